"""Demand source: pods that wait for GPU nodes of an inference pool. Pure.

Pods Pending and Unschedulable that request nvidia.com/gpu (the pod index: pendingpod.py) and
would fit one of the pool's inference pools: their nodeSelector and required node affinity are
met by the pool's labels over a node's own labels, and they tolerate the pool's taints. Each pod
counts for the highest-priority pool it fits. Inference's want: ceil(GPUs / GPUs per node); each
named pool's, ceil(its pods' GPUs / GPUs per node).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from slurmpool.core.demand.pendingpod import PendingPod
from slurmpool.core.demand.want import Seen, Want
from slurmpool.core.fit import misfit
from slurmpool.core.models import InferencePool
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


def want(waiting: int, gpus: int, gpn: int, pool_gpus: dict[str, int] | None = None) -> Want:
    """Inference's want for `waiting` pods asking for `gpus` GPUs, `pool_gpus` of them per pool."""
    pools = tuple(sorted((name, math.ceil(g / gpn)) for name, g in (pool_gpus or {}).items()))
    return Want(Side.INFERENCE, math.ceil(gpus / gpn), waiting, gpus, f"{waiting} unschedulable pod(s) want {gpus} GPU(s)", pools)


def wants(seen: Seen) -> list[Want]:
    """The source (an entry of SOURCES): what the pods that fit an inference pool want from inference."""
    spec = seen.spec
    # Node labels as inference would see them: without the pool-managed ones, which fits() checks.
    managed = {k for p in spec.inference.pools for k in p.labels}
    labels = [{k: v for k, v in n.labels.items() if k not in managed} for n in seen.nodes]
    by_priority = sorted(spec.inference.pools, key=lambda p: (-p.priority, p.name))
    waiting = 0
    pool_gpus: dict[str, int] = {}
    cache: FitCache = {}
    for pod in seen.pods:
        pool = next((q for q in by_priority if fits(pod, q, labels, cache)), None) if pod.gpus > 0 else None
        if pool is not None:
            waiting += 1
            pool_gpus[pool.name] = pool_gpus.get(pool.name, 0) + pod.gpus
    return [want(waiting, sum(pool_gpus.values()), seen.gpus_per_node, pool_gpus)] if waiting else []
