"""`kubectl slurmpool plan`: the dry run. The operator's planner run wave after wave (core/waves.py)
on the pool as read, with the drain forecast (core/forecast.py) of each node a move takes out of
Slurm. Pure. Imported only by `plan`: the planner, schedules, handovers, moves and health it loads
are not each `status`'s (0.1 s of its start)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from slurmpool.core import health
from slurmpool.core import schedule as sched
from slurmpool.core.forecast import free_at
from slurmpool.core.handover import Edge, HandoverPlan, edge_at, planned
from slurmpool.core.warning import warn
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.moves import between_pools, disturbed_pods
from slurmpool.core.planner import Goal, desired_split
from slurmpool.core.published import published, slurm_view
from slurmpool.core.placement import SLURM
from slurmpool.core.view import NodeView, PodView, counts_at, iso
from slurmpool.core.waves import PoolView, every_move_done, waves


@dataclass(frozen=True)
class Asked:
    """What `kubectl slurmpool plan` was asked: `--slurm-nodes` (None: the target in force) and
    `--at` (None: now)."""

    slurm_nodes: int | None = None
    at: datetime | None = None


def plan_view(spec: SlurmNodePoolSpec, pool: dict, nodes: list[NodeView], now: datetime, asked: Asked = Asked(),
              pods_of: Callable[[str], Iterable[PodView]] | None = None) -> dict[str, Any]:
    """Run the planner wave after wave (each wave's moves assumed done) until the split is reached.
    `asked.at`: the plan for that time instead: the count the schedule sets then (unless
    `asked.slurm_nodes`), and the planned handover an edge then gets (`at_handover`).
    `pods_of(node)`: the node's pods whole (what each needs of a node), asked for only where a move
    needs them, when `nodes` carry their pods as read without their spec: a move between inference
    pools evicts the pods the new pool does not admit. The planner's choice and every other move
    need only which pods are evictable."""
    slurm_nodes, at = asked.slurm_nodes, asked.at
    whole: dict[str, tuple[PodView, ...]] = {}

    def with_needs(node: NodeView, target: str) -> NodeView:
        if pods_of is None or not between_pools(node.placement, target) or not any(p.evictable for p in node.pods):
            return node
        if node.name not in whole:
            whole[node.name] = tuple(pods_of(node.name))
        return replace(node, pods=whole[node.name])
    status = pool.get("status") or {}
    target = slurm_nodes
    if target is None:
        target = (status.get("target") or {}).get("slurmNodes", spec.slurm_nodes)
    pool_counts = (status.get("target") or {}).get("inference")  # None: the spec's own counts
    edge = edge_at(spec, len(nodes), at) if at is not None else None
    if edge is not None:
        target = edge.slurm_nodes if slurm_nodes is None else slurm_nodes
        window = sched.active_at(spec.schedule, len(nodes), edge.at) if spec.schedule else None
        pool_counts = (spec.schedule[window.index].inference or None) if window else None  # the window's, else the spec's
    slurm = slurm_view(nodes)
    sick = health.from_status(status.get("unhealthyNodes") or [])  # never chosen, as by the operator
    held = frozenset(r.get("node", "") for r in status.get("reservedNodes") or [])  # in others' reservations: kept in Slurm too
    jobs_by_node = {n.name: [j for j in published(n).get("jobs") or []] for n in nodes}
    desired, problems = desired_split(spec, len(nodes), target, pool_counts)
    moves: list[dict[str, Any]] = []
    in_flight = [
        {"wave": 0, "node": n.name, "from": n.move.source, "to": n.move.target, "cause": f"in flight ({n.move.phase})", "jobs": [], "pods": []}
        for n in nodes
        if n.move
    ]
    # A paused pool is planned as on resume: the planner itself starts nothing while paused.
    unpaused = spec.model_copy(update={"paused": False})
    for wave in waves(PoolView(unpaused, nodes, slurm, now, sick, held), Goal(target, pool_counts, held=held), every_move_done):
        problems = wave.plan.problems
        for start in wave.plan.starts:
            node = wave.moved[start.node]
            disturbs_jobs = jobs_by_node.get(node.name, []) if node.placement == SLURM else []
            disturbs_pods = [p.key for p in disturbed_pods(spec, with_needs(node, start.target), start.target)]
            free = free_at(node.name, slurm, now) if node.placement == SLURM else now
            moves.append(
                {
                    "wave": wave.number,
                    "node": node.name,
                    "from": start.source,
                    "to": start.target,
                    "cause": start.cause,
                    "jobs": [j.get("id") for j in disturbs_jobs],
                    "jobDetails": disturbs_jobs,
                    "pods": disturbs_pods,
                    # Drain forecast: the latest end of its jobs by their time limits (None: a job has none).
                    "freeAt": iso(free) if free else None,
                }
            )
        for name in wave.plan.aborts:
            move = wave.moved[name].move
            assert move is not None  # an abort turns back a move in flight
            moves.append({"wave": wave.number, "node": name, "from": move.target, "to": move.source,
                          "cause": "abort", "jobs": [], "jobDetails": [], "pods": []})
    return {
        "pool": pool.get("metadata", {}).get("name"),
        "namespace": pool.get("metadata", {}).get("namespace"),
        "slurmNodes": target,
        "paused": spec.paused,
        "before": dict(sorted(Counter(counts_at(n) for n in nodes).items())),
        "desired": desired,
        "problems": problems,
        "unhealthy": sorted(sick),
        "inFlight": in_flight,
        # the operator's planned handover (status.handover), if any; with --at, the one an edge then gets
        "handover": status.get("handover") if edge is None else at_handover(pool, PoolView(spec, nodes, slurm, now, sick, held),
                                                                                replace(edge, slurm_nodes=target)),
        "at": iso(at) if at is not None else None,
        "moves": moves,
        "waves": max([m["wave"] for m in moves] or [0]),
        "now": iso(now),
    }


def at_handover(pool: dict, view: PoolView, edge: Edge) -> dict[str, Any] | None:
    """The planned handover an edge at `edge.at` to `edge.slurm_nodes` Slurm nodes gets, as the operator
    would plan it (handover.planned: same leaving nodes, reservation, forecasts), in status.handover's
    shape plus each node's forecast and, with drain.onTimeout: Checkpoint, when each late job is warned
    (warning.py); None when the edge takes no node out of Slurm."""
    meta = pool.get("metadata", {})
    h = planned(PoolRef(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")), view, edge, edge.at - view.now)
    if h is None:
        return None
    off = "" if view.spec.handover.enabled else "spec.handover.enabled is false: no reservation, the edge drains as before"
    return {"reservation": h.reservation, "flags": list(h.flags), "nodes": list(h.nodes), "start": iso(h.start),
            "end": iso(edge.until), "state": "Forecast", "late": sorted(h.late), "message": off,
            "forecast": {n: (iso(t) if t else None) for n, t in h.forecast.items()},
            # warned only when the handover is on (decide reconciles no edge otherwise)
            "checkpoints": [j.status().model_dump(by_alias=True) for j in warn(HandoverPlan("keep", ahead=h), view).jobs]
            if view.spec.handover.enabled else []}
