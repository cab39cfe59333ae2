"""`kubectl slurmpool status`: the pool's nodes from their API objects, and the status view (one
row per node) that render.py prints or -o json/yaml gives whole. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from slurmpool.core.forecast import draining_out_of_slurm, free_at
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.phases import SETTLED
from slurmpool.core.published import published, slurm_view
from slurmpool.core.view import NodeView, PodView, iso, parse_time


def pool_nodes(spec: SlurmNodePoolSpec, node_bodies: Iterable[dict], pod_bodies: Iterable[dict]) -> list[NodeView]:
    from slurmpool.core.bodies import pod_view

    return with_pods(pool_node_views(spec, node_bodies), (pod_view(body) for body in pod_bodies))


def pool_node_views(spec: SlurmNodePoolSpec, node_bodies: Iterable[dict]) -> list[NodeView]:
    """The pool's nodes, each reduced to its view as it is read (a page of bodies held at a time)."""
    from slurmpool.core.bodies import node_view

    if spec.node_selector.is_empty():
        return []
    views = (node_view(body) for body in node_bodies)
    return sorted((v for v in views if spec.node_selector.matches(v.labels)), key=lambda n: n.name)


def with_pods(nodes: list[NodeView], pod_views: Iterable[PodView], in_place: bool = False) -> list[NodeView]:
    """The views with their pods. `in_place`: the views are the caller's own, just made and not
    shared yet (`api.load_pool`'s), and get their pods in place: dataclasses.replace would build each view
    again and read its annotations again (0.2 s of 5,000)."""
    pods: dict[str, list[PodView]] = {n.name: [] for n in nodes}
    for pod in pod_views:
        on = pods.get(pod.node)
        if on is not None:
            on.append(pod)
    if in_place:
        for n in nodes:
            object.__setattr__(n, "pods", tuple(pods[n.name]))  # as NodeView.__post_init__ sets its own fields
        return nodes
    return [replace(n, pods=tuple(pods[n.name])) for n in nodes]


def age(since: datetime | None, now: datetime) -> str:
    if since is None:
        return "-"
    s = max(0, int((now - since).total_seconds()))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d"


def node_rows(nodes: list[NodeView], now: datetime, sick: dict[str, str] | None = None,
              pod_keys: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """One row per node; `sick`: node -> why it is unhealthy (the pool's status.unhealthyNodes);
    `pod_keys`: node -> its pods' keys as api.load_status read them (else from each node's pods)."""
    sick = sick or {}
    rows = []
    for node in nodes:
        move = node.move
        info = published(node)
        since = move.since if move else node.settled_at
        rows.append(
            {
                "node": node.name,
                "side": node.placement,
                "phase": move.phase if move else SETTLED,
                "to": move.target if move else None,
                "moveId": move.id if move else None,
                "since": since.strftime("%Y-%m-%dT%H:%M:%SZ") if since else None,
                "age": age(since, now),
                "slurmState": info.get("state"),
                "jobs": [j.get("id") for j in info.get("jobs") or []],
                "pods": pod_keys.get(node.name, []) if pod_keys is not None else
                        [p.key for p in node.pods if not p.slurmd and p.phase not in ("Succeeded", "Failed")],
                "pin": node.pin,
                "moveNow": node.move_now,
                "cordoned": node.unschedulable,
                "unhealthy": sick.get(node.name),
            }
        )
    return rows


def unhealthy_reasons(status: dict) -> dict[str, str]:
    """node -> why it is unhealthy (or suspect, with 'until' its grace ends), from the pool's status."""
    out: dict[str, list[str]] = {}
    for r in status.get("unhealthyNodes") or []:
        text = str(r.get("reason", "")) + (f" (grace until {r['graceUntil']})" if r.get("graceUntil") else "")
        out.setdefault(str(r.get("node")), []).append(text)
    return {node: "; ".join(texts) for node, texts in out.items()}


def draining_forecast(nodes: list[NodeView], now: datetime) -> dict[str, str | None]:
    """node -> when it will be free (RFC 3339; None: a job has no time limit), for each node with a
    move out of Slurm in flight that still drains, by the operator's forecast (forecast.py) on the
    jobs it published (the same forecast as `plan`'s FREE)."""
    draining = draining_out_of_slurm(nodes)
    if not draining:
        return {}
    slurm = slurm_view(draining)  # a node's forecast reads only its own published jobs: not every node's parsed again
    out: dict[str, str | None] = {}
    for node in draining:
        free = free_at(node.name, slurm, now)
        out[node.name] = iso(free) if free else None
    return out


def status_view(pool: dict, nodes: list[NodeView], now: datetime, pod_keys: dict[str, list[str]] | None = None) -> dict[str, Any]:
    meta, spec, status = pool.get("metadata", {}), pool.get("spec", {}), pool.get("status") or {}
    forecast = draining_forecast(nodes, now)
    rows = node_rows(nodes, now, unhealthy_reasons(status), pod_keys)
    for row in rows:
        if row["node"] in forecast:
            row["freeAt"] = forecast[row["node"]]
    return {
        "pool": meta.get("name"),
        "namespace": meta.get("namespace"),
        "paused": bool(spec.get("paused")),
        "spec": {"slurmNodes": spec.get("slurmNodes")},
        "target": status.get("target"),
        "slurm": status.get("slurm"),
        "inference": {k: v for k, v in (status.get("inference") or {}).items() if k != "byPool"},
        "moving": status.get("moving", 0),
        "unhealthy": status.get("unhealthy", 0),
        "conditions": {c["type"]: f"{c['status']} {c.get('reason', '')}".strip() for c in status.get("conditions") or []},
        "nodes": rows,
        "now": iso(now),
    }


def history_view(pool: dict) -> dict[str, Any]:
    """`kubectl slurmpool history`: the pool's status.recentMoves (newest first) as the operator wrote
    them, each with how long it took, and, in shadow mode, what the operator would do now."""
    status = pool.get("status") or {}
    moves = []
    for move in status.get("recentMoves") or []:
        started, ended = parse_time(move.get("started") or ""), parse_time(move.get("ended") or "")
        took = int((ended - started).total_seconds()) if started and ended else None
        moves.append({**move, "seconds": took})
    meta = pool.get("metadata") or {}
    return {"pool": meta.get("name"), "namespace": meta.get("namespace"), "mode": (pool.get("spec") or {}).get("mode", "Active"),
            "moves": moves, "shadow": status.get("shadow")}
