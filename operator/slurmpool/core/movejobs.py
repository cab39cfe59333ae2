"""The Slurm jobs of a move's drain: the `jobs` of its record (`slurmpool.io/move` on the Node),
reported in status.recentMoves[].jobs once the move ends. Pure data, just above the floor.

Draining (moves.py) adds what it sees each pass: every job on the node is named once, as
`drained` (waited for: it ended on its own, or still ran when the move turned back) until the
drain's expiry (expiry.py) requeues or cancels it, which moves it to `requeued` or `cancelled`;
`signalled` marks the jobs sent their checkpoint signal (a timed-out Checkpoint drain, or a
handover's warning: checkpoint.py's record on the node), which also sit in one of the three.
It is written with the step's record, before the requeue or signal it names (apply.py writes
node patches first), so an operator restarted mid-move reads it back and loses none.

Bounded: a record of the Node is anyone's text and at most view.MAX_RECORD_CHARS long, so it
names at most MAX_NAMED jobs; beyond, `unnamed` counts the most jobs seen at once that it could
not name (how they left is not kept). The status shows at most SHOWN ids per move (`groups`)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, Field, model_validator

from slurmpool.core.models import JobFate, MoveJobGroup

MAX_NAMED = 64  # jobs a record names (a node runs a few; checkpoint.MAX_JOBS is the same bound)
SHOWN = 10  # job ids per move in status.recentMoves (20 moves: the status stays small)
JOB_ID = re.compile(r"^[0-9]+([_+][0-9]+)?$")  # as Slurm lists a running job (checkpoint.py's rule)
ENDINGS = ("requeued", "cancelled")


class MoveJobs(BaseModel):
    """The jobs of one move's drain, each named once in drained, requeued or cancelled."""

    drained: list[str] = Field(default_factory=list)
    requeued: list[str] = Field(default_factory=list)
    cancelled: list[str] = Field(default_factory=list)
    signalled: list[str] = Field(default_factory=list)
    unnamed: int = Field(default=0, ge=0, le=1_000_000)

    @model_validator(mode="after")
    def _bounded(self) -> MoveJobs:
        named = [*self.drained, *self.requeued, *self.cancelled]
        if len(named) > MAX_NAMED or len(self.signalled) > MAX_NAMED:
            raise ValueError(f"jobs name at most {MAX_NAMED} jobs")
        if bad := next((j for j in (*named, *self.signalled) if not isinstance(j, str) or not JOB_ID.match(j)), None):
            raise ValueError(f"jobs: {str(bad)[:20]!r} is no Slurm job id")
        if len(set(named)) != len(named):
            raise ValueError("jobs: a job is named twice (drained, requeued and cancelled are exclusive)")
        return self

    @property
    def named(self) -> set[str]:
        return {*self.drained, *self.requeued, *self.cancelled}

    def seeing(self, on_node: Iterable[str]) -> MoveJobs:
        """These jobs run on the node now: each new one is named as drained while there is room.
        An id the record would refuse (not as Slurm lists a job) is counted, never named: a record
        the operator wrote must read back valid, or the node would be left alone as invalid."""
        named, room = self.named, MAX_NAMED - len(self.named)
        seen = list(dict.fromkeys(on_node))
        new = [j for j in seen if j not in named and JOB_ID.match(j)]
        odd = len(seen) - len([j for j in seen if JOB_ID.match(j)])
        unnamed = max(self.unnamed, max(0, len(new) - room) + odd)  # the most seen at once: no id, no way to count one twice
        return self.model_copy(update={"drained": self.drained + new[:max(0, room)], "unnamed": unnamed})

    def ending(self, fate: JobFate, job_ids: Iterable[str]) -> MoveJobs:
        """The drain's expiry requeued or cancelled these (named ones move; unnamed stay counted)."""
        assert fate in ENDINGS, fate
        ids = set(job_ids)
        lists = {k: [j for j in getattr(self, k) if j not in ids] for k in ("drained", *ENDINGS)}
        lists[fate] = getattr(self, fate) + [j for j in dict.fromkeys(job_ids) if j in self.named and j not in getattr(self, fate)]
        return self.model_copy(update=lists)

    def signalling(self, job_ids: Iterable[str]) -> MoveJobs:
        """These named jobs were sent their checkpoint signal."""
        named = self.named
        fresh = [j for j in dict.fromkeys(job_ids) if j in named and j not in self.signalled]
        return self.model_copy(update={"signalled": self.signalled + fresh}) if fresh else self

    def groups(self) -> list[MoveJobGroup]:
        """status.recentMoves[].jobs: each fate with its count and at most SHOWN ids in all,
        the disruptive ones first."""
        groups, left = [], SHOWN
        for fate in ("requeued", "cancelled", "signalled", "drained"):
            ids: list[str] = getattr(self, fate)
            if ids:
                groups.append(MoveJobGroup(how=fate, count=len(ids), ids=ids[:left]))
                left = max(0, left - len(ids))
        return groups
