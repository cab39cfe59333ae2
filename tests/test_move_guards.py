"""issue 37: moves that must never strand a node nor kill a job. StoppingSlurmd looks at Slurm
again before it stops slurmd: a drain lifted after Draining (a slurmctld failover that lost its
state, an admin's resume sweep) lets a job start, and slurmd must not be stopped under it."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from slurmpool.core.moves import DeleteSlurmdPod, Drain, Pass, Step, advance, drain, drain_reason
from slurmpool.core.patch import node_patch
from slurmpool.core.phases import Phase
from slurmpool.core.events import Reason
from slurmpool.core import slurmnames
from slurmpool.core.view import NONE, SLURM, MoveRecord, NodeView, PodView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .sim import POOL, PoolWorld, World, run_move, start
from .test_moves import INFERENCE, assert_inference, slurm_world
from .test_planner import job


def at_stopping_slurmd(world):
    """The move as Draining left it: drained, no job, StoppingSlurmd, slurmd still running."""
    start(world, SLURM, INFERENCE, NOW)
    move = world.node.move.model_copy(update={"phase": Phase.STOPPING_SLURMD})
    step = Step(move)
    drain(step, world.node, drain_reason(move), NOW)  # the claim on the Node, as Draining wrote it
    world.write(node_patch(POOL, world.node, step, NOW))
    world.slurm_node = replace(world.slurm_node, flags=world.slurm_node.flags | {"DRAIN"}, reason=drain_reason(move))
    world.drain_owner = "slurmpool"
    return move


def test_stopping_slurmd_after_an_admin_resume_goes_back_to_draining_and_keeps_slurmd():
    spec = make_spec()
    world = slurm_world()
    move = at_stopping_slurmd(world)
    world.slurm_node = slurm_node("gpu01", "MIXED")  # the drain was lifted and a job started
    world.jobs = [job("77", ["gpu01"], end_in=600)]
    step = advance(move, world.node, Pass(world.view(), spec, NOW + timedelta(seconds=5)))
    assert not any(isinstance(a, DeleteSlurmdPod) for a in step.actions)
    assert step.move is not None and step.move.phase == Phase.DRAINING
    assert [a for a in step.actions if isinstance(a, Drain)], "drained again"
    assert [str(b) for b in step.blocked_by] == ["job/77"]
    assert any("drain was lifted" in e.message for e in step.events)


def test_stopping_slurmd_with_a_job_on_a_drained_node_waits_in_draining():
    spec = make_spec()
    world = slurm_world()
    move = at_stopping_slurmd(world)
    world.slurm_node = slurm_node("gpu01", "MIXED", {"DRAIN"}, reason="slurmpool: moving to inference:default")
    world.jobs = [job("78", ["gpu01"], end_in=600)]
    step = advance(move, world.node, Pass(world.view(), spec, NOW + timedelta(seconds=5)))
    assert not any(isinstance(a, DeleteSlurmdPod) for a in step.actions)
    assert step.move.phase == Phase.DRAINING and not [a for a in step.actions if isinstance(a, Drain)]


def test_stopping_slurmd_waits_while_slurm_cannot_be_seen():
    spec = make_spec()
    world = slurm_world()
    move = at_stopping_slurmd(world)
    step = advance(move, world.node, Pass(SlurmView(False, error="down"), spec, NOW + timedelta(seconds=5)))
    assert not any(isinstance(a, DeleteSlurmdPod) for a in step.actions)
    assert step.move.phase == Phase.STOPPING_SLURMD and [str(b) for b in step.blocked_by] == ["slurm-unavailable"]


def test_the_resumed_node_still_ends_in_inference_once_its_job_ends():
    spec = make_spec()
    world = slurm_world()
    move = at_stopping_slurmd(world)
    world.slurm_node = slurm_node("gpu01", "MIXED")
    world.jobs = [job("77", ["gpu01"], end_in=600)]
    world.drain_owner = None
    run_move(world, spec, NOW + timedelta(seconds=5), rounds=5)
    assert world.node.move.phase == Phase.DRAINING and world.node.slurmd_pod is not None
    world.finish_jobs()
    run_move(world, spec, NOW + timedelta(seconds=20))
    assert_inference(world)
    assert move.id == "m1"


# ---------------------------------------------------------------- a node that leaves the selector mid-move


def pool_of_two(spec, jobs=()) -> PoolWorld:
    worlds = {}
    for name in ("gpu01", "gpu02"):
        w = slurm_world()
        w.node = replace(w.node, name=name, labels={**w.node.labels, "gpu": "true"},
                         pods=(PodView("slurm", f"slurmd-{name}", f"u-{name}", slurmd=True, ready=True),))
        w.slurm_node = slurm_node(name)
        worlds[name] = w
    worlds["gpu01"].jobs = list(jobs)
    if jobs:
        worlds["gpu01"].slurm_node = slurm_node("gpu01", "MIXED")
    return PoolWorld(spec=spec, worlds=worlds, now=NOW)


def reasons(pw: PoolWorld) -> list[str]:
    return [e.reason for d in pw.decisions for s in d.steps.values() for e in s.events] + \
        [e.reason for d in pw.decisions for e in d.pool_events]


def test_a_node_relabelled_out_while_draining_goes_back_to_slurm_reported_never_deleted():
    spec = make_spec(slurm_nodes=1, drain={"timeout": "1h"})
    pw = pool_of_two(spec, jobs=[job("42", ["gpu01"], end_in=3600)])
    pw.worlds["gpu02"].slurm_node = slurm_node("gpu02", "MIXED")  # gpu02 busy too: the planner picks gpu01 or gpu02
    pw.worlds["gpu02"].jobs = [job("43", ["gpu02"], end_in=7200)]
    pw.run(passes=2)
    moving = next(n for n, w in pw.worlds.items() if w.node.move is not None)
    assert pw.worlds[moving].node.move.phase == Phase.DRAINING
    pw.outside.add(moving)  # a person relabels it out of the selector
    pw.run(passes=1)
    assert degraded(pw).reason == "NodeLeftSelector" and moving in degraded(pw).message
    pw.run(passes=30)
    world = pw.worlds[moving]
    assert world.node.move is None and world.node.placement == SLURM
    assert not world.slurm_node.drain_set and world.node.slurmd_pod is not None and world.jobs  # its job was never touched
    got = reasons(pw)
    assert Reason.NodeDeleted not in got and got.count(Reason.NodeLeftSelector) == 1
    assert degraded(pw).reason != "NodeLeftSelector"  # ended: no longer reported


def degraded(pw: PoolWorld):
    return next(c for c in pw.status.conditions if c.type == "Degraded")


def test_a_node_whose_pool_labels_take_it_out_at_relabeling_ends_in_inference():
    spec = make_spec(slurm_nodes=1)
    pw = pool_of_two(spec)
    pw.run(passes=1)
    moving = next(n for n, w in pw.worlds.items() if w.node.move is not None)
    while pw.worlds[moving].node.move.phase != Phase.RELABELING:
        pw.run(passes=1)
    pw.outside.add(moving)  # its labels were written: a pool label over the selector's key takes it out
    pw.run(passes=10)
    world = pw.worlds[moving]
    assert world.node.move is None and world.node.placement == INFERENCE
    assert world.node.slurmd_pod is None and world.slurm_node.drain_set  # parked under our claimed drain
    assert world.node.drain_claim is not None
    assert Reason.NodeDeleted not in reasons(pw) and Reason.NodeLeftSelector in reasons(pw)


# ---------------------------------------------------------------- adopted nodes


def test_an_unadopted_node_without_a_slurm_name_is_never_moved_to_inference_undrained():
    spec = make_spec().model_copy(update={"slurm": make_spec().slurm.model_copy(update={"node_name_label": "slurm/name"})})
    node = NodeView(name="gpu01", labels={"gpu": "true"}, pods=(PodView("slurm", "slurmd-gpu01", "u1", slurmd=True, ready=True),))
    view = slurmnames.by_node(SlurmView(True, nodes={"n001": slurm_node("n001", "MIXED")}), slurmnames.names_of(spec.slurm, [node]))
    move = MoveRecord(id="a1", source=NONE, target=INFERENCE, phase=Phase.DRAINING, since=NOW, started=NOW)
    step = advance(move, node, Pass(view, spec, NOW))
    assert step.move.phase == Phase.DRAINING and [str(b) for b in step.blocked_by] == ["slurm-unlisted"]
    assert not any(isinstance(a, DeleteSlurmdPod) for a in step.actions) and "no valid Slurm NodeName" in step.message


def test_a_node_deleted_and_created_again_is_adopted_and_its_old_drain_of_ours_lifted():
    """The Node went with its claim; Slurm still holds the drain slurmpool set, in its exact form."""
    spec = make_spec()
    node = NodeView(name="gpu01", labels={"gpu": "true"})  # created again: no record, no claim
    world = World(node=node, slurm_node=slurm_node("gpu01", "IDLE", {"DRAIN"}, reason="slurmpool: moving to inference:default"))
    world.drain_owner = "slurmpool"  # ground truth: our drain, the claim lost with the old Node
    world.slurm_node = replace(world.slurm_node, reason_user="root", reason_time=NOW - timedelta(hours=2))
    start(world, NONE, SLURM, NOW)
    run_move(world, spec, NOW)
    assert world.node.move is None and world.node.placement == SLURM
    assert not world.slurm_node.drain_set and "Resume" in world.log
    assert not any(isinstance(a, Drain) for a in world.actions)


def test_an_adopted_node_keeps_a_drain_in_our_form_that_slurm_judged_or_a_person_reworded():
    spec = make_spec()
    for reason, flags in (("slurmpool: moving to inference:default : gres/gpu count reported lower than configured (7 < 8)", {"DRAIN"}),
                          ("slurmpool: moving to inference:default", {"DRAIN", "INVALID_REG"}),
                          ("maintenance: slurmpool: moving to slurm", {"DRAIN"})):
        node = NodeView(name="gpu01", labels={"gpu": "true"})
        world = World(node=node, slurm_node=slurm_node("gpu01", "IDLE", flags, reason=reason))
        start(world, NONE, SLURM, NOW)
        run_move(world, spec, NOW)
        assert world.slurm_node.drain_set and "Resume" not in world.log, reason


def test_a_stray_pod_on_a_settled_slurm_node_is_reported_once_and_never_evicted():
    spec = make_spec(slurm_nodes=2)
    pw = pool_of_two(spec)
    debug = PodView("team", "debug", "u9", owner_kinds=(), ready=True, node="gpu02")
    w = pw.worlds["gpu02"]
    w.node = replace(w.node, annotations={**w.node.annotations}, pods=w.node.pods + (debug,))
    pw.run(passes=3)
    assert degraded(pw).reason == "StrayPod" and "team/debug on gpu02" in degraded(pw).message
    events = [e for d in pw.decisions for e in d.node_events if e.reason == Reason.StrayPod]
    assert len(events) == 1 and events[0].node == "gpu02"
    assert debug in pw.worlds["gpu02"].node.pods and "Evict" not in pw.worlds["gpu02"].log


def test_the_snapshot_finds_the_nodes_with_this_pools_move_that_no_pool_selects():
    from slurmpool.controller.snapshots import Sources, strays
    from slurmpool.core.interfaces import PoolRef
    from slurmpool.core.membership import Membership
    from slurmpool.core.models import LabelSelector
    from slurmpool.core.view import ANN_MOVE, ANN_POOL

    class Pods:
        def on(self, name):
            return ()

    record = {ANN_POOL: "ns/gpu", ANN_MOVE: '{"id":"m1"}'}
    views = {"out": NodeView("out", labels={"gpu": "false"}, annotations=record),  # relabelled out mid-move
             "theirs": NodeView("theirs", labels={"gpu": "false", "team": "b"}, annotations=record),  # another pool selects it
             "settled": NodeView("settled", labels={"gpu": "false"}, annotations={ANN_POOL: "ns/gpu"}),  # no move: let go
             "member": NodeView("member", labels={"gpu": "true"}, annotations=record)}
    membership = Membership()
    membership.set_selectors({("ns", "gpu"): LabelSelector(match_labels={"gpu": "true"}), ("ns", "b"): LabelSelector(match_labels={"team": "b"})})
    for name, view in views.items():
        membership.update(name, view.labels)
    src = Sources(nodes={n: (v,) for n, v in views.items()}, pods=Pods(), pools={}, membership=membership, access=None, status=None)
    assert [n.name for n in strays(src, PoolRef("ns", "gpu", "uid"))] == ["out"]
