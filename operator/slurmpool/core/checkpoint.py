"""The checkpoint record (`slurmpool.io/checkpoint` on the Node): which jobs of a timed-out drain
were sent their checkpoint signal, which signal, and when. Written with the step's record *before*
the signal is sent (apply.py writes node patches first), so an operator restarted during the grace
reads it back: it signals no job twice and counts each job's grace from its own signal.

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
    """The jobs signalled on one node: job id -> when it was signalled; `to`: Batch or All."""

    signal: str
    to: str
    jobs: tuple[tuple[str, datetime], ...]

    def at(self, job_id: str) -> datetime | None:
        return next((t for j, t in self.jobs if j == job_id), None)

    def adding(self, job_ids: tuple[str, ...], now: datetime) -> CheckpointRecord:
        """The record with `job_ids` signalled at `now` (those already in it keep their time)."""
        known = {j for j, _ in self.jobs}
        return CheckpointRecord(self.signal, self.to, self.jobs + tuple((j, now) for j in job_ids if j not in known))

    def body(self) -> dict[str, Any]:
        return {"signal": self.signal, "to": self.to, "jobs": {j: t.strftime("%Y-%m-%dT%H:%M:%SZ") for j, t in self.jobs}}

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
            try:
                at = datetime.fromisoformat(when.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"jobs: {when[:40]!r} is no RFC 3339 time") from None
            if at.tzinfo is None:
                raise ValueError(f"jobs: {when[:40]!r} has no time zone")
            read.append((job, at.astimezone(timezone.utc)))
        return cls(signal, to, tuple(read))
