"""Demand source: pods that wait for GPU nodes of an inference pool. Pure.

Pods Pending and Unschedulable that request one of spec.demand.inference.resources (default
nvidia.com/gpu; the pod index: pendingpod.py) and would fit one of the pool's inference pools:
their nodeSelector and required node affinity are met by the pool's labels over a node's own
labels, and they tolerate the pool's taints. Each pod counts for the highest-priority pool it
fits; pods of a group are pod_groups'. Per resource, a node holds what the pool's Nodes have allocatable of it (the most any of
them has; demand.gpusPerNode, when set, wins; none has it: the count in slurm.gres, else 8).
Inference's want: the sum over resources of ceil(requested / per node); each named pool's, the
same over its own pods.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from slurmpool.core.demand.pendingpod import PendingPod
from slurmpool.core.demand.want import Seen, Want
from slurmpool.core.fit import misfit
from slurmpool.core.models import DemandSpec, InferencePool
from slurmpool.core.placement import Side

# Per pass: the label keys a pod asks about -> the distinct values nodes have for them.
FitCache = dict[tuple[str, ...], set[tuple[tuple[str, str | None], ...]]]


def fits(pod: PendingPod, pool: InferencePool, node_labels: Sequence[dict[str, str]], cache: FitCache | None = None) -> bool:
    """Would the pod run on some node of this inference pool? The node's own labels with the
    pool's on top must meet its nodeSelector and required node affinity, and it must
    tolerate the pool's taints. Nodes are judged only by the label keys the pod asks about,
    so a Deployment's many pods cost one look at the nodes (`cache`, per pass)."""
    needs = pod.needs
    keys = tuple(sorted({k for k, _ in needs.node_selector} | {r[0] for term in needs.affinity for r in term}))
    if cache is None:
        cache = {}
    if keys not in cache:
        cache[keys] = {tuple((k, labels.get(k)) for k in keys) for labels in node_labels}
    taints = [t.model_dump() for t in pool.taints]
    for seen in cache[keys]:
        labels = {k: v for k, v in seen if v is not None}
        labels.update(pool.labels)
        if misfit(needs, labels, taints) is None:
            return True
    return False


def node_labels(seen: Seen) -> list[dict[str, str]]:
    """Node labels as inference would see them: without the pool-managed ones, which fits() checks."""
    managed = {k for p in seen.spec.inference.pools for k in p.labels}
    return [{k: v for k, v in n.labels.items() if k not in managed} for n in seen.nodes]


def by_priority(seen: Seen) -> list[InferencePool]:
    return sorted(seen.spec.inference.pools, key=lambda p: (-p.priority, p.name))


def per_node(seen: Seen, resource: str) -> int:
    """What one node holds of the resource: demand.gpusPerNode, else the Nodes' allocatable, else gres or 8."""
    if seen.spec.demand and seen.spec.demand.gpus_per_node:
        return seen.spec.demand.gpus_per_node
    return max((n for node in seen.nodes for r, n in node.resources if r == resource), default=0) or seen.gpus_per_node


def nodes_for(asked: dict[str, int], capacity: dict[str, int]) -> int:
    """Nodes that hold what is asked: per resource, ceil(asked / per node), added up."""
    return sum(math.ceil(n / capacity[r]) for r, n in asked.items())


def want(waiting: int, asked: dict[str, int], capacity: dict[str, int], pool_asked: dict[str, dict[str, int]] | None = None) -> Want:
    """Inference's want for `waiting` pods asking for `asked` (per resource), `pool_asked` of it per pool."""
    pools = tuple(sorted((name, nodes_for(a, capacity)) for name, a in (pool_asked or {}).items()))
    gpus = sum(asked.values())
    return Want(Side.INFERENCE, nodes_for(asked, capacity), waiting, gpus, f"{waiting} unschedulable pod(s) want {gpus} GPU(s)", pools)


def wants(seen: Seen) -> list[Want]:
    """The source (an entry of SOURCES): what the pods that fit an inference pool want from inference."""
    resources = (seen.spec.demand or DemandSpec()).inference.resources
    labels, pools = node_labels(seen), by_priority(seen)
    waiting = 0
    asked: dict[str, int] = {}
    pool_asked: dict[str, dict[str, int]] = {}
    cache: FitCache = {}
    for pod in seen.pods:
        mine = pod.asks(resources) if not pod.group else {}  # a group's pods are pod_groups'
        pool = next((q for q in pools if fits(pod, q, labels, cache)), None) if mine else None
        if pool is not None:
            waiting += 1
            for r, n in mine.items():
                asked[r] = asked.get(r, 0) + n
                pool_asked.setdefault(pool.name, {})[r] = pool_asked.get(pool.name, {}).get(r, 0) + n
    capacity = {r: per_node(seen, r) for r in asked}
    return [want(waiting, asked, capacity, pool_asked)] if waiting else []
