"""One pass over one pool, decided: `decide(snapshot) -> PoolDecision`. Pure: no I/O, no
clock but the snapshot's, no randomness; the same snapshot gives the same decision.

In order:
1. records: a node whose annotations cannot be read (or name what this pool does not have)
   is left alone and reported; every other node goes on; each node's health (health.py);
2. the target: who sets the split now (target.py: manual, schedule, demand); with power-save
   parking, which parked nodes are lent to Slurm or held (parking.py), and the nodes Slurm asked
   back and its jobs hold, counted on the Slurm side;
3. each node's step: the move in flight advanced as far as the observations allow
   (moves.py; an unhealthy node's move stops where it is safe), or the upkeep of a settled
   Slurm node (its slurmd pod; a health drain for a listed condition, resumed once it clears)
   or of a parked one (powered down where power saving parks it: moves.keep_parked);
4. nodes deleted from Kubernetes: reported, their orphan slurmd pods deleted once idle; nodes
   that left the selector mid-move (strays): reported, their move ended on a side;
5. the give-backs Slurm asked for (parking.py), then the plan (planner.py) on the nodes as the
   steps leave them: moves to turn back, moves to start (each advanced at once on the same observations); then the planned handover's
   reservation ahead of the next schedule edge (handover.py) on the nodes as they leave them, and the
   checkpoint warning of the jobs that would still run at it (warning.py). Nodes in others' Slurm
   reservations (reservations.py) are held in Slurm by the plan and the handover alike;
6. what to publish on nodes (Slurm's state) and the move-now requests now fulfilled.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import datetime

from slurmpool.core import health as healthmod
from slurmpool.core import adoption, parking, reservations, slurmnames, slurmstate
from slurmpool.core.demand import Seen, signals
from slurmpool.core.handover import PoolView, reconcile as reconcile_handover
from slurmpool.core.warning import warn
from slurmpool.core.health import HEALTHY, NodeHealth
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.models import ReservedNode, SlurmNodePoolSpec, TargetStatus, seconds
from slurmpool.core.patch import after, node_patch
from slurmpool.core.expiry import expire, overdue
from slurmpool.core.published import changed_annotations
from slurmpool.core.moves import (
    Pass, Refusal, Resume, Step, abortable, advance, checkpointing, drain, ensure_slurmd_pod, first_phase, keep_parked, restore_cordon, reverse,
)
from slurmpool.core.planner import Goal, Start, current_placement, desired_split, move_now_done, move_now_target, placements, plan
from slurmpool.core.events import Event, Reason
from slurmpool.core.snapshot import PoolDecision, PoolSnapshot
from slurmpool.core.target import Decision, decide_target, with_given_back
from slurmpool.core.view import (
    ANN_ADOPT,
    ANN_MOVE,
    ANN_MOVE_NOW,
    ANN_PIN,
    ANN_PLACEMENT,
    NONE,
    SLURM,
    Cause,
    MoveRecord,
    NodeView,
    PodView,
    RecordProblem,
    SlurmView,
    iso,
    pool_of,
)


def decide(snap: PoolSnapshot) -> PoolDecision:
    # Slurm read by Node name (slurmnames.py); Slurm's names come back only in apply.py.
    names = slurmnames.names_of(snap.spec.slurm, (*snap.nodes, *snap.strays), (p.node for p in snap.orphans))
    shared = slurmnames.collisions(names, (n.name for n in (*snap.nodes, *snap.strays)))
    names = {n: None if n in shared else s for n, s in names.items()}  # no Node's view is another's Slurm node
    snap = replace(snap, slurm=slurmnames.by_node(snap.slurm, names))
    spec, slurm, now = snap.spec, snap.slurm, snap.now
    at = Pass(slurm, spec, now)  # what every move of this pass is advanced against
    nodes = [_flag(spec, n, shared.get(n.name)) for n in snap.nodes]
    node_events = _record_events(snap, nodes)
    health = healthmod.assess_all(spec.health, nodes, slurm, now, snap.previous.unhealthy_nodes if snap.previous else ())
    target = _target(snap, nodes, frozenset(n for n, h in health.items() if h.unhealthy))
    window = desired_split(spec, len(nodes), target.slurm_nodes, target.pool_counts)[0] if target.status.window else None
    lend = parking.settle(spec, nodes, slurm, health, now, window)
    lend.waiting = parking.waiting_on_held(spec, slurm, lend.held)
    target = with_given_back(target, lend.given_back, len(nodes))

    # A write the API server refused last pass, as the move's status said (apply.py puts it there).
    refusals = {m.node: r for m in snap.previous.moves if (r := Refusal.read(m.message))} if snap.previous else {}
    steps: dict[str, Step] = {}
    stray_pods: list[tuple[str, PodView]] = []  # on settled Slurm nodes: they share the GPUs with Slurm's jobs
    for node in nodes:
        if node.problems:
            continue  # left alone: no step, never a victim (planner), reported above
        if node.move is not None and (why := lend.declines.get(node.name)):
            steps[node.name] = parking.decline(node.move, node, at, why)
        elif node.move is not None:
            steps[node.name] = advance(node.move, node, at, _unhealthy(node, health), refusals.get(node.name))
        elif adoption.wanted(node):
            if (placed := adoption.place(node, at)) is not None:
                steps[node.name] = placed
        elif node.placement == SLURM:
            repair = _repair_slurm_node(node, slurm, health.get(node.name, HEALTHY), now, spec)
            restore_cordon(node, spec, repair, "while settled in Slurm")
            adoption.follow(node, slurm.nodes.get(node.name) if slurm.available else None, repair)
            stray_pods += [(node.name, p) for p in node.pods if p.evictable]
            if repair.actions or repair.drop_claim or repair.drop_checkpoint or repair.adopted:
                steps[node.name] = repair
        elif node.name in lend.steps:
            steps[node.name] = lend.steps[node.name]
        elif pool_of(node.placement) is not None and (parked := keep_parked(node, at)) is not None:
            steps[node.name] = parked
    for name in lend.unmark:
        steps.setdefault(name, Step(move=None)).given_back = False
    decision = PoolDecision(target=target, desired={}, problems=[], steps=steps, nodes_after=[], node_events=node_events, health=health,
                            slurm_names=slurmnames.renamed(names), parking=lend)
    decision.pool_events.extend(target.events)
    _gone(snap, nodes, decision)
    _report_stray_pods(snap, stray_pods, decision)

    # Plan on the nodes as the steps leave them, so finished moves free budget at once.
    by_name = {n.name: n for n in nodes}
    for name, step in steps.items():
        by_name[name] = _after(snap.pool, by_name[name], step, now)
    for giveback in lend.givebacks:  # before the plan: it counts them in flight (and the target on the Slurm side)
        _begin(snap, by_name, giveback, at, health, decision)
    held = reservations.holds(snap.pool, spec, by_name.values(), slurm, now, snap.previous.reserved_nodes if snap.previous else ())
    result = plan(spec, list(by_name.values()), slurm, now, Goal(target.slurm_nodes, target.pool_counts, target.named, frozenset(held)), health)
    decision.desired, decision.problems = result.desired, result.problems
    decision.held = sorted(set(result.refused))
    was_held = {r.node for r in snap.previous.unhealthy_nodes if r.held} if snap.previous else set()
    for name in decision.held:
        if name not in was_held:  # once, when it starts to wait: the status says it meanwhile
            what = f"pin={by_name[name].pin!r}" if by_name[name].pin else f"move-now={by_name[name].move_now!r}"
            decision.node_events.append(Event.warning(Reason.UnhealthyNodeHeld, node=name, message=f"{name} is unhealthy ({health[name].reason}): "
                                                  f"{what} waits until it is healthy; set slurmpool.io/force=true to move it anyway"))
    for name in result.aborts:
        node = by_name[name]
        aborted = node.move
        assert aborted is not None, "the planner aborts moves in flight only"
        back = reverse(aborted, spec, now, cause=Cause.ABORT)
        step = advance(back, node, at)
        why = f"reservation {reservations.describe(held[name])} holds it, so it stays in Slurm" \
            if name in held and aborted.source == SLURM else f"the split no longer wants move {aborted.id}"
        step.events.insert(0, Event.normal(Reason.MoveAborted, f"{name}: {why}; returning to {back.target}"))
        steps[name] = step
        by_name[name] = _after(snap.pool, node, step, now)
    for start in result.starts:
        step = _begin(snap, by_name, start, at, health, decision)
        if start.node in result.forced:
            step.events.insert(1, Event.warning(Reason.UnhealthyNodeForced, f"{start.node} is unhealthy ({health[start.node].reason}) and "
                                   f"moves to {start.target} anyway: {start.cause} with slurmpool.io/force=true"))
    _strays(snap, at, decision)  # after the plan: they are no part of it
    decision.nodes_after = list(by_name.values())
    _reserved(snap, held, decision)
    view = PoolView(spec, decision.nodes_after, slurm, now, health, frozenset(held))
    decision.handover = reconcile_handover(snap.pool, view, target.slurm_nodes, snap.previous.handover if snap.previous else None)
    _warn(decision, view)
    before = {n.name: n for n in (*nodes, *snap.strays)}
    decision.patches = {name: p for name, step in steps.items() if (p := node_patch(snap.pool, before[name], step, now))}
    decision.nodes_after += [_after(snap.pool, n, steps[n.name], now) if n.name in steps else n for n in snap.strays]
    decision.invalid = {n.name: n.problems for n in nodes if n.problems}
    decision.publish = changed_annotations(nodes, slurm)
    decision.clear_move_now = _fulfilled_move_now(spec, nodes, target)
    return decision


def _reserved(snap: PoolSnapshot, held: dict[str, ReservedNode], decision: PoolDecision) -> None:
    """Nodes others' reservations hold (reservations.py), for the status: a Normal Event when one is
    first kept in Slurm, a Warning when a pin or move-now takes one out anyway (its move starts)."""
    before = {r.node for r in snap.previous.reserved_nodes} if snap.previous else set()
    starting = {start.node: start.cause for start, _ in decision.starts if start.source == SLURM}
    for node in decision.nodes_after:
        if (r := held.get(node.name)) is None:
            continue
        leaving = node.move is not None and node.move.source == SLURM
        decision.reserved.append(r.model_copy(update={"leaving": leaving}))
        if node.name in starting:
            decision.node_events.append(Event.warning(Reason.ReservedNodeMoved, node=node.name, message=(
                f"{node.name} leaves Slurm on its {starting[node.name]} though reservation {reservations.describe(r)} holds it")))
        elif node.name not in before and not leaving:
            decision.node_events.append(Event.normal(Reason.ReservedNodeKept, node=node.name, message=(
                f"{node.name} stays in Slurm: reservation {reservations.describe(r)} holds it (a pin or move-now moves it anyway)")))


def _warn(decision: PoolDecision, view: PoolView) -> None:
    """The planned handover's checkpoint warnings (warning.py) into the leaving nodes' steps: each
    record is written with the step's patch, before its signal; the status says when each job is warned."""
    plan = decision.handover
    assert plan is not None, "the handover is reconciled first"
    warned = warn(plan, view)
    for name in warned.drop:
        decision.steps.setdefault(name, Step(move=None)).drop_checkpoint = True
    for name, record in warned.records.items():
        step = decision.steps.setdefault(name, Step(move=None))
        # a health drain's record of this pass is kept in it: its jobs are not signalled again
        step.checkpoint, step.drop_checkpoint = record.merged(step.checkpoint) if step.checkpoint else record, False
    edge = iso(plan.ahead.start) if plan.ahead else "?"
    for name, sent in warned.signals.items():
        decision.steps[name].actions += sent
        decision.steps[name].events += [Event.warning(Reason.JobsSignalled, f"{name}: the planned handover takes it at {edge}; sent {s.signal} "
                                                      f"to {'the batch shell of' if s.batch_only else 'every step of'} job(s) {', '.join(s.job_ids)} "
                                                      "to checkpoint; requeued at the edge unless they end") for s in sent]
    if plan.status is not None:
        plan.status.checkpoints = [j.status() for j in warned.jobs]


def _begin(snap: PoolSnapshot, by_name: dict[str, NodeView], start: Start, at: Pass, health: dict[str, NodeHealth],
           decision: PoolDecision) -> Step:
    """Start a move (the planner's, or a give-back) and take it as far as this pass allows."""
    node, now = by_name[start.node], snap.now
    move = MoveRecord(id=move_id(snap.pool, node.name, start.target, now), source=start.source, target=start.target,
                      phase=first_phase(start.target, start.source), since=now, started=now, cause=start.cause,
                      by=asked_by(node, start.cause, decision.target.status))
    step = advance(move, node, at, _unhealthy(node, health))
    step.entered.insert(0, move.phase)
    step.given_back = True if start.cause == Cause.GIVEBACK else None  # marked with its move: the target counts it
    step.events.insert(0, Event.normal(Reason.MoveStarted, f"{node.name}: {start.source} -> {start.target} ({start.cause}, move {move.id})"))
    decision.steps[node.name] = step
    by_name[node.name] = _after(snap.pool, node, step, now)
    decision.starts.append((start, move))
    return step


def asked_by(node: NodeView, cause: Cause, target: TargetStatus) -> str | None:
    """Who asked for a move (status.recentMoves): the writer of its pin or move-now, or what set the split."""
    if cause == Cause.PIN:
        return node.writers.get(ANN_PIN)
    if cause == Cause.MOVE_NOW:
        return node.writers.get(ANN_MOVE_NOW)
    if cause == Cause.REBALANCE:
        return f"{target.source}" + (f" ({target.by})" if target.source == "Manual" and target.by else "")
    return None


def move_id(pool: PoolRef, node: str, target: str, now: datetime) -> str:
    """Deterministic, so the same snapshot decides the same move; unique per node and instant."""
    return hashlib.sha1(f"{pool.uid}/{pool.key}/{node}/{target}/{now.isoformat()}".encode()).hexdigest()[:8]


# ---------------------------------------------------------------- 1. records people can write


def _flag(spec: SlurmNodePoolSpec, node: NodeView, same_slurm_name: list[str] | None = None) -> NodeView:
    """Problems only this pool's spec reveals: a placement, pin or move naming a pool it does not
    have, a Slurm name other Nodes map to too. A move-now or pin on a node whose placement names
    such a pool is a person saying where it goes, so that node is not flagged (the planner adopts
    it from there)."""
    valid = set(placements(spec))
    flags: list[RecordProblem] = []
    if same_slurm_name:
        how = f"label {spec.slurm.node_name_label}" if spec.slurm.node_name_label else f"spec.slurm.nodeName {spec.slurm.node_name!r}"
        flags.append(RecordProblem(how, f"maps it to Slurm node {slurmnames.slurm_name(spec.slurm, node.name, node.labels)} as it does "
                                   f"{', '.join(same_slurm_name[:3])}: neither moves nor gets a slurmd pod until the names differ"))
    names = ", ".join(p.name for p in spec.inference.pools) or "none"
    told = bool(node.move_now) or (node.pin in valid)
    if node.placement not in (NONE, *valid) and not told:
        flags.append(RecordProblem(ANN_PLACEMENT, f"names inference pool {pool_of(node.placement)!r}, which this SlurmNodePool does not have "
                                   f"(pools: {names}); set slurmpool.io/move-now or a pin to say where the node goes"))
    if node.pin and node.pin != "inference" and node.pin not in valid and not any(p.annotation == ANN_PIN for p in node.problems):
        flags.append(RecordProblem(ANN_PIN, f"names inference pool {pool_of(node.pin)!r}, which this SlurmNodePool does not have (pools: {names})"))
    if node.adopt is not None and (node.move is not None or pool_of(node.placement) is not None):
        where = f"is moving to {node.move.target}" if node.move else f"serves {node.placement}"
        flags.append(RecordProblem(ANN_ADOPT, f"the node {where}: adoption takes in only a node the pool has not placed; remove the annotation"))
    move = node.move
    if move is not None and move.target not in valid and move.source not in valid:
        # A move to a pool since removed goes back where it came from (planner); with nowhere
        # known to go back to, it could only wait forever.
        flags.append(RecordProblem(ANN_MOVE, f"move {move.id} goes from {move.source} to {move.target}; this SlurmNodePool has neither"))
    return replace(node, flagged=tuple(flags)) if flags else node


def _record_events(snap: PoolSnapshot, nodes: list[NodeView]) -> list[Event]:
    """A Warning for each problem not reported in the previous status, a Normal once it is fixed."""
    before = {(r.node, r.annotation, r.message) for r in (snap.previous.invalid_records if snap.previous else ())}
    now = {(n.name, p.annotation, p.message) for n in nodes for p in n.problems}
    names = {n.name for n in nodes}
    events = [
        Event.warning(Reason.InvalidNodeRecord, node=node, message=f"{node}: annotation {ann} cannot be used: {message}; the node is left alone until it is fixed")
        for node, ann, message in sorted(now - before)
    ]
    fixed = {(node, ann) for node, ann, _ in before - now if node in names} - {(node, ann) for node, ann, _ in now}
    events += [Event.normal(Reason.NodeRecordFixed, node=node, message=f"{node}: annotation {ann} is readable again; the node is managed again")
               for node, ann in sorted(fixed)]
    return events


# ---------------------------------------------------------------- 2. the target


def _target(snap: PoolSnapshot, nodes: list[NodeView], unhealthy: frozenset[str]) -> Decision:
    spec = snap.spec
    sig = None
    if spec.demand is not None and spec.demand.enabled and snap.slurm.available and snap.slurm.has_pending(spec.slurm.partition):
        sig = signals(Seen(spec, nodes, snap.slurm, snap.pending, unhealthy, snap.claims, snap.pod_groups, now=snap.now))
    previous = snap.previous.target if snap.previous else None
    return decide_target(spec, len(nodes), snap.now, previous, snap.author, sig)


# ---------------------------------------------------------------- 3. settled nodes


def _unhealthy(node: NodeView, health: dict[str, NodeHealth]) -> str | None:
    """Why the node's move must stop (moves.stop_side), or None: healthy, or forced by the on-call."""
    h = health.get(node.name, HEALTHY)
    return h.reason if h.unhealthy and not node.force else None


def _repair_slurm_node(node: NodeView, slurm: SlurmView, health: NodeHealth, now: datetime, spec: SlurmNodePoolSpec) -> Step:
    """Level-triggered upkeep of a settled Slurm node: its slurmd pod runs; a listed condition
    drains it (`slurmpool: health: <type>`, claimed first: running jobs end, no new job starts);
    and no drain of ours outlives its cause: the move that set it (a crash between the two
    writes) or the condition. A drain of ours on an unhealthy node stays; a drain by others is
    never resumed. A claim outlives nothing: once the node is seen undrained, or drained by
    someone else, the claim goes."""
    step = Step(move=None)
    sn = slurm.nodes.get(node.name) if slurm.available else None
    ensure_slurmd_pod(node, step, boot=slurmstate.powering_up(sn))
    if sn is None:
        return step
    if (condition := health.drain_condition) and not slurmstate.drain_set(sn):
        drain(step, node, healthmod.health_drain_reason(condition), now)
        step.events.append(Event.warning(Reason.HealthDrain, f"{node.name}: {health.reason}; draining it in Slurm (running jobs end, no new job starts)"))
        return step
    if node.drain_claim is None:  # a planned handover's record waits for its edge (warning.py drops it when stale)
        step.drop_checkpoint = node.checkpoint is not None and node.checkpoint.before is None
        return step
    if slurmstate.drain_set(sn) and not healthmod.drained_by_others(node, sn):
        if health.drain_condition and (sn.reason or "").startswith(healthmod.HEALTH_REASON):
            _health_drain_timeout(node, slurm, spec, now, step)
        step.drop_checkpoint = node.checkpoint is not None and step.checkpoint is None and not slurm.jobs_on(node.name)
        if slurmstate.resumable(sn) and not health.suspect:
            step.actions.append(Resume(node.name))
            if (sn.reason or "").startswith(healthmod.HEALTH_REASON):
                step.events.append(Event.normal(Reason.HealthResume, f"{node.name} is healthy again; resuming it in Slurm (drain {sn.reason!r})"))
    else:
        step.drop_claim = True
    return step


def _health_drain_timeout(node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> None:
    """A health drain's jobs end by the drain policy (expiry.py) once `drain.timeout` has passed
    since the claim: Requeue or Cancel ends them; Checkpoint signals them, then requeues them after
    the grace (its record on the Node, as a move's); Wait (and Rollback, which has no move to undo)
    lets them run."""
    claim = node.drain_claim
    jobs = slurm.jobs_on(node.name)
    if not any(j.state == "RUNNING" for j in jobs) or claim is None or claim.at is None:
        return
    late = (now - claim.at).total_seconds() - seconds(spec.drain.timeout)
    if late < 0:
        return
    policy = spec.drain.on_timeout
    expiry = expire(policy, overdue(jobs, late, spec.drain, node.checkpoint, now))
    step.message = checkpointing(node.name, expiry, step, spec)
    for ended in expiry.ended:
        step.actions.append(ended.action)
        # The Event's wording as it always was for Requeue and Cancel ("requeueed", "canceled").
        verb = f"{policy.lower()}ed" if policy in ("Requeue", "Cancel") else ended.verb
        step.events.append(Event.warning(ended.reason, f"{node.name}: health drain timed out after {spec.drain.timeout}; "
                                         f"{verb} job(s) {', '.join(ended.action.job_ids)}"))


def _after(pool: PoolRef, node: NodeView, step: Step, now: datetime) -> NodeView:
    """The node's view once the step's record is written (labels follow next round): the record
    of the very patch apply.py sends (patch.py)."""
    return after(node, node_patch(pool, node, step, now))


# ---------------------------------------------------------------- 4. nodes deleted from Kubernetes


def _gone(snap: PoolSnapshot, nodes: list[NodeView], decision: PoolDecision) -> None:
    """Nodes deleted from Kubernetes. Their move record went with the Node, so a node that had a
    move in flight last pass is reported once (its Slurm side stays as the move left it; if it
    registers again it is a new, unadopted node and is adopted like any other). Its slurmd pod
    is deleted only once Slurm shows it serves nothing (drained, no jobs); until then, or while
    Slurm cannot be seen, it stays and the pool is Degraded (NodeMissing)."""
    names = {n.name for n in (*nodes, *snap.strays)}
    slurm = snap.slurm
    for m in snap.previous.moves if snap.previous else ():
        if m.node not in names:
            decision.pool_events.append(Event.warning(Reason.NodeDeleted,
                                         f"{m.node} was deleted from Kubernetes during move {m.move_id} ({m.phase}, {m.from_} -> {m.to}); "
                                         "its move record went with it; it is adopted again if it registers"))
    for pod in snap.orphans:
        sn = slurm.nodes.get(pod.node) if slurm.available else None
        known = decision.slurm_names.get(pod.node, pod.node) is not None  # a gone Node's label cannot be read
        idle = slurm.available and known and (sn is None or (slurmstate.drained(sn) and not slurm.jobs_on(pod.node)))
        if idle and not pod.deleting:
            decision.pool_events.append(Event.normal(Reason.OrphanSlurmdDeleted,
                                         f"deleting slurmd pod {pod.key}: its node {pod.node} is gone from Kubernetes and serves nothing in Slurm"))
            decision.orphans_to_delete.append(pod)
        elif not idle:
            why = ("Slurm cannot be seen" if not slurm.available else "its Slurm NodeName is unknown (nodeNameLabel)" if not known
                   else "Slurm still uses it (not drained, or jobs on it)")
            decision.missing.append(f"{pod.node} (slurmd pod {pod.key} kept: {why})")


def _report_stray_pods(snap: PoolSnapshot, pods: list[tuple[str, PodView]], decision: PoolDecision) -> None:
    """A pod on a node settled in Slurm (bound by nodeName, or tolerating the slurmpool.io/slurm
    taint) runs beside Slurm's jobs on the same GPUs. It is reported, never evicted: it may be a
    person's on purpose (a debug pod); the Degraded condition names it while it runs, a Warning
    once when it is first seen."""
    seen = "".join(c.message for c in snap.previous.conditions if c.type == "Degraded") if snap.previous else ""
    for node, pod in pods:
        decision.stray_pods.append(f"{pod.key} on {node}")
        if f"{pod.key} on {node}" not in seen:
            decision.node_events.append(Event.warning(Reason.StrayPod, node=node, message=f"pod {pod.key} runs on {node}, which "
                                                      "serves Slurm: it shares the node with Slurm's jobs; move it or delete it"))


def _strays(snap: PoolSnapshot, at: Pass, decision: PoolDecision) -> None:
    """Nodes with this pool's move record that no pool selects any more (a person relabelled
    them, or an inference pool's labels took them out). Never left between sides: a move that
    has not crossed yet (moves.abortable: Draining, Cordoning, Evicting) is turned back to its
    source, where the node was safe and nothing was taken from it; one past that point goes on to
    its target, the way that finishes soonest with no work cut short. Either way the node ends on
    a side with no drain or cordon of ours left without a claim, is never planned again, and is
    reported (Warning NodeLeftSelector, the Degraded condition) until its move has ended."""
    seen = "".join(c.message for c in snap.previous.conditions if c.type == "Degraded") if snap.previous else ""
    for node in snap.strays:
        record = node.move
        if record is None or node.problems:
            continue
        move = reverse(record, at.spec, at.now, cause=Cause.ABORT) if not record.rollback and abortable(record) else record
        step = advance(move, node, at)
        ends = step.settled or (step.move.target if step.move else move.target)
        if f"{node.name} (" not in seen:  # once: the Degraded condition names it from the next pass on
            step.events.insert(0, Event.warning(Reason.NodeLeftSelector, f"{node.name} no longer matches the pool's nodeSelector during move "
                                                f"{record.id} ({record.phase}); its move ends in {ends} and the node leaves the pool"))
        decision.steps[node.name] = step
        decision.strays.append(f"{node.name} (move ends in {ends})")


# ---------------------------------------------------------------- 6. published on nodes (published.py), move-now


def _fulfilled_move_now(spec: SlurmNodePoolSpec, nodes: list[NodeView], target: Decision) -> list[Event]:
    done = set(move_now_done(spec, nodes, target.slurm_nodes, target.pool_counts))
    if not done:
        return []
    desired, _ = desired_split(spec, len(nodes), target.slurm_nodes, target.pool_counts)
    count: dict[str, int] = {}
    for n in nodes:
        count[current_placement(n)] = count.get(current_placement(n), 0) + 1
    out = []
    for node in nodes:
        if node.name not in done or node.problems:
            continue
        want = move_now_target(node, spec, desired, count)
        if want is None:
            out.append(Event.warning(Reason.MoveNowIgnored, node=node.name, message=f"{node.name}: move-now={node.move_now!r} names no placement of this pool"))
        elif node.pin is not None and node.pin != want:
            out.append(Event.warning(Reason.MoveNowIgnored, node=node.name, message=f"{node.name}: move-now={node.move_now!r} conflicts with pin={node.pin!r}; the pin wins"))
        else:
            out.append(Event.normal(Reason.MoveNowDone, node=node.name, message=f"{node.name} serves {want} as asked; the split is whole again"))
    return out
