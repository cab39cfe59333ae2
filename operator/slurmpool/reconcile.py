"""One reconcile of one pool: observe, advance moves in flight, start new ones, report.

This is the imperative shell around the pure core (planner, moves, status). It talks to
Kubernetes and Slurm only through the two small interfaces below, so the same code runs
against the real adapters, and against recording fakes in the handler tests and benchmark.
Slurm actions are batched across the pool: one scontrol per kind of update per reconcile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import uuid
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Protocol

from slurmbridge import SlurmBackend, SlurmError

from . import metrics
from .models import SlurmNodePoolSpec, SlurmNodePoolStatus
from .moves import (
    Cancel,
    CreateSlurmdPod,
    DeleteSlurmdPod,
    Drain,
    Evict,
    PatchNode,
    Requeue,
    Resume,
    Step,
    advance,
    between_pools,
    first_phase,
    ours,
    restore_cordon,
    reverse,
)
from .planner import plan
from .status import Observed, build_status, iso
from .view import ANN_HOLD_UNTIL, ANN_MOVE, ANN_PLACEMENT, ANN_POOL, ANN_SETTLED, NONE, SLURM, MoveRecord, NodeView, PodView, SlurmView

log = logging.getLogger("slurmpool.reconcile")


@dataclass(frozen=True)
class PoolRef:
    namespace: str
    name: str
    uid: str = ""
    generation: int | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Kube(Protocol):
    async def patch_node(self, name: str, patch: dict) -> None: ...
    async def create_slurmd_pod(self, pool: PoolRef, spec: SlurmNodePoolSpec, node: str) -> None: ...
    async def delete_pod(self, namespace: str, name: str, uid: str) -> None: ...
    async def evict(self, namespace: str, name: str) -> str | None:
        """Ask the Eviction API; return why it was refused (a PDB), or None."""

    async def event(self, obj: dict, type_: str, reason: str, message: str) -> None: ...


async def observe_slurm(backend: SlurmBackend) -> SlurmView:
    """One `scontrol show node` and one `squeue` for the whole pool, side by side (each is a
    round trip over SSH). Fails closed."""
    nodes, jobs = await asyncio.gather(backend.nodes(), backend.jobs(), return_exceptions=True)
    for result in (nodes, jobs):
        if isinstance(result, SlurmError):
            return SlurmView(available=False, error=str(result)[:500])
        if isinstance(result, BaseException):
            raise result
    return SlurmView(available=True, nodes=nodes, jobs=tuple(jobs))


def pool_object(pool: PoolRef) -> dict:
    return {
        "apiVersion": "slurmpool.io/v1alpha1",
        "kind": "SlurmNodePool",
        "metadata": {"namespace": pool.namespace, "name": pool.name, "uid": pool.uid},
    }


def node_object(name: str) -> dict:
    # kubectl describe node finds events by name (and uid == name, as the kubelet posts them).
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": name}}


async def reconcile_pool(
    pool: PoolRef,
    spec: SlurmNodePoolSpec,
    nodes: list[NodeView],
    overlaps: list[str],
    slurm: SlurmView,
    kube: Kube,
    backend: SlurmBackend,
    now: datetime,
    previous: SlurmNodePoolStatus | None,
    target_slurm: int | None = None,
    pool_counts: dict[str, int] | None = None,
    orphans: list[PodView] = (),
) -> SlurmNodePoolStatus:
    """`orphans`: this pool's slurmd pods bound to a node that is no Node any more."""
    seen = Observed(desired={}, overlaps=overlaps, slurm_error=None if slurm.available else (slurm.error or "unavailable"))
    by_name = {n.name: n for n in nodes}
    steps: dict[str, Step] = {}
    for node in nodes:
        move = node.move
        if move is not None:
            steps[node.name] = advance(move, node, slurm, spec, now)
        elif node.placement == SLURM:
            repair = Step(move=None, actions=_repair_slurm_node(node, slurm))
            restore_cordon(node, spec, repair, "while settled in Slurm")
            if repair.actions:
                steps[node.name] = repair
    await _gone(pool, nodes, orphans, previous, slurm, kube, seen)

    # Plan on the nodes as the steps leave them, so finished moves free budget at once.
    for name, step in steps.items():
        by_name[name] = _after(by_name[name], step)
    result = plan(spec, list(by_name.values()), slurm, now, target_slurm, pool_counts)
    seen.desired, seen.problems = result.desired, result.problems
    for name in result.aborts:
        node = by_name[name]
        back = reverse(node.move, spec, now, cause="abort")
        step = advance(back, node, slurm, spec, now)
        step.events.insert(0, ("Normal", "MoveAborted", f"{name}: the split no longer wants move {node.move.id}; returning to {back.target}"))
        steps[name] = step
        by_name[name] = _after(node, step)
    for start in result.starts:
        node = by_name[start.node]
        move = MoveRecord(
            id=uuid.uuid4().hex[:8],
            source=start.source,
            target=start.target,
            phase=first_phase(start.target, start.source),
            since=now,
            started=now,
            cause=start.cause,
        )
        step = advance(move, node, slurm, spec, now)
        step.entered.insert(0, move.phase)
        step.events.insert(0, ("Normal", "MoveStarted", f"{node.name}: {start.source} -> {start.target} ({start.cause}, move {move.id})"))
        steps[node.name] = step
        by_name[node.name] = _after(node, step)
        metrics.MOVES_STARTED.labels(direction=_direction(start.source, start.target), cause=start.cause).inc()

    await _execute(pool, spec, nodes, steps, kube, backend, seen)
    for name, step in steps.items():
        if step.blocked_by or step.message:
            seen.blocked[name] = (step.blocked_by, step.message)
    return build_status(pool.name, spec, pool.generation, list(by_name.values()), seen, previous.conditions if previous else [], now)


async def _gone(pool, nodes, orphans, previous, slurm: SlurmView, kube: Kube, seen: Observed) -> None:
    """Nodes deleted from Kubernetes. Their move record went with the Node, so a node that had a
    move in flight last pass is reported once (its Slurm side stays as the move left it; if it
    registers again it is a new, unadopted node and is adopted like any other). Its slurmd pod
    is deleted only once Slurm shows it serves nothing (drained, no jobs); until then, or while
    Slurm cannot be seen, it stays and the pool is Degraded (NodeMissing)."""
    names = {n.name for n in nodes}
    for m in previous.moves if previous else ():
        if m.node not in names:
            await kube.event(pool_object(pool), "Warning", "NodeDeleted",
                             f"{m.node} was deleted from Kubernetes during move {m.move_id} ({m.phase}, {m.from_} -> {m.to}); "
                             "its move record went with it; it is adopted again if it registers")
    for pod in orphans:
        node = pod.node
        sn = slurm.nodes.get(node) if slurm.available else None
        idle = slurm.available and (sn is None or (sn.drain_set and not sn.busy and not slurm.jobs_on(node)))
        if idle and not pod.deleting:
            await kube.event(pool_object(pool), "Normal", "OrphanSlurmdDeleted",
                             f"deleting slurmd pod {pod.key}: its node {node} is gone from Kubernetes and serves nothing in Slurm")
            await _guard(seen, f"delete pod {pod.key}", kube.delete_pod(pod.namespace, pod.name, pod.uid))
        elif not idle:
            why = "Slurm cannot be seen" if not slurm.available else "Slurm still uses it (not drained, or jobs on it)"
            seen.missing.append(f"{node} (slurmd pod {pod.key} kept: {why})")


def _repair_slurm_node(node: NodeView, slurm: SlurmView) -> list:
    """Level-triggered upkeep of a settled Slurm node: its slurmd pod runs, and no drain
    of ours outlives the move that set it (a crash between the two writes)."""
    actions: list = []
    if node.slurmd_pod is None:
        actions.append(CreateSlurmdPod(node.name))
    sn = slurm.nodes.get(node.name) if slurm.available else None
    if sn is not None and sn.drain_set and ours(sn.reason) and sn.responding:
        actions.append(Resume(node.name))
    return actions


def _direction(source: str, target: str) -> str:
    if between_pools(source, target):
        return "between_pools"
    return "to_slurm" if target == SLURM else "to_inference"


def _after(node: NodeView, step: Step) -> NodeView:
    """The node's view once the step's annotations are written (labels follow next round)."""
    annotations = dict(node.annotations)
    annotations[ANN_MOVE] = step.move.to_annotation() if step.move else ""
    if step.settled:
        annotations[ANN_PLACEMENT] = step.settled
    if step.hold_until:
        annotations[ANN_HOLD_UNTIL] = iso(step.hold_until)
    return replace(node, annotations={k: v for k, v in annotations.items() if v})


async def _execute(pool, spec, before: list[NodeView], steps: dict[str, Step], kube: Kube, backend, seen: Observed) -> None:
    old = {n.name: n for n in before}
    drains: dict[str, list[str]] = defaultdict(list)
    resumes: list[str] = []
    requeues: list[str] = []
    cancels: list[str] = []
    # 1. Kubernetes: one patch per node carries the move record with its shape, atomically.
    #    A node whose record could not be written takes no other step this round: nothing
    #    may happen in Slurm that the node's annotations do not explain after a crash.
    #    The patches of different nodes are independent: sent concurrently (500 nodes in one
    #    pass would otherwise queue behind each other's round trips).
    patches = {name: _node_patch(pool, old[name], step) for name, step in steps.items()}
    written = await asyncio.gather(
        *(_guard(seen, f"patch node {name}", kube.patch_node(name, patch), ok=True) for name, patch in patches.items() if patch)
    )
    failed = {name for name, ok in zip([n for n, p in patches.items() if p], written) if ok is None}
    for name, step in steps.items():
        node = old[name]
        if name in failed:
            continue
        _crash_point(patches[name], step)
        for action in step.actions:
            if isinstance(action, Drain):
                drains[action.reason].append(action.node)
            elif isinstance(action, Resume):
                resumes.append(action.node)
            elif isinstance(action, Requeue):
                requeues.extend(action.job_ids)
            elif isinstance(action, Cancel):
                cancels.extend(action.job_ids)
        for type_, reason, message in step.events:
            await kube.event(pool_object(pool), type_, reason, message)
            await kube.event(node_object(name), type_, reason, message)
        if step.settled:
            direction = _direction(node.move.source if node.move else NONE, step.settled)
            metrics.MOVES_COMPLETED.labels(direction=direction).inc()
            if node.move:
                metrics.MOVE_SECONDS.labels(direction=direction).observe(
                    max(0.0, (datetime.now(node.move.started.tzinfo) - node.move.started).total_seconds())
                )
        if any(r == "MoveRolledBack" for _, r, _ in step.events) and node.move:
            metrics.MOVES_FAILED.labels(direction=_direction(node.move.source, node.move.target), reason="rollback").inc()
    # 2. Slurm: batched, one command per kind.
    for reason, names in drains.items():
        await _guard(seen, "scontrol drain", backend.drain(sorted(set(names)), reason))
    if resumes:
        await _guard(seen, "scontrol resume", backend.resume(sorted(set(resumes))))
    if requeues:
        await _guard(seen, "scontrol requeue", backend.requeue(sorted(set(requeues))))
    if cancels:
        await _guard(seen, "scancel", backend.cancel(sorted(set(cancels))))
    # 3. Pods: after Slurm has been told, so a slurmd only starts on a node held drained.
    #    Each node's pod actions in order; nodes concurrently.
    await asyncio.gather(*(_pod_actions(pool, spec, name, step, kube, seen) for name, step in steps.items() if name not in failed))


async def _pod_actions(pool, spec, name: str, step: Step, kube: Kube, seen: Observed) -> None:
    for action in step.actions:
        if isinstance(action, CreateSlurmdPod):
            await _guard(seen, f"create slurmd pod on {name}", kube.create_slurmd_pod(pool, spec, name))
        elif isinstance(action, DeleteSlurmdPod):
            pod = action.pod
            await _guard(seen, f"delete pod {pod.key}", kube.delete_pod(pod.namespace, pod.name, pod.uid))
        elif isinstance(action, Evict):
            refused = await _guard(seen, f"evict pod {action.pod.key}", kube.evict(action.pod.namespace, action.pod.name))
            if refused:
                step.message = f"eviction of {action.pod.key} refused: {refused}"
                metrics.EVICTIONS_REFUSED.inc()


async def _guard(seen: Observed, what: str, coro, ok=None):
    """Run one action; a failure is reported (Degraded, lastError) and retried next round.
    Returns the action's result (or `ok` when it has none), None on failure."""
    try:
        result = await coro
        return ok if result is None else result
    except Exception as err:  # noqa: BLE001 - any failure of one action must not stop the others
        log.warning("%s failed: %s", what, err)
        seen.errors.append(f"{what}: {err}"[:500])
        metrics.ACTION_ERRORS.labels(action=what.split(" ")[0]).inc()
        return None


def _crash_point(patch: dict, step: Step) -> None:
    """Fault injection for the crash tests: SLURMPOOL_CRASH_AFTER_PHASE=<phase> makes the
    operator SIGKILL itself right after recording a step that entered that phase, before
    any Slurm or pod action of the step (the worst moment: record written, nothing done)."""
    phase = os.environ.get("SLURMPOOL_CRASH_AFTER_PHASE")
    if phase and phase in step.entered and ANN_MOVE in patch.get("metadata", {}).get("annotations", {}):
        log.warning("SLURMPOOL_CRASH_AFTER_PHASE=%s: killing myself", phase)
        os.kill(os.getpid(), signal.SIGKILL)


def _node_patch(pool: PoolRef, node: NodeView, step: Step) -> dict:
    annotations: dict[str, str | None] = {}
    current_move = node.annotations.get(ANN_MOVE)
    new_move = step.move.to_annotation() if step.move else None
    if _move_changed(current_move, step.move):
        annotations[ANN_MOVE] = new_move
    if step.settled and node.placement != step.settled:
        annotations[ANN_PLACEMENT] = step.settled
        annotations[ANN_SETTLED] = iso(datetime.now(timezone.utc))  # for `kubectl slurmpool status`
    if (step.move or step.settled) and node.annotations.get(ANN_POOL) != pool.key:
        annotations[ANN_POOL] = pool.key
    if step.hold_until:
        annotations[ANN_HOLD_UNTIL] = iso(step.hold_until)
    patch: dict = {}
    if annotations:
        patch["metadata"] = {"annotations": annotations}
    shapes = [a for a in step.actions if isinstance(a, PatchNode)]
    if shapes:
        shape = shapes[-1]
        patch.setdefault("metadata", {})["labels"] = shape.labels
        patch["spec"] = {"taints": list(shape.taints), "unschedulable": shape.unschedulable}
    return patch


def _move_changed(current: str | None, move: MoveRecord | None) -> bool:
    if move is None:
        return bool(current)
    old = MoveRecord.from_annotation(current)
    return old is None or old.model_dump() != move.model_dump()
