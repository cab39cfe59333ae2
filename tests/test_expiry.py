"""The drain-expiry table (core/expiry.py): what each `drain.onTimeout` does to a timed-out
drain's jobs, and how its two callers (a move's Draining, a health drain) word it."""

from __future__ import annotations

from datetime import timedelta
from typing import get_args

import pytest

from slurmpool.core.expiry import ON_TIMEOUT, Cancel, Expiry, JobsEnded, Overdue, Requeue, expire
from slurmpool.core.events import Reason
from slurmpool.core.models import DrainSpec
from slurmpool.core.moves import Pass, advance
from slurmpool.core.phases import Phase
from slurmpool.core.view import ANN_MOVE, ANN_PLACEMENT, LABEL_SIDE, SLURM, MoveRecord, NodeCondition, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .test_health import _decide, _slurm_node_view, claimed, with_health
from .test_planner import job

RUNNING = Overdue(running=("42", "43"), late=1.0)
IDLE = Overdue(running=(), late=1.0)


def test_every_on_timeout_value_of_the_spec_has_its_entry():
    assert set(ON_TIMEOUT) == set(get_args(DrainSpec.model_fields["on_timeout"].annotation))


def test_wait_lets_the_jobs_run():
    assert expire("Wait", RUNNING) == Expiry() and expire("Wait", IDLE) == Expiry()


def test_rollback_turns_the_move_back_and_ends_no_job():
    assert expire("Rollback", RUNNING) == Expiry(rollback=True) and expire("Rollback", IDLE) == Expiry(rollback=True)


@pytest.mark.parametrize("policy, action, reason, verb", [
    ("Requeue", Requeue(("42", "43")), Reason.JobsRequeued, "requeued"),
    ("Cancel", Cancel(("42", "43")), Reason.JobsCancelled, "cancelled"),
])
def test_requeue_and_cancel_end_the_running_jobs_and_nothing_when_none_runs(policy, action, reason, verb):
    assert expire(policy, RUNNING) == Expiry(JobsEnded(action, reason, verb))
    assert expire(policy, IDLE) == Expiry()


# ---------------------------------------------------------------- the two callers' wording


def _draining(since) -> NodeView:
    move = MoveRecord(id="m1", source=SLURM, target="inference:default", phase=Phase.DRAINING, since=since, started=since)
    return NodeView("gpu01", annotations={ANN_PLACEMENT: SLURM, ANN_MOVE: move.to_annotation()}, labels={LABEL_SIDE: "slurm"})


DRAINING_WITH_A_JOB = SlurmView(True, nodes={"gpu01": slurm_node("gpu01", "MIXED", {"DRAIN"}, reason="slurmpool: moving to inference:default")},
                                jobs=(job("42", ["gpu01"], end_in=3600),))


@pytest.mark.parametrize("policy, reason, text", [
    ("Requeue", Reason.JobsRequeued, "gpu01: drain timed out; requeued job(s) 42"),
    ("Cancel", Reason.JobsCancelled, "gpu01: drain timed out; cancelled job(s) 42"),
])
def test_a_moves_drain_reports_the_jobs_it_ended(policy, reason, text):
    node = _draining(NOW - timedelta(seconds=10))
    step = advance(node.move, node, Pass(DRAINING_WITH_A_JOB, make_spec(drain={"timeout": "5s", "onTimeout": policy}), NOW))
    assert [(e.reason, e.message) for e in step.events if e.reason == reason] == [(reason, text)]
    assert step.message.startswith(f"drain timed out after 5s (onTimeout {policy}); ")


def test_a_moves_drain_before_its_timeout_ends_nothing():
    node = _draining(NOW - timedelta(seconds=4))
    step = advance(node.move, node, Pass(DRAINING_WITH_A_JOB, make_spec(drain={"timeout": "5s", "onTimeout": "Cancel"}), NOW))
    assert step.move is not None and step.move.phase == Phase.DRAINING
    assert not [a for a in step.actions if isinstance(a, (Requeue, Cancel))] and "timed out" not in step.message


@pytest.mark.parametrize("policy, action, text", [
    ("Requeue", Requeue(("7",)), "a: health drain timed out after 10m; requeueed job(s) 7"),  # the wording as it always was
    ("Cancel", Cancel(("7",)), "a: health drain timed out after 10m; canceled job(s) 7"),
    ("Rollback", None, None),  # a health drain has no move to undo: its jobs run on
    ("Wait", None, None),
])
def test_a_health_drain_reports_the_jobs_it_ended(policy, action, text):
    spec = with_health(make_spec(slurm_nodes=1, drain={"timeout": "10m", "onTimeout": policy}), conditions=[{"type": "GpuXid"}])
    sick = claimed(_slurm_node_view("a", conditions=(NodeCondition("GpuXid", "True", NOW),)), "slurmpool: health: GpuXid")
    slurm = SlurmView(True, nodes={"a": slurm_node("a", "MIXED", {"DRAIN"}, reason="slurmpool: health: GpuXid")},
                      jobs=(job("7", ["a"], end_in=3600),))
    decision, _ = _decide(spec, [sick], slurm, now=NOW + timedelta(minutes=11))
    step = decision.steps.get("a")
    ended = [a for a in step.actions if isinstance(a, (Requeue, Cancel))] if step else []
    events = [e.message for e in step.events if e.reason in (Reason.JobsRequeued, Reason.JobsCancelled)] if step else []
    assert ended == ([action] if action else []) and events == ([text] if text else [])
