"""Carry out a PoolDecision: `apply(ctx, decision) -> ApplyResult`. The only module of the pass
that writes; it reads the decision and never changes it.

Order, as crash safety needs it:
1. Kubernetes: one patch per node carries the move record with its shape, atomically (the
   patch is the decision's: core/patch.py). A node whose record could not be written takes no
   other step this pass: nothing may happen in Slurm that the node's annotations do not explain
   after a crash. A pass's starts are written after the moves it ends, and not at all when one of
   those is refused (its move stays in flight: the start would pass maxConcurrentMoves).
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
from dataclasses import dataclass, field
from datetime import datetime, timezone

from slurmbridge.backend import SlurmBackend

from slurmpool.adapters import metrics
from slurmpool.adapters.metrics import Action
from slurmpool.controller import shadow
from slurmpool.controller.posting import move_id, post
from slurmpool.controller.published import fold_published, publish
from slurmpool.core.events import Event, Reason
from slurmpool.core.interfaces import Conflict, Kube, PoolRef, Refused
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.expiry import Cancel, Requeue, Signal
from slurmpool.core.moves import CreateSlurmdPod, DeleteSlurmdPod, Drain, Evict, PowerDown, PowerDownAgain, PowerUp, Refusal, Resume, Step
from slurmpool.core.patch import RECORD, annotations_of, rebuilt, shape_of
from slurmpool.core.snapshot import ApplyResult, PoolDecision
from slurmpool.core.view import ANN_MOVE, ANN_MOVE_NOW, NONE, Direction, NodeView

log = logging.getLogger("slurmpool.apply")
CONFLICT_RETRIES = 5  # a node's write whose precondition failed is rebuilt on the Node read again, this often


@dataclass(frozen=True)
class ApplyContext:
    """What a pass writes with. `nodes`: the nodes the decision was made on (the snapshot's);
    `published`: what this process last wrote as slurmpool.io/slurm per node, and when (kept
    across passes, updated here); `crash_after_phase`: the crash tests' hook (settings.py)."""

    pool: PoolRef
    spec: SlurmNodePoolSpec
    nodes: list[NodeView]
    kube: Kube
    slurm: SlurmBackend
    published: dict[str, tuple[str, float]] = field(default_factory=dict)
    crash_after_phase: str | None = None
    dry_run: bool = False  # this pass writes nothing (`slurmpool run --dry-run`; pools.py also sets it for spec.mode Shadow)

    @property
    def shadow(self) -> bool:
        """Writes nothing to Nodes, pods or Slurm: spec.mode Shadow, or the whole operator's --dry-run."""
        return self.dry_run or self.spec.mode == "Shadow"

    def __post_init__(self) -> None:
        if self.published is None:
            object.__setattr__(self, "published", {})


async def apply(ctx: ApplyContext, decision: PoolDecision) -> ApplyResult:
    if ctx.shadow:  # the one way past every write below
        return await shadow.report(ctx.kube, ctx.pool, decision)
    shadow.leave(ctx.pool)
    result = ApplyResult()
    for ev in (*decision.pool_events, *decision.node_events):
        await _post(ctx, ev)
    for pod in decision.orphans_to_delete:
        await _guard(ctx, result, Action.DELETE, f"delete pod {pod.key}", ctx.kube.delete_pod(pod.namespace, pod.name, pod.uid))
    written = await _write_nodes(ctx, decision, result)
    await _slurm(ctx, decision, written, result)
    await asyncio.gather(*(_pod_actions(ctx, name, step, result, _in_slurm(decision, name)) for name, step in written.items()))
    await _handover(ctx, decision, result)
    await publish(ctx.kube, decision.publish, ctx.published)
    for ev in decision.clear_move_now:
        if ev.node is None:  # never: each is about the node whose move-now it clears (decide)
            continue
        try:
            await ctx.kube.patch_node(ev.node, {"metadata": {"annotations": {ANN_MOVE_NOW: None}}})
        except Exception as err:  # noqa: BLE001 - retried next pass
            log.warning("could not clear move-now on %s: %s", ev.node, err)
            continue
        await _post(ctx, ev)
    return result


async def _write_nodes(ctx: ApplyContext, decision: PoolDecision, result: ApplyResult) -> dict[str, Step]:
    """Each node's patch (with Slurm's state folded in), concurrently; the starts after the rest
    when moves end this pass (PoolDecision.starts_may_follow: a refused ending keeps its slot, so
    the starts wait for the next pass). Returns the steps of the nodes that may go on: written,
    or with nothing to write."""
    patches, folded = fold_published(decision.patches, decision.publish, ctx.published)
    later = decision.starting if decision.ending & set(patches) else set()
    result.unwritten = await _patch_all(ctx, decision, {n: p for n, p in patches.items() if n not in later}, result)
    if later and decision.starts_may_follow(result.unwritten):
        result.unwritten |= await _patch_all(ctx, decision, {n: p for n, p in patches.items() if n in later}, result)
    elif later:
        log.info("%s: not starting moves of %s this pass: a move that ends in it could not be written", ctx.pool.key, ", ".join(sorted(later)))
        result.unwritten |= later
    now = time.monotonic()  # what a failed patch carried is left to publish() below
    ctx.published.update({name: (value, now) for name, value in folded.items() if name not in result.unwritten})
    for name, patch in patches.items():
        if name not in result.unwritten and (record := {k: v for k, v in annotations_of(patch).items() if k in RECORD}):
            result.records[name] = record
    result.acted = bool(patches)
    return {name: step for name, step in decision.steps.items() if name not in result.unwritten}


async def _patch_all(ctx: ApplyContext, decision: PoolDecision, patches: dict[str, dict], result: ApplyResult) -> set[str]:
    """Write the patches concurrently; the nodes whose patch failed."""
    old = {n.name: n for n in ctx.nodes}
    written = await asyncio.gather(*(
        _guard(ctx, result, Action.PATCH, f"patch node {n}", _write_node(ctx.kube, old[n], decision.steps[n], p), node=n)
        for n, p in patches.items()))
    return {name for name, ok in zip(patches, written) if ok is None}


# The Slurm updates of node lists, batched by hostlist, in this order: a drain before the power-up
# of the node it holds (moves.PoweringUp), a resume (a lent node) beside the power-downs.
NODE_UPDATES = ((Resume, "scontrol resume", lambda s, nodes: s.resume(nodes)),
                (PowerDown, "scontrol power down", lambda s, nodes: s.power_down(nodes)),
                (PowerDownAgain, "scontrol power down (again, forced)", lambda s, nodes: s.power_down(nodes, again=True)),
                (PowerUp, "scontrol power up", lambda s, nodes: s.power_up(nodes)))


async def _slurm(ctx: ApplyContext, decision: PoolDecision, steps: dict[str, Step], result: ApplyResult) -> None:
    """The steps' Slurm actions, batched (one command per kind), after their nodes' records."""
    drains: dict[str, list[str]] = defaultdict(list)
    updates: dict[type, list[str]] = defaultdict(list)  # Resume, PowerDown, PowerUp -> Slurm names
    requeues: list[str] = []
    cancels: list[str] = []
    signals: dict[tuple[str, bool], list[str]] = defaultdict(list)  # (signal, batch only) -> jobs
    old = {n.name: n for n in ctx.nodes}
    for name, step in steps.items():
        _crash_point(ctx.crash_after_phase, decision.patches.get(name, {}), step)
        for action in step.actions:
            if isinstance(action, Drain) and (target := _in_slurm(decision, action.node)):
                drains[action.reason].append(target)
            elif isinstance(action, Resume | PowerDown | PowerUp) and (target := _in_slurm(decision, action.node)):
                updates[type(action)].append(target)
            elif isinstance(action, Signal):
                signals[(action.signal, action.batch_only)].extend(action.job_ids)
            elif isinstance(action, Requeue):
                requeues.extend(action.job_ids)
            elif isinstance(action, Cancel):
                cancels.extend(action.job_ids)
        for ev in step.events:
            await _post(ctx, ev.on(name), move_id(step))
        _count(ctx.pool.key, old[name], step)
    for start, move in decision.starts:
        if start.node not in result.unwritten:
            metrics.MOVES_STARTED.labels(pool=ctx.pool.key, direction=Direction.of(move.source, move.target), cause=start.cause).inc()
    for reason, names in drains.items():
        await _guard(ctx, result, Action.SCONTROL, "scontrol drain", ctx.slurm.drain(sorted(set(names)), reason))
    for kind, what, call in NODE_UPDATES:
        if updates[kind]:
            await _guard(ctx, result, Action.SCONTROL, what, call(ctx.slurm, sorted(set(updates[kind]))))
    for (sig, batch), jobs in signals.items():  # before any requeue: a grace of 0 signals, then requeues
        await _guard(ctx, result, Action.SCANCEL, f"scancel --signal={sig}", ctx.slurm.signal(sorted(set(jobs)), sig, batch))
    if requeues:
        await _guard(ctx, result, Action.SCONTROL, "scontrol requeue", ctx.slurm.requeue(sorted(set(requeues))))
    if cancels:
        await _guard(ctx, result, Action.SCANCEL, "scancel", ctx.slurm.cancel(sorted(set(cancels))))
    result.slurm_changed = bool(drains or any(updates.values()) or signals or requeues or cancels)
    result.acted |= result.slurm_changed


async def _handover(ctx: ApplyContext, decision: PoolDecision, result: ApplyResult) -> None:
    """The planned handover's reservation: deleted (ours when no longer wanted or done, orphans of
    deleted pools), then created. After the moves' own Slurm actions, and a failure is only the
    handover's (`result.handover_error`, retried next pass): it never holds a move back."""
    plan = decision.handover
    if plan is None or not (plan.delete or plan.create or plan.events):
        return
    try:
        for name in plan.delete:
            await ctx.slurm.delete_reservation(name)
        if plan.create is not None:
            nodes = [s for n in plan.create.nodes if (s := _in_slurm(decision, n)) is not None]
            await ctx.slurm.create_reservation(plan.create.reservation, nodes, plan.create.start, plan.minutes, plan.create.flags)
    except Exception as err:  # noqa: BLE001 - reported on the pool, retried next pass
        log.warning("%s: reservation %s failed: %s", ctx.pool.key, plan.outcome, err)
        result.handover_error = f"{plan.outcome} reservation: {err}"[:500]
        metrics.ACTION_ERRORS.labels(pool=ctx.pool.key, action=Action.SCONTROL).inc()
        if result.handover_error != plan.reported:
            await _post(ctx, Event.warning(Reason.HandoverFailed, f"{result.handover_error}; retried next pass, moves go on"))
        return
    result.slurm_changed = result.slurm_changed or bool(plan.delete or plan.create)
    for ev in plan.events:
        await _post(ctx, ev)


async def _post(ctx: ApplyContext, ev: Event, move: str | None = None) -> None:
    await post(ctx.kube, ctx.pool, ev, move)


def _count(pool: str, node: NodeView, step: Step) -> None:
    """Moves completed, their duration, rollbacks and moves stopped on unhealthy nodes (slurmpool_moves_*)."""
    if step.stopped is not None:
        metrics.MOVES_FAILED.labels(pool=pool, direction=Direction.of(step.stopped.source, step.stopped.target), reason="unhealthy").inc()
    elif step.settled:
        move = step.finished or node.move
        d = Direction.of(move.source if move else NONE, step.settled)
        metrics.MOVES_COMPLETED.labels(pool=pool, direction=d).inc()
        if node.move:  # the wall clock: a metric of how long moves take, not a record
            metrics.MOVE_SECONDS.labels(pool=pool, direction=d).observe(max(0.0, (datetime.now(timezone.utc) - node.move.started).total_seconds()))
    if step.rolled_back is not None:
        metrics.MOVES_FAILED.labels(pool=pool, direction=Direction.of(step.rolled_back.source, step.rolled_back.target), reason="rollback").inc()


def _in_slurm(decision: PoolDecision, node: str) -> str | None:
    """The node's Slurm NodeName (slurmnames.py); None: it has none, so nothing is sent for it."""
    return decision.slurm_names.get(node, node)


async def _pod_actions(ctx: ApplyContext, name: str, step: Step, result: ApplyResult, slurm_name: str | None) -> None:
    kube = ctx.kube
    for action in step.actions:
        if isinstance(action, CreateSlurmdPod):
            if slurm_name is None:  # a slurmd under a guessed name would register as another node
                result.errors.append(f"create slurmd pod on {name}: the Node has no Slurm NodeName (spec.slurm.nodeNameLabel)")
                continue
            result.acted = True
            created = kube.create_slurmd_pod(ctx.pool, ctx.spec, name, slurm_name, boot=action.boot)
            await _guard(ctx, result, Action.CREATE, f"create slurmd pod on {name}", created, node=name)
        elif isinstance(action, DeleteSlurmdPod):
            pod = action.pod
            result.acted = True
            await _guard(ctx, result, Action.DELETE, f"delete pod {pod.key}", kube.delete_pod(pod.namespace, pod.name, pod.uid))
        elif isinstance(action, Evict):
            refused = await _guard(ctx, result, Action.EVICT, f"evict pod {action.pod.key}", kube.evict(action.pod.namespace, action.pod.name))
            if refused:
                result.refused[name] = f"eviction of {action.pod.key} refused: {refused}"
                metrics.EVICTIONS_REFUSED.labels(pool=ctx.pool.key).inc()
            elif refused is not None:
                result.acted = True


async def _guard(ctx: ApplyContext, result: ApplyResult, action: Action, what: str, coro, node: str | None = None):
    """Run one action; a failure is reported (Degraded, lastError; slurmpool_action_errors_total
    by pool and `action`) and retried next pass. A write the API server refused is also the node's move
    message (moves.Refusal), which the next pass reads: a bounded phase's rollback names it.
    Returns the action's result, None on failure."""
    try:
        return await coro
    except Exception as err:  # noqa: BLE001 - any failure of one action must not stop the others
        log.warning("%s failed: %s", what, err)
        if node is not None and isinstance(err, Refused):
            result.refused[node] = Refusal.of(what, err)
        result.errors.append(f"{what}: {err}"[:500])
        metrics.ACTION_ERRORS.labels(pool=ctx.pool.key, action=action).inc()
        return None


def _crash_point(phase: str | None, patch: dict, step: Step) -> None:
    """Fault injection for the crash tests (SLURMPOOL_CRASH_AFTER_PHASE=<phase>): SIGKILL right
    after recording a step that entered that phase, before any Slurm or pod action of the step
    (the worst moment: record written, nothing done)."""
    if phase and phase in step.entered and ANN_MOVE in annotations_of(patch):
        log.warning("SLURMPOOL_CRASH_AFTER_PHASE=%s: killing myself", phase)
        os.kill(os.getpid(), signal.SIGKILL)


async def _write_node(kube: Kube, before: NodeView, step: Step, patch: dict) -> bool:
    """Write a node's patch; one that carries the node's shape is rebuilt on the Node read again
    while its precondition fails (someone else wrote the Node since the pass read it). True once written."""
    shape, attempt = shape_of(step), 0
    while True:
        try:
            await kube.patch_node(before.name, patch)
            return True
        except Conflict:
            if shape is None or attempt == CONFLICT_RETRIES:
                raise
            attempt += 1
            log.info("node %s changed since the pass read it: its shape is written again on the Node as it is now", before.name)
            current = await kube.read_node(before.name)
            if current is None:
                raise
            patch = rebuilt(before, current, step, shape, patch)
