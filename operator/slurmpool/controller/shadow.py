"""Shadow mode: a pass of a pool with spec.mode Shadow (or of an operator run with --dry-run) reads
and decides as usual, and this is all its apply does: it reports what it would have done and
writes nothing to Nodes, pods or Slurm. apply.apply returns here before its first write, so no
step of the decision reaches the API server or Slurm; the status (core/history.shadow) shows the
rest. The Events repeat each pass while the decision does: kube.py aggregates them (count)."""

from __future__ import annotations

from collections import Counter

from slurmpool.adapters import metrics
from slurmpool.controller.posting import post
from slurmpool.core.events import Event, Reason
from slurmpool.core.history import would_start
from slurmpool.core.interfaces import Kube, PoolRef
from slurmpool.core.snapshot import ApplyResult, PoolDecision


async def report(kube: Kube, pool: PoolRef, decision: PoolDecision) -> ApplyResult:
    """Events and the gauge of the moves the pass would start; an ApplyResult that wrote nothing."""
    lines = would_start(decision)
    for (start, move), line in zip(decision.starts, lines):
        await post(kube, pool, Event.normal(Reason.ShadowDecision, f"shadow mode, not done: would start {line}", start.node), move.id)
    directions = Counter(move.direction.value for _, move in decision.starts)
    for direction in metrics.DIRECTIONS:
        metrics.SHADOW_MOVES.labels(pool=pool.key, direction=direction).set(directions.get(direction, 0))
    return ApplyResult(shadow=True)


def leave(pool: PoolRef) -> None:
    """An acting pass: no slurmpool_shadow_moves of the pool (one that was shadow until now)."""
    metrics.SHADOW_MOVES.remove_by_labels({"pool": pool.key})
