"""The checkpoint record (`slurmpool.io/checkpoint` on the Node): which jobs of a timed-out drain
were sent their checkpoint signal, which signal, and when. Written with the step's record *before*
the signal is sent (apply.py writes node patches first), so an operator restarted during the grace
reads it back: it signals no job twice and counts each job's grace from its own signal.

A planned handover writes the same record ahead of its edge (warning.py), with the edge in
`before`: it warns the jobs of the leaving nodes `grace` before the edge, and the Draining at
the edge reads it back (their grace is over by then: they are requeued at once).

Just above the floor: the record's data and its JSON body only; view.py reads and validates the
annotation (people can write it), expiry.py decides with it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from slurmpool.core.models import SIGNAL_PATTERN

MAX_JOBS = 64  # a node runs a few jobs; a record is bounded like every record (view.MAX_RECORD_CHARS)


@dataclass(frozen=True)
class CheckpointRecord:
    """The jobs signalled on one node: job id -> when it was signalled; `to`: Batch or All;
    `before`: the handover edge they were warned for (None: a timed-out drain signalled them)."""

    signal: str
    to: str
    jobs: tuple[tuple[str, datetime], ...]
    before: datetime | None = None

    def at(self, job_id: str) -> datetime | None:
        return next((t for j, t in self.jobs if j == job_id), None)

    def adding(self, job_ids: tuple[str, ...], now: datetime) -> CheckpointRecord:
        """The record with `job_ids` signalled at `now` (those already in it keep their time)."""
        known = {j for j, _ in self.jobs}
        return CheckpointRecord(self.signal, self.to, self.jobs + tuple((j, now) for j in job_ids if j not in known), self.before)

    def merged(self, other: CheckpointRecord) -> CheckpointRecord:
        """The record with `other`'s jobs too, each at its own time (this record's signal, target and edge)."""
        known = {j for j, _ in self.jobs}
        return CheckpointRecord(self.signal, self.to, self.jobs + tuple((j, t) for j, t in other.jobs if j not in known), self.before)

    def warned_for(self, running: tuple[str, ...], now: datetime) -> bool:
        """A handover warned every running job for an edge now passed: its Draining need not wait
        for `drain.timeout` (their grace ran before the edge)."""
        return self.before is not None and self.before <= now and bool(running) and all(self.at(j) is not None for j in running)

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"signal": self.signal, "to": self.to, "jobs": {j: _utc(t) for j, t in self.jobs}}
        if self.before is not None:
            body["before"] = _utc(self.before)
        return body

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CheckpointRecord:
        """Raises ValueError with a message for people (the annotation is writable)."""
        signal, to, jobs = body.get("signal"), body.get("to"), body.get("jobs")
        if not isinstance(signal, str) or not re.match(SIGNAL_PATTERN, signal):
            raise ValueError("signal must be a signal name such as USR1, or its number")
        if to not in ("Batch", "All"):
            raise ValueError("to must be Batch or All")
        if not isinstance(jobs, dict) or len(jobs) > MAX_JOBS:
            raise ValueError(f"jobs must be an object of at most {MAX_JOBS} job ids to RFC 3339 times")
        read = []
        for job, when in jobs.items():
            if not re.match(r"^[0-9]+([_+][0-9]+)?$", job) or not isinstance(when, str):
                raise ValueError(f"jobs: {job[:20]!r} is no job id with an RFC 3339 time")
            read.append((job, _time("jobs", when)))
        before = body.get("before")
        if before is not None and not isinstance(before, str):
            raise ValueError("before must be an RFC 3339 time")
        return cls(signal, to, tuple(read), _time("before", before) if before is not None else None)


def _utc(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(field: str, when: str) -> datetime:
    try:
        at = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{field}: {when[:40]!r} is no RFC 3339 time") from None
    if at.tzinfo is None:
        raise ValueError(f"{field}: {when[:40]!r} has no time zone")
    return at.astimezone(timezone.utc)
