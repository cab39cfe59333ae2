"""Power saving (issue 39) from real output: every node state Slurm showed while a node was parked,
lent, asked back, given back and declined, on each version and path, read by the parsers and
judged by core/slurmstate.py; what power_down and power_up send for each; power_save() from
`scontrol show config` and slurmrestd's GET /conf.

The fixtures under tests/fixtures/power_states/<version>-<nodes>/ were captured on the lab by
e2e/lab/capture-power-states.sh (see its header for the steps): nodes-STEP.txt is `scontrol -o -d
show node`, nodes-STEP-VERSION.json slurmrestd's GET /nodes/, answers.txt every request with what
Slurm answered, config-{on,off}.txt `scontrol show config` with the lab's power-save block and
without it, conf-{on,off}-v0.0.45.json GET /conf. Of the API versions each slurmrestd serves, the
lowest and the highest are kept (24.11: v0.0.40, v0.0.42; 26.05: v0.0.42, v0.0.45)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from aiohttp import web

from slurmbridge import SlurmError
from slurmbridge.backend import REFUSED, ScontrolBackend, power_requests
from slurmbridge.errors import SlurmUnsupported
from slurmbridge.models import SlurmNode
from slurmbridge.parse import parse_config, parse_scontrol_nodes, power_save_from_config
from slurmbridge.rest import RestAuth, RestBackend, parse_rest_node
from slurmpool.core import slurmstate

from .factories import slurm_node
from .restfake import FakeSlurmrestd

FIXTURES = Path(__file__).parent / "fixtures" / "power_states"
CAPTURES = sorted(p.name for p in FIXTURES.iterdir() if (p / "notes.txt").exists())


def roles(capture: str) -> dict[str, str]:
    """A B C D -> node name, from the capture's notes."""
    return dict(re.findall(r"\b([ABCD])=(\S+)", (FIXTURES / capture / "notes.txt").read_text()))


def scontrol_nodes(capture: str, step: str) -> dict[str, SlurmNode]:
    return parse_scontrol_nodes((FIXTURES / capture / f"nodes-{step}.txt").read_text())


def rest_captures(capture: str, step: str) -> dict[str, dict[str, SlurmNode]]:
    """API version -> the nodes GET /nodes/ answered at this step."""
    out = {}
    for path in sorted((FIXTURES / capture).glob(f"nodes-{step}-v0.0.*.json")):
        raw = json.loads(path.read_text())["nodes"]
        out[path.stem.rsplit("-", 1)[1]] = {n.name: n for n in map(parse_rest_node, raw) if n is not None}
    return out


def without_model(flags: frozenset[str]) -> frozenset[str]:
    return flags - {"DYNAMIC_NORM"}


# Each step's settled node (by role), its state as scontrol prints it on every version, and what
# slurmstate answers for it: parked, usable, idle, busy, responding, down.
SETTLED = {
    ("up", "A"): ("IDLE", dict(parked=False, usable=True, idle=True, busy=False, responding=True, down=False)),
    ("drain-powered-down", "C"): ("IDLE+DRAIN+POWERED_DOWN",  # drain~: held
                                  dict(parked=True, usable=False, idle=False, busy=False, responding=False, down=False)),
    # idle~: lendable (NOT_RESPONDING too on 24.11 and 26.05, once its slurmd was gone SlurmdTimeout)
    ("idle-powered-down", "D"): ("IDLE+POWERED_DOWN",
                                 dict(parked=True, usable=True, idle=True, busy=False, responding=False, down=False)),
    ("powering-up-job", "D"): ("MIXED+NOT_RESPONDING+POWERING_UP",  # mixed#: Slurm asks for it back
                               dict(parked=False, usable=False, idle=False, busy=True, responding=False, down=False)),
    ("given-back", "D"): ("MIXED",
                          dict(parked=False, usable=True, idle=False, busy=True, responding=True, down=False)),
    ("declined", "C"): ("IDLE+DRAIN+NOT_RESPONDING+POWERING_UP",  # drained#: the job requeued
                        dict(parked=False, usable=False, idle=False, busy=False, responding=False, down=False)),
}
ANSWERS = ("parked", "usable", "idle", "busy", "responding", "down")


def test_every_version_was_captured():
    assert {c.split("-")[0] for c in CAPTURES} >= {"22.05", "24.11", "26.05"}, CAPTURES


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize(("step", "role"), sorted(SETTLED))
def test_each_settled_power_state_reads_and_means_the_same_on_every_path(capture, step, role):
    want_state, want = SETTLED[(step, role)]
    name = roles(capture)[role]
    seen = {"scontrol": scontrol_nodes(capture, step)[name]}
    seen.update({v: nodes[name] for v, nodes in rest_captures(capture, step).items()})
    base, *flags = want_state.split("+")
    for path, sn in seen.items():
        shown = without_model(sn.flags) - ({"NOT_RESPONDING"} if "POWERED_DOWN" in flags else set())
        assert (sn.state, shown) == (base, frozenset(flags)), (capture, path)
        assert {a: getattr(slurmstate, a)(sn) for a in ANSWERS} == want, (capture, path, slurmstate.text(sn))


@pytest.mark.parametrize("capture", CAPTURES)
def test_every_path_shows_the_node_weight_the_lending_order_reads(capture):
    """Weight= (the lab's slurm.conf sets none: Slurm's default 1), powered down or not (parking.by_weight)."""
    for step in ("up", "drain-powered-down", "idle-powered-down"):
        seen = [scontrol_nodes(capture, step), *rest_captures(capture, step).values()]
        assert {sn.weight for nodes in seen for sn in nodes.values()} == {1}, (capture, step)


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_held_node_keeps_its_reason_and_a_declined_one_names_why(capture):
    r = roles(capture)
    assert scontrol_nodes(capture, "drain-powered-down")[r["C"]].reason == "slurmpool: parked for inference"
    assert scontrol_nodes(capture, "declined")[r["C"]].reason == "slurmpool: give-back declined"
    for nodes in rest_captures(capture, "declined").values():
        assert nodes[r["C"]].reason == "slurmpool: give-back declined"


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_declined_node_forced_down_is_parked_lendable_or_down(capture):
    """POWER_DOWN_FORCE on a declined node: back down, its drain gone (idle~); or, where Slurm had
    marked it not responding first (24.11 dynamic: its reason gets " : Not responding"), DOWN too
    (down~): parked either way, and never counted as Slurm's to use while DOWN."""
    name = roles(capture)["C"]
    for sn in [scontrol_nodes(capture, "declined-powered-down")[name],
               *(n[name] for n in rest_captures(capture, "declined-powered-down").values())]:
        assert sn.state in ("IDLE", "DOWN") and "POWERED_DOWN" in sn.flags and "DRAIN" not in sn.flags, slurmstate.text(sn)
        assert slurmstate.parked(sn) and not slurmstate.busy(sn) and not slurmstate.responding(sn)
        assert slurmstate.usable(sn) is (sn.state == "IDLE") and slurmstate.down(sn) is (sn.state == "DOWN")
        assert (sn.reason or "").startswith("slurmpool: give-back declined")


@pytest.mark.parametrize("capture", CAPTURES)
def test_every_transient_power_state_is_no_slurmd_and_no_failure(capture):
    """On its way down, asked up without a job, or up again without its drain: never responding
    (no slurmd answers), never down (Slurm's ResumeTimeout judges a node that does not come back)."""
    r = roles(capture)
    for step, role in (("powering-down", "C"), ("powering-down", "D"), ("powering-up-idle", "C"), ("powered-down", "C")):
        for sn in [scontrol_nodes(capture, step)[r[role]], *(n[r[role]] for n in rest_captures(capture, step).values())]:
            assert sn.flags & slurmstate.POWER_FLAGS, (step, slurmstate.text(sn))
            assert not slurmstate.responding(sn) and not slurmstate.down(sn) and not slurmstate.busy(sn), (step, slurmstate.text(sn))


@pytest.mark.parametrize("capture", CAPTURES)
def test_the_pinned_job_waits_configuring_on_the_node_slurm_powers_up(capture):
    r = roles(capture)
    rows = [line.split() for line in (FIXTURES / capture / "squeue-powering-up-job.txt").read_text().splitlines()]
    assert any(row[1] == "CONFIGURING" and row[-1] == r["D"] for row in rows), rows
    declined = [line.split() for line in (FIXTURES / capture / "squeue-declined.txt").read_text().splitlines()]
    assert any(row[1] == "PENDING" for row in declined), declined  # requeued, not lost


# ---------------------------------------------------------------- what power_down and power_up send

def wanted(capture: str, step: str, down: bool, *roles_: str) -> dict[str, list[str]]:
    r = roles(capture)
    nodes = scontrol_nodes(capture, step)
    return power_requests([(r[x], nodes[r[x]]) for x in roles_], down=down)


@pytest.mark.parametrize("capture", CAPTURES)
def test_power_requests_go_only_where_they_are_needed(capture):
    r = roles(capture)
    assert wanted(capture, "up", True, "A", "B") == {"POWER_DOWN": [r["A"], r["B"]]}
    assert wanted(capture, "up", False, "A") == {}  # up already
    # Powered down, held or lent: a second POWER_DOWN would power it down again and drop its drain.
    assert wanted(capture, "drain-powered-down", True, "C", "D") == {}
    assert wanted(capture, "idle-powered-down", True, "D") == {}
    assert wanted(capture, "idle-powered-down", False, "C", "D") == {"POWER_UP": [r["C"], r["D"]]}
    # Powering up: a second POWER_UP would stay set after it registers.
    assert wanted(capture, "powering-up-job", False, "D") == {}
    assert wanted(capture, "given-back", False, "D") == {}
    # Declined (drained, its job requeued): POWER_DOWN is ignored while it powers up; forced.
    assert wanted(capture, "declined", True, "C") == {"POWER_DOWN_FORCE": [r["C"]]}
    # Powering up for a job: refused (a decline drains first, which requeues the job).
    assert wanted(capture, "powering-up-job", True, "A", "D") == {"POWER_DOWN": [r["A"]], REFUSED: [r["D"]]}


def test_asked_again_a_power_down_slurm_left_queued_is_forced_and_nothing_else_changes():
    queued = slurm_node("gpu01", "DOWN", {"DRAIN", "POWER_DOWN", "NOT_RESPONDING"})
    assert power_requests([("gpu01", queued)], down=True) == {}  # asked once: a plain request is not repeated
    assert power_requests([("gpu01", queued)], down=True, again=True) == {"POWER_DOWN_FORCE": ["gpu01"]}
    for flags, state in (({"POWER_DOWN", "POWERING_DOWN"}, "IDLE"), ({"POWERED_DOWN"}, "IDLE"), ({"POWER_DOWN"}, "ALLOCATED")):
        assert power_requests([("gpu01", slurm_node("gpu01", state, flags))], down=True, again=True) == {}, flags


def test_a_node_slurm_does_not_know_is_passed_on_for_slurm_to_refuse():
    assert power_requests([("gpu09", None)], down=True) == {"POWER_DOWN": ["gpu09"]}
    assert power_requests([("gpu09", None)], down=False) == {"POWER_UP": ["gpu09"]}


class Runner:
    def __init__(self, show_node: str) -> None:
        self.show_node = show_node
        self.calls: list[list[str]] = []

    async def run(self, argv: list[str], timeout: float) -> str:
        self.calls.append(argv)
        return self.show_node if argv[:2] == ["scontrol", "-o"] else ""


@pytest.mark.parametrize("capture", CAPTURES)
async def test_scontrol_power_calls_read_then_update_with_one_command_per_state(capture):
    r = roles(capture)
    runner = Runner((FIXTURES / capture / "nodes-declined.txt").read_text())
    backend = ScontrolBackend(runner)
    await backend.power_down([r["A"], r["C"]])
    updates = [c for c in runner.calls if c[1] == "update"]
    assert updates == [["scontrol", "update", f"NodeName={r['A']}", "State=POWER_DOWN"],
                       ["scontrol", "update", f"NodeName={r['C']}", "State=POWER_DOWN_FORCE"]], runner.calls
    runner.calls.clear()
    runner.show_node = (FIXTURES / capture / "nodes-powering-up-job.txt").read_text()
    with pytest.raises(SlurmError, match="powering up for a job; drain first"):
        await backend.power_down([r["A"], r["D"]])
    assert [c for c in runner.calls if c[1] == "update"] == [["scontrol", "update", f"NodeName={r['A']}", "State=POWER_DOWN"]]
    runner.calls.clear()
    runner.show_node = (FIXTURES / capture / "nodes-declined.txt").read_text()
    await backend.power_up([r["A"], r["C"]])  # A is up; C is powering up already
    assert [c for c in runner.calls if c[1] == "update"] == []
    await backend.power_down([])
    await backend.power_up([])


# ---------------------------------------------------------------- power_save()

@pytest.mark.parametrize("capture", CAPTURES)
def test_power_save_from_scontrol_show_config(capture):
    version = capture.split("-")[0]
    on = power_save_from_config(parse_config((FIXTURES / capture / "config-on.txt").read_text()))
    assert on.on and on.why_off == ""
    assert on.resume_timeout == timedelta(seconds=300)
    assert on.suspend_exc_parts == ("gpu",) and on.suspend_exc_nodes == ""
    assert on.keeps_settings is (version != "22.05")  # ReconfigFlags=KeepPowerSaveSettings: 23.02+
    off = power_save_from_config(parse_config((FIXTURES / capture / "config-off.txt").read_text()))
    assert not off.on
    assert "SuspendProgram is not set" in off.why_off and "ResumeProgram is not set" in off.why_off
    assert "SuspendTime is" in off.why_off
    assert off.resume_timeout == timedelta(seconds=60) and off.suspend_exc_parts == () and not off.keeps_settings


@pytest.mark.parametrize(("conf", "why"), [
    ({"SuspendProgram": "true", "ResumeProgram": "/bin/true", "SuspendTime": "3600 sec"},
     "SuspendProgram=true is not an absolute path"),
    ({"SuspendProgram": "/bin/true", "ResumeProgram": "/bin/true", "SuspendTime": "NONE"}, "SuspendTime is NONE"),
    ({"SuspendProgram": "/bin/true", "ResumeProgram": "/bin/true", "SuspendTime": "3600 sec", "SuspendRate": "60 nodes/min",
      "SlurmctldParameters": "enable_configless,power_save_interval=120"}, "power_save_interval=120 is over 60"),
])
def test_power_save_off_says_why_in_slurm_conf_words(conf, why):
    ps = power_save_from_config(conf)
    assert not ps.on and why in ps.why_off
    assert ps.keeps_settings is None  # no ReconfigFlags line: not known


def test_an_interval_over_60_without_rates_keeps_power_save_on():
    conf = {"SuspendProgram": "/bin/true", "ResumeProgram": "/bin/true", "SuspendTime": "3600 sec", "SuspendRate": "0 nodes/min",
            "ResumeRate": "0 nodes/min", "SlurmctldParameters": "power_save_interval=120"}
    assert power_save_from_config(conf).on


# ---------------------------------------------------------------- REST

@pytest.fixture
async def rest():
    runners, made = [], []

    async def make(fake: FakeSlurmrestd) -> RestBackend:
        runner = web.AppRunner(fake.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        backend = RestBackend(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", RestAuth("good"), retries=0)
        made.append(backend)
        return backend

    yield make
    for b in made:
        await b.close()
    for r in runners:
        await r.cleanup()


def rest_fixture(capture: str, step: str, version: str) -> list[dict]:
    return json.loads((FIXTURES / capture / f"nodes-{step}-{version}.json").read_text())["nodes"]


REST_CAPTURES = [(c, v) for c in CAPTURES for v in sorted(rest_captures(c, "declined"))]


@pytest.mark.parametrize(("capture", "version"), REST_CAPTURES)
async def test_rest_power_calls_send_flags_every_version_parses(rest, capture, version):
    r = roles(capture)
    fake = FakeSlurmrestd(versions=(version,), nodes=rest_fixture(capture, "declined", version))
    backend = await rest(fake)
    await backend.power_down([r["A"], r["C"]])
    posts = sorted((p, b) for m, p, _, b in fake.requests if m == "POST")
    # C powers up without a job: the two flags of POWER_DOWN_FORCE (a name only v0.0.45 knows)
    assert posts == [(f"/slurm/{version}/node/{r['A']}", {"state": ["POWER_DOWN"]}),
                     (f"/slurm/{version}/node/{r['C']}", {"state": ["POWER_DOWN", "POWERED_DOWN"]})]
    fake.requests.clear()
    fake.nodes = rest_fixture(capture, "powering-up-job", version)
    with pytest.raises(SlurmError, match="powering up for a job"):
        await backend.power_down([r["A"], r["D"]])
    assert [(p, b) for m, p, _, b in fake.requests if m == "POST"] == [(f"/slurm/{version}/node/{r['A']}", {"state": ["POWER_DOWN"]})]
    fake.requests.clear()
    fake.nodes = rest_fixture(capture, "idle-powered-down", version)
    await backend.power_up([r["A"], r["D"]])
    assert [(p, b) for m, p, _, b in fake.requests if m == "POST"] == [(f"/slurm/{version}/node/{r['D']}", {"state": ["POWER_UP"]})]


@pytest.mark.parametrize(("capture", "version"), REST_CAPTURES)
async def test_rest_power_save_from_get_conf_or_unsupported(rest, capture, version):
    fake = FakeSlurmrestd(versions=(version,))
    backend = await rest(fake)
    if version != "v0.0.45":
        with pytest.raises(SlurmUnsupported, match=f"slurmrestd {version} does not tell slurm.conf's power saving"):
            await backend.power_save()
        return
    for setting, on in (("on", True), ("off", False)):
        conf = json.loads((FIXTURES / capture / f"conf-{setting}-v0.0.45.json").read_text())["slurm_conf"]
        fake.scripted[("GET", "/conf")] = (200, {"slurm_conf": conf}, [])
        ps = await backend.power_save()
        assert ps.on is on, ps.why_off
        assert ps.resume_timeout == timedelta(seconds=300 if on else 60)
        assert ps.suspend_exc_parts == (("gpu",) if on else ()) and ps.keeps_settings is on
        if not on:
            assert "SuspendTime is INFINITE" in ps.why_off
