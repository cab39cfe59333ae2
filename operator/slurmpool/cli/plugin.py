"""`kubectl slurmpool`: the on-call's view of a SlurmNodePool, a dry-run planner, and the knobs.

    kubectl slurmpool status POOL [-n NS] [-o wide|json|yaml] [--watch]   every node: side, phase, time in it, jobs, pods
    kubectl slurmpool plan POOL [--slurm-nodes N] [--at TIME] [-o json|yaml] which nodes would move, what they would disturb
    kubectl slurmpool move NODE --to slurm|inference[:POOL] ask for one node to move now (move-now annotation)
    kubectl slurmpool pause POOL / resume POOL             spec.paused

Installed with the package as the console script `kubectl-slurmpool`, so kubectl finds it on
PATH. It reads the same kubeconfig as kubectl (KUBECONFIG, or --kubeconfig/--context). It needs
no Slurm access: the operator publishes each node's Slurm state and jobs in the node
annotation `slurmpool.io/slurm`. `plan` runs the operator's own planner on that state and
changes nothing. No kopf import here: the command starts fast.

It reads only the pool's Nodes (its nodeSelector as a label selector, pages of JSON, the next asked
for while one is parsed) and only the pods not ended on them: a field selector per node for small
pools, else the cluster's pods in one answer, kept only when on a pool node. Pods come in the
apiserver's protobuf (podproto.py: a quarter of the apiserver's CPU of JSON), read as they arrive
and parsed in batches in C, describing only the fields read; `status` keeps each pod's key and
node, `plan` a view of each. `plan` reads whole pods (what each needs of a node) only for the
nodes of a move between inference pools, node by node, the one place a pod's spec counts. No client
models, and the garbage collector off meanwhile. No import of kopf, asyncssh or the client's
CoreV1Api (`CoreCalls`): `make bench` times `status` on 5,000 Nodes and 50,000 pods.
Shell completion: the console script `kubectl_complete-slurmpool` (kubectl 1.26+ calls it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import queue
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Generic, TypeVar

# Before pydantic builds a model: its plugins are looked for among every installed package's
# entry points, 20 ms of each command's start, and none is used here.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from slurmbridge.models import SlurmJob, SlurmNode

from slurmpool.core.interfaces import PoolRef
from slurmpool.core.models import GROUP, PLURAL, VERSION, LabelSelector, SlurmNodePoolSpec
from slurmpool.core.models import parse_at as parse_rfc3339
from slurmpool.core.phases import Phase
from slurmpool.core.view import (
    ANN_MOVE,
    ANN_MOVE_NOW,
    ANN_PLACEMENT,
    ANN_SETTLED,
    ANN_SLURM,
    SLURM,
    NodeView,
    PodView,
    SlurmView,
    iso,
    pool_of,
)
from slurmpool.core.placement import names_a_side

if TYPE_CHECKING:
    from slurmpool.core.handover import Edge, PoolView

# `status` runs on every look at a pool: what only `plan` needs (the planner, schedules, handovers,
# moves, health) is imported where `plan` uses it, not by each `status` (0.1 s of its start).

MAX_WAVES = 100
OUTPUTS = ("table", "wide", "json", "yaml")
T = TypeVar("T")


# ---------------------------------------------------------------- pure: state from API objects


def parse_time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None
    except (ValueError, AttributeError):
        return None


AT_OFFSET = re.compile(r"\+(?=\d)(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_at(text: str, now: datetime) -> datetime:
    """`plan --at`: an RFC 3339 time with its offset, or an offset from now (+2h, +1h30m, +45m, +1d);
    in the future. ValueError with the reason otherwise."""
    text = text.strip()
    if text.startswith("+"):
        match = AT_OFFSET.fullmatch(text)
        if not match:
            raise ValueError(f"--at {text!r}: an offset is + and numbers with d, h, m or s, e.g. +2h or +1h30m")
        days, hours, minutes, secs = (int(x or 0) for x in match.groups())
        at = now + timedelta(days=days, hours=hours, minutes=minutes, seconds=secs)
    else:
        try:
            at = parse_rfc3339(text)
        except ValueError:
            raise ValueError(f"--at {text!r}: give an RFC 3339 time with its offset (e.g. 2026-12-24T18:00:00Z) "
                             "or an offset from now (e.g. +2h)") from None
    if at <= now:
        raise ValueError(f"--at {text}: not in the future (now is {iso(now)})")
    return at.astimezone(timezone.utc)


def published(node: NodeView) -> dict:
    """The operator's `slurmpool.io/slurm` annotation of the node, parsed ({} if none)."""
    try:
        value = json.loads(node.annotations.get(ANN_SLURM) or "{}")
        return value if isinstance(value, dict) else {}
    except ValueError:
        return {}


def slurm_view(nodes: list[NodeView]) -> SlurmView:
    """Slurm as the operator last published it: enough for the planner's victim order."""
    snodes: dict[str, SlurmNode] = {}
    jobs: list[SlurmJob] = []
    for node in nodes:
        info = published(node)
        if not info:
            continue
        state, *flags = (info.get("state") or "UNKNOWN").split("+")
        snodes[node.name] = SlurmNode(
            name=node.name, state=state, flags=frozenset(flags), reason=info.get("reason") or None, gres="", gres_used="",
            features=(), partitions=(),
        )
        for j in info.get("jobs") or []:
            jobs.append(
                SlurmJob(
                    job_id=str(j.get("id")), name=j.get("name") or "", user=j.get("user") or "", state=j.get("state") or "RUNNING",
                    partition="", nodes=(node.name,), gpus_per_node=0, num_nodes=1, start_time=None,
                    end_time=parse_time(j.get("end")), reason="",
                )
            )
    return SlurmView(available=True, nodes=snodes, jobs=tuple(jobs))


def label_selector_query(selector: LabelSelector) -> str:
    """The pool's nodeSelector as the API's labelSelector parameter (the apiserver filters)."""
    terms = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for req in selector.match_expressions:
        if req.operator == "In":
            terms.append(f"{req.key} in ({','.join(req.values)})")
        elif req.operator == "NotIn":
            terms.append(f"{req.key} notin ({','.join(req.values)})")
        elif req.operator == "Exists":
            terms.append(req.key)
        else:
            terms.append(f"!{req.key}")
    return ",".join(terms)


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
    shared yet (`_load`'s), and get their pods in place: dataclasses.replace would build each view
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


def list_continue(data: bytes) -> str | None:
    """The `continue` token of a list's answer, read from its head: the list's metadata comes
    before its items or rows (Go's field order), so the next page can be asked for before this one
    is parsed. ValueError if the head is not that."""
    at = data.find(b'"metadata":', 0, 256)
    if at < 0:
        raise ValueError("a list's answer without its metadata ahead of its items")
    meta, _ = json.JSONDecoder().raw_decode(data[at + 11:at + 11 + 8192].decode("utf-8", "replace"))
    token = meta.get("continue") if isinstance(meta, dict) else None
    return token or None


def _json_page(data: bytes) -> tuple[list[dict], str | None]:
    """A JSON list's items and its `continue`."""
    page = json.loads(data)
    return page.get("items") or [], (page.get("metadata") or {}).get("continue") or None


def _json_pods(data: bytes) -> tuple[list[PodView], str | None]:
    from slurmpool.core.bodies import pod_view

    items, token = _json_page(data)
    return [pod_view(body) for body in items], token


def _pod_page(data: bytes) -> tuple[list[PodView], str | None]:
    from slurmpool.cli import podproto

    return podproto.pod_page(data) if podproto.is_protobuf(data) else _json_pods(data)


def _pod_keys(data: bytes) -> tuple[list[tuple[str, str]], str | None]:
    from slurmpool.cli import podproto

    if podproto.is_protobuf(data):
        return podproto.pod_keys_page(data)
    views, token = _json_pods(data)
    return [(v.node, v.key) for v in views if not v.slurmd], token


def _pod_page_head(data: bytes) -> str | None:
    from slurmpool.cli import podproto

    return podproto.continue_token(data) if podproto.is_protobuf(data) else list_continue(data)


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
    `pod_keys`: node -> its pods' keys as _load_status read them (else from each node's pods)."""
    sick = sick or {}
    rows = []
    for node in nodes:
        move = node.move
        info = published(node)
        since = move.since if move else parse_time(node.annotations.get(ANN_SETTLED))
        rows.append(
            {
                "node": node.name,
                "side": node.placement,
                "phase": move.phase if move else "Settled",
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
    move out of Slurm in flight that still drains: the latest end of its jobs by their time
    limits, as the operator published them (the same forecast as `plan`'s FREE)."""
    draining = [n for n in nodes if n.move and n.move.source == SLURM and n.move.phase == Phase.DRAINING]
    if not draining:
        return {}
    from slurmpool.core.handover import free_at

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
    from slurmpool.core import health
    from slurmpool.core import schedule as sched
    from slurmpool.core.handover import PoolView, edge_at, free_at
    from slurmpool.core.moves import between_pools, disturbed_pods
    from slurmpool.core.planner import Goal, desired_split, plan

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
        window = sched.active_at(spec.schedule, len(nodes), at) if spec.schedule else None
        pool_counts = (spec.schedule[window.index].inference or None) if window else None  # the window's, else the spec's
    slurm = slurm_view(nodes)
    sick = health.from_status(status.get("unhealthyNodes") or [])  # never chosen, as by the operator
    jobs_by_node = {n.name: [j for j in published(n).get("jobs") or []] for n in nodes}
    before = _counts(nodes)
    desired, problems = desired_split(spec, len(nodes), target, pool_counts)
    moves: list[dict[str, Any]] = []
    in_flight = [
        {"wave": 0, "node": n.name, "from": n.move.source, "to": n.move.target, "cause": f"in flight ({n.move.phase})", "jobs": [], "pods": []}
        for n in nodes
        if n.move
    ]
    current = list(nodes)
    place = {n.name: i for i, n in enumerate(current)}  # the same order wave after wave: only the nodes a wave moves change
    # A paused pool is planned as on resume: the planner itself starts nothing while paused.
    unpaused = spec.model_copy(update={"paused": False})
    for wave in range(1, MAX_WAVES + 1):
        result = plan(unpaused, current, slurm, now, Goal(target, pool_counts), sick)
        problems = result.problems
        if not result.starts and not result.aborts:
            break
        by_name = _Lookup(current, place)
        for start in result.starts:
            node = by_name[start.node]
            disturbs_jobs = jobs_by_node.get(node.name, []) if node.placement == SLURM else []
            disturbs_pods = [p.key for p in disturbed_pods(spec, with_needs(node, start.target), start.target)]
            free = free_at(node.name, slurm, now) if node.placement == SLURM else now
            moves.append(
                {
                    "wave": wave,
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
        for name in result.aborts:
            moves.append({"wave": wave, "node": name, "from": by_name[name].move.target, "to": by_name[name].move.source,
                          "cause": "abort", "jobs": [], "jobDetails": [], "pods": []})
        starts = {s.node: s for s in result.starts}
        for name in {*starts, *result.aborts, *(n.name for n in current if n.move)}:  # the rest stay as they are
            current[place[name]] = _settle(current[place[name]], result, starts.get(name))
    return {
        "pool": pool.get("metadata", {}).get("name"),
        "namespace": pool.get("metadata", {}).get("namespace"),
        "slurmNodes": target,
        "paused": spec.paused,
        "before": before,
        "desired": desired,
        "problems": problems,
        "unhealthy": sorted(sick),
        "inFlight": in_flight,
        # the operator's planned handover (status.handover), if any; with --at, the one an edge then gets
        "handover": status.get("handover") if at is None else at_handover(pool, PoolView(spec, nodes, slurm, now, sick),
                                                                              replace(edge, slurm_nodes=target)),
        "at": iso(at) if at is not None else None,
        "moves": moves,
        "waves": max([m["wave"] for m in moves] or [0]),
        "now": iso(now),
    }


def at_handover(pool: dict, view: PoolView, edge: Edge) -> dict[str, Any] | None:
    """The planned handover an edge at `edge.at` to `edge.slurm_nodes` Slurm nodes gets, as the operator
    would plan it (handover.planned: same leaving nodes, reservation, forecasts), in status.handover's
    shape plus each node's forecast; None when the edge takes no node out of Slurm."""
    from slurmpool.core.handover import planned

    meta = pool.get("metadata", {})
    h = planned(PoolRef(meta.get("namespace", ""), meta.get("name", "")), view, edge, edge.at - view.now)
    if h is None:
        return None
    off = "" if view.spec.handover.enabled else "spec.handover.enabled is false: no reservation, the edge drains as before"
    return {"reservation": h.reservation, "flags": list(h.flags), "nodes": list(h.nodes), "start": iso(h.start),
            "end": iso(edge.until), "state": "Forecast", "late": sorted(h.late), "message": off,
            "forecast": {n: (iso(t) if t else None) for n, t in h.forecast.items()}}


def _counts(nodes: list[NodeView]) -> dict[str, int]:
    from slurmpool.core.planner import current_placement

    out: dict[str, int] = {}
    for n in nodes:
        out[current_placement(n)] = out.get(current_placement(n), 0) + 1
    return dict(sorted(out.items()))


class _Lookup:
    """`current[name]`, by the index of its place."""

    def __init__(self, current: list[NodeView], at: dict[str, int]):
        self.current, self.at = current, at

    def __getitem__(self, name: str) -> NodeView:
        return self.current[self.at[name]]


def _settle(node: NodeView, result, start=None) -> NodeView:
    """The node once this wave (and any move in flight) is done; `start`: this wave's start of it."""
    target = start.target if start else (node.move.source if node.name in result.aborts else (node.move.target if node.move else None))
    if target is None:
        return node
    ann = {k: v for k, v in node.annotations.items() if k not in (ANN_MOVE, ANN_MOVE_NOW)}
    ann[ANN_PLACEMENT] = target
    return replace(node, annotations=ann, pods=tuple(p for p in node.pods if not p.evictable) if target == SLURM else node.pods)


# ---------------------------------------------------------------- pure: rendering


def width() -> int:
    return max(80, min(120, shutil.get_terminal_size((100, 24)).columns))


def clip(items: list[str], room: int) -> str:
    """'a,b,c' cut to about `room` characters, with '+N' for the items that do not fit."""
    if not items:
        return "-"
    shown: list[str] = []
    for i, item in enumerate(items):
        rest = len(items) - i - 1
        if len(",".join(shown + [item])) + (len(f" +{rest}") if rest else 0) > room:
            break
        shown.append(item)
    if not shown:
        return (items[0][: max(1, room - 4)] + (f" +{len(items) - 1}" if len(items) > 1 else ""))[:room]
    left = len(items) - len(shown)
    return ",".join(shown) + (f" +{left}" if left else "")


def table(headers: list[str], rows: list[list[str]], total: int) -> str:
    """Columns sized to their content; the last column takes what is left of `total`."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [headers, *rows]:
        head = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1]))
        lines.append((head + "  " + row[-1])[:total].rstrip())
    return "\n".join(lines)


def render_status(view: dict[str, Any], total: int = 100, wide: bool = False) -> str:
    """The status table in `total` columns; `wide`: no width limit, every pod or job, and each
    node's SINCE (when its phase began) and MOVE (the move's id)."""
    if wide:
        total = 10**6
    t = view.get("target") or {}
    lines = [
        f"SlurmNodePool {view['namespace']}/{view['pool']}: spec.slurmNodes {view['spec']['slurmNodes']}"
        + (", PAUSED" if view["paused"] else "")
    ]
    if t:
        lines.append(f"Target: {t.get('slurmNodes')} Slurm node(s), source {t.get('source')} since {t.get('since')}"
                     + (f" by {t['by']}" if t.get("by") else ""))
        if t.get("reason"):
            lines.append(f"  why: {t['reason']}"[:total])
        if t.get("nextChange"):
            lines.append(f"  next schedule edge: {t['nextChange']}")
        d = t.get("demand")
        if d:
            lines.append(f"  demand: {d.get('pendingJobs', 0)} pending job(s) ({d.get('pendingJobGpus', 0)} GPUs), "
                         f"{d.get('pendingPods', 0)} pending pod(s) ({d.get('pendingPodGpus', 0)} GPUs)"[:total])
            for why in d.get("unstartableJobs") or []:
                lines.append(f"  not demand, no split starts it: {why}"[:total])
    s, i = view.get("slurm") or {}, view.get("inference") or {}
    lines.append(f"Slurm {s.get('ready', 0)}/{s.get('desired', 0)} ready, inference {i.get('ready', 0)}/{i.get('desired', 0)} ready, "
                 f"{view.get('moving', 0)} moving" + (f", unhealthy: Slurm {s.get('unhealthy', 0)}, inference {i.get('unhealthy', 0)}"
                                                      if view.get("unhealthy") else ""))
    counts = t.get("inference") or {}
    pools = [f"{p['name']} {p.get('ready', 0)}/{p.get('desired', 0)}" + (f" (count {counts[p['name']]})" if p["name"] in counts else "")
             for p in i.get("pools") or []]
    if pools:
        lines.append(("Inference pools (ready/desired): " + ", ".join(pools))[:total])
    shown = [f"{k}={v}" for k, v in view.get("conditions", {}).items() if k == "Ready" or v.startswith("True")]
    if shown:
        lines.append(("Conditions: " + ", ".join(shown))[:total])
    rows = []
    for r in view["nodes"]:
        phase = r["phase"] if not r["to"] else f"{r['phase']}>{_short(r['to'])}"
        marks = "".join(m for m, on in (("P", r["pin"]), ("M", r["moveNow"]), ("C", r["cordoned"]), ("U", r.get("unhealthy"))) if on)
        extra = [r["since"] or "-", r["moveId"] or "-"] if wide else []
        rows.append([r["node"], _short(r["side"]), phase, r["age"], sinfo_state(r["slurmState"]), marks or "-", *extra, ""])
    headers = ["NODE", "SIDE", "PHASE", "AGE", "SLURM", "FLAGS", *(["SINCE", "MOVE"] if wide else []), "WORKLOAD"]
    fixed = table(headers, rows, total)
    # Fill the last column (jobs or pods) with what room is left on each line.
    header_line = fixed.splitlines()[0]
    start = header_line.index("WORKLOAD")
    room = max(12, total - start)
    out = [header_line]
    for line, r in zip(fixed.splitlines()[1:], view["nodes"]):
        work = ("jobs " + clip(r["jobs"], room - 5)) if r["jobs"] else ("pods " + clip(r["pods"], room - 5)) if r["pods"] else "-"
        out.append((line.ljust(start) + work)[:total])
    lines.append("")
    lines.extend(out)
    free = [f"  {r['node']}: " + (f"free at {r['freeAt']}" if r["freeAt"] and r["freeAt"] != view.get("now") else
                                   "free now" if r["freeAt"] else "a job has no time limit: drain.onTimeout decides")
            for r in view["nodes"] if "freeAt" in r]
    if free:
        lines.append("Draining out of Slurm, free by their jobs' time limits:")
        lines.extend(free)
    sick = [f"  {r['node']}: {r['unhealthy']}" for r in view["nodes"] if r.get("unhealthy")]
    if sick:
        lines.append("Unhealthy (never moved, never counted as ready):")
        lines.extend(sick)
    lines.append("FLAGS: P pinned, M move-now asked, C cordoned, U unhealthy. AGE: time in the phase.")
    return "\n".join(line[:total] for line in lines)


_SINFO = {"IDLE": "idle", "ALLOCATED": "alloc", "MIXED": "mix", "DOWN": "down", "UNKNOWN": "unk", "FUTURE": "futr"}


def sinfo_state(state: str | None) -> str:
    """Slurm's state as sinfo abbreviates it: idle, mix, alloc, drain, drng (draining), '*' not responding."""
    if not state:
        return "-"
    base, *flags = state.split("+")
    text = _SINFO.get(base, base.lower()[:5])
    if "DRAIN" in flags:
        text = "drng" if base in ("ALLOCATED", "MIXED") or "COMPLETING" in flags else "drain"
    elif "COMPLETING" in flags:
        text = "comp"
    return text + ("*" if "NOT_RESPONDING" in flags else "")


def _short(placement: str) -> str:
    pool = pool_of(placement) if placement else None
    return f"inf:{pool}" if pool is not None else placement or "-"


def render_plan(view: dict[str, Any], total: int = 100) -> str:
    before, desired = view["before"], view["desired"]
    count = f"at {view['at']}: {view['slurmNodes']}" if view.get("at") else f"at {view['slurmNodes']}"
    lines = [f"Plan for {view['namespace']}/{view['pool']} {count} Slurm node(s) (dry run: nothing changes)"]
    lines.append("  now:     " + ", ".join(f"{k} {v}" for k, v in before.items()))
    lines.append("  desired: " + ", ".join(f"{k} {v}" for k, v in desired.items()))
    for p in view["problems"]:
        lines.append(f"  cannot plan: {p}"[:total])
    if view.get("unhealthy"):
        lines.append(("  never moved (unhealthy, see `kubectl slurmpool status`): " + ", ".join(view["unhealthy"]))[:total])
    if view["paused"]:
        lines.append("  the pool is paused: these moves start on `kubectl slurmpool resume`")
    for m in view["inFlight"]:
        lines.append(f"  in flight: {m['node']} {m['from']} -> {m['to']} {m['cause']}"[:total])
    lines += [line[:total] for line in handover_lines(view.get("handover"), view.get("now"))]
    if not view["moves"]:
        lines.append("No move needed." if not view["problems"] else "Nothing would move.")
        return "\n".join(lines)
    lines.append(f"{len(view['moves'])} move(s) in {view['waves']} wave(s) of at most maxConcurrentMoves:")
    rows = [[str(m["wave"]), m["node"], _short(m["from"]), _short(m["to"]), m["cause"], _free(m, view.get("now")), ""] for m in view["moves"]]
    fixed = table(["WAVE", "NODE", "FROM", "TO", "CAUSE", "FREE", "DISTURBS"], rows, total)
    header = fixed.splitlines()[0]
    start = header.index("DISTURBS")
    room = max(12, total - start)
    lines.append(header)
    for line, m in zip(fixed.splitlines()[1:], view["moves"]):
        if m["jobs"]:
            work = "jobs " + clip(m["jobs"], room - 5)
        elif m["pods"]:
            work = "pods " + clip(m["pods"], room - 5)
        else:
            work = "nothing (idle)"
        lines.append((line.ljust(start) + work)[:total])
    if view["waves"] > 1:
        lines.append("Waves after the first are a forecast: they depend on how Slurm looks then.")
    return "\n".join(line[:total] for line in lines)


def handover_lines(h: dict | None, now: str | None = None) -> list[str]:
    """The planned handover ahead of the next edge: its reservation (as in `scontrol show res`),
    nodes, and the nodes whose jobs will still run at the edge."""
    if not h:
        return []
    lines = [f"  planned handover ({h.get('state')}): reservation {h.get('reservation')} ({','.join(h.get('flags') or [])}) "
             f"from {h.get('start')} until {h.get('end') or '?'} on {', '.join(h.get('nodes') or [])}"]
    if h.get("forecast"):
        lines.append("    free by their jobs' time limits: " + ", ".join(
            f"{n} {'no limit' if t is None else 'now' if t == now else t}" for n, t in h["forecast"].items()))
    if h.get("late"):
        lines.append(f"    jobs on {', '.join(h['late'])} have no time limit or end after the edge: drain.onTimeout decides")
    if h.get("message"):
        lines.append(f"    {h['message']}")
    return lines


def _free(move: dict, now: str | None) -> str:
    """When the node is free by its jobs' time limits: now, a time, or `no limit`."""
    if "freeAt" not in move:
        return "-"
    if move["freeAt"] is None:
        return "no limit"
    return "now" if move["freeAt"] == now else move["freeAt"]


# ---------------------------------------------------------------- pure: shell completion

COMMANDS = ("status", "plan", "move", "pause", "resume")
FLAGS = {
    "status": ("--namespace", "--output", "--watch", "--interval"),
    "plan": ("--namespace", "--output", "--slurm-nodes", "--at"),
    "move": ("--to", "--output"),
    "pause": ("--namespace", "--output"),
    "resume": ("--namespace", "--output"),
}
VALUE_FLAGS = ("-n", "--namespace", "-o", "--output", "--to", "--slurm-nodes", "--at", "--interval", "--kubeconfig", "--context")
NO_FILES = ":4"  # cobra's ShellCompDirectiveNoFileComp, what kubectl reads from the last line


def complete(words: list[str], pools: Callable[[str | None], list[str]], nodes: Callable[[], list[str]]) -> list[str]:
    """Candidates for the last of `words` (the plugin's arguments as typed, the last one partial).
    `pools(namespace)` and `nodes()` are asked only when a pool or a node name is wanted."""
    *done, word = words or [""]
    namespace = next((done[i + 1] for i, w in enumerate(done[:-1]) if w in ("-n", "--namespace")), None)
    previous = done[-1] if done else ""
    command = next((w for w in done if w in COMMANDS), None)
    if previous in ("-o", "--output"):
        found = list(OUTPUTS)
    elif previous == "--to":
        found = ["slurm", "inference", "inference:"]
    elif previous in VALUE_FLAGS:
        return []  # a namespace, a number, a file: nothing to offer
    elif command is None:
        found = ["--kubeconfig", "--context", "--version"] if word.startswith("-") else list(COMMANDS)
    elif word.startswith("-"):
        found = list(FLAGS[command])
    elif [w for i, w in enumerate(done) if not w.startswith("-") and w not in COMMANDS and (i == 0 or done[i - 1] not in VALUE_FLAGS)]:
        return []  # the pool or node is already there
    else:
        found = nodes() if command == "move" else pools(namespace)
    return [c for c in found if c.startswith(word)]


def complete_main(argv: list[str] | None = None) -> int:
    """`kubectl_complete-slurmpool ARGS... PARTIAL`: one candidate a line, then kubectl's directive."""
    words = list(sys.argv[1:] if argv is None else argv)
    api: list[Api] = []

    def option(name: str) -> str | None:  # --kubeconfig and --context, as typed before the subcommand
        return next((words[i + 1] for i, w in enumerate(words[:-2]) if w == name), None)

    kubeconfig, context = option("--kubeconfig"), option("--context")

    def client() -> Api:
        if not api:
            api.append(Api(kubeconfig, context))
        return api[0]

    try:
        found = complete(words, lambda ns: client().pool_names(ns or Api.default_namespace(kubeconfig, context)),
                         lambda: client().node_names())
    except Exception:  # noqa: BLE001 - no cluster: complete nothing rather than print a traceback
        found = []
    print("\n".join([*found, NO_FILES]))
    return 0


# ---------------------------------------------------------------- I/O: the Kubernetes API


class Ahead(Generic[T]):
    """`items`, each made in a thread while the consumer uses the one before: one waits, at most.
    The thread starts at once (the first item is made before it is asked for). An error in the
    thread is raised here; `close()`, or the consumer stopping early, stops the thread, and the
    thread closes `items` (a chain of them stops from its end)."""

    _DONE = object()

    def __init__(self, items: Iterator[T]):
        self._handoff: queue.Queue = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        threading.Thread(target=self._run, args=(items,), daemon=True, name="slurmpool-pages").start()
        self._items = self._consume()

    def __iter__(self) -> Ahead[T]:
        return self

    def __next__(self) -> T:
        return next(self._items)

    def close(self) -> None:
        self._stop.set()
        self._items.close()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._handoff.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, items: Iterator[T]) -> None:
        try:
            for item in items:
                if not self._put((item, None)):
                    return
            self._put((self._DONE, None))
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, raised there
            self._put((self._DONE, err))
        finally:
            if hasattr(items, "close"):
                items.close()

    def _consume(self) -> Iterator[T]:
        try:
            while True:
                item, err = self._handoff.get()
                if err is not None:
                    raise err
                if item is self._DONE:
                    return
                yield item
        finally:
            self._stop.set()


def ahead(items: Iterator[T]) -> Ahead[T]:
    return Ahead(items)


class CoreCalls:
    """The three CoreV1Api methods the plugin calls, under their names and with the arguments it
    passes, sent through the client's ApiClient (kubeconfig, auth, TLS; a refusal raises
    ApiException). Importing CoreV1Api builds some 250 pydantic models of Kubernetes objects:
    0.4 s and 21 MiB of a command that parses its answers itself. The on-call role is derived
    from these names (tests/test_oncall_role.py)."""

    QUERY = {"label_selector": "labelSelector", "field_selector": "fieldSelector", "limit": "limit", "_continue": "continue"}

    def __init__(self, api):
        self.api = api

    def list_node(self, **kwargs):
        return self._call("GET", "/api/v1/nodes", **kwargs)

    def list_pod_for_all_namespaces(self, **kwargs):
        return self._call("GET", "/api/v1/pods", **kwargs)

    def patch_node(self, name: str, body: dict, **kwargs):
        return self._call("PATCH", "/api/v1/nodes/{name}", path={"name": name}, body=body, **kwargs)

    def _call(self, method: str, resource: str, path: dict | None = None, body: dict | None = None, _headers: dict | None = None,
              _request_timeout=None, _preload_content: bool = True, _stream: bool = False, **query):
        """The answer as the client's methods give it: parsed, or (`_preload_content=False`)
        the response, whose `data` is the body unparsed; `_stream`: urllib3's response, its body
        not read yet (`stream()` reads it as it comes; the caller closes it)."""
        from kubernetes.client.rest import ApiException

        headers = {"Accept": "application/json", **(_headers or {})}
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json"  # what the body names changes, the rest is kept
        params = [(self.QUERY[k], v) for k, v in query.items() if v is not None]
        request = self.api.param_serialize(method, resource, path_params=path, query_params=params, header_params=headers, body=body,
                                           auth_settings=["BearerToken"])
        response = self.api.call_api(*request, _request_timeout=_request_timeout)
        if _stream and 200 <= response.status <= 299:
            return response.response
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=_error_body(response.data), data=None)
        return response if not _preload_content else json.loads(response.data)


def _error_body(data: bytes) -> str:
    """A refusal's body as JSON text, though the request asked for protobuf first."""
    from slurmpool.cli import podproto

    if podproto.is_protobuf(data):
        try:
            return podproto.status_json(data)
        except Exception:  # noqa: BLE001 - not a Status after all: its bytes, as they came
            pass
    return data.decode("utf-8", "replace")


class Api:
    def __init__(self, kubeconfig: str | None, context: str | None):
        from kubernetes import client, config

        try:
            config.load_kube_config(config_file=kubeconfig, context=context)
        except config.ConfigException:
            config.load_incluster_config()
        self.api = client.ApiClient()
        self.core = CoreCalls(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    @staticmethod
    def default_namespace(kubeconfig: str | None, context: str | None) -> str:
        from kubernetes import config

        try:
            _, active = config.list_kube_config_contexts(config_file=kubeconfig)
            if context:
                contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
                active = next((c for c in contexts if c["name"] == context), active)
            return (active or {}).get("context", {}).get("namespace") or "default"
        except Exception:  # noqa: BLE001 - no kubeconfig: in-cluster
            return "default"

    def pool(self, namespace: str, name: str) -> dict:
        answer = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, _preload_content=False)
        return json.loads(answer.data)

    PAGE = 500  # Nodes per request: a page of bodies is held at a time
    POD_PAGE = 2000  # pods per request or batch, in protobuf (about 1.3 kB each)
    PODS_BY_NODE_UP_TO = 64  # nodes; a larger pool reads the cluster's pods not ended in one answer (fewer round trips)
    RUNNING = "status.phase!=Succeeded,status.phase!=Failed"

    def _pages(self, list_call: Callable, limit: int, read: Callable[[bytes], tuple[T, str | None]] | None = None,
               head: Callable[[bytes], str | None] = list_continue, **kwargs) -> Ahead[T]:
        """Every page of a list, each parsed once (no client models): by `read`, to what the page
        is reduced and its `continue` (a JSON page, whole, by default), a parsed page let go before
        the next one comes. Two threads: one asks for the next page as soon as this one has come
        (its `continue` read from its head by `head`), one parses: the apiserver prepares a page
        while the one before is parsed and the one before that is used."""
        read = read or _json_page

        def answers() -> Iterator[tuple[bytes | tuple, str | None]]:
            token = None
            while True:
                data = list_call(limit=limit, _continue=token, _preload_content=False, _request_timeout=(30, 120), **kwargs).data
                try:
                    token = head(data)
                    yield data, token
                except ValueError:  # not written as expected: parsed here, before the next page is asked for
                    page = read(data)
                    token = page[1]
                    yield page, token
                if not token:
                    return

        def parsed(answers: Ahead[tuple[bytes | tuple, str | None]]) -> Iterator[T]:
            try:
                for data, token in answers:
                    page, parsed_token = data if isinstance(data, tuple) else read(data)
                    if parsed_token != token:
                        raise ValueError("the list's continue token read from its head is not the one parsed")
                    yield page
            finally:
                answers.close()

        return ahead(parsed(ahead(answers())))

    def _items(self, list_call: Callable, **kwargs) -> Iterator[dict]:
        for items in self._pages(list_call, self.PAGE, **kwargs):
            yield from items

    def nodes(self, label_selector: str) -> Iterator[dict]:
        return self._items(self.core.list_node, label_selector=label_selector)

    # What of each pod is read: its key and node (`status`), its view (`plan`), or its view with
    # what it needs of a node (`plan`, for a move between inference pools).
    KEYS, VIEWS, WHOLE = "keys", "views", "whole"
    _cluster_pods: tuple[str, Ahead[list]] | None = None

    def start_pods(self, read: str = VIEWS) -> None:
        """Start reading the cluster's pods not ended now, while the pool's Nodes are read (the
        apiserver is asked for both at once). `pods_on` keeps those on a large pool's nodes; for a
        small pool it drops this read, of which a batch may have been read (the cost of not waiting
        for the Nodes on a large cluster), and asks node by node."""
        self._cluster_pods = (read, self._cluster_pods_read(read))

    def pods_on(self, node_names: set[str], read: str = VIEWS) -> Iterator:
        """The pods not ended on these nodes only: PodViews, or with KEYS (node, "namespace/name")
        of each but our slurmd pods."""
        started, self._cluster_pods = self._cluster_pods, None
        pages = started[1] if started and started[0] == read else None
        if started and pages is None:
            started[1].close()
        if len(node_names) <= self.PODS_BY_NODE_UP_TO:
            if pages:
                pages.close()

            def on(name: str) -> list:
                return self._pods_of_node(name, read)

            with ThreadPoolExecutor(8) as threads:
                for items in threads.map(on, sorted(node_names)):
                    yield from items
            return
        pages = pages or self._cluster_pods_read(read)
        try:
            if read == self.KEYS:
                for pods in pages:
                    yield from (pod for pod in pods if pod[0] in node_names)
            else:
                for pods in pages:
                    yield from (pod for pod in pods if pod.node in node_names)
        finally:
            pages.close()

    def whole_pods_on(self, node_name: str) -> list[PodView]:
        """The pods not ended on one node, whole (what each needs of a node): `plan`, for a move
        between inference pools."""
        return self._pods_of_node(node_name, self.WHOLE)

    def _pods_of_node(self, node_name: str, read: str) -> list:
        return [pod for pods in self._pod_pages(f"spec.nodeName={node_name},{self.RUNNING}", read) for pod in pods]

    def _cluster_pods_read(self, read: str) -> Ahead[list]:
        """The cluster's pods not ended, in batches: one request, read as it comes (podproto.
        stream_pages). Not in pages: the watch cache serves a whole list, where a page after the
        first was read from etcd again as often as not (the apiserver's CPU for 50,000 pods:
        0.9-1.0 s whole, 2.0-3.5 s in pages of 2,000, with etcd's 0.5 s beside). WHOLE, or a
        server that does not answer in protobuf: in pages of JSON."""
        from slurmpool.cli import podproto

        if read == self.WHOLE:
            return self._pod_pages(self.RUNNING, read)
        convert = podproto.pod_keys if read == self.KEYS else podproto.pod_views

        def batches() -> Iterator[list]:
            answer = self.core.list_pod_for_all_namespaces(field_selector=self.RUNNING, _stream=True, _request_timeout=(30, 300),
                                                           _headers={"Accept": podproto.ACCEPT})
            if not (answer.headers.get("Content-Type") or "").startswith(podproto.PROTOBUF):
                answer.close()
                pages = self._pod_pages(self.RUNNING, read)
                try:
                    yield from pages
                finally:
                    pages.close()
                return
            # Blocks of 1 MiB (urllib3's stream() would hand over each 2 kB chunk of the answer).
            blocks = ahead(iter(lambda: answer.read(1 << 20), b""))
            try:
                yield from podproto.stream_pages(blocks, self.POD_PAGE, lambda raw: convert(podproto.PodList.FromString(raw)))
            finally:
                blocks.close()
                answer.close()

        return ahead(batches())

    def _pod_pages(self, field_selector: str, read: str) -> Ahead[list]:
        """Pages of pods. WHOLE: from JSON, whole (what each needs of a node); else in protobuf
        (podproto.py: the apiserver writes it in a quarter of the time JSON takes), or from JSON
        where the server answers that instead."""
        from slurmpool.cli import podproto

        if read == self.WHOLE:
            return self._pages(self.core.list_pod_for_all_namespaces, self.PAGE, read=_json_pods, field_selector=field_selector)
        return self._pages(self.core.list_pod_for_all_namespaces, self.POD_PAGE, read=_pod_keys if read == self.KEYS else _pod_page,
                           head=_pod_page_head, field_selector=field_selector, _headers={"Accept": podproto.ACCEPT})

    def pool_names(self, namespace: str) -> list[str]:
        answer = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _preload_content=False)
        return sorted(item["metadata"]["name"] for item in json.loads(answer.data).get("items") or ())

    def node_names(self) -> list[str]:
        return sorted(item["metadata"]["name"] for item in self._items(self.core.list_node))

    def patch_pool(self, namespace: str, name: str, patch: dict) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch)

    def patch_node(self, name: str, patch: dict) -> dict:
        return self.core.patch_node(name, patch)


def _load(api: Api, namespace: str, name: str, whole_pods: bool = False) -> tuple[dict, SlurmNodePoolSpec, list[NodeView]]:
    """The pool, its nodes and the pods on them (plan). `whole_pods`: with what each needs of a node."""
    gc.disable()  # tens of thousands of objects, none in a cycle: the collector would scan them again and again
    try:
        pool, spec, nodes, pods = _pool_nodes_pods(api, namespace, name, Api.WHOLE if whole_pods else Api.VIEWS)
        return pool, spec, with_pods(nodes, pods, in_place=True)  # pool_node_views made them: no one else holds them
    finally:
        gc.enable()


def _load_status(api: Api, namespace: str, name: str) -> tuple[dict, list[NodeView], dict[str, list[str]]]:
    """The pool, its nodes, and node -> the keys of the pods not ended on it but our slurmd pods:
    what `status` shows of pods (no PodView is made: 0.2 s of 50,000)."""
    gc.disable()
    try:
        pool, _, nodes, pods = _pool_nodes_pods(api, namespace, name, Api.KEYS)
        keys: dict[str, list[str]] = {n.name: [] for n in nodes}
        for node, key in pods:
            keys[node].append(key)
        return pool, nodes, keys
    finally:
        gc.enable()


def _pool_nodes_pods(api: Api, namespace: str, name: str, read: str) -> tuple[dict, SlurmNodePoolSpec, list[NodeView], Iterator]:
    pool = api.pool(namespace, name)
    spec = SlurmNodePoolSpec.model_validate(pool.get("spec") or {})
    api.start_pods(read)  # while the Nodes are read
    nodes = pool_node_views(spec, api.nodes(label_selector_query(spec.node_selector)))
    return pool, spec, nodes, api.pods_on({n.name for n in nodes}, read)


def _emit(data: Any, text: str, output: str, watching: bool = False) -> None:
    if output == "json":
        print(json.dumps(data, indent=None if watching else 2, sort_keys=True, default=str))
    elif output == "yaml":
        import yaml

        print(("---\n" if watching else "") + yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=True).rstrip())
    else:
        print(text)
    sys.stdout.flush()


def watch_status(api: Api, namespace: str, name: str, output: str, interval: float, total: int) -> None:
    """Status again every `interval` seconds until interrupted: on a terminal the table is redrawn
    in place; otherwise one document per round (JSON lines, YAML documents, tables apart)."""
    redraw = output in ("table", "wide") and sys.stdout.isatty()
    while True:
        started = time.monotonic()
        pool, nodes, pod_keys = _load_status(api, namespace, name)
        view = status_view(pool, nodes, datetime.now(timezone.utc), pod_keys)
        text = render_status(view, total, wide=output == "wide")
        if redraw:
            text = "\033[H\033[2J" + text
        elif output in ("table", "wide"):
            text += "\n"
        _emit(view, text, output, watching=True)
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


class _Version(argparse.Action):
    """--version, read only when asked for (importlib.metadata: 40 ms of every other command)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from slurmpool import __version__

        print(f"kubectl-slurmpool {__version__}")
        parser.exit()


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(prog="kubectl slurmpool", description="On-call tools for SlurmNodePools.")
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", default=None)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", default=None)
    common.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("status", parents=[common], help="every node of a pool: side, phase, time in phase, jobs or pods")
    p.add_argument("pool")
    p.add_argument("-w", "--watch", action="store_true", help="show it again every --interval seconds until interrupted")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between rounds of --watch (default 2)")
    p = sub.add_parser("plan", parents=[common], help="dry run: which nodes would move and which jobs and pods they disturb")
    p.add_argument("pool")
    p.add_argument("--slurm-nodes", type=int, default=None, help="plan for this Slurm count (default: the current target)")
    p.add_argument("--at", default=None, metavar="TIME",
                   help="plan as at TIME (RFC 3339, e.g. 2026-12-24T18:00:00Z, or +2h): the schedule's count then and the "
                        "planned handover an edge then gets")
    p = sub.add_parser("move", parents=[common], help="ask the operator to move one node now (slurmpool.io/move-now)")
    p.add_argument("node")
    p.add_argument("--to", required=True, help="slurm, inference or inference:POOL")
    for verb in ("pause", "resume"):
        p = sub.add_parser(verb, parents=[common], help=f"{verb} a pool (spec.paused)")
        p.add_argument("pool")
    args = parser.parse_args(argv)
    at = None
    if args.command == "plan" and args.at is not None:
        try:
            at = parse_at(args.at, datetime.now(timezone.utc))
        except ValueError as err:
            parser.error(str(err))
    if args.command == "move" and not names_a_side(args.to):
        parser.error("--to must be slurm, inference or inference:POOL")

    try:
        api = Api(args.kubeconfig, args.context)
        namespace = args.namespace or Api.default_namespace(args.kubeconfig, args.context)
        now = datetime.now(timezone.utc)
        if args.command == "status" and args.watch:
            # Ctrl-C ends it even where SIGINT came ignored (a child of a background shell job: CI).
            signal.signal(signal.SIGINT, signal.default_int_handler)
            watch_status(api, namespace, args.pool, args.output, max(0.5, args.interval), width())
        elif args.command == "status":
            pool, nodes, pod_keys = _load_status(api, namespace, args.pool)
            view = status_view(pool, nodes, now, pod_keys)
            _emit(view, render_status(view, width(), wide=args.output == "wide"), args.output)
        elif args.command == "plan":
            pool, spec, nodes = _load(api, namespace, args.pool)
            view = plan_view(spec, pool, nodes, now, Asked(args.slurm_nodes, at), pods_of=api.whole_pods_on)
            _emit(view, render_plan(view, 10**6 if args.output == "wide" else width()), args.output)
        elif args.command == "move":
            body = api.patch_node(args.node, {"metadata": {"annotations": {ANN_MOVE_NOW: args.to}}})
            owner = (body.get("metadata", {}).get("annotations") or {}).get("slurmpool.io/pool")
            note = f"; pool {owner} will move it" if owner else "; no SlurmNodePool has adopted this node yet"
            _emit({"node": args.node, "moveNow": args.to, "pool": owner},
                  f"node/{args.node} annotated {ANN_MOVE_NOW}={args.to}{note} (the split is kept: another node moves the other way)",
                  args.output)
        else:
            paused = args.command == "pause"
            api.patch_pool(namespace, args.pool, {"spec": {"paused": paused}})
            _emit({"pool": args.pool, "namespace": namespace, "paused": paused},
                  f"slurmnodepool {namespace}/{args.pool} {'paused: no new moves start; moves in flight finish' if paused else 'resumed'}",
                  args.output)
    except KeyboardInterrupt:  # the end of --watch: at once, not after the reads still in flight end
        try:
            sys.stdout.flush()
        finally:
            os._exit(0)
    except BrokenPipeError:  # `| head`: the reader took what it wanted; no error for that
        return _done(0, argv)
    except Exception as err:  # noqa: BLE001 - one clear line for the on-call, not a traceback
        from kubernetes.client.rest import ApiException

        if isinstance(err, ApiException):
            try:
                message = json.loads(err.body or "{}").get("message") or err.reason
            except ValueError:
                message = err.reason
            print(f"error: {message}", file=sys.stderr)
        else:
            print(f"error: {err}", file=sys.stderr)
        if os.environ.get("SLURMPOOL_DEBUG"):
            raise
        return _done(1, argv)
    return _done(0, argv)


def _done(code: int, argv: list[str] | None) -> int:
    """Run as the command (`argv` None), it ends here, without the interpreter's teardown: freeing
    the views of a large pool one by one (0.1-0.2 s of 5,000 Nodes and 50,000 pods) for nothing."""
    if argv is None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:  # a reader gone (`| head`): what it did not take is lost either way
                pass
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
