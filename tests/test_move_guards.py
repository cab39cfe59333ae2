"""issue 37: moves that must never strand a node nor kill a job. StoppingSlurmd looks at Slurm
again before it stops slurmd: a drain lifted after Draining (a slurmctld failover that lost its
state, an admin's resume sweep) lets a job start, and slurmd must not be stopped under it."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from slurmpool.core.moves import DeleteSlurmdPod, Drain, Pass, Step, advance, drain, drain_reason
from slurmpool.core.patch import node_patch
from slurmpool.core.phases import Phase
from slurmpool.core.view import SLURM, SlurmView

from .factories import NOW, make_spec, slurm_node
from .sim import POOL, run_move, start
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
