"""What a drain does once it has waited `drain.timeout` for its jobs: one entry per value of
`drain.onTimeout` (models.DrainSpec). Pure. Both drains that wait on Slurm jobs ask this table: a
move's Draining phase (moves.py) and the health drain of a settled Slurm node (decide.py). Each
caller words its own message and Event; a new policy is a new entry here and its spec value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from slurmbridge.models import DeclaredSignal, SlurmJob

from slurmpool.core.checkpoint import CheckpointRecord
from slurmpool.core.events import Reason
from slurmpool.core.models import CheckpointSpec, DrainSpec, seconds


@dataclass(frozen=True)
class Requeue:
    """Action: requeue the jobs (they start again elsewhere)."""

    job_ids: tuple[str, ...]


@dataclass(frozen=True)
class Cancel:
    """Action: cancel the jobs."""

    job_ids: tuple[str, ...]


@dataclass(frozen=True)
class Signal:
    """Action: send the jobs a signal (scancel --signal, to the batch shell only or to every step)."""

    job_ids: tuple[str, ...]
    signal: str
    batch_only: bool


@dataclass(frozen=True)
class Checkpointing:
    """What the Checkpoint policy decides on besides the running jobs: its spec, the node's record
    of the signals already sent (None: none yet), the clock, the jobs Slurm cannot requeue, and the
    jobs' own --signal where Slurm shows it (SlurmJob.declared_signal)."""

    spec: CheckpointSpec
    record: CheckpointRecord | None
    now: datetime
    not_requeueable: frozenset[str] = frozenset()
    declared: Mapping[str, DeclaredSignal] = field(default_factory=dict)

    def grace(self, job: str) -> timedelta:
        """The pool's grace, or the job's own warning time when it asked for more."""
        own = self.declared[job].seconds if job in self.declared else 0
        return timedelta(seconds=max(seconds(self.spec.grace), own))


@dataclass(frozen=True)
class Overdue:
    """A drain past `drain.timeout`: the jobs still running on its node, and by how much it is late."""

    running: tuple[str, ...]  # job ids
    late: float  # seconds since `drain.timeout` passed
    checkpointing: Checkpointing | None = None  # the Checkpoint policy's inputs (overdue() fills them)


def overdue(jobs: Sequence[SlurmJob], late: float, drain: DrainSpec, record: CheckpointRecord | None, now: datetime) -> Overdue:
    """The Overdue of a drain whose node holds `jobs`, as both callers build it."""
    running = tuple(j.job_id for j in jobs if j.state == "RUNNING")
    stuck = frozenset(j.job_id for j in jobs if j.requeue is False)
    declared = {j.job_id: j.declared_signal for j in jobs if j.declared_signal is not None}
    return Overdue(running, late, Checkpointing(drain.checkpoint, record, now, stuck, declared))


@dataclass(frozen=True)
class JobsEnded:
    """The running jobs are ended now: the action, the Warning's reason and its verb ("requeued")."""

    action: Requeue | Cancel
    reason: Reason
    verb: str


@dataclass(frozen=True)
class Expiry:
    """What a drain past its timeout does now. Nothing: its jobs run on and it waits."""

    ended: tuple[JobsEnded, ...] = ()
    rollback: bool = False  # a move turns back; a health drain, with no move to undo, waits
    signals: tuple[Signal, ...] = ()  # Checkpoint: the jobs warned now (each once), by signal
    record: CheckpointRecord | None = None  # Checkpoint: the record to write with the step, before the signal
    in_grace_until: datetime | None = None  # Checkpoint: when the last signalled job's grace ends
    not_requeueable: tuple[str, ...] = field(default=())  # Checkpoint: jobs past their grace Slurm cannot requeue: waited for


def _wait(overdue: Overdue) -> Expiry:
    return Expiry()


def _rollback(overdue: Overdue) -> Expiry:
    return Expiry(rollback=True)


def _requeue(overdue: Overdue) -> Expiry:
    return Expiry((JobsEnded(Requeue(overdue.running), Reason.JobsRequeued, "requeued"),)) if overdue.running else Expiry()


def _cancel(overdue: Overdue) -> Expiry:
    return Expiry((JobsEnded(Cancel(overdue.running), Reason.JobsCancelled, "cancelled"),)) if overdue.running else Expiry()


def _checkpoint(overdue: Overdue) -> Expiry:
    """Each running job gets the signal once (the record says which did, and when), runs on for
    `grace` from its own signal, then is requeued; one Slurm cannot requeue is waited for, or
    cancelled when `notRequeueable: Cancel`. A restart reads the record: no second signal, no
    shorter grace. A job whose own --signal Slurm shows gets that signal, and at least its time."""
    c = overdue.checkpointing
    assert c is not None, "the Checkpoint policy needs its inputs (expiry.overdue)"
    if not overdue.running:
        return Expiry()
    record = c.record or CheckpointRecord(c.spec.signal, c.spec.to, ())
    fresh = tuple(j for j in overdue.running if record.at(j) is None)
    record = record.adding(fresh, c.now)
    ends = {j: at + c.grace(j) for j in overdue.running if (at := record.at(j)) is not None}
    over = tuple(j for j in overdue.running if ends[j] <= c.now)
    waiting = [end for j, end in ends.items() if end > c.now]
    stuck = tuple(j for j in over if j in c.not_requeueable)
    ended = []
    if requeue := tuple(j for j in over if j not in c.not_requeueable):
        ended.append(JobsEnded(Requeue(requeue), Reason.JobsRequeued, "requeued"))
    if stuck and c.spec.not_requeueable == "Cancel":
        ended.append(JobsEnded(Cancel(stuck), Reason.JobsCancelled, "cancelled"))
        stuck = ()
    return Expiry(
        ended=tuple(ended),
        signals=checkpoint_signals(fresh, record, c.declared),
        record=record if fresh else None,
        in_grace_until=max(waiting) if waiting else None,
        not_requeueable=stuck,
    )


def checkpoint_signals(fresh: tuple[str, ...], record: CheckpointRecord, declared: Mapping[str, DeclaredSignal]) -> tuple[Signal, ...]:
    """The signals to send now: the pool's (as recorded), or each job's own; one call per kind."""
    kinds: dict[tuple[str, bool], list[str]] = {}
    for job in fresh:
        own = declared.get(job)
        kinds.setdefault((own.signal, own.batch_only) if own else (record.signal, record.to == "Batch"), []).append(job)
    return tuple(Signal(tuple(jobs), signal, batch) for (signal, batch), jobs in kinds.items())


# drain.onTimeout -> what it does (tests/test_expiry.py keeps it equal to the spec's values).
ON_TIMEOUT: dict[str, Callable[[Overdue], Expiry]] = {
    "Wait": _wait,
    "Rollback": _rollback,
    "Requeue": _requeue,
    "Cancel": _cancel,
    "Checkpoint": _checkpoint,
}


def expire(policy: str, overdue: Overdue) -> Expiry:
    return ON_TIMEOUT[policy](overdue)
