"""Per-pool metrics derived from a reconcile pass: nodes and GPUs per placement, GPU-seconds served per
side, the pool's conditions and blocked moves. Conditions live in the pool's status, which
Prometheus cannot read; these gauges make them alertable (deploy/helm/slurmpool's
PrometheusRule) and the Grafana dashboard's GPU panels possible.

`export(pool, nodes, status, now)` is called once per pool per pass (pools.py). It keeps, per
pool, the monotonic time of the previous pass and the nodes' settled sides then: the GPUs of a
node that was settled on a side at the previous pass and still is count for the time between
the two passes. A node's GPUs are its allocatable of the pool's spec.demand.inference.resources
(default nvidia.com/gpu) or its devices in the ResourceSlices of the pool's DRA drivers (default
gpu.nvidia.com), whichever is more (NodeView.gpus). Nodes in a move, unadopted nodes and nodes
without GPUs count for no side. A restarted operator starts a new counter (Prometheus' increase() handles the reset);
the time it was down is not counted.

It also observes slurmpool_drain_duration_seconds: when a node seen in phase `Draining` at the
previous pass is no longer draining (the next phase, a rollback, or gone from the pool), the
time since that phase started (the move record's `since`), to within one pass.

The series follow the pools and the Lease: `begin` starts a pool's counters at 0 before its
first pass acts, `forget` removes every series of a deleted pool, and `leading(False)` clears
the gauges of a replica that lost the Lease (the holder exports them; two replicas' would add up
in sum()) and what it kept of the passes, so a replica that leads again counts from its next pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from slurmpool.adapters import metrics
from slurmpool.core.models import InferenceDemand, SlurmNodePoolStatus
from slurmpool.core.phases import Phase, phase_label
from slurmpool.core.view import NONE, NodeView, counts_at, side_of


@dataclass
class _Last:
    at: float
    sides: dict[str, tuple[str, int]]  # node -> (side, gpus) of settled nodes
    placements: set[tuple[str, str]] = field(default_factory=set)  # (placement, phase) with nodes
    conditions: set[str] = field(default_factory=set)
    draining: dict[str, tuple[str, datetime]] = field(default_factory=dict)  # node -> (move id, phase start)


_last: dict[str, _Last] = {}
_counted: set[str] = set()  # pools whose counters exist (metrics.count_from_zero)


def begin(pool_key: str) -> None:
    """Before a pass acts: the pool's counters exist at 0 (an alert's increase() sees the first failure)."""
    if pool_key not in _counted:
        metrics.count_from_zero(pool_key)
        _counted.add(pool_key)


def forget(pool_key: str) -> None:
    """A deleted pool: every series labelled with it, and what was kept of its passes."""
    metrics.forget(pool_key)
    _last.pop(pool_key, None)
    _counted.discard(pool_key)


def leading(holder: bool) -> None:
    """slurmpool_leader; a replica that no longer holds the Lease exports no pool's gauges."""
    metrics.LEADER.set(1 if holder else 0)
    if not holder:
        metrics.clear_pool_gauges()
        _last.clear()


def settled_side(node: NodeView) -> str | None:
    """"slurm" or "inference" for a node settled on a side, else None (moving, unadopted)."""
    if node.move is not None or node.placement == NONE:
        return None
    return side_of(node.placement)


def _unhealthy(pool_key: str, status: SlurmNodePoolStatus) -> None:
    """slurmpool_unhealthy_nodes: every side and kind, 0 included (an alert needs the series)."""
    counted: dict[tuple[str, str], set[str]] = {}
    for r in status.unhealthy_nodes:
        if r.grace_until is None:
            counted.setdefault((r.side, r.kind), set()).add(r.node)
    for side in metrics.HEALTH_SIDES:
        for kind in metrics.HEALTH_KINDS:
            metrics.UNHEALTHY_NODES.labels(pool=pool_key, side=side, kind=kind).set(len(counted.get((side, kind), ())))


def export(
    pool_key: str,
    nodes: list[NodeView],
    status: SlurmNodePoolStatus | None,
    now: float | None = None,
    wall: datetime | None = None,
    counted: InferenceDemand | None = None,
) -> None:
    counted = counted or InferenceDemand()
    now = time.monotonic() if now is None else now
    wall = datetime.now(timezone.utc) if wall is None else wall
    last = _last.get(pool_key)
    if last is None:  # both sides' counters from 0, so increase() counts the first pass too
        for each in ("slurm", "inference"):
            metrics.GPU_SECONDS.labels(pool=pool_key, side=each)
    sides = {n.name: (side, n.gpus(counted.resources, counted.drivers)) for n in nodes if (side := settled_side(n)) is not None}
    # GPU-seconds: only the time a node was on the same side at both ends of the interval.
    if last is not None and now > last.at:
        served: dict[str, float] = {}
        for name, (at, count) in sides.items():
            if last.sides.get(name, (None, 0))[0] == at and count:
                served[at] = served.get(at, 0.0) + count * (now - last.at)
        for at, value in served.items():
            metrics.GPU_SECONDS.labels(pool=pool_key, side=at).inc(value)
    # Nodes and GPUs per placement and phase; a pair exported before and gone now is set to 0.
    counts: dict[tuple[str, str], int] = dict.fromkeys(last.placements if last else (), 0)
    gpus = dict(counts)
    for node in nodes:
        key = (counts_at(node), phase_label(node.move.phase if node.move else None))
        counts[key] = counts.get(key, 0) + 1
        gpus[key] = gpus.get(key, 0) + node.gpus(counted.resources, counted.drivers)
    for (placement, phase), value in counts.items():
        metrics.NODES.labels(pool=pool_key, placement=placement, phase=phase).set(value)
        metrics.GPUS.labels(pool=pool_key, placement=placement, phase=phase).set(gpus[(placement, phase)])
    conditions: set[str] = set()
    if status is not None:
        for cond in status.conditions:
            metrics.POOL_CONDITION.labels(pool=pool_key, type=cond.type).set(1 if cond.status == "True" else 0)
            conditions.add(cond.type)
        metrics.MOVES_BLOCKED.labels(pool=pool_key).set(status.blocked)
        _unhealthy(pool_key, status)
    for gone in (last.conditions if last else set()) - conditions:
        metrics.POOL_CONDITION.remove(pool_key, gone)
    # Drains that ended since the previous pass.
    draining: dict[str, tuple[str, datetime]] = {}
    for node in nodes:
        move = node.move
        if move is not None and move.phase == Phase.DRAINING:
            draining[node.name] = (move.id, move.since)
    for name, (move_id, since) in (last.draining if last else {}).items():
        if draining.get(name, (None,))[0] != move_id:
            metrics.DRAIN_SECONDS.labels(pool=pool_key).observe(max(0.0, (wall - since).total_seconds()))
    _last[pool_key] = _Last(
        at=now, sides=sides, placements={k for k, v in counts.items() if v}, conditions=conditions, draining=draining
    )
