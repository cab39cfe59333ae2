"""Parking by power saving at the edges (issue 39): Slurm's power-save settings polled once a
minute and only for PowerSave pools, the power requests batched by hostlist, the PowerSaveReady
condition, and `-b` on the slurmd pod only when asked."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from slurmbridge import PowerSave, SlurmUnavailable, SlurmUnsupported
from slurmpool.adapters import access
from slurmpool.adapters.kube import slurmd_pod
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.models import SlurmAccess
from slurmpool.core.view import ANN_PLACEMENT, ANN_SETTLED, LABEL_SIDE, NodeView, SlurmView, iso

from .factories import NOW, make_spec, slurm_node
from .sim import POWER_SAVE_OFF, POWER_SAVE_ON, parked
from .test_access import Clock, CountingBackend, backend_is
from .test_apply import FakeKube, FakeSlurm, run

INFERENCE = "inference:default"


class PowerSaveBackend(CountingBackend):
    def __init__(self, answer):
        super().__init__()
        self.answer = answer

    async def power_save(self):
        self.calls.append("power_save")
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_power_save_is_read_only_for_pools_that_want_it_and_at_most_once_a_minute(monkeypatch):
    clock = Clock()
    clock.t = 1000.0
    pool = access.SlurmAccessPool(read_secret=None, clock=clock)
    fake = PowerSaveBackend(POWER_SAVE_ON)
    backend_is(monkeypatch, pool, fake)
    spec = SlurmAccess(local={})
    _, view = await pool.observe("ns", spec, access.Wanted(max_age=0.5))
    assert "power_save" not in fake.calls and view.power_save is None  # a Drain pool: never asked
    for _ in range(10):  # a PowerSave pool, ten passes within the minute: read once
        clock.t += 1
        _, view = await pool.observe("ns", spec, access.Wanted(max_age=0.5, power_save=True))
    assert fake.calls.count("power_save") == 1 and view.power_save == POWER_SAVE_ON and fake.calls.count("nodes") == 11
    clock.t += access.POWER_SAVE_MAX_AGE
    await pool.observe("ns", spec, access.Wanted(max_age=0.5, power_save=True))
    assert fake.calls.count("power_save") == 2


async def test_a_failed_or_unsupported_power_save_read_is_unknown_and_never_fails_the_poll(monkeypatch):
    for error in (SlurmUnsupported("slurmrestd v0.0.40 cannot tell"), SlurmUnavailable("timed out")):
        clock = Clock()
        pool = access.SlurmAccessPool(read_secret=None, clock=clock)
        fake = PowerSaveBackend(error)
        backend_is(monkeypatch, pool, fake)
        _, view = await pool.observe("ns", SlurmAccess(local={}), access.Wanted(max_age=0.5, power_save=True))
        assert view.available and view.power_save is None and view.nodes
        clock.t += 1
        await pool.observe("ns", SlurmAccess(local={}), access.Wanted(max_age=0.5, power_save=True))
        assert fake.calls.count("power_save") == 1  # not known, for as long as a reading would be kept


def test_the_slurmd_pod_gets_b_only_when_asked():
    spec = make_spec()
    spec = spec.model_copy(update={"slurm": spec.slurm.model_copy(update={"slurmd_pod": spec.slurm.slurmd_pod.model_copy(
        update={"args": ["-vv"]})})})
    plain = slurmd_pod(PoolRef("ns", "p"), spec, "n1")["spec"]["containers"][0]
    booting = slurmd_pod(PoolRef("ns", "p"), spec, "n1", boot=True)["spec"]["containers"][0]
    assert plain["args"] == ["-vv"] and booting["args"] == ["-vv", "-b"] and booting["command"] == plain["command"]


# ------------------------------------------------------------------ a PowerSave pool's pass


def power_save_pool(parking="PowerSave"):
    spec = make_spec(slurm_nodes=0)
    return spec.model_copy(update={"slurm": spec.slurm.model_copy(update={"parking": parking})})


def parked_nodes(n, power_save):
    """n nodes settled in inference, parked by Drain (drained, slurmd gone, powered)."""
    nodes, slurm = [], {}
    for i in range(n):
        name = f"gpu{i:02d}"
        node = NodeView(name=name, annotations={ANN_PLACEMENT: INFERENCE}, labels={LABEL_SIDE: "inference", "pool": "default"},
                        taints=({"key": "inference", "value": "default", "effect": "NoSchedule"},))
        node, sn = parked(node, slurm_node(name, "IDLE"), "default", parked_at())
        nodes.append(node)
        slurm[name] = sn
    return nodes, SlurmView(True, nodes=slurm, power_save=power_save)


def parked_at():
    return NOW - timedelta(hours=1)


def condition(status, type_="PowerSaveReady"):
    return next((c for c in status.conditions if c.type == type_), None)


async def test_a_drain_to_power_save_switch_powers_every_parked_node_down_in_one_batched_request():
    nodes, view = parked_nodes(3, POWER_SAVE_ON)
    status, kube, slurm = await run(power_save_pool(), nodes, view, kube=FakeKube(), slurm=Powering())
    assert slurm.calls == [("power_down", ("gpu00", "gpu01", "gpu02"))]
    assert not [c for c in kube.calls if c[0] == "patch_node" and "slurmpool.io/move" in c[2]]  # no move: the state is in Slurm
    c = condition(status)
    assert (c.status, c.reason) == ("True", "PowerSaveOn")


async def test_power_save_off_or_unknown_is_the_condition_and_nothing_is_powered_down():
    nodes, view = parked_nodes(2, POWER_SAVE_OFF)
    status, _, slurm = await run(power_save_pool(), nodes, view, slurm=Powering())
    c = condition(status)
    assert slurm.calls == [] and (c.status, c.reason) == ("False", "PowerSaveOff")
    assert c.message.startswith(POWER_SAVE_OFF.why_off) and "Drain parking" in c.message
    nodes, view = parked_nodes(2, None)
    status, _, slurm = await run(power_save_pool(), nodes, view, slurm=Powering())
    assert slurm.calls == [] and (condition(status).status, condition(status).reason) == ("Unknown", "PowerSaveUnknown")


async def test_a_drain_pool_has_no_power_save_condition_and_loses_one_it_had():
    nodes, view = parked_nodes(2, POWER_SAVE_ON)
    before, _, _ = await run(power_save_pool(), nodes, view, slurm=Powering())
    assert condition(before) is not None
    status, _, slurm = await run(power_save_pool("Drain"), nodes, view, slurm=Powering(), previous=before)
    assert condition(status) is None and slurm.calls == []


async def test_a_power_down_slurm_keeps_queued_is_asked_again_forced_after_the_node_records_when():
    nodes, view = parked_nodes(2, POWER_SAVE_ON)
    queued = {n: replace(sn, state="DOWN", flags=sn.flags | {"POWER_DOWN", "NOT_RESPONDING"}) for n, sn in view.nodes.items()}
    view = SlurmView(True, nodes=queued, power_save=POWER_SAVE_ON)
    nodes = [replace(n, annotations={**n.annotations, ANN_SETTLED: iso(parked_at())}) for n in nodes]  # an hour ago
    _, kube, slurm = await run(power_save_pool(), nodes, view, kube=FakeKube(), slurm=Powering())
    assert slurm.calls == [("power_down_again", ("gpu00", "gpu01"))]  # one batched request, forced
    assert {c[1] for c in kube.calls if c[0] == "patch_node" and "slurmpool.io/power-down-asked" in c[2]} == {"gpu00", "gpu01"}


async def test_a_powered_down_parked_node_is_not_asked_to_power_down_again():
    nodes, view = parked_nodes(1, POWER_SAVE_ON)
    sn = view.nodes["gpu00"]
    view = SlurmView(True, nodes={"gpu00": replace(sn, flags=sn.flags | {"POWERED_DOWN"})}, power_save=POWER_SAVE_ON)
    _, _, slurm = await run(power_save_pool(), nodes, view, slurm=Powering())
    assert not [c for c in slurm.calls if c[0].startswith("power")]  # (parking.py may lend it: a resume)


class Powering(FakeSlurm):
    async def power_down(self, nodes, again=False):
        self.calls.append(("power_down_again" if again else "power_down", tuple(nodes)))

    async def power_up(self, nodes):
        self.calls.append(("power_up", tuple(nodes)))

    async def power_save(self) -> PowerSave:
        return POWER_SAVE_ON


async def test_power_save_off_lends_nothing_a_parked_powered_down_node_stays_held():
    """Off, Slurm could not power a lent node up for its job (22.05, 24.11): parking.py lends none."""
    nodes, view = parked_nodes(1, POWER_SAVE_ON)
    sn = replace(view.nodes["gpu00"], flags=view.nodes["gpu00"].flags | {"POWERED_DOWN"})
    _, _, slurm = await run(power_save_pool(), nodes, SlurmView(True, nodes={"gpu00": sn}, power_save=POWER_SAVE_ON), slurm=Powering())
    assert slurm.calls == [("resume", ("gpu00",))]  # on: lent
    status, _, slurm = await run(power_save_pool(), nodes, SlurmView(True, nodes={"gpu00": sn}, power_save=POWER_SAVE_OFF),
                                 slurm=Powering())
    assert slurm.calls == [] and "power saving is off" in condition(status, "Lending").message
