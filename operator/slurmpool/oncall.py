"""The glue of schedules, demand and the on-call tools inside the reconcile loop (kopf-free).

Per pool and pass, handlers.py calls:
- `decide(...)` before reconcile_pool: the target Slurm count and its source (target.py),
  with Events for every automatic change;
- `publish(...)` after it: each node's Slurm state and jobs as the annotation
  `slurmpool.io/slurm` (so `kubectl slurmpool` needs no Slurm access), and the removal of
  fulfilled `slurmpool.io/move-now` requests.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time

from .demand import PendingPod, signals
from .fit import needs_of
from .models import SlurmNodePoolSpec, SlurmNodePoolStatus
from .planner import desired_split, move_now_done, move_now_target
from .planner import current_placement as _here
from .reconcile import PoolRef, node_object, pool_object
from .status import iso
from .target import Decision, decide_target
from .view import ANN_MOVE_NOW, ANN_SLURM, NodeView, SlurmView

log = logging.getLogger("slurmpool.oncall")
MAX_JOBS_PUBLISHED = 32
GPU = "nvidia.com/gpu"


# ---------------------------------------------------------------- the pending-GPU-pod index (compact)


def _gpus(resources: dict | None) -> int:
    resources = resources or {}
    for part in ("limits", "requests"):
        value = (resources.get(part) or {}).get(GPU)
        if value is not None:
            try:
                return int(math.ceil(float(str(value))))
            except ValueError:
                return 0
    return 0


def pod_gpus(spec: dict) -> int:
    """nvidia.com/gpu a pod asks for: the sum over containers, or the largest init container."""
    main = sum(_gpus(c.get("resources")) for c in spec.get("containers") or [])
    init = max([_gpus(c.get("resources")) for c in spec.get("initContainers") or []] or [0])
    return max(main, init)


def is_pending_gpu_pod(spec: dict, status: dict) -> bool:
    """No node, Pending, PodScheduled=False/Unschedulable, and asks for GPUs."""
    if spec.get("nodeName") or (status or {}).get("phase", "Pending") != "Pending":
        return False
    unschedulable = any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (status or {}).get("conditions") or []
    )
    return unschedulable and pod_gpus(spec) > 0


def pending_pod(body: dict) -> PendingPod:
    meta, spec = body.get("metadata", {}), body.get("spec", {}) or {}
    needs = needs_of(spec)
    return PendingPod(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        gpus=pod_gpus(spec),
        node_selector=needs.node_selector,
        tolerations=needs.tolerations,
        affinity=needs.affinity,
    )


# ---------------------------------------------------------------- before the reconcile: the target


async def decide(kube, pool: PoolRef, spec: SlurmNodePoolSpec, raw: dict, nodes: list[NodeView], slurm: SlurmView,
                 previous: SlurmNodePoolStatus | None, now, pending_index) -> Decision:
    sig = None
    if spec.demand is not None and spec.demand.enabled and slurm.available:
        pods = [p for store in (pending_index or {}).values() for p in store] if pending_index is not None else []
        sig = signals(spec, nodes, slurm, pods)
    decision = decide_target(spec, len(nodes), now, previous.target if previous else None, raw.get("author"), sig)
    for type_, reason, message in decision.events:
        log.info("%s: %s: %s", pool.key, reason, message)
        await kube.event(pool_object(pool), type_, reason, message)
    return decision


# ---------------------------------------------------------------- after the reconcile: publish and tidy


def slurm_annotation(name: str, slurm: SlurmView) -> str | None:
    """Compact JSON of what Slurm says of the node: state (with flags), drain reason, jobs."""
    sn = slurm.nodes.get(name)
    jobs = slurm.jobs_on(name)
    if sn is None and not jobs:
        return None
    body = {
        "state": (sn.state + "".join("+" + f for f in sorted(sn.flags))) if sn else "UNKNOWN",
        "reason": (sn.reason or "") if sn else "",
        "jobs": [
            {"id": j.job_id, "user": j.user, "name": j.name[:40], "state": j.state, "end": iso(j.end_time) if j.end_time else None}
            for j in sorted(jobs, key=lambda j: j.job_id)[:MAX_JOBS_PUBLISHED]
        ],
    }
    if len(jobs) > MAX_JOBS_PUBLISHED:
        body["more"] = len(jobs) - MAX_JOBS_PUBLISHED
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


async def _publish_one(kube, name: str, value: str, written: dict) -> None:
    try:
        await kube.patch_node(name, {"metadata": {"annotations": {ANN_SLURM: value}}})
        written[name] = (value, time.monotonic())
    except Exception as err:  # noqa: BLE001 - best effort: retried next pass
        log.warning("could not publish Slurm state of %s: %s", name, err)


async def publish(kube, pool: PoolRef, spec: SlurmNodePoolSpec, nodes: list[NodeView], slurm: SlurmView,
                  target: Decision, written: dict[str, tuple[str, float]]) -> None:
    """`written` remembers what this process last wrote per node, and when (the index may lag)."""
    if slurm.available:
        changed = []
        for node in nodes:
            value = slurm_annotation(node.name, slurm)
            if value is None or value == node.annotations.get(ANN_SLURM):
                continue
            last = written.get(node.name)
            if last and last[0] == value and time.monotonic() - last[1] < 10:
                continue  # written already; the watch has not brought it back yet
            changed.append((node.name, value))
        # Concurrently: when Slurm changes under many nodes at once, one by one took seconds.
        await asyncio.gather(*(_publish_one(kube, name, value, written) for name, value in changed))
    done = move_now_done(spec, nodes, target.slurm_nodes, target.pool_counts)
    if not done:
        return
    desired, _ = desired_split(spec, len(nodes), target.slurm_nodes, target.pool_counts)
    count: dict[str, int] = {}
    for n in nodes:
        count[_here(n)] = count.get(_here(n), 0) + 1
    for node in nodes:
        if node.name not in done:
            continue
        want = move_now_target(node, spec, desired, count)
        if want is None:
            type_, reason, msg = "Warning", "MoveNowIgnored", f"{node.name}: move-now={node.move_now!r} names no placement of this pool"
        elif node.pin is not None and node.pin != want:
            type_, reason, msg = "Warning", "MoveNowIgnored", f"{node.name}: move-now={node.move_now!r} conflicts with pin={node.pin!r}; the pin wins"
        else:
            type_, reason, msg = "Normal", "MoveNowDone", f"{node.name} serves {want} as asked; the split is whole again"
        try:
            await kube.patch_node(node.name, {"metadata": {"annotations": {ANN_MOVE_NOW: None}}})
        except Exception as err:  # noqa: BLE001
            log.warning("could not clear move-now on %s: %s", node.name, err)
            continue
        await kube.event(pool_object(pool), type_, reason, msg)
        await kube.event(node_object(node.name), type_, reason, msg)
