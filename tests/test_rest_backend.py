"""RestBackend against a real HTTP server in-process (tests/restfake.py) answering as slurmrestd
does: version negotiation, node and job mapping, fail-closed errors, auth, transport failures,
and the request bodies of drain, resume, requeue and cancel."""

from __future__ import annotations

import json
import asyncio
import socket
from datetime import datetime, timezone
from pathlib import Path

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmbridge import SlurmError, SlurmUnavailable
from slurmbridge.parse import parse_scontrol_nodes
from slurmbridge.rest import (
    KNOWN_VERSIONS,
    CachedToken,
    RestAuth,
    RestBackend,
    SlurmAuthError,
    StaticToken,
    job_id,
    node_state,
    parse_rest_job,
    parse_rest_node,
    rest_job_ids,
)

from .restfake import FakeSlurmrestd, error, no_val, rest_job, rest_node


@pytest.fixture
async def serve():
    runners = []

    async def start(fake: FakeSlurmrestd) -> str:
        runner = web.AppRunner(fake.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def backends():
    made = []

    def make(url, token=None, **kw):
        kw.setdefault("retries", 0)
        b = RestBackend(url, token or RestAuth("good"), **kw)
        made.append(b)
        return b

    yield make
    for b in made:
        await b.close()


def paths(fake, method=None):
    return [p for m, p, _, _ in fake.requests if method is None or m == method]


# ---------------------------------------------------------------- version negotiation


@pytest.mark.parametrize(
    "offered, expected",
    [
        (("v0.0.40", "v0.0.41", "v0.0.42"), "v0.0.42"),  # Slurm 24.11
        (("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"), "v0.0.45"),  # Slurm 26.05
        (("v0.0.39", "v0.0.40"), "v0.0.40"),
        (("v0.0.44", "v0.0.46"), "v0.0.44"),  # a newer one the operator does not know is not used
    ],
)
@pytest.mark.parametrize("openapi", [True, False], ids=["openapi-v3", "probing"])
async def test_picks_the_highest_version_both_know(serve, backends, offered, expected, openapi):
    fake = FakeSlurmrestd(versions=offered, openapi=openapi)
    backend = backends(await serve(fake))
    await backend.ping()
    assert backend.version == expected
    assert paths(fake)[-1] == f"/slurm/{expected}/ping/"
    if openapi:
        assert paths(fake)[0] == "/openapi/v3"
    else:  # probed from the highest known down to the first one served
        probed = [p for p in paths(fake) if p.endswith("/ping/")]
        assert probed[0] == "/slurm/v0.0.45/ping/" and f"/slurm/{expected}/ping/" in probed
    await backend.ping()  # negotiated once
    assert paths(fake).count("/openapi/v3") <= 1


async def test_no_common_version_is_a_clear_error(serve, backends):
    fake = FakeSlurmrestd(versions=("v0.0.38", "v0.0.39"))
    backend = backends(await serve(fake))
    with pytest.raises(SlurmError, match=r"offers API versions \['v0.0.38', 'v0.0.39'\], none of"):
        await backend.nodes()


async def test_an_unknown_path_renegotiates(serve, backends):
    fake = FakeSlurmrestd(versions=("v0.0.45",))
    backend = backends(await serve(fake))
    await backend.ping()
    fake.versions = ("v0.0.42",)  # slurmrestd replaced by an older one
    with pytest.raises(SlurmError, match="does not serve GET /slurm/v0.0.45/nodes/"):
        await backend.nodes()
    assert backend.version is None
    await backend.nodes()
    assert backend.version == "v0.0.42"


# ---------------------------------------------------------------- nodes


NODE_CASES = [
    # REST state list -> scontrol's State= for the same node
    (["IDLE"], "IDLE"),
    (["IDLE", "DRAIN"], "IDLE+DRAIN"),
    (["MIXED", "DRAIN"], "MIXED+DRAIN"),
    (["ALLOCATED", "DRAIN"], "ALLOCATED+DRAIN"),
    (["IDLE", "COMPLETING", "DRAIN"], "IDLE+COMPLETING+DRAIN"),
    (["DOWN", "NOT_RESPONDING"], "DOWN+NOT_RESPONDING"),
    (["IDLE", "DRAIN", "NOT_RESPONDING"], "IDLE+DRAIN+NOT_RESPONDING"),
    (["IDLE", "DRAIN", "INVALID_REG"], "IDLE+DRAIN+INVALID_REG"),
    (["IDLE", "DYNAMIC_NORM"], "IDLE+DYNAMIC_NORM"),
    (["FUTURE"], "FUTURE"),
    (["IDLE", "POWERED_DOWN"], "IDLE+POWERED_DOWN"),
    (["IDLE", "MAINTENANCE", "RESERVED"], "IDLE+MAINTENANCE+RESERVED"),
    (["UNKNOWN", "PLANNED"], "UNKNOWN+PLANNED"),
]


def scontrol_line(name, state, reason="", stamp="", gres="gpu:h100:8", gres_used="gpu:h100:0(IDX:N/A)",
                  features="gpu,h100", partitions="gpu", start="2025-12-01T00:00:00"):
    line = (f"NodeName={name} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=4 CPUTot=4 "
            f"AvailableFeatures={features} ActiveFeatures={features} Gres={gres} GresUsed={gres_used} "
            f"NodeAddr=127.0.0.1 NodeHostName=localhost Version=26.05.3 OS=Linux 6.1 RealMemory=1000 "
            f"State={state} Weight=1 Partitions={partitions} BootTime=2025-11-30T22:00:00 "
            f"SlurmdStartTime={start} LastBusyTime=2025-11-30T23:56:40")
    if reason:
        line += f" Reason={reason}" + (f" [{stamp}]" if stamp else "")
    return line


@pytest.mark.parametrize("rest_state, scontrol_state", NODE_CASES)
async def test_nodes_read_as_the_scontrol_parser_reads_them(serve, backends, rest_state, scontrol_state):
    reason = "slurmpool: move 3f2a to inference : Not responding" if "DRAIN" in rest_state else ""
    when = int(datetime(2025, 12, 1, 1, 2, 3, tzinfo=timezone.utc).timestamp())
    fake = FakeSlurmrestd(nodes=[rest_node("gpu01", rest_state, reason=reason, reason_user="root", reason_at=when,
                                           slurmd_start=int(datetime(2025, 12, 1, tzinfo=timezone.utc).timestamp()))])
    got = (await backends(await serve(fake)).nodes())["gpu01"]
    want = parse_scontrol_nodes(scontrol_line("gpu01", scontrol_state, reason, "root@2025-12-01T01:02:03"))["gpu01"]
    assert (got.state, got.flags, got.reason, got.gres, got.gres_used, got.features, got.partitions,
            got.slurmd_start) == (want.state, want.flags, want.reason, want.gres, want.gres_used, want.features,
                                  want.partitions, want.slurmd_start)
    assert (got.drained, got.busy, got.responding) == (want.drained, want.busy, want.responding)
    if reason:  # the stamp's parts stay available, never in the reason text
        assert got.reason_user == "root" and got.reason_time == datetime(2025, 12, 1, 1, 2, 3, tzinfo=timezone.utc)
        assert "[" not in got.reason
    else:
        assert got.reason is None and got.reason_user is None and got.reason_time is None


async def test_nodes_by_name_filters_and_unknown_names_are_absent(serve, backends):
    fake = FakeSlurmrestd(nodes=[rest_node("gpu01", ["IDLE"]), rest_node("gpu02", ["MIXED"])])
    backend = backends(await serve(fake))
    assert set(await backend.nodes(["gpu02", "gpu09"])) == {"gpu02"}
    assert await backend.nodes([]) == {}
    with pytest.raises(ValueError):
        await backend.nodes(["gpu01;reboot"])


async def test_unset_times_and_missing_fields_read_as_none(serve, backends):
    raw = rest_node("gpu01", ["IDLE"], slurmd_start=0)
    raw["slurmd_start_time"] = no_val(None)
    del raw["gres_used"]
    node = parse_rest_node(raw)
    assert node.slurmd_start is None and node.gres_used == "" and node.reason is None
    # complex mode dumps plain numbers and null
    raw["slurmd_start_time"] = 1764547200
    assert parse_rest_node(raw).slurmd_start == datetime.fromtimestamp(1764547200, timezone.utc)
    raw["state"] = []
    assert parse_rest_node(raw).state == "UNKNOWN" and not parse_rest_node(raw).responding  # fail closed


BASES = ["UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"]
FLAGS = ["DRAIN", "COMPLETING", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_UP", "MAINTENANCE", "RESERVED",
         "REBOOT_REQUESTED", "PLANNED", "INVALID_REG", "DYNAMIC_NORM", "UNDRAIN", "CLOUD", "FAIL"]


@given(st.sampled_from(BASES), st.sets(st.sampled_from(FLAGS)), st.randoms())
@settings(max_examples=200, deadline=None)
def test_node_state_lists_read_as_scontrol_states(base, flags, rnd):
    tokens = [base, *flags]
    rnd.shuffle(tokens)
    got = node_state(tokens)
    assert got == (base, frozenset(flags))
    from slurmbridge.parse import parse_state
    assert parse_state("+".join([base, *sorted(flags)])) == got  # what scontrol's line would give


# ---------------------------------------------------------------- jobs


JOB_ID_CASES = [
    (dict(job_id=42), "42"),
    (dict(job_id=45, array_job_id=42, array_task_id=3), "42_3"),
    (dict(job_id=7, array_job_id=7, array_task_string="0-3"), "7_[0-3]"),
    (dict(job_id=7, array_job_id=7, array_task_string="1,3,5-9%4"), "7_[1,3,5-9%4]"),
    (dict(job_id=6, het_job_id=5, het_job_offset=1), "5+1"),
    (dict(job_id=5, het_job_id=5, het_job_offset=0), "5+0"),
]


@pytest.mark.parametrize("fields, expected", JOB_ID_CASES)
def test_job_ids_read_as_squeue_prints_them(fields, expected):
    raw = rest_job(fields.pop("job_id"), ["PENDING"], **fields)
    assert job_id(raw) == expected
    assert rest_job_ids([expected]) == [expected]


@pytest.mark.parametrize(
    "state, shown",
    [
        (["RUNNING"], "RUNNING"),
        (["PENDING"], "PENDING"),
        (["RUNNING", "COMPLETING"], "COMPLETING"),
        (["PENDING", "REQUEUED"], "REQUEUED"),
        (["COMPLETED", "COMPLETING"], "COMPLETING"),
        (["PENDING", "CONFIGURING"], "CONFIGURING"),
        (["RUNNING", "SIGNALING"], "SIGNALING"),
        (["SUSPENDED"], "SUSPENDED"),
    ],
)
def test_job_state_is_what_squeue_prints(state, shown):
    job, tokens = parse_rest_job(rest_job(1, state))
    assert job.state == shown and tokens == set(state)


async def test_jobs_fields_and_filters(serve, backends):
    start, end = 1764547200, 1764550800
    fake = FakeSlurmrestd(jobs=[
        rest_job(42, ["RUNNING"], nodes="gpu[01-02]", node_count=2, start=start, end=end, tres_per_node="gres/gpu:h100:4"),
        rest_job(45, ["RUNNING"], nodes="gpu03", array_job_id=44, array_task_id=1),
        rest_job(7, ["PENDING"], array_job_id=7, array_task_string="0-3", reason="Resources", partition="cpu"),
        rest_job(6, ["PENDING"], het_job_id=5, het_job_offset=1, reason="Priority"),
        rest_job(3, ["COMPLETED"], nodes="gpu04", end=end),  # finished: squeue does not list it
        rest_job(2, ["COMPLETED", "COMPLETING"], nodes="gpu04"),  # still completing: listed
    ])
    backend = backends(await serve(fake))
    jobs = {j.job_id: j for j in await backend.jobs()}
    assert set(jobs) == {"42", "44_1", "7_[0-3]", "5+1", "2"}
    j = jobs["42"]
    assert (j.name, j.user, j.state, j.partition, j.nodes, j.num_nodes, j.gpus_per_node, j.gpus_wanted) == (
        "train", "alice", "RUNNING", "gpu", ("gpu01", "gpu02"), 2, 4, 8)
    assert j.start_time == datetime.fromtimestamp(start, timezone.utc) and j.end_time == datetime.fromtimestamp(end, timezone.utc)
    assert jobs["7_[0-3]"].start_time is None and jobs["7_[0-3]"].reason == "Resources"
    assert [j.job_id for j in await backend.jobs(partition="cpu")] == ["7_[0-3]"]
    assert sorted(j.job_id for j in await backend.jobs(states=["PENDING"])) == ["5+1", "7_[0-3]"]
    assert sorted(j.job_id for j in await backend.jobs(states=["COMPLETED"])) == ["2", "3"]
    assert [j.job_id for j in await backend.jobs(states=["COMPLETING"])] == ["2"]
    assert len(await backend.jobs(states=["all"])) == 6
    assert await backend.jobs(states=[]) == []
    with pytest.raises(ValueError):
        await backend.jobs(partition="gpu;x")


@given(st.integers(1, 2**31), st.one_of(
    st.just(None),
    st.tuples(st.just("task"), st.integers(0, 10**6)),
    st.tuples(st.just("pending"), st.from_regex(r"[0-9]{1,4}(-[0-9]{1,4})?(,[0-9]{1,4}){0,3}(%[0-9]{1,2})?", fullmatch=True)),
    st.tuples(st.just("het"), st.integers(0, 20)),
))
@settings(max_examples=200, deadline=None)
def test_every_job_id_form_is_accepted_for_requeue_and_cancel(number, form):
    kw = {}
    if form and form[0] == "task":
        kw = dict(array_job_id=number, array_task_id=form[1])
    elif form and form[0] == "pending":
        kw = dict(array_job_id=number, array_task_string=form[1])
    elif form and form[0] == "het":
        kw = dict(het_job_id=number, het_job_offset=form[1])
    text = job_id(rest_job(number + 1, ["PENDING"], **kw))
    assert rest_job_ids([text]) == [text]


@pytest.mark.parametrize("bad", ["", "42 ", "-1", "42_", "42_[", "42;reboot", "42/../nodes", "4+", "a1", "42_[0-3]x"])
def test_other_job_ids_are_refused(bad):
    with pytest.raises(ValueError):
        rest_job_ids([bad])


# ---------------------------------------------------------------- failures


async def test_a_200_with_errors_fails_closed(serve, backends):
    fake = FakeSlurmrestd(nodes=[rest_node("gpu01", ["IDLE"])])
    fake.scripted[("GET", "/nodes/")] = (200, {"nodes": [rest_node("gpu01", ["IDLE"])]},
                                         [error("Unable to query nodes", 1, "Unspecified error", "slurm_load_node()")])
    backend = backends(await serve(fake))
    with pytest.raises(SlurmError, match="Unable to query nodes") as info:
        await backend.nodes()
    assert not isinstance(info.value, SlurmUnavailable) and info.value.returncode == 200
    fake.scripted[("POST", "/node/gpu01")] = (200, {}, [error("Failure to update node gpu01", 1, "Unspecified error", "x")])
    with pytest.raises(SlurmError, match="Failure to update node"):
        await backend.drain(["gpu01"], "slurmpool: x")


async def test_slurmctld_unreachable_behind_slurmrestd_is_unavailable_and_retried(serve, backends):
    fake = FakeSlurmrestd()
    fake.scripted[("GET", "/jobs/")] = (502, {"jobs": []}, [error(
        "Unable to query jobs", 1001, "Unable to contact slurm controller (connect failure)", "slurm_load_jobs()")])
    backend = backends(await serve(fake), retries=2, backoff=0.01)
    with pytest.raises(SlurmUnavailable, match="Unable to contact slurm controller"):
        await backend.jobs()
    assert paths(fake).count("/slurm/v0.0.45/jobs/") == 3


async def test_a_failure_status_is_an_error_with_slurms_words(serve, backends):
    fake = FakeSlurmrestd(nodes=[rest_node("gpu01", ["IDLE"])])
    backend = backends(await serve(fake))
    with pytest.raises(SlurmError, match="Invalid node name specified") as info:
        await backend.drain(["gpu09"], "slurmpool: x")
    assert info.value.returncode == 500


async def test_no_token_is_401_and_a_bad_one_511(serve, backends):
    fake = FakeSlurmrestd()
    url = await serve(fake)
    with pytest.raises(SlurmAuthError, match="511 Network Authentication Required.*expired") as info:
        await backends(url, RestAuth("stale")).nodes()
    assert not isinstance(info.value, SlurmUnavailable)  # not retried as an outage: the token is wrong
    fake.versions = ("v0.0.45",)
    b = backends(url)
    b.version = "v0.0.45"

    class NoHeader(RestAuth):  # a proxy that strips the token, say
        def headers(self):
            return {}

    b.token = StaticToken(NoHeader("good"))
    with pytest.raises(SlurmAuthError, match="401 Unauthorized"):
        await b.ping()
    b.token = StaticToken(RestAuth(""))  # an empty token is never sent
    with pytest.raises(SlurmAuthError, match="empty"):
        await b.ping()


@pytest.mark.parametrize("bearer", [False, True])
async def test_headers_carry_the_token_and_user(serve, backends, bearer):
    fake = FakeSlurmrestd()
    await backends(await serve(fake), RestAuth("good", user="slurmpool", bearer=bearer)).ping()
    headers = fake.requests[-1][2]
    if bearer:
        assert headers["Authorization"] == "Bearer good" and "X-SLURM-USER-TOKEN" not in headers
    else:
        assert headers["X-SLURM-USER-TOKEN"] == "good" and "Authorization" not in headers
    assert headers["X-SLURM-USER-NAME"] == "slurmpool"
    assert "good" not in repr(RestAuth("good"))


async def test_a_renewed_token_is_read_again_after_a_refusal(serve, backends):
    fake = FakeSlurmrestd(tokens={"t1"})
    secret = {"token": "t1"}
    clock = [0.0]

    async def read():
        return RestAuth(secret["token"])

    token = CachedToken(read, max_age=30, clock=lambda: clock[0])
    backend = backends(await serve(fake), token)
    await backend.ping()
    # The token is renewed: slurmctld takes only the new one, the Secret has it.
    fake.tokens = {"t2"}
    secret["token"] = "t2"
    await backend.ping()  # 511 with t1, the Secret read again, the call retried with t2
    used = [h.get("X-SLURM-USER-TOKEN") for _, _, h, _ in fake.requests]
    assert used[-2:] == ["t1", "t2"] and token.reads == 2
    # Within max_age the Secret is not read again; after it, it is (a change shows up unprompted).
    await backend.ping()
    assert token.reads == 2
    secret["token"] = "t3"
    fake.tokens = {"t2", "t3"}
    clock[0] += 31
    await backend.ping()
    assert token.reads == 3 and fake.requests[-1][2]["X-SLURM-USER-TOKEN"] == "t3"


async def test_a_token_that_stays_refused_or_cannot_be_read_fails_closed(serve, backends):
    fake = FakeSlurmrestd(tokens={"t1"})
    secret = {"token": "t1"}

    async def read():
        if secret["token"] is None:
            raise KeyError("Secret slurm/slurm-token has no key 'token'")
        return RestAuth(secret["token"])

    token = CachedToken(read, max_age=0)
    backend = backends(await serve(fake), token)
    await backend.ping()
    fake.tokens = set()  # expired, and nobody renewed it
    with pytest.raises(SlurmAuthError, match="511"):
        await backend.nodes()
    with pytest.raises(SlurmAuthError, match=r"did not accept the token \(ping: Protocol authentication error\)"):
        await backend.ping()  # a 200 whose controller "is not responding" because of the token
    fake.tokens = {"t1"}
    secret["token"] = None  # the Secret lost its key: a periodic read keeps the token that works
    await backend.ping()
    fake.tokens = set()  # ... until it is refused: then the unreadable Secret is the answer
    with pytest.raises(SlurmAuthError, match="cannot read the slurmrestd token.*has no key 'token'"):
        await backend.nodes()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_connection_refused_is_unavailable(backends):
    backend = backends(f"http://127.0.0.1:{free_port()}", retries=1, backoff=0.01)
    with pytest.raises(SlurmUnavailable, match="unreachable"):
        await backend.nodes()
    assert backend.commands_run == 2  # retried once


async def test_a_server_that_never_answers_times_out_as_unavailable(backends):
    accepted = []

    async def hold(reader, writer):
        accepted.append(writer)
        await reader.read()  # never answer

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        backend = backends(f"http://127.0.0.1:{port}", timeout=0.3)
        with pytest.raises(SlurmUnavailable, match="timed out"):
            await backend.ping()
    finally:
        for w in accepted:
            w.close()
        server.close()
        await server.wait_closed()


async def test_a_controller_that_does_not_answer_the_ping_is_unavailable(serve, backends):
    for versions in (("v0.0.40",), ("v0.0.45",)):  # "pinged": "DOWN" and "responding": false
        fake = FakeSlurmrestd(versions=versions, controller_up=False)
        with pytest.raises(SlurmUnavailable, match="slurmctld is not responding"):
            await backends(await serve(fake)).ping()


# ---------------------------------------------------------------- writes


async def test_drain_and_resume_bodies(serve, backends):
    fake = FakeSlurmrestd(nodes=[rest_node("gpu01", ["IDLE"]), rest_node("gpu02", ["MIXED"])])
    backend = backends(await serve(fake))
    await backend.drain(["gpu01", "gpu02", "gpu01"], 'slurmpool: move 3f2a "to" inference')
    posts = sorted((p, b) for m, p, _, b in fake.requests if m == "POST")
    assert posts == [
        ("/slurm/v0.0.45/node/gpu01", {"state": ["DRAIN"], "reason": 'slurmpool: move 3f2a "to" inference'}),
        ("/slurm/v0.0.45/node/gpu02", {"state": ["DRAIN"], "reason": 'slurmpool: move 3f2a "to" inference'}),
    ]
    nodes = await backend.nodes()
    assert nodes["gpu01"].drained and nodes["gpu01"].reason == 'slurmpool: move 3f2a "to" inference'
    assert nodes["gpu02"].drain_set and not nodes["gpu02"].drained  # MIXED+DRAIN: still busy
    fake.requests.clear()
    fake.nodes.append(rest_node("gpu03", ["IDLE"]))
    await backend.resume(["gpu01", "gpu03"])  # gpu03 was not drained: "Invalid node state specified" is fine
    assert sorted((p, b) for m, p, _, b in fake.requests if m == "POST") == [
        ("/slurm/v0.0.45/node/gpu01", {"state": ["RESUME"]}), ("/slurm/v0.0.45/node/gpu03", {"state": ["RESUME"]})]
    assert not (await backend.nodes(["gpu01"]))["gpu01"].drain_set
    with pytest.raises(ValueError):
        await backend.drain(["gpu01"], "bad\nreason")
    with pytest.raises(ValueError):
        await backend.resume(["../nodes"])


async def test_cancel_sends_every_id_form_in_one_call(serve, backends):
    fake = FakeSlurmrestd()
    backend = backends(await serve(fake))
    await backend.cancel(["42", "44_1", "7_[0-3]", "5+1", 42])
    assert [(m, p, b) for m, p, _, b in fake.requests if m == "DELETE"] == [
        ("DELETE", "/slurm/v0.0.45/jobs/", {"jobs": ["42", "44_1", "7_[0-3]", "5+1"], "signal": "SIGKILL"})]
    await backend.cancel([])
    assert len(paths(fake, "DELETE")) == 1


async def test_cancel_fails_on_a_job_that_could_not_be_signalled_but_not_on_one_already_gone(serve, backends):
    fake = FakeSlurmrestd()
    backend = backends(await serve(fake))
    gone = {"error": {"string": "Job/step already completing or completed", "code": 2021, "message": ""},
            "step_id": "41", "job_id": no_val(41), "federation": {"sibling": ""}}
    fake.scripted[("DELETE", "/jobs/")] = (200, {"status": [gone]}, [])
    await backend.cancel(["41"])
    denied = {"error": {"string": "Access/permission denied", "code": 2002, "message": "not your job"},
              "step_id": "42", "job_id": no_val(42), "federation": {"sibling": ""}}
    fake.scripted[("DELETE", "/jobs/")] = (200, {"status": [gone, denied]}, [])
    with pytest.raises(SlurmError, match="42: Access/permission denied not your job"):
        await backend.cancel(["41", "42"])


async def test_signal_is_a_delete_of_each_job_with_its_signal_and_whom_on_every_version(serve, backends):
    fake = FakeSlurmrestd()
    backend = backends(await serve(fake))
    await backend.signal(["42", "44_1"], "USR1", batch_only=True)
    await backend.signal(["43"], "SIGTERM", batch_only=False)
    assert sorted(fake.signals) == [("v0.0.45", "42", {"signal": "USR1", "flags": "BATCH_JOB"}),
                                    ("v0.0.45", "43", {"signal": "SIGTERM", "flags": "FULL_JOB"}),
                                    ("v0.0.45", "44_1", {"signal": "USR1", "flags": "BATCH_JOB"})]
    old = FakeSlurmrestd(versions=("v0.0.42",))
    backend = backends(await serve(old))
    await backend.signal(["42"], "USR1", batch_only=True)
    assert old.signals == [("v0.0.42", "42", {"signal": "USR1", "flags": "BATCH_JOB"})]


async def test_signal_of_a_job_already_gone_is_done_and_a_bad_signal_never_sent(serve, backends):
    fake = FakeSlurmrestd()
    fake.scripted[("DELETE", "/job/41")] = (500, {"status": []}, [error("Signal request failed", 2021,
                                                                    "Job/step already completing or completed", "slurm_kill_jobs()")])
    backend = backends(await serve(fake))
    await backend.signal(["41"], "USR1", batch_only=True)
    fake.scripted[("DELETE", "/job/41")] = (500, {"status": []}, [error("Signal request failed", 2002,
                                                                    "Access/permission denied", "slurm_kill_jobs()")])
    with pytest.raises(SlurmError, match="permission denied"):
        await backend.signal(["41"], "USR1", batch_only=True)
    with pytest.raises(ValueError, match="invalid signal"):
        await backend.signal(["41"], "USR1&flags=FULL_JOB", batch_only=True)


def test_a_jobs_requeue_and_batch_flag_say_whether_slurm_can_requeue_it():
    assert parse_rest_job(rest_job(42, ["RUNNING"]))[0].requeue is True
    assert parse_rest_job({**rest_job(42, ["RUNNING"]), "requeue": False})[0].requeue is False  # sbatch --no-requeue
    assert parse_rest_job({**rest_job(42, ["RUNNING"]), "batch_flag": False})[0].requeue is False  # salloc, srun
    assert parse_rest_job({k: v for k, v in rest_job(42, ["RUNNING"]).items() if k != "requeue"})[0].requeue is None


async def test_requeue_then_release_on_v0045(serve, backends):
    fake = FakeSlurmrestd(jobs=[rest_job(42, ["RUNNING"], nodes="gpu01"),
                                rest_job(45, ["RUNNING"], nodes="gpu02", array_job_id=44, array_task_id=1),
                                rest_job(7, ["PENDING"], array_job_id=7, array_task_string="0-3")])
    backend = backends(await serve(fake))
    await backend.requeue(["42", "44_1", "7_[0-3]"])
    calls = [(m, p, b) for m, p, _, b in fake.requests if "/job/" in p]
    # the pending array record is pending already: nothing to requeue; the array task is
    # released by its own job id (slurmrestd refuses updates addressed as 44_1)
    assert sorted(calls[:2]) == [("GET", "/slurm/v0.0.45/job/42/requeue", None),
                                 ("GET", "/slurm/v0.0.45/job/44_1/requeue", None)]
    assert sorted(calls[2:]) == [("POST", "/slurm/v0.0.45/job/42", {"begin_time": "now"}),
                                 ("POST", "/slurm/v0.0.45/job/45", {"begin_time": "now"})]


async def test_a_job_slurm_may_not_requeue_does_not_hold_back_the_others_on_v0045(serve, backends):
    """26.05.3 answered a --no-requeue job's requeue with 422, error 2037 (tests/fixtures/checkpoint)."""
    fake = FakeSlurmrestd(jobs=[rest_job(42, ["RUNNING"], nodes="gpu01"), {**rest_job(43, ["RUNNING"], nodes="gpu02"), "requeue": False}])
    fake.scripted[("GET", "/job/43/requeue")] = (422, {}, [error("Requeue JobID=43 failed", 2037, "Requested operation is presently disabled",
                                                                 "slurm_requeue2()")])
    with pytest.raises(SlurmError, match="presently disabled"):
        await backends(await serve(fake)).requeue(["42", "43"])
    released = [(m, p) for m, p, _, b in fake.requests if m == "POST" and "/job/" in p]
    assert ("POST", "/slurm/v0.0.45/job/42") in released


async def test_a_heterogeneous_job_is_requeued_and_released_through_its_leader(serve, backends):
    fake = FakeSlurmrestd(jobs=[rest_job(5, ["RUNNING"], nodes="gpu01", het_job_id=5, het_job_offset=0),
                                rest_job(6, ["RUNNING"], nodes="gpu02", het_job_id=5, het_job_offset=1)])
    await backends(await serve(fake)).requeue(["5+1", "5+0"])
    calls = [(m, p, b) for m, p, _, b in fake.requests if "/job/" in p]
    assert calls[0] == ("GET", "/slurm/v0.0.45/job/5/requeue", None)
    assert sorted(calls[1:]) == [("POST", "/slurm/v0.0.45/job/5", {"begin_time": "now"}),
                                 ("POST", "/slurm/v0.0.45/job/6", {"begin_time": "now"})]


async def test_requeue_waits_while_the_job_settles(serve, backends):
    fake = FakeSlurmrestd(jobs=[rest_job(42, ["RUNNING"], nodes="gpu01")], requeue_state=["PENDING", "COMPLETING", "REQUEUED"])
    backend = backends(await serve(fake), requeue_settle=30)

    async def settle():
        while not any(p.endswith("/requeue") for p in paths(fake)):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        fake.jobs[0]["job_state"] = ["PENDING"]

    await asyncio.gather(backend.requeue(["42"]), settle())
    assert paths(fake, "GET").count("/slurm/v0.0.45/jobs/") >= 2
    assert paths(fake, "POST") == ["/slurm/v0.0.45/job/42"]


async def test_requeue_of_a_job_already_pending_is_benign(serve, backends):
    fake = FakeSlurmrestd(jobs=[rest_job(42, ["PENDING"])])
    fake.scripted[("GET", "/job/42/requeue")] = (500, {"status": []}, [error(
        "Requeue JobID=42 failed", 2020, "Job is pending execution", "op_handler_job_requeue")])
    await backends(await serve(fake)).requeue(["42"])
    fake.scripted[("GET", "/job/42/requeue")] = (500, {"status": []}, [error(
        "Requeue JobID=42 failed", 2002, "Access/permission denied", "op_handler_job_requeue")])
    with pytest.raises(SlurmError, match="Access/permission denied"):
        await backends(await serve(fake)).requeue(["42"])


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.42", "v0.0.44"])
async def test_requeue_before_v0045_says_it_cannot(serve, backends, version):
    fake = FakeSlurmrestd(versions=(version,), jobs=[rest_job(42, ["RUNNING"])])
    backend = backends(await serve(fake))
    with pytest.raises(SlurmError, match=rf"slurmrestd {version} has no requeue endpoint.*onTimeout Cancel"):
        await backend.requeue(["42"])
    assert not any("requeue" in p for p in paths(fake))


async def test_topology_is_empty_over_rest(serve, backends):
    assert await backends(await serve(FakeSlurmrestd())).topology() == []


def test_known_versions():
    assert KNOWN_VERSIONS == ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")


async def test_close_releases_the_pool_and_a_later_call_opens_a_new_one(serve, backends):
    fake = FakeSlurmrestd()
    backend = backends(await serve(fake))
    await backend.ping()
    await backend.close()
    await backend.ping()
    assert paths(fake)[-1] == "/slurm/v0.0.45/ping/"


# ---------------------------------------------------------------- HTTP quirks of the real slurmrestd

# What slurmrestd 26.05.3 wrote, byte for byte, for a RESUME of a node that was not drained
# (captured from e2e/test_rest_real.py's cluster): a complete JSON answer with Connection: Close,
# then a second answer on the same connection, in one write.
QUIRK = (
    b'HTTP/1.1 422 UNPROCESSABLE CONTENT\r\nConnection: Close\r\nContent-Length: %d\r\n'
    b'Content-Type: application/json\r\n\r\n%s'
    b'HTTP/1.1 422 UNPROCESSABLE CONTENT\r\nContent-Length: 29\r\nContent-Type: text/plain\r\n\r\n'
    b'Invalid node state transition'
)
QUIRK_JSON = (b'{\n  "errors": [\n    {\n      "description": "Failure to update node gpu01",\n'
              b'      "error_number": 2180,\n      "error": "Invalid node state transition",\n'
              b'      "source": "_update_node"\n    }\n  ],\n  "warnings": [\n  ],\n  "meta": {}\n}')


async def raw_server(answer):
    """A TCP server answering each request (read up to its blank line and body) with answer(request)."""
    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
                body = await reader.readexactly(length) if length else b""
                data, close = answer(head + body)
                writer.write(data)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def ok(body: dict, close=False) -> tuple[bytes, bool]:
    import json as _json
    text = _json.dumps({**body, "meta": {}, "errors": [], "warnings": []}).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: application/json\r\n\r\n%s" % (len(text), text), close


async def test_the_double_answer_of_slurmrestd_2605_errors_is_read_as_its_json(backends):
    state = {"node": ["IDLE"]}

    def answer(request):
        if b"POST /slurm/v0.0.45/node/gpu01" in request:
            return QUIRK % (len(QUIRK_JSON), QUIRK_JSON), True
        if b"GET /openapi/v3" in request:
            return ok({"paths": {"/slurm/v0.0.45/ping/": {}}})
        if b"GET /slurm/v0.0.45/nodes/" in request:
            return ok({"nodes": [rest_node("gpu01", state["node"])]})
        return b"HTTP/1.1 404 NOT FOUND\r\nContent-Length: 0\r\n\r\n", True

    server = await raw_server(answer)
    port = server.sockets[0].getsockname()[1]
    try:
        backend = backends(f"http://127.0.0.1:{port}")
        await backend.resume(["gpu01"])  # not drained: the refusal is the goal, once the node shows it
        state["node"] = ["IDLE", "DRAIN"]  # drained, and RESUME refused all the same: an error with Slurm's words
        with pytest.raises(SlurmError, match=r"failed \(422\): Invalid node state transition: Failure to update node gpu01") as info:
            await backend.resume(["gpu01"])
        assert not isinstance(info.value, SlurmUnavailable)
    finally:
        server.close()
        await server.wait_closed()


async def test_connections_are_kept_alive_and_a_stale_one_is_replaced(backends):
    requests = []

    def answer(request):
        requests.append(request)
        if b"/openapi/v3" in request:
            return ok({"paths": {"/slurm/v0.0.45/ping/": {}}})
        # every third answer closes the connection afterwards, as a server's idle timeout would
        return ok({"pings": [{"hostname": "ctl", "responding": True}]}, close=len(requests) % 3 == 0)

    server = await raw_server(answer)
    port = server.sockets[0].getsockname()[1]
    try:
        backend = backends(f"http://127.0.0.1:{port}")
        for _ in range(8):
            await backend.ping()
        assert len(requests) == 9  # openapi + 8 pings, none lost or repeated
        # Answers 3, 6 and 9 close their connection without saying so: the next request finds it
        # stale and goes again on a new one. One connection per three requests, not one per request.
        assert backend._http.opened == 3
    finally:
        server.close()
        await server.wait_closed()


async def test_something_that_is_not_http_is_an_error_not_an_outage(backends):
    server = await raw_server(lambda request: (b"SSH-2.0-OpenSSH_9.2\r\n", True))
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(SlurmError, match="did not answer in HTTP") as info:
            await backends(f"http://127.0.0.1:{port}").ping()
        assert not isinstance(info.value, SlurmUnavailable)
    finally:
        server.close()
        await server.wait_closed()


async def test_an_untrusted_certificate_is_a_clear_error(backends):
    import ssl as _ssl
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=slurmrestd",
                        "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", f"{d}/k.pem", "-out", f"{d}/c.pem"], check=True, capture_output=True)
        ctx = _ssl.create_default_context(_ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(f"{d}/c.pem", f"{d}/k.pem")
        fake = FakeSlurmrestd()
        runner = web.AppRunner(fake.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(SlurmError, match="TLS certificate not trusted") as info:
                await backends(f"https://127.0.0.1:{port}").ping()
            assert not isinstance(info.value, SlurmUnavailable)
            # The CA given (here the self-signed certificate itself) makes it trusted.
            trusted = _ssl.create_default_context(cadata=open(f"{d}/c.pem").read())
            await backends(f"https://127.0.0.1:{port}", ssl_context=trusted).ping()
        finally:
            await runner.cleanup()


# ---------------------------------------------------------------- the same node, either way

_word = st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="=[]"), min_size=1, max_size=12)


@given(
    name=st.from_regex(r"[a-z][a-z0-9-]{0,10}[0-9]", fullmatch=True),
    base=st.sampled_from(BASES),
    flags=st.sets(st.sampled_from(FLAGS)),
    reason=st.one_of(st.just(""), st.lists(_word, min_size=1, max_size=6).map(" ".join)),
    gres=st.sampled_from(["gpu:h100:8", "gpu:8", "gpu:a100:4,nic:1", "(null)"]),
    features=st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), max_size=4, unique=True),
    partitions=st.lists(st.sampled_from(["gpu", "debug", "long"]), min_size=1, max_size=3, unique=True),
    started=st.integers(1_600_000_000, 1_900_000_000),
)
@settings(max_examples=150, deadline=None)
def test_any_node_reads_the_same_over_rest_and_scontrol(name, base, flags, reason, gres, features, partitions, started):
    when = datetime.fromtimestamp(started, timezone.utc)
    state = "+".join([base, *sorted(flags)])
    line = scontrol_line(name, state, reason, f"root@{when:%Y-%m-%dT%H:%M:%S}" if reason else "",
                         gres=gres, features=",".join(features) or "(null)", partitions=",".join(partitions),
                         start=f"{when:%Y-%m-%dT%H:%M:%S}")
    want = parse_scontrol_nodes(line)[name]
    raw = rest_node(name, [base, *flags], reason=reason, reason_user="root" if reason else "", reason_at=started,
                    gres="" if gres == "(null)" else gres, features=features, partitions=partitions, slurmd_start=started)
    got = parse_rest_node(raw)
    assert got == want  # the stamp's user and time too: scontrol's "[root@...]", REST's reason_set_by_user/_changed_at
    if reason:
        assert (got.reason_user, got.reason_time) == ("root", when)


async def test_a_200_without_a_node_list_is_a_failed_poll_not_an_empty_cluster(serve, backends):
    """Issue 25: a 200 with no `nodes` read as no nodes made every Slurm node "nothing to drain"."""
    fake = FakeSlurmrestd(nodes=[rest_node("gpu01", ["ALLOCATED"])])
    fake.scripted[("GET", "/nodes/")] = (200, {"last_update": no_val(1764547300)}, [])
    backend = backends(await serve(fake))
    with pytest.raises(SlurmUnavailable, match="without a node list"):
        await backend.nodes()
    fake.scripted[("GET", "/nodes/")] = (200, {"nodes": []}, [])  # a cluster of dynamic nodes none of which registered yet
    assert await backend.nodes() == {}


# ---------------------------------------------------------------- what jobs ask of nodes (issue 39)
PENDING_REASONS = Path(__file__).parent / "fixtures" / "pending_reasons"


@pytest.mark.parametrize("capture", ["24.11-local", "26.05-local"])
def test_real_jobs_say_which_nodes_they_name_and_whether_they_take_whole_nodes(capture):
    """GET /slurm/v0.0.42/jobs as 24.11 and 26.05 answer it: "required_nodes" a hostlist string,
    "shared" ["none"] for --exclusive (fill, gang) and [] otherwise."""
    raw = json.loads((PENDING_REASONS / capture / "jobs.json").read_text())["jobs"]
    jobs = {j.name: j for j in (parse_rest_job(r)[0] for r in raw)}
    assert (jobs["fill"].exclusive, jobs["gang"].exclusive, jobs["one"].exclusive, jobs["pinned"].exclusive) == (True, True, False, False)
    assert jobs["pinned"].required_nodes == ("gpu08",) and jobs["one"].required_nodes == ()
    assert jobs["pinned"].unavailable_nodes == ()  # "ReqNodeNotAvail, May be reserved for other job" names none


async def test_jobs_read_exclusive_up_to_v0044_and_not_from_v0045(serve, backends):
    """v0.0.45 (26.05) removed "shared" from a job's info (dumped as an empty list) and put no
    "exclusive" there: whole-node jobs read as not known."""
    pinned = {**rest_job(9, ["PENDING"], node_count=2, reason="ReqNodeNotAvail"), "shared": ["none"],
              "required_nodes": "gpu[07-08]", "state_description": "ReqNodeNotAvail, UnavailableNodes:gpu[07-08]"}
    for version, exclusive in (("v0.0.42", True), ("v0.0.44", True), ("v0.0.45", None)):
        fake = FakeSlurmrestd(versions=(version,), jobs=[pinned])
        (job,) = await backends(await serve(fake)).jobs()
        assert (job.exclusive, job.required_nodes, job.unavailable_nodes) == (exclusive, ("gpu07", "gpu08"), ("gpu07", "gpu08")), version
    assert parse_rest_job({**pinned, "shared": []})[0].exclusive is False
    assert parse_rest_job({k: v for k, v in pinned.items() if k != "shared"})[0].exclusive is None
    assert parse_rest_job({**pinned, "required_nodes": ["gpu07", "gpu08"]})[0].required_nodes == ("gpu07", "gpu08")
