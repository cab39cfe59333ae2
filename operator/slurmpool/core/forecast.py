"""The drain forecast: when a node's Slurm jobs end by their time limits. One rule for the
status (`moves[].freeAt`), the planned handover and the plugin's `status` and `plan`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from slurmpool.core.phases import Phase
from slurmpool.core.placement import SLURM
from slurmpool.core.view import NodeView, SlurmView


@dataclass(frozen=True)
class Forecast:
    """The end of a node's jobs: `busy` (it has any), and the latest end by their time limits
    (None: a job has no time limit, which is what `drain.onTimeout` is for, or no job runs)."""

    busy: bool
    last_end: datetime | None

    @property
    def unlimited(self) -> bool:
        return self.busy and self.last_end is None

    def free_at(self, now: datetime) -> datetime | None:
        """When the node is free: now when idle (or its jobs are past their limits); None: a job has no end."""
        if self.unlimited:
            return None
        return max(now, self.last_end) if self.last_end is not None else now


def forecast(node: str, slurm: SlurmView) -> Forecast:
    ends = [j.end_time for j in slurm.jobs_on(node)]
    if any(end is None for end in ends):
        return Forecast(busy=True, last_end=None)
    return Forecast(busy=bool(ends), last_end=max(e for e in ends if e is not None) if ends else None)


def free_at(node: str, slurm: SlurmView, now: datetime) -> datetime | None:
    """When the node's jobs end by their time limits (now when idle); None: a job has no end."""
    return forecast(node, slurm).free_at(now)


def draining_out_of_slurm(nodes: list[NodeView]) -> list[NodeView]:
    """The nodes whose move out of Slurm is still draining their jobs: the ones a forecast is shown for."""
    return [n for n in nodes if n.move is not None and n.move.source == SLURM and n.move.phase == Phase.DRAINING]
