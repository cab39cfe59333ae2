"""The shared type of demand: what one source's waiting work wants from one side (`Want`), and
what every source reads (`Seen`). Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime

from slurmbridge.models import gpu_count

from slurmpool.core.demand.claims import Asks
from slurmpool.core.demand.pendingpod import PendingPod, PodGroupSizes
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.placement import Side
from slurmpool.core.view import NodeView, SlurmView

DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Want:
    """What one source's waiting work wants from one side this pass. Wants of several sources
    for the same side add up; the decision reads nothing else from a source."""

    side: Side  # SLURM or INFERENCE
    nodes: int  # nodes more that would start the work, by the source's own rule (>= 0)
    waiting: int  # how much waits (jobs, pods...): status.target.demand.pending*
    gpus: int  # GPUs the waiting work asks for: status.target.demand.pending*Gpus
    what: str  # the work for messages: "3 pending job(s) want 24 GPU(s)"
    # Of `nodes`, what the work of each named inference pool needs (GPUs pack across pools, so
    # these need not add up to `nodes`).
    pools: tuple[tuple[str, int], ...] = ()
    unstartable: tuple[str, ...] = ()  # work no split of the pool could start, and why: reported, never counted
    # Of `nodes`, the pool's nodes the work names (a job's -w): the planner moves these to the
    # side before any other (planner.Goal.named).
    named: tuple[str, ...] = ()


@dataclass(frozen=True)
class Seen:
    """What a source may read: the pool, its nodes, the Slurm view, the pending-pod index, the
    pass's clock, the nodes health.py finds unhealthy (never moved: work that names one cannot
    start), what the DRA claims and templates ask for (claims.key -> asks), and each PodGroup's
    gang minCount ((namespace, name) -> minCount, None: a basic policy; pod_groups.py)."""

    spec: SlurmNodePoolSpec
    nodes: Sequence[NodeView]
    slurm: SlurmView
    pods: Sequence[PendingPod]
    unhealthy: frozenset[str] = frozenset()
    claims: Mapping[str, Asks] = field(default_factory=dict)
    pod_groups: PodGroupSizes = field(default_factory=dict)
    now: datetime = field(kw_only=True)  # the snapshot's clock

    @cached_property
    def gpus_per_node(self) -> int:
        return gpus_per_node(self.spec)


Source = Callable[[Seen], Iterable[Want]]


def gpus_per_node(spec: SlurmNodePoolSpec) -> int:
    if spec.demand and spec.demand.gpus_per_node:
        return spec.demand.gpus_per_node
    return gpu_count(spec.slurm.gres or "") or DEFAULT_GPUS_PER_NODE
