"""The move state machine, walked through a simulated world: both directions, drain
policies, PDB-refused evictions, foreign drains, and a crash at every round."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmpool.core.moves import BETWEEN_POOLS, TO_INFERENCE, TO_SLURM, Blocker, BlockerKind, Drain, PatchNode, Pass, advance
from slurmpool.core.view import ANN_PLACEMENT, LABEL_SIDE, SLURM, SLURM_TAINT_KEY, MoveRecord, NodeView, PodView

from .factories import NOW, make_spec, slurm_node
from .sim import World, parked, run_move, start
from .test_planner import job

INFERENCE = "inference:default"


def slurm_world(**kw) -> World:
    node = NodeView(
        name="gpu01",
        annotations={ANN_PLACEMENT: SLURM},
        labels={LABEL_SIDE: "slurm"},
        taints=({"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"},),
        unschedulable=True,
        pods=(PodView("slurm", "slurmd-gpu01", "u1", slurmd=True, ready=True),),
    )
    return World(node=node, slurm_node=slurm_node("gpu01"), **kw)


def inference_world(pods=(), **kw) -> World:
    node = NodeView(name="gpu01", annotations={ANN_PLACEMENT: INFERENCE}, labels={LABEL_SIDE: "inference", "pool": "default"},
                    taints=({"key": "inference", "value": "default", "effect": "NoSchedule"},), pods=tuple(pods))
    node, sn = parked(node, slurm_node("gpu01", "DOWN", {"NOT_RESPONDING"}), "default", NOW - timedelta(hours=1))
    return World(node=node, slurm_node=sn, **kw)


def assert_inference(world: World):
    n = world.node
    assert n.move is None and n.placement == INFERENCE
    assert n.labels[LABEL_SIDE] == "inference" and n.labels["pool"] == "default"
    assert not n.unschedulable and n.slurmd_pod is None
    assert {(t["key"], t["effect"]) for t in n.taints} == {("inference", "NoSchedule")}
    assert world.slurm_node.drain_set and world.slurm_node.reason.startswith("slurmpool:")  # parked


def assert_slurm(world: World):
    n = world.node
    assert n.move is None and n.placement == SLURM
    assert n.labels[LABEL_SIDE] == "slurm" and "pool" not in n.labels
    assert n.unschedulable and n.has_taint(SLURM_TAINT_KEY, "NoSchedule")
    assert n.slurmd_pod is not None
    assert not world.slurm_node.drain_set and world.slurm_node.responding


def test_idle_node_to_inference():
    spec = make_spec()
    world = slurm_world()
    start(world, SLURM, INFERENCE, NOW)
    run_move(world, spec, NOW)
    assert_inference(world)
    assert world.log[:2] == ["Drain", "DeleteSlurmdPod"]


def test_inference_node_to_slurm_evicts_then_starts_slurmd_then_resumes():
    spec = make_spec()
    web = PodView("web", "web-1", "u2", owner_kinds=("ReplicaSet",), ready=True)
    daemon = PodView("kube-system", "dcgm", "u3", owner_kinds=("DaemonSet",), ready=True)
    world = inference_world(pods=[web, daemon])
    start(world, INFERENCE, SLURM, NOW)
    run_move(world, spec, NOW)
    assert_slurm(world)
    assert [p.name for p in world.node.pods if not p.slurmd] == ["dcgm"]  # DaemonSet pods stay
    assert world.log.index("Evict") < world.log.index("CreateSlurmdPod") < world.log.index("Resume")


def test_running_job_holds_the_drain_until_it_ends():
    spec = make_spec(drain={"timeout": "1h"})
    world = slurm_world(jobs=[job("42", ["gpu01"], end_in=30)])
    world.slurm_node = slurm_node("gpu01", "MIXED")
    start(world, SLURM, INFERENCE, NOW)
    run_move(world, spec, NOW, rounds=10)
    assert world.node.move.phase == "Draining" and world.node.slurmd_pod is not None
    step = advance(world.node.move, world.node, Pass(world.view(), spec, NOW + timedelta(seconds=10)))
    assert [str(b) for b in step.blocked_by] == ["job/42"]
    world.finish_jobs()
    run_move(world, spec, NOW + timedelta(seconds=20))
    assert_inference(world)
    assert world.requeued == [] and world.cancelled == []


@pytest.mark.parametrize("policy,requeued,cancelled", [("Requeue", ["42"], []), ("Cancel", [], ["42"])])
def test_drain_timeout_policies(policy, requeued, cancelled):
    spec = make_spec(drain={"timeout": "5s", "onTimeout": policy})
    world = slurm_world(jobs=[job("42", ["gpu01"], end_in=3600)])
    start(world, SLURM, INFERENCE, NOW)
    run_move(world, spec, NOW, rounds=30)
    assert_inference(world)
    assert world.requeued == requeued and world.cancelled == cancelled


def test_drain_timeout_wait_never_touches_jobs():
    spec = make_spec(drain={"timeout": "5s", "onTimeout": "Wait"})
    world = slurm_world(jobs=[job("42", ["gpu01"], end_in=3600)])
    start(world, SLURM, INFERENCE, NOW)
    run_move(world, spec, NOW, rounds=30)
    assert world.node.move.phase == "Draining"
    assert world.jobs and world.requeued == [] and world.cancelled == []


def test_drain_timeout_rollback_resumes_the_node_in_slurm():
    spec = make_spec(drain={"timeout": "5s", "onTimeout": "Rollback"})
    world = slurm_world(jobs=[job("42", ["gpu01"], end_in=3600)])
    start(world, SLURM, INFERENCE, NOW)
    run_move(world, spec, NOW, rounds=40)
    world.finish_jobs()  # not needed for the rollback: the job keeps running in Slurm
    assert world.node.move is None and world.node.placement == SLURM
    assert not world.slurm_node.drain_set and world.requeued == [] and world.cancelled == []


def test_pdb_refused_eviction_blocks_and_names_the_pod_never_forced():
    spec = make_spec()
    web = PodView("web", "web-1", "u2", owner_kinds=("ReplicaSet",), ready=True)
    world = inference_world(pods=[web], protected={"web/web-1"})
    start(world, INFERENCE, SLURM, NOW)
    run_move(world, spec, NOW, rounds=10)
    assert world.node.move.phase == "Evicting"
    step = advance(world.node.move, world.node, Pass(world.view(), spec, NOW + timedelta(seconds=11)))
    assert [str(b) for b in step.blocked_by] == ["pod/web/web-1"]
    assert world.node.slurmd_pod is None and "CreateSlurmdPod" not in world.log
    world.protected.clear()  # the PDB is relaxed
    run_move(world, spec, NOW + timedelta(seconds=12))
    assert_slurm(world)


def test_slurmd_that_never_registers_rolls_back_to_inference():
    spec = make_spec()
    spec.slurm.register_timeout = "10s"
    world = inference_world(slurmd_registers=False)
    start(world, INFERENCE, SLURM, NOW)
    run_move(world, spec, NOW, rounds=60)
    assert world.node.move is None and world.node.placement == INFERENCE
    assert world.node.slurmd_pod is None and not world.node.unschedulable


def test_foreign_drain_is_never_undone():
    spec = make_spec()
    world = inference_world()
    world.slurm_node = slurm_node("gpu01", "DOWN", {"DRAIN", "NOT_RESPONDING"}, reason="bad GPU, ticket 123")
    start(world, INFERENCE, SLURM, NOW)
    run_move(world, spec, NOW)
    assert world.node.placement == SLURM and "Resume" not in world.log
    assert world.slurm_node.reason == "bad GPU, ticket 123"


def test_slurm_unreachable_fails_closed():
    spec = make_spec()
    world = slurm_world(slurm_up=False)
    start(world, SLURM, INFERENCE, NOW)
    run_move(world, spec, NOW, rounds=10)
    assert world.node.move.phase == "Draining" and world.node.slurmd_pod is not None and world.log == []


@settings(max_examples=120, deadline=None)
@given(
    direction=st.sampled_from(["in", "out"]),
    crash_at=st.integers(0, 12),
    keeps_slurm=st.booleans(),
    busy_for=st.sampled_from([None, 2, 4]),
)
def test_a_crash_at_any_round_still_settles_the_move(direction, crash_at, keeps_slurm, busy_for):
    spec = make_spec()
    if direction == "out":
        world = slurm_world(jobs=[job("7", ["gpu01"], end_in=60)] if busy_for else [])
        start(world, SLURM, INFERENCE, NOW)
    else:
        world = inference_world(pods=[PodView("web", "w", "u", owner_kinds=("ReplicaSet",))])
        start(world, INFERENCE, SLURM, NOW)
    for i in range(40):
        if busy_for is not None and i == busy_for:
            world.finish_jobs()
        run_move(world, spec, NOW + timedelta(seconds=i), rounds=1, crash_at=0 if i == crash_at else None, crash_keeps_slurm=keeps_slurm)
    if direction == "out":
        assert_inference(world)
    else:
        assert_slurm(world)
    assert world.requeued == [] and world.cancelled == []


def test_phase_lists_cover_the_machine():
    from slurmpool.core.moves import PHASE_FUNCTIONS
    from slurmpool.core.phases import Phase

    assert set(PHASE_FUNCTIONS) == set(TO_INFERENCE) | set(TO_SLURM) | set(BETWEEN_POOLS) == set(Phase)


def _events(step) -> list[str]:
    return [reason for reason in (e.reason for e in step.events)]


def _uncordoned(node: NodeView) -> NodeView:
    return replace(node, unschedulable=False)


def test_a_hand_uncordon_mid_move_to_slurm_is_restored_and_reported_once():
    spec = make_spec()
    world = inference_world(pods=[PodView("web", "protected-1", "u9", owner_kinds=("ReplicaSet",))], protected={"web/protected-1"})
    start(world, INFERENCE, SLURM, NOW)
    run_move(world, spec, NOW, rounds=3)
    assert world.node.move.phase == "Evicting" and world.node.unschedulable
    step = advance(world.node.move, _uncordoned(world.node), Pass(world.view(), spec, NOW))
    assert _events(step).count("CordonRestored") == 1
    patch = next(a for a in step.actions if isinstance(a, PatchNode))
    assert patch.unschedulable and any(t["key"] == SLURM_TAINT_KEY for t in patch.taints)
    assert "pool" not in patch.labels  # the pool's labels are neither removed nor changed here
    step = advance(world.node.move, world.node, Pass(world.view(), spec, NOW))
    assert "CordonRestored" not in _events(step)  # cordoned: nothing to say


def test_a_rollback_towards_inference_does_not_restore_a_cordon():
    spec = make_spec()
    world = slurm_world()
    move = MoveRecord(id="m1-rb", source=SLURM, target=INFERENCE, phase="Draining", since=NOW, started=NOW, rollback=True)
    step = advance(move, _uncordoned(world.node), Pass(world.view(), spec, NOW))
    assert "CordonRestored" not in _events(step)
    step = advance(move.model_copy(update={"rollback": False}), _uncordoned(world.node), Pass(world.view(), spec, NOW))
    assert "CordonRestored" in _events(step)


def test_a_foreign_drain_mid_move_to_inference_is_reported_and_left():
    spec = make_spec()
    world = slurm_world()
    world.slurm_node = slurm_node("gpu01", "IDLE", {"DRAIN"}, reason="maintenance: fan")
    start(world, SLURM, INFERENCE, NOW)
    step = advance(world.node.move, world.node, Pass(world.view(), spec, NOW))
    assert "ForeignDrain" in _events(step) and not any(isinstance(a, Drain) for a in step.actions)
    run_move(world, spec, NOW)
    assert world.node.placement == INFERENCE and world.slurm_node.reason == "maintenance: fan"


def test_a_stale_registration_from_the_stopped_slurmd_is_not_taken_for_the_new_one():
    from slurmpool.core.moves import stale_slurmd

    spec = make_spec()
    old_start, pod_made = NOW - timedelta(minutes=5), NOW - timedelta(seconds=20)
    pod = PodView("slurm", "slurmd-gpu01", "u2", slurmd=True, created=pod_made)
    stale = replace(inference_world().slurm_node, state="IDLE", flags=frozenset({"DRAIN"}), slurmd_start=old_start)
    node = replace(inference_world().node, pods=(pod,), unschedulable=True,
                   taints=({"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"},))
    move = MoveRecord(id="m1", source=INFERENCE, target=SLURM, phase="Registering", since=NOW, started=NOW)
    from slurmpool.core.view import SlurmView

    step = advance(move, node, Pass(SlurmView(True, nodes={"gpu01": stale}), spec, NOW))
    assert step.move.phase == "Registering" and "before pod" in step.message
    fresh = replace(stale, slurmd_start=pod_made + timedelta(seconds=1))
    step = advance(move, node, Pass(SlurmView(True, nodes={"gpu01": fresh}), spec, NOW))
    assert step.move.phase == "Resuming"
    assert stale_slurmd(replace(stale, slurmd_start=None), pod) is None  # nothing to compare: trust the state


def test_slurmd_is_not_stopped_while_slurm_runs_an_epilog_on_the_node():
    """Issue 29: pyxis's job epilog runs after the job's tasks end. Slurm shows the job COMPLETING and
    the node +COMPLETING until every node's epilog is done; stopping slurmd then drains the node
    "Epilog error". Both count as jobs still there: the slurmd pod stays until both are gone."""
    spec = make_spec(drain={"timeout": "1h"})
    world = slurm_world(jobs=[job("42", ["gpu01"], state="COMPLETING")])
    world.slurm_node = slurm_node("gpu01", "IDLE", {"COMPLETING"})
    start(world, SLURM, INFERENCE, NOW)
    run_move(world, spec, NOW, rounds=10)
    assert world.node.move.phase == "Draining" and world.node.slurmd_pod is not None
    assert advance(world.node.move, world.node, Pass(world.view(), spec, NOW)).blocked_by == [Blocker(BlockerKind.JOB, "42")]
    world.jobs = []  # the job left squeue; this node's epilog is still running
    run_move(world, spec, NOW + timedelta(seconds=5), rounds=10)
    assert world.node.move.phase == "Draining" and world.node.slurmd_pod is not None
    assert "DeleteSlurmdPod" not in world.log
    world.slurm_node = replace(world.slurm_node, flags=world.slurm_node.flags - {"COMPLETING"})  # epilog done
    run_move(world, spec, NOW + timedelta(seconds=10))
    assert_inference(world)
    assert world.cancelled == [] and world.requeued == []
