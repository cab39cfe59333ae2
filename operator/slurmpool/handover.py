"""Planned handover ahead of a known edge (issue 24): which nodes a schedule edge will take
out of Slurm, when each will be free, and the Slurm reservation that keeps new jobs that would
outlast the edge off them. Pure: the caller gives the clock and the edge.

Not wired into the operator's pass yet: the bridge's reservation calls, the poll of our
reservations, apply and status are still to come (see the issue). Only the decisions live here.

- The leaving nodes are chosen by the same planner (planner.plan, wave after wave, as the
  plugin's `plan` does) with the count the edge sets, so health, pins and topology rules hold.
- Drain forecast of a node: the latest end of its jobs by their time limits; None when a job
  has no end (no time limit), which is what `drain.onTimeout` is for. Idle: free now.
- The reservation: named `slurmpool-<namespace>-<pool>` (a name no person would choose, one
  per pool, so a crash between creating it and recording it leaves nothing unfound), on the
  leaving nodes, starting at the edge, flags MAINT,IGNORE_JOBS: MAINT keeps Slurm from
  counting the nodes' reserved time as idle and shows them `maint` in sinfo; IGNORE_JOBS lets it
  be created on nodes still running jobs (the notes in shared/reference measured both on 22.05).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from .health import NodeHealth
from .models import SlurmNodePoolSpec
from .planner import plan
from .view import ANN_MOVE, ANN_PLACEMENT, SLURM, NodeView, SlurmView

RESERVATION_PREFIX = "slurmpool-"
RESERVATION_FLAGS = ("MAINT", "IGNORE_JOBS")
MAX_WAVES = 100


def reservation_name(namespace: str, pool: str) -> str:
    return f"{RESERVATION_PREFIX}{namespace}-{pool}"


def is_ours(name: str, namespace: str, pool: str) -> bool:
    """Only the pool's own reservation is ever changed or deleted; every other one is left alone."""
    return name == reservation_name(namespace, pool)


def free_at(node: str, slurm: SlurmView, now: datetime) -> datetime | None:
    """When the node's jobs end by their time limits (now when idle); None: a job has no end."""
    ends = [j.end_time for j in slurm.jobs_on(node)]
    if any(end is None for end in ends):
        return None
    return max([now, *ends])


@dataclass(frozen=True)
class Handover:
    """The planned handover for the next edge that takes nodes out of Slurm."""

    reservation: str
    nodes: tuple[str, ...]  # leaving Slurm at the edge, in the planner's order
    start: datetime  # the edge
    flags: tuple[str, ...] = RESERVATION_FLAGS
    forecast: dict[str, datetime | None] = field(default_factory=dict)  # node -> free at (None: no time limit)

    @property
    def late(self) -> list[str]:
        """Nodes whose jobs will not have ended by the edge: `drain.onTimeout` decides for them."""
        return [n for n, t in self.forecast.items() if t is None or t > self.start]


def leaving_nodes(
    spec: SlurmNodePoolSpec,
    nodes: list[NodeView],
    slurm: SlurmView,
    now: datetime,
    slurm_count: int,
    pool_counts: dict[str, int] | None = None,
    health: Mapping[str, NodeHealth] | None = None,
) -> list[str]:
    """Nodes the planner would move out of Slurm to reach `slurm_count`, wave after wave."""
    current, leaving = list(nodes), []
    for _ in range(MAX_WAVES):
        result = plan(spec, current, slurm, now, slurm_count, pool_counts, health)
        if not result.starts:
            break
        moved = {s.node: s for s in result.starts}
        leaving += [s.node for s in result.starts if s.source == SLURM]
        current = [_settled(n, moved[n.name].target) if n.name in moved else n for n in current]
    return leaving


def _settled(node: NodeView, placement: str) -> NodeView:
    """The node as if its move were done (the next wave plans on it)."""
    annotations = {k: v for k, v in node.annotations.items() if k != ANN_MOVE}
    return replace(node, annotations={**annotations, ANN_PLACEMENT: placement})


def planned(
    namespace: str,
    pool: str,
    spec: SlurmNodePoolSpec,
    nodes: list[NodeView],
    slurm: SlurmView,
    now: datetime,
    edge: datetime | None,
    count_at_edge: int | None,
    lead: timedelta,
    health: Mapping[str, NodeHealth] | None = None,
) -> Handover | None:
    """The handover to prepare now: an edge within `lead` that takes nodes out of Slurm."""
    if edge is None or count_at_edge is None or not (now < edge <= now + lead) or not slurm.available:
        return None
    leaving = leaving_nodes(spec, nodes, slurm, now, count_at_edge, None, health)
    if not leaving:
        return None
    return Handover(
        reservation=reservation_name(namespace, pool),
        nodes=tuple(leaving),
        start=edge,
        forecast={n: free_at(n, slurm, now) for n in leaving},
    )
