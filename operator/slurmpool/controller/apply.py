"""Carry out a PoolDecision: `apply(...) -> ApplyResult`. The only module of the pass that
writes; it reads the decision and never changes it.

Order, as crash safety needs it:
1. Kubernetes: one patch per node carries the move record with its shape, atomically. A
   node whose record could not be written takes no other step this pass: nothing may happen
   in Slurm that the node's annotations do not explain after a crash.
2. Slurm: batched, one command per kind of update.
3. Pods: after Slurm has been told, so a slurmd only starts on a node held drained.
Patches of different nodes, and pod actions of different nodes, go out concurrently.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections import defaultdict
from datetime import datetime, timezone

from slurmbridge import SlurmBackend

from slurmpool.adapters import metrics
from slurmpool.core.interfaces import Conflict, Kube, PoolRef, Refused, node_object, pool_object
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.moves import REFUSED, Cancel, CreateSlurmdPod, DeleteSlurmdPod, Drain, Evict, PatchNode, Requeue, Resume, Step, between_pools
from slurmpool.core.snapshot import ApplyResult, NodeEvent, PoolDecision
from slurmpool.core.view import (
    ANN_CORDON_KEPT, ANN_DRAIN, ANN_HOLD_UNTIL, ANN_MOVE, ANN_MOVE_NOW, ANN_PLACEMENT, ANN_POOL, ANN_SETTLED, ANN_SLURM, NONE, SLURM,
    SLURM_TAINT_KEY, MoveRecord, NodeView, iso, pool_of,
)

log = logging.getLogger("slurmpool.controller.apply")
PUBLISH_LAG = 10.0  # seconds: a value written this recently is not written again (the watch lags)
CONFLICT_RETRIES = 5  # a node's write whose precondition failed is rebuilt on the Node read again, this often


async def apply(
    pool: PoolRef,
    spec: SlurmNodePoolSpec,
    before: list[NodeView],
    decision: PoolDecision,
    kube: Kube,
    backend: SlurmBackend,
    published: dict[str, tuple[str, float]] | None = None,
    crash_after_phase: str | None = None,
) -> ApplyResult:
    """`published`: what this process last wrote as slurmpool.io/slurm per node, and when."""
    result = ApplyResult()
    published = {} if published is None else published
    old = {n.name: n for n in before}
    for type_, reason, message in decision.pool_events:
        await kube.event(pool_object(pool), type_, reason, message)
    for ev in decision.node_events:
        await _both(kube, pool, ev)
    for pod in decision.orphans_to_delete:
        await _guard(result, f"delete pod {pod.key}", kube.delete_pod(pod.namespace, pod.name, pod.uid))

    steps = decision.steps
    patches = {name: node_patch(pool, old[name], step) for name, step in steps.items()}
    patches = {name: p for name, p in patches.items() if p}
    folded = _fold_published(patches, decision.publish, published)
    written = await asyncio.gather(*(
        _guard(result, f"patch node {n}", _write_node(kube, old[n], steps[n], p), ok=True, node=n) for n, p in patches.items()))
    result.unwritten = {name for name, ok in zip(patches, written) if ok is None}
    now = time.monotonic()  # what a failed patch carried is left to _publish below
    published.update({name: (value, now) for name, value in folded.items() if name not in result.unwritten})
    for name, patch in patches.items():
        record = {k: v for k, v in patch.get("metadata", {}).get("annotations", {}).items() if k in (ANN_MOVE, ANN_PLACEMENT, ANN_DRAIN)}
        if record and name not in result.unwritten:
            result.records[name] = record
    result.acted = bool(patches)
    drains: dict[str, list[str]] = defaultdict(list)
    resumes, requeues, cancels = [], [], []
    for name, step in steps.items():
        if name in result.unwritten:
            continue
        _crash_point(crash_after_phase, patches.get(name, {}), step)
        for action in step.actions:
            if isinstance(action, Drain) and (target := _in_slurm(decision, action.node)):
                drains[action.reason].append(target)
            elif isinstance(action, Resume) and (target := _in_slurm(decision, action.node)):
                resumes.append(target)
            elif isinstance(action, Requeue):
                requeues.extend(action.job_ids)
            elif isinstance(action, Cancel):
                cancels.extend(action.job_ids)
        for type_, reason, message in step.events:
            await _both(kube, pool, NodeEvent(name, type_, reason, message))
        _count(old[name], step)
    for start, move in decision.starts:
        if start.node not in result.unwritten:
            metrics.MOVES_STARTED.labels(direction=direction(move.source, move.target), cause=start.cause).inc()

    for reason, names in drains.items():
        await _guard(result, "scontrol drain", backend.drain(sorted(set(names)), reason))
    if resumes:
        await _guard(result, "scontrol resume", backend.resume(sorted(set(resumes))))
    if requeues:
        await _guard(result, "scontrol requeue", backend.requeue(sorted(set(requeues))))
    if cancels:
        await _guard(result, "scancel", backend.cancel(sorted(set(cancels))))
    result.slurm_changed = bool(drains or resumes or requeues or cancels)
    result.acted |= result.slurm_changed

    await asyncio.gather(*(_pod_actions(pool, spec, name, step, kube, result, _in_slurm(decision, name))
                           for name, step in steps.items() if name not in result.unwritten))
    await _handover(pool, decision, kube, backend, result)
    await _publish(kube, decision.publish, published)
    for ev in decision.clear_move_now:
        try:
            await kube.patch_node(ev.node, {"metadata": {"annotations": {ANN_MOVE_NOW: None}}})
        except Exception as err:  # noqa: BLE001 - retried next pass
            log.warning("could not clear move-now on %s: %s", ev.node, err)
            continue
        await _both(kube, pool, ev)
    return result


async def _handover(pool: PoolRef, decision: PoolDecision, kube: Kube, backend: SlurmBackend, result: ApplyResult) -> None:
    """The planned handover's reservation: deleted (ours when no longer wanted or done, orphans of
    deleted pools), then created. After the moves' own Slurm actions, and a failure is only the
    handover's (`result.handover_error`, retried next pass): it never holds a move back."""
    plan = decision.handover
    if plan is None or not (plan.delete or plan.create or plan.events):
        return
    try:
        for name in plan.delete:
            await backend.delete_reservation(name)
        if plan.create is not None:
            nodes = [s for n in plan.create.nodes if (s := _in_slurm(decision, n)) is not None]
            await backend.create_reservation(plan.create.reservation, nodes, plan.create.start, plan.minutes, plan.create.flags)
    except Exception as err:  # noqa: BLE001 - reported on the pool, retried next pass
        log.warning("%s: reservation %s failed: %s", pool.key, plan.outcome, err)
        result.handover_error = f"{plan.outcome} reservation: {err}"[:500]
        metrics.ACTION_ERRORS.labels(action="scontrol").inc()
        if result.handover_error != plan.reported:
            await kube.event(pool_object(pool), "Warning", "HandoverFailed", f"{result.handover_error}; retried next pass, moves go on")
        return
    result.slurm_changed = result.slurm_changed or bool(plan.delete or plan.create)
    for type_, reason, message in plan.events:
        await kube.event(pool_object(pool), type_, reason, message)


# Events of a node's move that only its Node shows: a phase step is detail for `kubectl describe
# node`; the pool's own list keeps each move's start, end and every warning. (Half the Events of
# a large adoption: 500 nodes posted ~6,000, and the queue of Events overflowed.)
NODE_ONLY_REASONS = frozenset({"MovePhase"})


async def _both(kube: Kube, pool: PoolRef, ev: NodeEvent) -> None:
    if ev.reason not in NODE_ONLY_REASONS:
        await kube.event(pool_object(pool), ev.type, ev.reason, ev.message)
    await kube.event(node_object(ev.node), ev.type, ev.reason, ev.message)


def direction(source: str, target: str) -> str:
    if between_pools(source, target):
        return "between_pools"
    return "to_slurm" if target == SLURM else "to_inference"


def _count(node: NodeView, step: Step) -> None:
    """Moves completed, their duration, rollbacks and moves stopped on unhealthy nodes (slurmpool_moves_*)."""
    if step.stopped is not None:
        metrics.MOVES_FAILED.labels(direction=direction(step.stopped.source, step.stopped.target), reason="unhealthy").inc()
    elif step.settled:
        move = step.finished or node.move
        d = direction(move.source if move else NONE, step.settled)
        metrics.MOVES_COMPLETED.labels(direction=d).inc()
        if node.move:
            metrics.MOVE_SECONDS.labels(direction=d).observe(max(0.0, (datetime.now(timezone.utc) - node.move.started).total_seconds()))
    if step.rolled_back is not None:
        metrics.MOVES_FAILED.labels(direction=direction(step.rolled_back.source, step.rolled_back.target), reason="rollback").inc()


def _in_slurm(decision: PoolDecision, node: str) -> str | None:
    """The node's Slurm NodeName (slurmnames.py); None: it has none, so nothing is sent for it."""
    return decision.slurm_names.get(node, node)


async def _pod_actions(pool, spec, name: str, step: Step, kube: Kube, result: ApplyResult, slurm_name: str | None) -> None:
    for action in step.actions:
        if isinstance(action, CreateSlurmdPod):
            if slurm_name is None:  # a slurmd under a guessed name would register as another node
                result.errors.append(f"create slurmd pod on {name}: the Node has no Slurm NodeName (spec.slurm.nodeNameLabel)")
                continue
            result.acted = True
            await _guard(result, f"create slurmd pod on {name}", kube.create_slurmd_pod(pool, spec, name, slurm_name), node=name)
        elif isinstance(action, DeleteSlurmdPod):
            pod = action.pod
            result.acted = True
            await _guard(result, f"delete pod {pod.key}", kube.delete_pod(pod.namespace, pod.name, pod.uid))
        elif isinstance(action, Evict):
            refused = await _guard(result, f"evict pod {action.pod.key}", kube.evict(action.pod.namespace, action.pod.name))
            if refused:
                result.refused[name] = f"eviction of {action.pod.key} refused: {refused}"
                metrics.EVICTIONS_REFUSED.inc()
            elif refused is not None:
                result.acted = True


def _fold_published(patches: dict[str, dict], values: dict[str, str], written: dict[str, tuple[str, float]]) -> dict[str, str]:
    """Slurm's state to publish on a node this pass patches anyway goes in that patch: one write
    instead of two (a move changes both at most phases, and with 100 moves at once the apiserver
    is what every pass waits for). Returns what was folded in."""
    folded = {}
    for name, patch in patches.items():
        value = values.get(name)
        if value is None or _written_lately(written, name, value):
            continue
        patch.setdefault("metadata", {}).setdefault("annotations", {})[ANN_SLURM] = value
        folded[name] = value
    return folded


async def _publish(kube: Kube, values: dict[str, str], written: dict[str, tuple[str, float]]) -> None:
    """Best effort, and nothing waits for it: queued on the adapter's later lane (when Slurm
    changes under hundreds of nodes at once, the pass waited for every one). A write that failed
    is made again once PUBLISH_LAG has passed, if the node still shows another value."""
    for name, value in values.items():
        if _written_lately(written, name, value):
            continue
        await kube.patch_node_later(name, {"metadata": {"annotations": {ANN_SLURM: value}}})
        written[name] = (value, time.monotonic())


def _written_lately(written: dict[str, tuple[str, float]], name: str, value: str) -> bool:
    last = written.get(name)
    return bool(last) and last[0] == value and time.monotonic() - last[1] < PUBLISH_LAG


async def _guard(result: ApplyResult, what: str, coro, ok=None, node: str | None = None):
    """Run one action; a failure is reported (Degraded, lastError) and retried next pass. A write
    the API server refused is also the node's move message (`REFUSED ...`), which the next pass
    reads: a bounded phase's rollback names it. Returns the action's result (or `ok` when it has
    none), None on failure."""
    try:
        value = await coro
        return ok if value is None else value
    except Exception as err:  # noqa: BLE001 - any failure of one action must not stop the others
        log.warning("%s failed: %s", what, err)
        if node is not None and isinstance(err, Refused):
            result.refused[node] = f"{REFUSED} {what}: {err}"[:500]
        result.errors.append(f"{what}: {err}"[:500])
        metrics.ACTION_ERRORS.labels(action=what.split(" ")[0]).inc()
        return None


def _crash_point(phase: str | None, patch: dict, step: Step) -> None:
    """Fault injection for the crash tests (SLURMPOOL_CRASH_AFTER_PHASE=<phase>): SIGKILL right
    after recording a step that entered that phase, before any Slurm or pod action of the step
    (the worst moment: record written, nothing done)."""
    if phase and phase in step.entered and ANN_MOVE in patch.get("metadata", {}).get("annotations", {}):
        log.warning("SLURMPOOL_CRASH_AFTER_PHASE=%s: killing myself", phase)
        os.kill(os.getpid(), signal.SIGKILL)


def node_patch(pool: PoolRef, node: NodeView, step: Step) -> dict:
    """The node's record and shape for this step, as one merge patch (empty: nothing to write)."""
    patch: dict = {}
    annotations = _record(pool, node, step)
    shape = _shape(step)
    if shape is not None:
        patch = shape_write(node, node, shape)
    if annotations:
        patch.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
    return patch


def _shape(step: Step) -> PatchNode | None:
    shapes = [a for a in step.actions if isinstance(a, PatchNode)]
    return shapes[-1] if shapes else None


def shape_write(before: NodeView, current: NodeView, shape: PatchNode) -> dict:
    """The node's labels, taints and cordon as a merge patch on `current` (the Node as last read),
    changing only what the step changes against `before` (the Node the pass decided on): a taint
    of someone else's, added since, is kept; one they removed is not put back. The taint list is
    written whole (a merge patch has no other way), so `current`'s resourceVersion is its
    precondition: on a conflict the Node is read again and this is rebuilt (_write_node).

    The cordon: the operator lifts only its own. A cordon found on the node when a move takes it
    to Slurm (`claims_cordon`, without our taint beside it) is someone else's: marked
    ANN_CORDON_KEPT, it stays when the node returns to inference."""
    wanted, had = _norm_set(shape.taints), _norm_set(before.taints)
    taints = [t for t in current.taints if _norm(t) in wanted or _norm(t) not in had]
    present = _norm_set(taints)
    taints += [dict(t) for t in shape.taints if _norm(t) not in present and _norm(t) not in had]
    spec: dict = {"taints": taints}
    annotations: dict[str, str | None] = {}
    if shape.unschedulable is True:
        if not current.unschedulable:
            spec["unschedulable"] = True
            if current.cordon_kept:  # their cordon was lifted meanwhile: this one is ours
                annotations[ANN_CORDON_KEPT] = None
        elif shape.claims_cordon and not current.cordon_kept and not current.has_taint(SLURM_TAINT_KEY, "NoSchedule"):
            annotations[ANN_CORDON_KEPT] = "true"
    elif shape.unschedulable is False and current.unschedulable and not current.cordon_kept:
        spec["unschedulable"] = False
    metadata: dict = {"labels": dict(shape.labels)}
    if current.version:
        metadata["resourceVersion"] = current.version
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def _norm(taint: dict) -> tuple[str, str, str]:
    return (taint.get("key", ""), taint.get("value") or "", taint.get("effect", ""))


def _norm_set(taints) -> set[tuple[str, str, str]]:
    return {_norm(t) for t in taints}


async def _write_node(kube: Kube, before: NodeView, step: Step, patch: dict) -> None:
    """Write a node's patch; one that carries the node's shape is rebuilt on the Node read again
    while its precondition fails (someone else wrote the Node since the pass read it)."""
    shape = _shape(step)
    for attempt in range(CONFLICT_RETRIES + 1):
        try:
            return await kube.patch_node(before.name, patch)
        except Conflict:
            if shape is None or attempt == CONFLICT_RETRIES:
                raise
            log.info("node %s changed since the pass read it: its shape is written again on the Node as it is now", before.name)
            current = await kube.read_node(before.name)
            if current is None:
                raise
            record = patch.get("metadata", {}).get("annotations", {})
            patch = shape_write(before, current, shape)
            patch["metadata"].setdefault("annotations", {}).update(record)


def _record(pool: PoolRef, node: NodeView, step: Step) -> dict[str, str | None]:
    """The annotations of the node's record this step changes."""
    annotations: dict[str, str | None] = {}
    if _move_changed(node.annotations.get(ANN_MOVE), step.move):
        annotations[ANN_MOVE] = step.move.to_annotation() if step.move else None
    if step.settled and node.placement != step.settled:
        annotations[ANN_PLACEMENT] = step.settled
        annotations[ANN_SETTLED] = iso(datetime.now(timezone.utc))  # for `kubectl slurmpool status`
    if (step.move or step.settled) and node.annotations.get(ANN_POOL) != pool.key:
        annotations[ANN_POOL] = pool.key
    if step.hold_until:
        annotations[ANN_HOLD_UNTIL] = iso(step.hold_until)
    if step.claim and node.annotations.get(ANN_DRAIN) != step.claim.to_annotation():
        annotations[ANN_DRAIN] = step.claim.to_annotation()
    elif step.drop_claim and ANN_DRAIN in node.annotations:
        annotations[ANN_DRAIN] = None
    if step.settled and pool_of(step.settled) and node.cordon_kept:
        annotations[ANN_CORDON_KEPT] = None  # back in inference, their cordon kept: theirs as any other
    return annotations


def _move_changed(current: str | None, move: MoveRecord | None) -> bool:
    if move is None:
        return bool(current)
    old = MoveRecord.from_annotation(current)
    return old is None or old.model_dump() != move.model_dump()
