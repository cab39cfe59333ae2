"""Parking by power saving (issue 39): the PoweringDown and PoweringUp phases walked through the
simulated world (tests/sim.py models Slurm's power flags), the upkeep of parked nodes, switches
of `spec.slurm.parking` on a running pool, and a crash at every round."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmpool.core import slurmstate
from slurmpool.core.events import Reason
from slurmpool.core.moves import CreateSlurmdPod, Pass, PowerDown, PowerDownAgain, PowerUp, Step, advance, keep_parked
from slurmpool.core.patch import node_patch
from slurmpool.core.view import ANN_POWER_DOWN_ASKED, ANN_SETTLED, SLURM, Cause, MoveRecord, PodView, iso

from .factories import NOW, make_spec, slurm_node
from .sim import POOL, POWER_SAVE_OFF, POWER_SAVE_ON, RESUME_TIMEOUT, World, parked, run_move, start
from .test_moves import INFERENCE, assert_inference, assert_slurm, inference_world, slurm_world

WEB = PodView("web", "w", "u", owner_kinds=("ReplicaSet",))


def power_save_spec(parking="PowerSave", **kw):
    spec = make_spec(**kw)
    return spec.model_copy(update={"slurm": spec.slurm.model_copy(update={"parking": parking})})


def powered_down_world(drained=True, **kw) -> World:
    """A node parked in inference and powered down: `drain~` (held) or, without the drain, `idle~` (lendable)."""
    world = inference_world(pods=[WEB], power_save=POWER_SAVE_ON, clock=NOW, **kw)
    sn = replace(world.slurm_node, state="IDLE", flags=frozenset({"DRAIN", "POWERED_DOWN"} if drained else {"POWERED_DOWN"}))
    if not drained:
        sn = replace(sn, reason=None)
        world.drain_owner = None
    world.slurm_node = sn
    return world


def created(world: World) -> list[bool]:
    return [a.boot for a in world.actions if isinstance(a, CreateSlurmdPod)]


# ------------------------------------------------------------------ to inference


def test_power_save_parks_the_node_powered_down_after_its_slurmd_stops():
    world = slurm_world(power_save=POWER_SAVE_ON)
    start(world, SLURM, INFERENCE, NOW)
    run_move(world, power_save_spec(), NOW)
    assert_inference(world)
    assert world.phases == ["StoppingSlurmd", "PoweringDown", "Relabeling"]
    assert world.log.index("DeleteSlurmdPod") < world.log.index("PowerDown")
    assert slurmstate.parked(world.slurm_node) and "POWERED_DOWN" in world.slurm_node.flags  # drain~: held


def test_a_drain_slurm_lifts_as_it_powers_the_node_down_is_set_again():
    """26.05 clears a node's DRAIN when it powers it down: the move ends with the node held, `drain~`."""
    world = slurm_world(power_save=POWER_SAVE_ON, version="26.05")
    start(world, SLURM, INFERENCE, NOW)
    run_move(world, power_save_spec(), NOW)
    assert_inference(world)
    assert world.log.count("Drain") == 2 and world.log.index("PowerDown") < len(world.log) - 1 - world.log[::-1].index("Drain")
    assert "POWERED_DOWN" in world.slurm_node.flags and world.drain_owner == "slurmpool"


def test_a_drain_pool_never_enters_the_power_phases_nor_asks_slurm_for_power():
    world = slurm_world(power_save=POWER_SAVE_ON)
    start(world, SLURM, INFERENCE, NOW)
    run_move(world, make_spec(), NOW)
    assert_inference(world)
    assert world.phases == ["StoppingSlurmd", "Relabeling"] and "PowerDown" not in world.log
    back = inference_world(pods=[WEB], power_save=POWER_SAVE_ON)
    start(back, INFERENCE, SLURM, NOW)
    run_move(back, make_spec(), NOW)
    assert_slurm(back)
    assert back.phases == ["Evicting", "StartingSlurmd", "Registering", "Resuming"] and created(back) == [False]


def test_power_save_off_or_unknown_parks_by_drain_and_sends_no_power_request():
    for power_save in (POWER_SAVE_OFF, None):
        world = slurm_world(power_save=power_save)
        start(world, SLURM, INFERENCE, NOW)
        run_move(world, power_save_spec(), NOW)
        assert_inference(world)
        assert "PoweringDown" not in world.phases and "PowerDown" not in world.log and slurmstate.powered(world.slurm_node)


def test_powering_down_waits_for_slurm_and_is_bounded_by_register_timeout():
    spec = power_save_spec()
    move = MoveRecord(id="m1", source=SLURM, target=INFERENCE, phase="PoweringDown", since=NOW, started=NOW)
    world = slurm_world(power_save=POWER_SAVE_ON)
    world.node = replace(world.node, pods=())
    stuck = replace(world.slurm_node, flags=frozenset({"DRAIN", "POWER_DOWN"}))  # asked, not taken (a busy slurmctld)
    step = advance(move, world.node, Pass(replace(world.view(), nodes={"gpu01": stuck}), spec, NOW))
    assert step.move.phase == "PoweringDown" and step.actions == [] and "powering down" in step.message  # asked once only
    late = NOW + timedelta(minutes=5)
    step = advance(move, world.node, Pass(replace(world.view(), nodes={"gpu01": stuck}), spec, late))
    assert step.move.phase == "Relabeling"
    assert [e.reason for e in step.events if e.type == "Warning"] == [Reason.NotPoweredDown]


def test_powering_down_a_node_slurm_leaves_out_of_its_answer_waits_within_the_same_bound():
    """A lying Slurm (issue 37; the pool model found it): a poll without the node is no proof of a
    power-down, nor of none. Done then, the node counted parked by its drain while Slurm powered it
    down, and a move back started its slurmd on a powered-down node."""
    spec = power_save_spec()
    move = MoveRecord(id="m1", source=SLURM, target=INFERENCE, phase="PoweringDown", since=NOW, started=NOW)
    world = slurm_world(power_save=POWER_SAVE_ON)
    world.node = replace(world.node, pods=())
    hidden = replace(world.view(), nodes={})
    step = advance(move, world.node, Pass(hidden, spec, NOW + timedelta(seconds=30)))
    assert step.move.phase == "PoweringDown" and step.actions == [] and "does not list" in step.message
    step = advance(move, world.node, Pass(hidden, spec, NOW + timedelta(minutes=5)))
    assert step.move.phase == "Relabeling" and [e.reason for e in step.events if e.type == "Warning"] == [Reason.NotPoweredDown]
    step = advance(move, world.node, Pass(hidden, make_spec(), NOW))  # a Drain pool powers nothing down: no wait
    assert step.move.phase == "Relabeling"


# ------------------------------------------------------------------ to Slurm


def test_a_held_powered_down_node_is_powered_up_then_its_slurmd_starts_with_b():
    world = powered_down_world()
    start(world, INFERENCE, SLURM, NOW)
    run_move(world, power_save_spec(), NOW)
    assert_slurm(world)
    assert world.phases == ["Evicting", "PoweringUp", "StartingSlurmd", "Registering", "Resuming"]
    assert world.log.index("Evict") < world.log.index("PowerUp") < world.log.index("CreateSlurmdPod") < world.log.index("Resume")
    assert created(world) == [True] and slurmstate.powered(world.slurm_node)


def test_a_lendable_node_is_drained_before_it_is_powered_up():
    world = powered_down_world(drained=False)
    start(world, INFERENCE, SLURM, NOW)
    run_move(world, power_save_spec(), NOW)
    assert_slurm(world)
    assert world.log.index("Drain") < world.log.index("PowerUp") < world.log.index("Resume")


def test_a_drain_pool_powers_up_a_node_parked_by_power_save_before_the_switch():
    """PowerSave -> Drain: parked nodes stay powered down (`drain~` is a valid Drain park); a move
    to Slurm powers them up first."""
    world = powered_down_world()
    start(world, INFERENCE, SLURM, NOW)
    run_move(world, make_spec(), NOW)
    assert_slurm(world)
    assert "PoweringUp" in world.phases and created(world) == [True]


def test_slurms_own_power_up_for_a_job_goes_straight_to_slurmd_with_b_and_never_drains():
    """A give-back: Slurm placed a job on the lendable node (POWERING_UP, the job CONFIGURING).
    A drain would requeue it: the move starts slurmd with -b and the job runs once it registers."""
    world = powered_down_world(drained=False)
    world.slurm_asks_back("42")
    start(world, INFERENCE, SLURM, NOW)
    run_move(world, power_save_spec(), NOW)
    assert_slurm(world)
    assert "Drain" not in world.log and "PowerUp" not in world.log and "PoweringUp" not in world.phases
    assert created(world) == [True] and [(j.job_id, j.state) for j in world.jobs] == [("42", "RUNNING")] and world.requeued == []


def test_a_powering_down_node_is_powered_up_once_it_is_down():
    spec = power_save_spec()
    world = powered_down_world()
    world.slurm_node = replace(world.slurm_node, flags=frozenset({"DRAIN", "POWERING_DOWN"}))
    move = MoveRecord(id="m1", source=INFERENCE, target=SLURM, phase="PoweringUp", since=NOW, started=NOW)
    step = advance(move, world.node, Pass(world.view(), spec, NOW))
    assert step.move.phase == "PoweringUp" and not [a for a in step.actions if isinstance(a, PowerUp)]
    world.tick()  # POWERED_DOWN
    step = advance(move, world.node, Pass(world.view(), spec, NOW))
    assert [a for a in step.actions if isinstance(a, PowerUp)] == [PowerUp("gpu01")]


def test_a_power_up_slurm_never_answers_rolls_back_and_parks_the_node_again():
    spec = power_save_spec()
    world = powered_down_world()
    world.slurm_node = replace(world.slurm_node, flags=frozenset({"DRAIN", "POWERED_DOWN", "POWER_UP"}))  # asked, never taken
    move = MoveRecord(id="m1", source=INFERENCE, target=SLURM, phase="PoweringUp", since=NOW, started=NOW)
    step = advance(move, world.node, Pass(world.view(), spec, NOW + timedelta(minutes=5)))
    assert step.rolled_back is not None and step.settled == INFERENCE  # back in inference, parked: powered down, drained


def test_a_power_up_timed_out_by_slurm_is_asked_again_before_slurmd_starts():
    """ResumeTimeout passed while StartingSlurmd waited (the pod refused, say): Slurm shows the node
    DOWN and powered down, its drain gone. No slurmd on a powered-down node: drained, powered up."""
    spec = power_save_spec()
    world = powered_down_world()
    world.slurm_node = replace(world.slurm_node, state="DOWN", flags=frozenset({"POWERED_DOWN"}))
    move = MoveRecord(id="m1", source=INFERENCE, target=SLURM, phase="StartingSlurmd", since=NOW, started=NOW)
    step = advance(move, world.node, Pass(world.view(), spec, NOW))
    kinds = [type(a).__name__ for a in step.actions]
    assert "CreateSlurmdPod" not in kinds and "Drain" in kinds and "PowerUp" not in kinds
    world.slurm_node = replace(world.slurm_node, flags=frozenset({"POWERED_DOWN", "DRAIN"}))
    step = advance(move, world.node, Pass(world.view(), spec, NOW))
    assert PowerUp("gpu01") in step.actions and not [a for a in step.actions if isinstance(a, CreateSlurmdPod)]


# ------------------------------------------------------------------ rollbacks


def test_a_give_back_turned_back_requeues_the_job_and_powers_the_node_down_again():
    """Slurm asked for the node, but its pods cannot be evicted (a PDB) and onEvictionTimeout is
    Rollback: the move back drains the POWERING_UP node (Slurm requeues the job: not lost) and
    powers it down again, bounded by ResumeTimeout on a Slurm that takes the power-down only then."""
    spec = power_save_spec(drain={"evictionTimeout": "10s", "onEvictionTimeout": "Rollback"})
    world = powered_down_world(drained=False, protected={"web/w"})
    world.slurm_asks_back("42")
    start(world, INFERENCE, SLURM, NOW)
    run_move(world, spec, NOW, rounds=200)
    n = world.node
    assert n.move is None and n.placement == INFERENCE and n.slurmd_pod is None
    assert world.requeued == ["42"] and world.jobs == []
    assert "PoweringDown" in world.phases and "CreateSlurmdPod" not in world.log
    assert slurmstate.parked(world.slurm_node) and not slurmstate.powering_up(world.slurm_node)


def test_a_move_to_slurm_rolled_back_after_our_power_up_parks_the_node_powered_down():
    spec = power_save_spec()
    world = powered_down_world()
    world.slurmd_registers = False
    start(world, INFERENCE, SLURM, NOW)
    # Registering never ends (the slurmd cannot register): registerTimeout rolls the move back.
    run_move(world, spec, NOW, rounds=400, step_seconds=2)
    assert world.node.move is None and world.node.placement == INFERENCE
    assert slurmstate.parked(world.slurm_node)


# ------------------------------------------------------------------ the parked node's upkeep, mode switches


def test_a_drain_to_power_save_switch_powers_parked_nodes_down_in_place():
    world = inference_world(power_save=POWER_SAVE_ON)
    world.slurm_node = replace(world.slurm_node, state="IDLE", flags=frozenset({"DRAIN"}))  # drained, its slurmd gone
    assert keep_parked(world.node, Pass(world.view(), make_spec(), NOW)) is None  # Drain parking: nothing to do
    step = keep_parked(world.node, Pass(world.view(), power_save_spec(), NOW))
    assert step is not None and step.actions == [PowerDown("gpu01")] and step.move is None and step.power_down_asked == NOW
    world.write(node_patch(POOL, world.node, step, NOW))  # as apply.py does: the record first, then the request
    world.apply(PowerDown("gpu01"))
    assert keep_parked(world.node, Pass(world.view(), power_save_spec(), NOW)) is None  # asked: not again
    world.tick()
    world.tick()
    assert "POWERED_DOWN" in world.slurm_node.flags and world.slurm_node.drain_set  # drain~
    assert keep_parked(world.node, Pass(world.view(), power_save_spec(), NOW)) is None


def test_the_upkeep_leaves_foreign_drains_lent_nodes_busy_nodes_and_an_off_power_save_alone():
    spec = power_save_spec()
    world = inference_world(power_save=POWER_SAVE_ON)
    world.slurm_node = replace(world.slurm_node, state="IDLE", flags=frozenset({"DRAIN"}), reason="admin: bad DIMM")
    assert keep_parked(world.node, Pass(world.view(), spec, NOW)) is None
    lent = powered_down_world(drained=False)
    assert keep_parked(lent.node, Pass(lent.view(), spec, NOW)) is None
    off = inference_world(power_save=POWER_SAVE_OFF)
    off.slurm_node = replace(off.slurm_node, state="IDLE", flags=frozenset({"DRAIN"}))
    assert keep_parked(off.node, Pass(off.view(), spec, NOW)) is None


def test_the_upkeep_powers_down_a_parked_node_left_powering_up_in_any_pool():
    """Our drain on a node Slurm is powering up with nothing on it (a power-up turned back): without
    a slurmd it would go DOWN at ResumeTimeout; it is powered down again, Drain pool or not."""
    world = inference_world(power_save=POWER_SAVE_ON)
    world.slurm_node = replace(world.slurm_node, state="IDLE", flags=frozenset({"DRAIN", "POWERING_UP", "NOT_RESPONDING"}))
    step = keep_parked(world.node, Pass(world.view(), make_spec(), NOW))
    assert step is not None and step.actions == [PowerDown("gpu01")]


def queued(settled=NOW - timedelta(minutes=10), asked=None) -> World:
    """Parked by our drain, the power-down Slurm never took (`drained!`: a slurmd that never registered)."""
    world = inference_world(power_save=POWER_SAVE_ON)
    world.node = replace(world.node, annotations={**world.node.annotations, ANN_SETTLED: iso(settled),
                                                  **({ANN_POWER_DOWN_ASKED: iso(asked)} if asked else {})})
    world.slurm_node = replace(world.slurm_node, state="DOWN", flags=frozenset({"DRAIN", "POWER_DOWN", "NOT_RESPONDING"}))
    return world


def test_a_power_down_slurm_keeps_queued_is_asked_again_forced_once_per_register_timeout():
    spec = power_save_spec()  # registerTimeout 5m
    world = queued(settled=NOW - timedelta(minutes=4))
    assert keep_parked(world.node, Pass(world.view(), spec, NOW)) is None  # parked 4 min ago: within the bound
    step = keep_parked(world.node, Pass(world.view(), spec, NOW + timedelta(minutes=1)))
    assert step is not None and step.actions == [PowerDownAgain("gpu01")] and step.power_down_asked == NOW + timedelta(minutes=1)
    assert [e.reason for e in step.events] == [Reason.NotPoweredDown] and "POWER_DOWN_FORCE" in step.events[0].message
    # the time is written on the Node with the step, before the request: a restart does not ask twice
    assert node_patch(POOL, world.node, step, NOW)["metadata"]["annotations"][ANN_POWER_DOWN_ASKED] == iso(NOW + timedelta(minutes=1))
    again = queued(settled=NOW - timedelta(hours=1), asked=NOW - timedelta(minutes=2))
    assert keep_parked(again.node, Pass(again.view(), spec, NOW)) is None
    later = keep_parked(again.node, Pass(again.view(), spec, NOW + timedelta(minutes=3)))
    assert later is not None and later.actions == [PowerDownAgain("gpu01")]


def test_an_old_ask_from_an_earlier_parking_does_not_count_the_bound_runs_from_the_park():
    world = queued(settled=NOW - timedelta(minutes=1), asked=NOW - timedelta(days=2))
    assert keep_parked(world.node, Pass(world.view(), power_save_spec(), NOW)) is None


def test_without_a_record_of_the_park_or_the_ask_the_bound_starts_now():
    world = queued()
    world.node = replace(world.node, annotations={k: v for k, v in world.node.annotations.items() if k != ANN_SETTLED})
    step = keep_parked(world.node, Pass(world.view(), power_save_spec(), NOW))
    assert step is not None and step.actions == [] and step.power_down_asked == NOW


def test_a_node_slurm_powers_down_or_one_with_jobs_is_not_asked_again():
    spec = power_save_spec()
    for flags, state in (({"DRAIN", "POWER_DOWN", "POWERING_DOWN"}, "IDLE"), ({"DRAIN", "POWERED_DOWN"}, "IDLE"), ({"DRAIN", "POWER_DOWN"}, "ALLOCATED")):
        world = queued(settled=NOW - timedelta(hours=1))
        world.slurm_node = replace(world.slurm_node, state=state, flags=frozenset(flags))
        assert keep_parked(world.node, Pass(world.view(), spec, NOW)) is None, flags


def test_an_unreadable_ask_time_is_reported_on_the_node():
    world = inference_world()
    node = replace(world.node, annotations={**world.node.annotations, ANN_POWER_DOWN_ASKED: "soon"})
    assert [p.annotation for p in node.problems] == [ANN_POWER_DOWN_ASKED]


def test_a_settled_slurm_node_powering_up_gets_its_slurmd_with_b():
    from slurmpool.core.decide import decide
    from slurmpool.core.snapshot import PoolSnapshot

    from .sim import POOL

    world = slurm_world(power_save=POWER_SAVE_ON)
    world.node = replace(world.node, pods=())
    world.slurm_node = slurm_node("gpu01", "IDLE", {"POWERING_UP", "NOT_RESPONDING"})
    decision = decide(PoolSnapshot(pool=POOL, spec=make_spec(slurm_nodes=1), nodes=(world.node,), slurm=world.view(), now=NOW))
    assert CreateSlurmdPod("gpu01", boot=True) in decision.steps["gpu01"].actions


# ------------------------------------------------------------------ crashes


@settings(max_examples=120, deadline=None)
@given(
    direction=st.sampled_from(["in", "out", "give-back"]),
    crash_at=st.integers(0, 14),
    keeps_slurm=st.booleans(),
    parking=st.sampled_from(["PowerSave", "Drain"]),
    version=st.sampled_from(["22.05", "26.05"]),
)
def test_a_crash_at_any_round_of_a_power_save_move_still_settles_it(direction, crash_at, keeps_slurm, parking, version):
    spec = power_save_spec(parking)
    if direction == "in":
        world = slurm_world(power_save=POWER_SAVE_ON, version=version)
        start(world, SLURM, INFERENCE, NOW)
    else:
        world = powered_down_world(drained=direction == "out", version=version)
        if direction == "give-back":
            world.slurm_asks_back("42")
        start(world, INFERENCE, SLURM, NOW)
    for i in range(40):
        run_move(world, spec, NOW + timedelta(seconds=i), rounds=1, crash_at=0 if i == crash_at else None, crash_keeps_slurm=keeps_slurm)
    if direction == "in":
        assert_inference(world)
        assert slurmstate.parked(world.slurm_node) == (parking == "PowerSave")
    else:
        assert_slurm(world)
    assert world.requeued == [] and world.cancelled == []


def test_every_move_ends_within_resume_timeout_when_slurm_asked():
    """A give-back's path (evict, slurmd with -b, registered) fits in Slurm's ResumeTimeout here."""
    world = powered_down_world(drained=False)
    world.slurm_asks_back("42")
    start(world, INFERENCE, SLURM, NOW)
    run_move(world, power_save_spec(), NOW, step_seconds=1)
    assert_slurm(world)
    assert world.clock - NOW < RESUME_TIMEOUT


def test_a_parked_record_powered_down_reads_back_as_parked():
    """A node parked held: drain~ is `parked` and not `usable`; lent, idle~ is usable capacity."""
    node, sn = parked(inference_world().node, slurm_node("gpu01", "IDLE", {"POWERED_DOWN"}), "default", NOW)
    assert slurmstate.parked(sn) and not slurmstate.usable(sn) and node.drain_claim is not None
    lent = slurm_node("gpu01", "IDLE", {"POWERED_DOWN"})
    assert slurmstate.parked(lent) and slurmstate.usable(lent)


def test_slurmd_b_starts_only_once_slurms_power_up_request_is_seconds_old():
    """Measured on 22.05: a slurmd -b started within a second of the power-up request reports a
    boot time (whole seconds, less its uptime) that is not after it, and the node stays
    POWERING_UP until ResumeTimeout. StartingSlurmd lets the request age BOOT_AFTER_POWER_UP first."""
    from slurmpool.core.moves import BOOT_AFTER_POWER_UP
    from slurmpool.core.phases import Phase

    from .sim import POOL, node_patch

    world = powered_down_world()
    world.slurm_node = replace(world.slurm_node, flags=frozenset({"DRAIN", "POWERING_UP", "NOT_RESPONDING"}))
    move = MoveRecord(id="m1", source=INFERENCE, target=SLURM, phase=Phase.STARTING_SLURMD, since=NOW, started=NOW)
    world.write(node_patch(POOL, world.node, Step(move), NOW))

    def creates(after: timedelta) -> list[CreateSlurmdPod]:
        step = advance(world.node.move, world.node, Pass(world.view(), power_save_spec(), NOW + after))
        return [a for a in step.actions if isinstance(a, CreateSlurmdPod)]

    assert creates(timedelta(0)) == [] and creates(BOOT_AFTER_POWER_UP - timedelta(seconds=1)) == []
    assert creates(BOOT_AFTER_POWER_UP) == [CreateSlurmdPod("gpu01", boot=True)]
    # A give-back: Slurm's request came before the move began; its cordon and evictions count.
    giveback = move.model_copy(update={"cause": Cause.GIVEBACK, "started": NOW - BOOT_AFTER_POWER_UP, "since": NOW})
    world.write(node_patch(POOL, world.node, Step(giveback), NOW))
    assert creates(timedelta(0)) == [CreateSlurmdPod("gpu01", boot=True)]
    world.write(node_patch(POOL, world.node, Step(giveback.model_copy(update={"started": NOW})), NOW))
    assert creates(timedelta(seconds=1)) == []


def test_a_node_slurm_leaves_out_of_its_answer_after_showing_it_powered_down_gets_no_slurmd_until_listed():
    """A lying Slurm (issue 37): a poll that omits a node the operator last published powered
    down. A slurmd registering on it would be "unexpectedly rebooted": StartingSlurmd waits for
    Slurm to list it, half the registerTimeout at most (a node Slurm no longer knows, a deleted
    dynamic node, is then started as any unlisted node)."""
    from slurmpool.core.models import seconds
    from slurmpool.core.phases import Phase
    from slurmpool.core.published import slurm_annotation
    from slurmpool.core.view import ANN_SLURM

    from .sim import node_patch

    world = powered_down_world()
    world.write({"metadata": {"annotations": {ANN_SLURM: slurm_annotation("gpu01", world.view())}}})
    move = MoveRecord(id="m1", source=INFERENCE, target=SLURM, phase=Phase.STARTING_SLURMD, since=NOW, started=NOW)
    world.write(node_patch(POOL, world.node, Step(move), NOW))
    spec = power_save_spec()
    hidden = replace(world.view(), nodes={})

    def creates(after: float, view=hidden) -> list[CreateSlurmdPod]:
        step = advance(world.node.move, world.node, Pass(view, spec, NOW + timedelta(seconds=after)))
        return [a for a in step.actions if isinstance(a, CreateSlurmdPod)]

    half = seconds(spec.slurm.register_timeout) / 2
    assert creates(0) == [] and creates(half - 1) == []
    assert creates(0, world.view()) == []  # listed: powered down, so powered up first (PowerUp), still no slurmd
    assert creates(half) == [CreateSlurmdPod("gpu01", boot=False)]
    world.write({"metadata": {"annotations": {ANN_SLURM: None}}})  # never published: an unlisted node is started at once
    assert creates(0) == [CreateSlurmdPod("gpu01", boot=False)]
