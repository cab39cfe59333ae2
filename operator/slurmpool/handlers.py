"""The kopf layer: watch indexes for Nodes, Pods and SlurmNodePools, and one reconcile loop.

Why a loop of our own instead of kopf timers: kopf puts a finalizer on every object with
a timer or daemon, so deleting a pool would hang while the operator is down. The loop is
level-triggered: every pass recomputes everything from the indexes and Slurm, so a kick
from a pool event only makes it come sooner.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import time
from dataclasses import replace
from datetime import datetime, timezone

import kopf
from pydantic import ValidationError

from slurmbridge import SlurmUnavailable

from . import metrics, oncall, poolmetrics
from .access import SlurmAccessPool
from .kube import KubeAdapter, node_view, pod_view
from .leader import LeaderElector
from .models import GROUP, PLURAL, VERSION, SlurmNodePoolSpec, SlurmNodePoolStatus
from .reconcile import PoolRef, pool_object, reconcile_pool
from .status import Observed, build_status
from .target import author
from .view import NodeView

log = logging.getLogger("slurmpool")
INTERVAL = float(os.environ.get("SLURMPOOL_INTERVAL", "1.0"))
# Pools reconciled at once in a pass. They share no node (overlaps are never acted on), and a
# pool's time is mostly waiting on the apiserver and Slurm: one after another, 20 pools made a
# pass of 14 s (e2e/load.py).
POOL_CONCURRENCY = int(os.environ.get("SLURMPOOL_POOL_CONCURRENCY", "16"))


class _NoSlurm:
    """Stands in when no backend could be built: every call fails closed."""

    async def _fail(self, *_, **__):
        raise SlurmUnavailable("no Slurm backend")

    nodes = jobs = drain = resume = requeue = cancel = ping = _fail

    async def close(self):
        return None


# ---------------------------------------------------------------- indexes (kopf keeps them from watches)


# The index functions are async only so kopf calls them on the event loop: sync handlers go
# through a thread pool shared with the API calls, and 500 nodes changing at once queued there.
@kopf.index("nodes")
async def nodes_index(body, name, **_):
    return {name: node_view(body)}


@kopf.index("pods", when=lambda spec, **_: bool(spec.get("nodeName")))
async def pods_index(body, spec, **_):
    return {spec["nodeName"]: pod_view(body)}


@kopf.index("pods", when=lambda spec, status, **_: oncall.is_pending_gpu_pod(spec, status))
async def pending_gpu_pods_index(body, **_):
    # Demand's inference signal: unschedulable pods asking for nvidia.com/gpu (compact views).
    return {"pending": oncall.pending_pod(body)}


@kopf.index(GROUP, VERSION, PLURAL)
async def pools_index(body, namespace, name, **_):
    return {
        (namespace, name): {
            "uid": body.metadata.uid,
            "generation": body.metadata.get("generation"),
            "spec": copy.deepcopy(dict(body.get("spec", {}))),
            "status": copy.deepcopy(dict(body.get("status", {}))),
            "author": author(body.get("metadata", {}).get("managedFields")),  # of spec.slurmNodes
        }
    }


@kopf.on.event(GROUP, VERSION, PLURAL)
async def pool_changed(memo: kopf.Memo, type, namespace, name, body, **_):
    # Resource handlers only run once every index is filled: from now on the loop may act.
    memo.indexed.set()
    # Wake the loop for spec changes, not for our own status writes.
    generation = body.get("metadata", {}).get("generation")
    if type == "DELETED" or memo.generations.get((namespace, name)) != generation:
        memo.generations[(namespace, name)] = generation
        memo.wake.set()


# ---------------------------------------------------------------- startup: settings and the loop


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, nodes_index, pods_index, pools_index, pending_gpu_pods_index, **_):
    # Watches can stall silently; bound them so kopf re-lists (nolar/kopf#585).
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 30
    settings.persistence.finalizer = "slurmpool.io/finalizer"
    settings.posting.level = logging.INFO
    memo.indexed = asyncio.Event()
    memo.wake = asyncio.Event()
    memo.generations = {}
    memo.kube = KubeAdapter(_api_client())
    memo.leader = LeaderElector(memo.kube.api)
    memo.access = SlurmAccessPool(memo.kube.read_secret)
    memo.pending_pods, memo.published = pending_gpu_pods_index, {}
    memo.loop_task = asyncio.create_task(run_loop(memo, nodes_index, pods_index, pools_index))


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_):
    task = memo.get("loop_task")
    if task:
        task.cancel()
    if memo.get("access"):
        await memo.access.close()


def _api_client():
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


async def run_loop(memo, nodes_index, pods_index, pools_index) -> None:
    await memo.indexed.wait()
    log.info("indexes ready; reconcile loop running every %.1fs", INTERVAL)
    while True:
        memo.wake.clear()
        try:
            # Every replica watches; only the Lease holder acts (two replicas never both move).
            if await memo.leader.ensure():
                started = time.monotonic()
                await reconcile_all(memo, nodes_index, pods_index, pools_index)
                metrics.RECONCILE_PASS_SECONDS.observe(time.monotonic() - started)
        except Exception:  # noqa: BLE001 - the loop must outlive any one bad pass
            log.exception("reconcile pass failed")
            metrics.RECONCILE_TOTAL.labels(result="error").inc()
        try:
            await asyncio.wait_for(memo.wake.wait(), timeout=INTERVAL)
        except asyncio.TimeoutError:
            pass


def _first(store):
    return next(iter(store), None)


async def reconcile_all(memo, nodes_index, pods_index, pools_index) -> None:
    pools = []
    for (namespace, name), store in list(pools_index.items()):
        raw = _first(store)
        if raw is not None:
            pools.append((namespace, name, raw))
    parsed: dict[tuple[str, str], SlurmNodePoolSpec | str] = {}
    for namespace, name, raw in pools:
        try:
            parsed[(namespace, name)] = SlurmNodePoolSpec.model_validate(raw["spec"])
        except ValidationError as err:
            parsed[(namespace, name)] = _short(err)
    # Which pools select each node, for all pools at once: overlaps are never acted on.
    all_nodes = [_first(s) for s in nodes_index.values()]
    owners: dict[str, list[tuple[str, str]]] = {}
    for node in all_nodes:
        if node is None:
            continue
        for key, spec in parsed.items():
            if isinstance(spec, SlurmNodePoolSpec) and not spec.node_selector.is_empty() and spec.node_selector.matches(node.labels):
                owners.setdefault(node.name, []).append(key)
    # Pods bound to a node that is no Node (deleted): their slurmd pods are reported and cleaned up.
    gone = [pod for node in list(pods_index) if node not in nodes_index for pod in pods_index.get(node, ()) if pod.slurmd]
    memo.access.forget_views()
    errors = memo.setdefault("reconcile_errors", {})
    limit = asyncio.Semaphore(POOL_CONCURRENCY)

    async def one(namespace, name, raw):
        async with limit:
            started = time.monotonic()
            pool = PoolRef(namespace, name, raw["uid"], raw["generation"])
            spec = parsed[(namespace, name)]
            try:
                if isinstance(spec, str):
                    await _report_invalid(memo, pool, raw, spec)
                    return
                orphans = [p for p in gone if p.pool == name and p.namespace == namespace]
                await _reconcile_one(memo, pool, spec, raw, all_nodes, owners, pods_index, orphans)
                metrics.RECONCILE_TOTAL.labels(result="ok").inc()
                errors.pop(pool.key, None)
            except Exception as err:  # noqa: BLE001
                log.exception("reconcile of %s failed", pool.key)
                metrics.RECONCILE_TOTAL.labels(result="error").inc()
                message = str(err)[:500]
                if errors.get(pool.key) != message:  # one Event per distinct failure, not one per pass
                    errors[pool.key] = message
                    await memo.kube.event(pool_object(pool), "Warning", "ReconcileError", message)
            finally:
                metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    await asyncio.gather(*(one(*p) for p in pools))


async def _reconcile_one(memo, pool: PoolRef, spec: SlurmNodePoolSpec, raw, all_nodes, owners, pods_index, orphans=()) -> None:
    key = (pool.namespace, pool.name)
    mine: list[NodeView] = []
    overlaps: list[str] = []
    for node in all_nodes:
        if node is None or key not in owners.get(node.name, ()):
            continue
        if len(owners[node.name]) > 1:
            overlaps.append(node.name)
            continue
        pods = tuple(pods_index.get(node.name, ()))
        mine.append(replace(node, pods=pods))
    # One Event per change of the overlap, not one per pass.
    seen_overlaps = memo.setdefault("overlaps", {})
    if not overlaps:
        seen_overlaps.pop(key, None)
    elif seen_overlaps.get(key) != set(overlaps):
        seen_overlaps[key] = set(overlaps)
        others = sorted({f"{ns}/{n}" for name in overlaps for ns, n in owners[name] if (ns, n) != key})
        await memo.kube.event(pool_object(pool), "Warning", "NodeOverlap", f"nodes {', '.join(sorted(overlaps)[:10])} are also selected by {', '.join(others)}")
    backend, slurm = await memo.access.observe(pool.namespace, spec.slurm.access, max_age=INTERVAL / 2, topology=spec.topology.from_slurm)
    previous = _previous_status(raw)
    now = datetime.now(timezone.utc)
    target = await oncall.decide(memo.kube, pool, spec, raw, mine, slurm, previous, now, memo.get("pending_pods"))
    status = await reconcile_pool(
        pool, spec, mine, overlaps, slurm, memo.kube, backend or _NoSlurm(), now, previous,
        target_slurm=target.slurm_nodes, pool_counts=target.pool_counts, orphans=orphans,
    )
    status.target = target.status
    await oncall.publish(memo.kube, pool, spec, mine, slurm, target, memo.setdefault("published", {}))
    _export_gauges(pool, mine)
    poolmetrics.export(pool.key, mine, status)
    await _write_status(memo, pool, raw, status)


def _previous_status(raw) -> SlurmNodePoolStatus | None:
    try:
        return SlurmNodePoolStatus.model_validate(raw.get("status") or {})
    except ValidationError:
        return None


async def _write_status(memo, pool: PoolRef, raw, status: SlurmNodePoolStatus) -> None:
    body = status.model_dump(by_alias=True, exclude_none=False, mode="json")
    if body != (raw.get("status") or {}):
        await memo.kube.patch_pool_status(pool, body)
        raw["status"] = body  # until the watch brings it back: no second write of the same status


async def _report_invalid(memo, pool: PoolRef, raw, message: str) -> None:
    previous = _previous_status(raw)
    seen = Observed(desired={}, problems=[f"invalid spec: {message}"])
    now = datetime.now(timezone.utc)
    status = build_status(pool.name, _placeholder_spec(raw), pool.generation, [], seen, previous.conditions if previous else [], now)
    status.target = previous.target if previous else None  # keeps the audit across a bad edit
    await _write_status(memo, pool, raw, status)


def _placeholder_spec(raw) -> SlurmNodePoolSpec:
    return SlurmNodePoolSpec.model_construct(paused=bool((raw.get("spec") or {}).get("paused")), inference=_NoPools())


class _NoPools:
    pools: list = []


def _short(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5])


_exported: dict[str, set[tuple[str, str]]] = {}


def _export_gauges(pool: PoolRef, nodes: list[NodeView]) -> None:
    counts: dict[tuple[str, str], int] = dict.fromkeys(_exported.get(pool.key, ()), 0)
    for node in nodes:
        move = node.move
        placement = move.target if move else node.placement
        phase = move.phase if move else "Settled"
        counts[(placement, phase)] = counts.get((placement, phase), 0) + 1
    for (placement, phase), n in counts.items():
        metrics.NODES.labels(pool=pool.key, placement=placement, phase=phase).set(n)
    _exported[pool.key] = {k for k, n in counts.items() if n}
