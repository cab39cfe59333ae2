"""What a drain does once it has waited `drain.timeout` for its jobs: one entry per value of
`drain.onTimeout` (models.DrainSpec). Pure. Both drains that wait on Slurm jobs ask this table: a
move's Draining phase (moves.py) and the health drain of a settled Slurm node (decide.py). Each
caller words its own message and Event; a new policy is a new entry here and its spec value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from slurmpool.core.events import Reason


@dataclass(frozen=True)
class Requeue:
    """Action: requeue the jobs (they start again elsewhere)."""

    job_ids: tuple[str, ...]


@dataclass(frozen=True)
class Cancel:
    """Action: cancel the jobs."""

    job_ids: tuple[str, ...]


@dataclass(frozen=True)
class Overdue:
    """A drain past `drain.timeout`: the jobs still running on its node, and by how much it is late."""

    running: tuple[str, ...]  # job ids
    late: float  # seconds since `drain.timeout` passed


@dataclass(frozen=True)
class JobsEnded:
    """The running jobs are ended now: the action, the Warning's reason and its verb ("requeued")."""

    action: Requeue | Cancel
    reason: Reason
    verb: str


@dataclass(frozen=True)
class Expiry:
    """What a drain past its timeout does now. Nothing: its jobs run on and it waits."""

    ended: JobsEnded | None = None
    rollback: bool = False  # a move turns back; a health drain, with no move to undo, waits


def _wait(overdue: Overdue) -> Expiry:
    return Expiry()


def _rollback(overdue: Overdue) -> Expiry:
    return Expiry(rollback=True)


def _requeue(overdue: Overdue) -> Expiry:
    return Expiry(JobsEnded(Requeue(overdue.running), Reason.JobsRequeued, "requeued")) if overdue.running else Expiry()


def _cancel(overdue: Overdue) -> Expiry:
    return Expiry(JobsEnded(Cancel(overdue.running), Reason.JobsCancelled, "cancelled")) if overdue.running else Expiry()


# drain.onTimeout -> what it does (tests/test_expiry.py keeps it equal to the spec's values).
ON_TIMEOUT: dict[str, Callable[[Overdue], Expiry]] = {
    "Wait": _wait,
    "Rollback": _rollback,
    "Requeue": _requeue,
    "Cancel": _cancel,
}


def expire(policy: str, overdue: Overdue) -> Expiry:
    return ON_TIMEOUT[policy](overdue)
