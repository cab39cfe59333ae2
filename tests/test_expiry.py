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
    assert expire(policy, RUNNING) == Expiry((JobsEnded(action, reason, verb),))
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


# ---------------------------------------------------------------- Checkpoint: signal, grace, requeue


from dataclasses import replace  # noqa: E402

from slurmpool.core.checkpoint import CheckpointRecord  # noqa: E402
from slurmpool.core.expiry import Checkpointing, Signal  # noqa: E402
from slurmpool.core.interfaces import PoolRef  # noqa: E402
from slurmpool.core.models import CheckpointSpec  # noqa: E402
from slurmpool.core.patch import after, node_patch  # noqa: E402
from slurmpool.core.view import ANN_CHECKPOINT  # noqa: E402

GRACE = CheckpointSpec(grace="5m")
POOL = PoolRef("ns", "gpu", "uid")


def _checkpoint(running, record=None, now=NOW, stuck=(), spec=GRACE) -> Expiry:
    return expire("Checkpoint", Overdue(tuple(running), 1.0, Checkpointing(spec, record, now, frozenset(stuck))))


def test_checkpoint_signals_each_running_job_once_and_records_when():
    expiry = _checkpoint(["42", "43"])
    assert expiry.signals == (Signal(("42", "43"), "USR1", batch_only=True),)
    assert expiry.record == CheckpointRecord("USR1", "Batch", (("42", NOW), ("43", NOW)))
    assert expiry.ended == () and expiry.in_grace_until == NOW + timedelta(minutes=5)


def test_checkpoint_sends_the_pools_signal_to_every_step_when_asked():
    expiry = _checkpoint(["42"], spec=CheckpointSpec(signal="SIGTERM", to="All"))
    assert expiry.signals == (Signal(("42",), "SIGTERM", batch_only=False),)


def test_during_the_grace_nothing_is_sent_again_and_nothing_ended():
    record = CheckpointRecord("USR1", "Batch", (("42", NOW),))
    expiry = _checkpoint(["42"], record, now=NOW + timedelta(minutes=4, seconds=59))
    assert expiry == Expiry(in_grace_until=NOW + timedelta(minutes=5))


def test_after_its_grace_a_job_still_running_is_requeued():
    record = CheckpointRecord("USR1", "Batch", (("42", NOW),))
    expiry = _checkpoint(["42"], record, now=NOW + timedelta(minutes=5))
    assert expiry == Expiry((JobsEnded(Requeue(("42",)), Reason.JobsRequeued, "requeued"),))


def test_a_job_not_yet_signalled_gets_the_recorded_signal_and_its_own_grace():
    record = CheckpointRecord("USR2", "All", (("42", NOW),))
    later = NOW + timedelta(minutes=6)
    expiry = _checkpoint(["42", "44"], record, now=later)
    assert expiry.signals == (Signal(("44",), "USR2", batch_only=False),)
    assert expiry.record == CheckpointRecord("USR2", "All", (("42", NOW), ("44", later)))
    assert expiry.ended == (JobsEnded(Requeue(("42",)), Reason.JobsRequeued, "requeued"),)
    assert expiry.in_grace_until == later + timedelta(minutes=5)


def test_a_job_slurm_cannot_requeue_is_waited_for_or_cancelled_as_the_spec_says():
    record = CheckpointRecord("USR1", "Batch", (("42", NOW), ("43", NOW)))
    later = NOW + timedelta(minutes=5)
    waited = _checkpoint(["42", "43"], record, now=later, stuck=["43"])
    assert waited.ended == (JobsEnded(Requeue(("42",)), Reason.JobsRequeued, "requeued"),) and waited.not_requeueable == ("43",)
    cancelled = _checkpoint(["42", "43"], record, now=later, stuck=["43"], spec=CheckpointSpec(not_requeueable="Cancel"))
    assert cancelled.ended == (JobsEnded(Requeue(("42",)), Reason.JobsRequeued, "requeued"),
                               JobsEnded(Cancel(("43",)), Reason.JobsCancelled, "cancelled"))
    assert cancelled.not_requeueable == ()


def test_checkpoint_with_no_job_running_does_nothing():
    assert _checkpoint([]) == Expiry()


CHECKPOINT = {"timeout": "5s", "onTimeout": "Checkpoint", "checkpoint": {"grace": "5m"}}


def _pass(node, now, slurm=DRAINING_WITH_A_JOB, drain=CHECKPOINT):
    step = advance(node.move, node, Pass(slurm, make_spec(drain=drain), now))
    return step, after(node, node_patch(POOL, node, step, now))


def _sent(step) -> list[Signal]:
    return [a for a in step.actions if isinstance(a, Signal)]


def test_a_moves_drain_signals_writes_the_record_with_the_step_then_requeues_after_the_grace():
    node = _draining(NOW - timedelta(seconds=10))
    step, node = _pass(node, NOW)
    assert _sent(step) == [Signal(("42",), "USR1", batch_only=True)]
    assert [e.message for e in step.events if e.reason == Reason.JobsSignalled] == [
        "gpu01: drain timed out; sent USR1 to the batch shell of job(s) 42; requeued after 5m (or the job's own --signal time, if longer) unless they end"]
    assert node.checkpoint == CheckpointRecord("USR1", "Batch", (("42", NOW),))  # in the step's own patch
    assert "jobs checkpointing until" in step.message and step.blocked_by and str(step.blocked_by[0]) == "job/42"

    step, node = _pass(node, NOW + timedelta(minutes=3))
    assert not _sent(step) and not [a for a in step.actions if isinstance(a, Requeue)]
    step, node = _pass(node, NOW + timedelta(minutes=5))
    assert not _sent(step) and [a for a in step.actions if isinstance(a, Requeue)] == [Requeue(("42",))]


def test_a_restart_during_the_grace_neither_signals_again_nor_cuts_the_grace_short():
    """The operator is killed after the pass that signalled: the new one has only the Node."""
    node = _draining(NOW - timedelta(seconds=10))
    _, written = _pass(node, NOW)
    reread = NodeView(written.name, labels=dict(written.labels), annotations=dict(written.annotations))  # as a fresh watch reads it
    for minutes in (1, 4):
        step, _ = _pass(reread, NOW + timedelta(minutes=minutes))
        assert not _sent(step) and not [a for a in step.actions if isinstance(a, (Requeue, Cancel))], minutes
    step, _ = _pass(reread, NOW + timedelta(minutes=5))
    assert [a for a in step.actions if isinstance(a, Requeue)] == [Requeue(("42",))]


def test_the_record_goes_once_the_node_has_left_draining():
    node = _draining(NOW - timedelta(seconds=10))
    _, node = _pass(node, NOW)
    gone = SlurmView(True, nodes={"gpu01": slurm_node("gpu01", "IDLE", {"DRAIN"}, reason="slurmpool: moving to inference:default")})
    claimed_node = claimed(node, "slurmpool: moving to inference:default")
    step, after_step = _pass(claimed_node, NOW + timedelta(minutes=1), slurm=gone)
    assert step.move is not None and step.move.phase != Phase.DRAINING and step.drop_checkpoint
    assert ANN_CHECKPOINT not in after_step.annotations


def test_a_job_slurm_cannot_requeue_blocks_the_move_and_the_message_says_so():
    node = _draining(NOW - timedelta(seconds=10))
    stuck = replace(DRAINING_WITH_A_JOB, jobs=(replace(job("42", ["gpu01"], end_in=3600), requeue=False),))
    _, node = _pass(node, NOW, slurm=stuck)
    step, _ = _pass(node, NOW + timedelta(minutes=6), slurm=stuck)
    assert not [a for a in step.actions if isinstance(a, (Requeue, Cancel))]
    assert [str(b) for b in step.blocked_by] == ["job/42"] and "job(s) 42 cannot be requeued" in step.message
    cancel = {**CHECKPOINT, "checkpoint": {"grace": "5m", "notRequeueable": "Cancel"}}
    step, _ = _pass(node, NOW + timedelta(minutes=6), slurm=stuck, drain=cancel)
    assert [a for a in step.actions if isinstance(a, Cancel)] == [Cancel(("42",))]


@pytest.mark.parametrize("text, problem", [
    ('{"signal": "USR1", "to": "Batch", "jobs": {"42": "yesterday"}}', "is no RFC 3339 time"),
    ('{"signal": "USR1; rm", "to": "Batch", "jobs": {}}', "signal must be"),
    ('{"signal": "USR1", "to": "Everyone", "jobs": {}}', "to must be Batch or All"),
    ('{"signal": "USR1", "to": "Batch", "jobs": {"x": "2026-01-01T00:00:00Z"}}', "is no job id"),
    ('[1]', "not a JSON object"),
])
def test_a_checkpoint_record_people_broke_leaves_the_node_alone_and_says_why(text, problem):
    node = NodeView("gpu01", annotations={ANN_PLACEMENT: SLURM, ANN_CHECKPOINT: text})
    assert node.checkpoint is None
    assert [p.annotation for p in node.problems] == [ANN_CHECKPOINT] and problem in node.problems[0].message


def test_a_health_drain_with_checkpoint_signals_then_requeues_after_the_grace():
    spec = with_health(make_spec(slurm_nodes=1, drain={"timeout": "10m", "onTimeout": "Checkpoint"}), conditions=[{"type": "GpuXid"}])
    sick = claimed(_slurm_node_view("a", conditions=(NodeCondition("GpuXid", "True", NOW),)), "slurmpool: health: GpuXid")
    slurm = SlurmView(True, nodes={"a": slurm_node("a", "MIXED", {"DRAIN"}, reason="slurmpool: health: GpuXid")},
                      jobs=(job("7", ["a"], end_in=3600),))
    first = NOW + timedelta(minutes=11)
    decision, _ = _decide(spec, [sick], slurm, now=first)
    step = decision.steps["a"]
    assert _sent(step) == [Signal(("7",), "USR1", batch_only=True)] and not [a for a in step.actions if isinstance(a, Requeue)]
    sick = after(sick, decision.patches["a"])
    assert sick.checkpoint == CheckpointRecord("USR1", "Batch", (("7", first),))
    decision, _ = _decide(spec, [sick], slurm, now=first + timedelta(minutes=4))
    assert "a" not in decision.steps or not _sent(decision.steps["a"])
    decision, _ = _decide(spec, [sick], slurm, now=first + timedelta(minutes=5))
    assert [a for a in decision.steps["a"].actions if isinstance(a, Requeue)] == [Requeue(("7",))]
    assert [e.message for e in decision.steps["a"].events if e.reason == Reason.JobsRequeued] == [
        "a: health drain timed out after 10m; requeued job(s) 7"]


def test_a_job_whose_own_signal_slurm_shows_gets_it_and_at_least_its_time():
    from slurmbridge.models import DeclaredSignal

    own = {"44": DeclaredSignal("USR2", batch_only=False, seconds=600)}
    c = Checkpointing(GRACE, None, NOW, frozenset(), own)
    expiry = expire("Checkpoint", Overdue(("42", "44"), 1.0, c))
    assert set(expiry.signals) == {Signal(("42",), "USR1", batch_only=True), Signal(("44",), "USR2", batch_only=False)}
    record = expiry.record
    later = replace(c, record=record, now=NOW + timedelta(minutes=6))
    # 42 has had the pool's 5 minutes; 44 asked for 10 (--signal=USR2@600) and still has them
    assert expire("Checkpoint", Overdue(("42", "44"), 1.0, later)) == Expiry(
        (JobsEnded(Requeue(("42",)), Reason.JobsRequeued, "requeued"),), in_grace_until=NOW + timedelta(minutes=10))
