"""The pool's status, built from one pass's snapshot, decision and apply result. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from slurmbridge.models import PowerSave

from slurmpool.core.models import (
    Condition,
    HandoverStatus,
    InferenceStatus,
    InvalidRecord,
    MoveStatus,
    PoolCounts,
    SideCounts,
    SlurmNodePoolSpec,
    SlurmNodePoolStatus,
)
from slurmpool.core import health as healthmod
from slurmpool.core import history
from slurmpool.core import slurmnames
from slurmpool.core.forecast import draining_out_of_slurm, forecast
from slurmpool.core.health import NodeHealth
from slurmpool.core.moves import Blocker, BlockerKind, Refusal
from slurmpool.core.events import Reason
from slurmpool.core.parking import Parking
from slurmpool.core.snapshot import ApplyResult, PoolDecision, PoolSnapshot
from slurmpool.core.view import LABEL_COMPONENT, LABEL_POOL, SLURM, Cause, MoveRecord, NodeView, counts_at, inference, iso, side_of


@dataclass(frozen=True)
class StatusBasis:
    """What a status is built on besides what the pass observed: the pool, and what of its spec
    the counts and conditions read. A spec that cannot be read is a basis with no inference pools."""

    name: str
    generation: int | None
    pools: tuple[str, ...] = ()  # the inference pools' names (spec.inference.pools)
    paused: bool = False
    replace: bool = False  # spec.health.replace: the split counts healthy nodes only
    power_save: bool = False  # spec.slurm.parking is PowerSave: the PowerSaveReady and Lending conditions

    @classmethod
    def of(cls, name: str, generation: int | None, spec: SlurmNodePoolSpec) -> StatusBasis:
        return cls(name, generation, tuple(p.name for p in spec.inference.pools), spec.paused, spec.health.replace,
                   spec.slurm.parking == "PowerSave")


@dataclass
class Observed:
    """What a reconcile learnt, beyond the nodes themselves."""

    desired: dict[str, int]
    problems: list[str] = field(default_factory=list)  # the spec cannot be met: nothing moves
    policy: list[str] = field(default_factory=list)  # the pool goes beyond the pool policy (poolpolicy.py): nothing moves
    overlaps: list[str] = field(default_factory=list)  # nodes also selected by another pool
    slurm_error: str | None = None
    errors: list[str] = field(default_factory=list)  # actions that failed this round
    missing: list[str] = field(default_factory=list)  # deleted Nodes whose slurmd pod is kept
    strays: list[str] = field(default_factory=list)  # nodes that left the selector mid-move (decide._strays)
    stray_pods: list[str] = field(default_factory=list)  # pods on nodes settled in Slurm (decide._report_stray_pods)
    blocked: dict[str, tuple[list[Blocker], str]] = field(default_factory=dict)  # node -> (what its move waits for, message)
    invalid: list[InvalidRecord] = field(default_factory=list)  # nodes left alone: unreadable records
    health: dict[str, NodeHealth] = field(default_factory=dict)  # nodes with findings (health.py)
    held: list[str] = field(default_factory=list)  # unhealthy nodes whose pin or move-now waits
    refusals: dict[str, str] = field(default_factory=dict)  # node -> a write the API server refused
    free_at: dict[str, str] = field(default_factory=dict)  # node draining out of Slurm -> its jobs' latest end (draining_forecast)
    power_save: PowerSave | None = None  # Slurm's power saving as last read (None: not known)
    parking: Parking | None = None  # lendable and held parked nodes (parking.py)
    declined: list[str] = field(default_factory=list)  # this pass's GiveBackDeclined messages
    reserved: list[str] = field(default_factory=list)  # `node (reservation)` kept in Slurm by others' reservations (reservations.py)


def build_status(snap: PoolSnapshot, decision: PoolDecision, result: ApplyResult) -> SlurmNodePoolStatus:
    seen = Observed(
        desired=decision.desired,
        problems=decision.problems,
        overlaps=list(snap.overlaps),
        slurm_error=None if snap.slurm.available else (snap.slurm.error or "unavailable"),
        errors=result.errors,
        missing=decision.missing,
        strays=decision.strays,
        stray_pods=decision.stray_pods,
        invalid=[InvalidRecord(node=node, annotation=p.annotation, message=p.message[:512])
                 for node, problems in sorted(decision.invalid.items()) for p in problems],
        health=decision.health,
        held=decision.held,
        refusals={n: str(why) for n, why in result.refused.items() if isinstance(why, Refusal)},
        free_at=draining_forecast(decision.nodes_after, snap),
        power_save=snap.slurm.power_save,
        parking=decision.parking,
        declined=[e.message for s in decision.steps.values() for e in s.events if e.reason == Reason.GiveBackDeclined],
        reserved=[f"{r.node} ({r.reservation})" for r in decision.reserved if not r.leaving],
    )
    for name, step in decision.steps.items():
        message = str(result.refused.get(name) or step.message)
        if step.blocked_by or message:
            seen.blocked[name] = (step.blocked_by, message)
    previous = snap.previous.conditions if snap.previous else []
    basis = StatusBasis.of(snap.pool.name, snap.pool.generation, snap.spec)
    # A shadow pass changed nothing: the nodes are as observed, and what it would do is status.shadow.
    status = status_from(basis, list(snap.nodes) if result.shadow else decision.nodes_after, seen, previous, snap.now)
    status.target = decision.target.status
    status.handover = _handover(decision, result)
    status.reserved_nodes = list(decision.reserved)
    status.recent_moves = history.recent_moves(snap, decision, result)
    if result.shadow:
        status.shadow = history.shadow(decision, snap.previous.shadow if snap.previous else None, snap.now)
    return status


def draining_forecast(nodes: list[NodeView], snap: PoolSnapshot) -> dict[str, str]:
    """node -> when it will be free, for each node draining out of Slurm with jobs on it: the latest
    end of its jobs by their time limits (RFC 3339), or 'unlimited' when one has none. Not `now`
    for an idle node (it is about to leave): the status changes only when the jobs do."""
    draining = draining_out_of_slurm(nodes)
    if not draining or not snap.slurm.available:
        return {}
    # Slurm read by Node name, as decide reads it (a pool's Slurm names may differ: slurmnames.py).
    slurm = slurmnames.by_node(snap.slurm, slurmnames.names_of(snap.spec.slurm, snap.nodes))
    out = {}
    for node in draining:
        jobs = forecast(node.name, slurm)
        if jobs.busy:
            out[node.name] = iso(jobs.last_end) if jobs.last_end is not None else "unlimited"
    return out


def _handover(decision: PoolDecision, result: ApplyResult) -> HandoverStatus | None:
    """The planned handover as this pass left it; a failure to create or delete it is its message."""
    plan = decision.handover
    if plan is None or plan.status is None:
        return None
    status = plan.status
    if result.handover_error:
        return status.model_copy(update={"message": result.handover_error})
    if plan.create is not None and not result.shadow:  # made this pass
        return status.model_copy(update={"state": "Reserved"})
    return status


@dataclass(frozen=True)
class Verdict:
    """What a condition says: its status, its CamelCase reason and the message."""

    status: bool | None  # None: Unknown
    reason: str
    message: str = ""


def set_condition(conditions: list[Condition], type_: str, verdict: Verdict, now: datetime, generation: int | None) -> list[Condition]:
    """Replace one condition, keeping lastTransitionTime while its status holds."""
    value: Literal["True", "False", "Unknown"] = "Unknown" if verdict.status is None else "True" if verdict.status else "False"
    old = next((c for c in conditions if c.type == type_), None)
    since = old.last_transition_time if old and old.status == value else iso(now)
    new = Condition(
        type=type_, status=value, reason=verdict.reason, message=verdict.message[:1024], last_transition_time=since,
        observed_generation=generation,
    )
    return [c for c in conditions if c.type != type_] + [new]


def status_from(
    basis: StatusBasis,
    nodes: list[NodeView],
    seen: Observed,
    previous: list[Condition],
    now: datetime,
) -> SlurmNodePoolStatus:
    name, generation = basis.name, basis.generation
    moves: list[MoveStatus] = []
    waiting: dict[str, list[Blocker]] = {}  # node -> the jobs or pods its move waits for
    ready = {SLURM: 0, **{inference(p): 0 for p in basis.pools}}
    moving = dict.fromkeys(ready, 0)
    unhealthy = dict.fromkeys(ready, 0)  # settled or moving there: never counted as ready capacity
    broken = {name for name, h in seen.health.items() if h.unhealthy}
    for node in nodes:
        move: MoveRecord | None = node.move
        here = counts_at(node)
        if node.name in broken and here in unhealthy:
            unhealthy[here] += 1
        if move is None:
            if node.placement in ready and node.name not in broken:
                ready[node.placement] += 1
            continue
        if move.target in moving:
            moving[move.target] += 1
        blocked_by, message = seen.blocked.get(node.name, ([], ""))
        if move.cause == Cause.GIVEBACK and move.rollback:
            message = f"give-back declined (Slurm requeued its job); {message}"
        blocked_by = blocked_by[:20]
        if workload := [b for b in blocked_by if b.workload]:
            waiting[node.name] = workload
        moves.append(
            MoveStatus(
                node=node.name,
                move_id=move.id,
                from_=move.source,  # type: ignore[call-arg]  # by field name (populate_by_name); mypy knows the alias only
                to=move.target,
                phase=move.phase,
                since=iso(move.since),
                blocked_by=[str(b) for b in blocked_by],
                message=message[:512],
                free_at=seen.free_at.get(node.name),
            )
        )
    moves.sort(key=lambda m: m.node)
    pools = [
        PoolCounts(
            name=p,
            desired=seen.desired.get(inference(p), 0),
            ready=ready[inference(p)],
            moving=moving[inference(p)],
            unhealthy=unhealthy[inference(p)],
        )
        for p in basis.pools
    ]
    blocked = [(m, waiting[m.node]) for m in moves if m.node in waiting]
    status = SlurmNodePoolStatus(
        observed_generation=generation,
        selected_nodes=len(nodes),
        replicas=ready[SLURM],
        selector=f"{LABEL_COMPONENT}=slurmd,{LABEL_POOL}={name}",
        slurm=SideCounts(desired=seen.desired.get(SLURM, 0), ready=ready[SLURM], moving=moving[SLURM], unhealthy=unhealthy[SLURM]),
        inference=InferenceStatus(
            desired=sum(p.desired for p in pools),
            ready=sum(p.ready for p in pools),
            moving=sum(p.moving for p in pools),
            unhealthy=sum(p.unhealthy for p in pools),
            pools=pools,
            by_pool=", ".join(f"{p.name} {p.ready}/{p.desired}" for p in pools),
        ),
        moving=len(moves),
        blocked=len(blocked),
        moves=moves,
        invalid_records=seen.invalid[:50],
        unhealthy=len(broken & {n.name for n in nodes}),
        unhealthy_nodes=healthmod.records(seen.health, {n.name: _side(n) for n in nodes}, seen.held),
        last_error=(seen.errors[-1][:1024] if seen.errors else None),
    )
    status.conditions = _conditions(basis, status, seen, blocked, previous, now)
    return status


def _side(node: NodeView) -> str:
    return side_of(counts_at(node))


def _split_reached(basis: StatusBasis, status: SlurmNodePoolStatus) -> bool:
    """Every side at its desired count: of healthy nodes with `health.replace`, else of all its
    nodes (an unhealthy node still counts on its side, though never as ready)."""
    def have(side: SideCounts | PoolCounts) -> int:
        return side.ready + (0 if basis.replace else side.unhealthy)
    return have(status.slurm) == status.slurm.desired and all(have(p) == p.desired for p in status.inference.pools)


def _kept(status: SlurmNodePoolStatus, seen: Observed) -> str:
    """Why fewer nodes left Slurm than asked, when others' reservations hold some (status.reservedNodes)."""
    if not seen.reserved or status.slurm.ready + status.slurm.moving <= status.slurm.desired:
        return ""
    more = f" and {len(seen.reserved) - 10} more" if len(seen.reserved) > 10 else ""
    return f"; kept in Slurm by others' reservations (status.reservedNodes): {', '.join(seen.reserved[:10])}{more}"


def _lending(parking: Parking, declined: list[str], moves: list[MoveStatus]) -> Verdict:
    """Power-save parking: which parked nodes Slurm may ask back (idle~), which are held (drain~)
    and why, and give-backs declined (this pass, or still returning)."""
    held = "; ".join(f"{n}: {why}" for n, why in sorted(parking.held.items())[:10]) + (" ..." if len(parking.held) > 10 else "")
    text = f"lendable (idle~): {', '.join(parking.lendable[:20]) or 'none'}; held (drain~): {held or 'none'}"
    if parking.waiting:
        text += "; " + "; ".join(parking.waiting[:5])
    returning = [f"{m.node} ({m.phase})" for m in moves if m.message.startswith("give-back declined")]
    if declined or returning:
        return Verdict(True, "GiveBackDeclined", "; ".join(declined[:3] + ([f"returning: {', '.join(returning)}"] if returning else [])) + f". {text}")
    return Verdict(bool(parking.lendable), "Lending" if parking.lendable else "AllHeld", text)


def _conditions(basis: StatusBasis, status: SlurmNodePoolStatus, seen: Observed, blocked: list[tuple[MoveStatus, list[Blocker]]],
                previous: list[Condition], now: datetime) -> list[Condition]:
    generation = basis.generation
    c = list(previous)
    degraded = []
    if seen.policy:
        degraded.append(("PolicyViolation", "refused by the operator's pool policy, nothing moves (docs/rbac.md#pool-policy): "
                         + "; ".join(seen.policy)))
    if seen.problems:
        degraded.append(("InvalidSpec", "; ".join(seen.problems)))
    if seen.overlaps:
        degraded.append(("NodeOverlap", f"selected by another SlurmNodePool too, never moved: {', '.join(sorted(seen.overlaps)[:20])}"))
    if seen.invalid:
        degraded.append(("InvalidNodeRecord", "nodes left alone, an annotation cannot be used (see status.invalidRecords and Events): "
                          + "; ".join(f"{r.node} {r.annotation}: {r.message}" for r in seen.invalid[:5])
                          + (f" (and {len(seen.invalid) - 5} more)" if len(seen.invalid) > 5 else "")))
    if seen.slurm_error:
        degraded.append(("SlurmUnavailable", seen.slurm_error))
    if seen.missing:
        degraded.append(("NodeMissing", f"deleted from Kubernetes: {', '.join(seen.missing[:10])}"))
    if seen.strays:
        degraded.append(("NodeLeftSelector", f"left the nodeSelector mid-move: {', '.join(seen.strays[:10])}"))
    if seen.stray_pods:
        degraded.append(("StrayPod", f"pods on nodes that serve Slurm: {', '.join(seen.stray_pods[:10])}"))
    if seen.refusals:
        degraded.append(("WriteRefused", "; ".join(f"{node}: {why}" for node, why in sorted(seen.refusals.items())[:5])))
    if seen.errors:
        degraded.append(("ActionFailed", seen.errors[-1]))
    c = set_condition(
        c,
        "Degraded",
        Verdict(bool(degraded), degraded[0][0] if degraded else "AsExpected", "; ".join(m for _, m in degraded) if degraded else ""),
        now,
        generation,
    )
    if blocked:
        parts = [f"{m.node} ({m.phase}): {', '.join(str(b) for b in workload)}" for m, workload in blocked]
        reason = "EvictionRefused" if any(b.kind == BlockerKind.POD for _, workload in blocked for b in workload) else "JobsRunning"
        c = set_condition(c, "DrainBlocked", Verdict(True, reason, "; ".join(parts)), now, generation)
    else:
        c = set_condition(c, "DrainBlocked", Verdict(False, "NotBlocked"), now, generation)
    if status.moving:
        c = set_condition(c, "Progressing", Verdict(True, "MovesInFlight", f"{status.moving} move(s) in flight"), now, generation)
    elif basis.paused:
        c = set_condition(c, "Progressing", Verdict(False, "Paused", "spec.paused is set: no new moves start"), now, generation)
    else:
        c = set_condition(c, "Progressing", Verdict(False, "Idle"), now, generation)
    if basis.power_save and seen.parking is not None:
        c = set_condition(c, "Lending", _lending(seen.parking, seen.declined, status.moves), now, generation)
    else:  # Drain parking lends nothing: no such condition (one left by an earlier PowerSave goes)
        c = [x for x in c if x.type != "Lending"]
    settled = _split_reached(basis, status)
    if degraded:
        ready = Verdict(False, degraded[0][0], "; ".join(m for _, m in degraded))
    elif not settled or status.moving:
        ready = Verdict(False, "Progressing", f"Slurm {status.slurm.ready}/{status.slurm.desired}, inference {status.inference.ready}/{status.inference.desired}"
                        + _kept(status, seen))
    else:
        ready = Verdict(True, "SplitReached", f"Slurm {status.slurm.ready}, inference {status.inference.ready}" + (
            f" ({status.unhealthy} unhealthy: see status.unhealthyNodes)" if status.unhealthy else ""))
    c = set_condition(c, "Ready", ready, now, generation)
    if basis.power_save:
        c = set_condition(c, "PowerSaveReady", power_save_verdict(seen.power_save), now, generation)
    else:
        c = [x for x in c if x.type != "PowerSaveReady"]
    order = {"Ready": 0, "Progressing": 1, "DrainBlocked": 2, "Degraded": 3, "Lending": 4, "PowerSaveReady": 5}
    return sorted(c, key=lambda x: order.get(x.type, 9))



def power_save_verdict(power_save: PowerSave | None) -> Verdict:
    """Can a PowerSave pool park by power saving? Not while Slurm's power saving is off (Slurm
    could never bring the nodes back) or not known: its parked nodes stay drained meanwhile."""
    if power_save is None:
        return Verdict(None, "PowerSaveUnknown", "Slurm's power-save settings could not be read; parked nodes stay drained "
                       "(Drain parking) until they can")
    if not power_save.on:
        return Verdict(False, "PowerSaveOff", f"{power_save.why_off or 'power saving is off'}; parked nodes stay drained "
                       "(Drain parking) until it is on (docs/slurm-admin.md)")
    return Verdict(True, "PowerSaveOn", "parked nodes are powered down in Slurm")
