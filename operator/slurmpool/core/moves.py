"""The per-node move state machine. Pure: given a move, what we observe, the spec and the
clock, it says which idempotent actions to take now and where the move stands.

Each phase (phases.py) has a function here: its *ensure* (actions that are safe to repeat)
and its *done* test on fresh observations, answering one typed outcome (Wait, Advance,
Finish, Rollback). A phase advances only when its done test passes. So an operator killed
at any instant re-observes, re-ensures and carries on: no step runs twice harmfully.

    to inference:  Draining -> StoppingSlurmd -> Relabeling -> settled inference:<pool>
    to Slurm:      Cordoning -> Evicting -> StartingSlurmd -> Registering -> Resuming -> settled slurm
    between pools: Relabeling -> EvictingMisfits -> settled inference:<other pool>   (no Slurm step)

A rollback is a move back the way it came, through the same phases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import ClassVar

from slurmbridge.models import SlurmNode, gres_shortfall

from slurmpool.core import slurmstate
from slurmpool.core.events import Event, Reason
from slurmpool.core.expiry import Cancel, Overdue, Requeue, expire
from slurmpool.core.fit import misfit
from slurmpool.core.ownership import claim, why_not_ours
from slurmpool.core.models import InferencePool, SlurmNodePoolSpec, seconds
from slurmpool.core.phases import ABORTABLE, BETWEEN_POOLS, FINISH, TO_INFERENCE, TO_SLURM, WAIT, Advance, Finish, Outcome, Phase, Rollback, Wait
from slurmpool.core.view import (
    LABEL_SIDE,
    NONE,
    DrainClaim,
    REASON_PREFIX,
    SLURM,
    SLURM_TAINT_KEY,
    Cause,
    MoveRecord,
    NodeView,
    PodView,
    Direction,
    SlurmView,
    inference,
    pool_of,
)

SLURM_TAINT = {"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"}


class BlockerKind(StrEnum):
    """What a move waits for: a job or pod (named), or a wait of its own."""

    JOB = "job"
    POD = "pod"
    SLURM_UNAVAILABLE = "slurm-unavailable"
    SLURM_UNLISTED = "slurm-unlisted"
    MISSING_POOL = "missing-pool"
    SLURMD_REGISTRATION = "slurmd-registration"


@dataclass(frozen=True)
class Blocker:
    """One thing a move waits for. Written in the status' `blockedBy` as its str(): `job/42`,
    `pod/<namespace>/<name>`, or the kind alone (`slurmd-registration`)."""

    kind: BlockerKind
    id: str = ""

    def __str__(self) -> str:
        return f"{self.kind}/{self.id}" if self.id else str(self.kind)

    @property
    def workload(self) -> bool:
        """A job or a pod: the move waits for people's work to leave (the DrainBlocked condition)."""
        return self.kind in (BlockerKind.JOB, BlockerKind.POD)


SLURM_UNAVAILABLE = (Blocker(BlockerKind.SLURM_UNAVAILABLE),)


@dataclass(frozen=True)
class Refusal:
    """A write of the node the API server refused (a 4xx: admission, validation). apply.py makes
    it the move's status message; the next pass reads it back from there (`read`), and a bounded
    phase's rollback names it."""

    message: str  # as the status shows it: `refused by the API server: <what>: <error>`

    PREFIX: ClassVar[str] = "refused by the API server:"

    @classmethod
    def of(cls, what: str, error: object) -> Refusal:
        return cls(f"{cls.PREFIX} {what}: {error}"[:500])

    @classmethod
    def read(cls, message: str) -> Refusal | None:
        """The refusal a move's status message reports, or None."""
        return cls(message) if message.startswith(cls.PREFIX) else None

    def __str__(self) -> str:
        return self.message


# ---------------------------------------------------------------- actions (data; the executor runs them)


@dataclass(frozen=True)
class Drain:
    node: str
    reason: str


@dataclass(frozen=True)
class Resume:
    node: str


@dataclass(frozen=True)
class Evict:
    pod: PodView


@dataclass(frozen=True)
class CreateSlurmdPod:
    node: str


@dataclass(frozen=True)
class DeleteSlurmdPod:
    pod: PodView


@dataclass(frozen=True)
class PatchNode:
    node: str
    labels: dict[str, str | None]  # None removes the label
    taints: tuple[dict[str, str], ...]  # as wanted; written as an edit of the Node's own list (patch.shape_write)
    unschedulable: bool | None  # None: the cordon is left as it is
    # Cordoning: a cordon found on the node (not set with our taint) is someone else's, kept for them
    claims_cordon: bool = False


Action = Drain | Resume | Requeue | Cancel | Evict | CreateSlurmdPod | DeleteSlurmdPod | PatchNode


@dataclass
class Step:
    """What one node does this pass. Built by the pure core; the executor only reads it."""

    move: MoveRecord | None  # the move as it stands now; None once finished
    settled: str | None = None  # the node's placement once the move finished
    actions: list[Action] = field(default_factory=list)
    blocked_by: list[Blocker] = field(default_factory=list)
    message: str = ""
    events: list[Event] = field(default_factory=list)  # each about this node (Event.node None: apply names it)
    hold_until: datetime | None = None
    claim: DrainClaim | None = None  # written on the Node with the record, before the drain
    drop_claim: bool = False  # the node serves Slurm again: no drain on it is ours any more
    entered: list[Phase] = field(default_factory=list)  # phases this step moved into
    finished: MoveRecord | None = None  # the move that completed in this step (metrics)
    rolled_back: MoveRecord | None = None  # the move this step turned back (metrics)
    stopped: MoveRecord | None = None  # the move this step stopped: its node is unhealthy (metrics)
    refusal: Refusal | None = None  # what the API server refused on this node last pass
    given_back: bool | None = None  # True: mark the node given back to Slurm's job (now); False: unmark; None: as it is


def between_pools(source: str, target: str) -> bool:
    """A move from one inference pool to another: relabel and evict misfits, no Slurm step."""
    return Direction.of(source, target) == Direction.BETWEEN_POOLS


FIRST_PHASE = {Direction.BETWEEN_POOLS: BETWEEN_POOLS[0], Direction.TO_SLURM: TO_SLURM[0], Direction.TO_INFERENCE: TO_INFERENCE[0]}


def first_phase(target: str, source: str = NONE) -> Phase:
    return FIRST_PHASE[Direction.of(source, target)]


def abortable(move: MoveRecord) -> bool:
    """Can the move be turned back at once? Moves between pools only ever relabel (undone by
    relabelling back) and evict pods that would not fit the new pool anyway."""
    return move.phase in ABORTABLE or between_pools(move.source, move.target)


def drain_reason(move: MoveRecord) -> str:
    # No move id in it: moves to the same place share one batched `scontrol update`.
    return f"{REASON_PREFIX} moving to {move.target}"


def hold_reason(placement: str) -> str:
    """The drain of a held power-save parked node (`drain~`, parking.py): one per pool, so holds batch."""
    return f"{REASON_PREFIX} parked for {placement}"


def drain(step: Step, node: NodeView, reason: str, now: datetime) -> None:
    """Drain the node in Slurm, claiming the drain first (ownership.py)."""
    step.actions.append(Drain(node.name, reason))
    step.claim = claim(reason, now)


# ---------------------------------------------------------------- node shapes


def _pool(spec: SlurmNodePoolSpec, name: str | None) -> InferencePool | None:
    return next((p for p in spec.inference.pools if p.name == name), None)


def _managed_taint(spec: SlurmNodePoolSpec, taint: dict[str, str]) -> bool:
    if taint.get("key") == SLURM_TAINT_KEY:
        return True
    return any(taint.get("key") == t.key and taint.get("effect") == t.effect for p in spec.inference.pools for t in p.taints)


def _pool_label_keys(spec: SlurmNodePoolSpec) -> set[str]:
    return {k for p in spec.inference.pools for k in p.labels}


def inference_shape(spec: SlurmNodePoolSpec, node: NodeView, pool: InferencePool, keep_cordon: bool = False) -> PatchNode:
    """The pool's labels and taints. Coming from Slurm the node is uncordoned (the cordon was
    ours), unless someone else had cordoned it before it went (ANN_CORDON_KEPT); between pools
    the cordon stays as it is (on an inference node it is people's)."""
    labels: dict[str, str | None] = {k: None for k in _pool_label_keys(spec) - set(pool.labels)}
    labels.update(pool.labels)
    labels[LABEL_SIDE] = "inference"
    taints = [t for t in node.taints if not _managed_taint(spec, t)]
    taints += [t.model_dump(exclude_defaults=False) for t in pool.taints]
    return PatchNode(node.name, labels, tuple(taints), unschedulable=None if keep_cordon or node.cordon_kept else False)


def slurm_shape(spec: SlurmNodePoolSpec, node: NodeView, keep_pool_labels: bool = False, claims_cordon: bool = False) -> PatchNode:
    labels: dict[str, str | None] = {} if keep_pool_labels else {k: None for k in _pool_label_keys(spec)}
    labels[LABEL_SIDE] = "slurm"
    kept = [t for t in node.taints if keep_pool_labels or not _managed_taint(spec, t)]
    if not any(t.get("key") == SLURM_TAINT_KEY for t in kept):
        kept.append(dict(SLURM_TAINT))
    return PatchNode(node.name, labels, tuple(kept), unschedulable=True, claims_cordon=claims_cordon)


def disturbed_pods(spec: SlurmNodePoolSpec, node: NodeView, target: str) -> list[PodView]:
    """The pods a move of the node to `target` would evict: every evictable pod on the way to
    Slurm; between inference pools, those the new pool's labels and taints would not admit."""
    if target == SLURM:
        return [p for p in node.pods if p.evictable]
    pool = _pool(spec, pool_of(target))
    if pool is None or not between_pools(node.placement, target):
        return []
    shape = inference_shape(spec, node, pool)
    labels = {k: v for k, v in {**node.labels, **shape.labels}.items() if v is not None}
    return [p for p in node.pods if p.evictable and misfit(p.needs, labels, shape.taints)]


def _norm_taints(taints: Iterable[dict[str, str]]) -> set[tuple[str, str, str]]:
    return {(t.get("key", ""), t.get("value") or "", t.get("effect", "")) for t in taints}


def restore_cordon(node: NodeView, spec: SlurmNodePoolSpec, step: Step, during: str) -> None:
    """The cordon and the slurmpool.io/slurm taint are the operator's while the node is on the
    Slurm side: from Cordoning of a move to Slurm until Relabeling of a move to inference lifts
    them. A person's uncordon then is restored and reported, never silently: a pod landing on a
    node that runs (or is about to run) Slurm jobs would share its GPUs. Nothing is removed."""
    if node.unschedulable and node.has_taint(SLURM_TAINT_KEY, "NoSchedule"):
        return
    if any(e.reason == Reason.CordonRestored for e in step.events):
        return  # already done by an earlier phase of this same step
    step.actions.append(slurm_shape(spec, node, keep_pool_labels=True))
    step.events.append(Event.warning(Reason.CordonRestored, f"{node.name} was uncordoned or lost its {SLURM_TAINT_KEY} taint {during}; "
                        "restored: the node belongs to Slurm (to hand it to inference, scale or `kubectl slurmpool move`)"))


def shaped(node: NodeView, patch: PatchNode) -> bool:
    """True when the node already has the patch's labels, taints and schedulability."""
    for key, value in patch.labels.items():
        if node.labels.get(key) != value:
            return False
    if patch.unschedulable is not None and node.unschedulable != patch.unschedulable:
        return False
    return _norm_taints(node.taints) == _norm_taints(patch.taints)


def ensure_slurmd_pod(node: NodeView, step: Step) -> bool:
    """The node's slurmd pod is there and running (True), or is being made so. A pod that ended
    (evicted under memory pressure, refused at admission after a reboot) is a bare pod nothing
    else replaces: it is deleted, with a Warning naming the kubelet's reason, and created again
    once it is gone (its name is the node's)."""
    pod = node.slurmd_pod
    if pod is None:
        step.actions.append(CreateSlurmdPod(node.name))
        return False
    if pod.ended and not pod.deleting:
        step.actions.append(DeleteSlurmdPod(pod))
        why = f"{pod.phase}, reason {pod.reason or 'none given'}" + (f": {pod.message}" if pod.message else "")
        step.events.append(Event.warning(Reason.SlurmdPodReplaced, f"{node.name}: slurmd pod {pod.key} ended ({why}); "
                            "deleting it and starting a new one"))
    return not (pod.ended or pod.deleting)


def _bound_reached(move: MoveRecord, spec: SlurmNodePoolSpec, now: datetime) -> bool:
    """A step whose writes the API server may refuse is bounded (registerTimeout), then rolled
    back. A rollback is never rolled back again (it would go back and forth): it waits, reported."""
    return not move.rollback and _elapsed(move, now) >= seconds(spec.slurm.register_timeout)


# ---------------------------------------------------------------- the machine


@dataclass(frozen=True)
class Pass:
    """What every move of a pass is advanced against: Slurm as observed, the spec and the clock."""

    slurm: SlurmView
    spec: SlurmNodePoolSpec
    now: datetime


def advance(move: MoveRecord, node: NodeView, at: Pass, unhealthy: str | None = None, refusal: Refusal | None = None) -> Step:
    """Take the move as far as the current observations allow. `unhealthy`: why the node is
    broken (health.py); its move stops at the first phase where stopping is safe (stop_side).
    `refusal`: a write of this node the API server refused last pass (named by a bound's rollback)."""
    slurm, spec, now = at.slurm, at.spec, at.now
    step = Step(move=move, refusal=refusal)
    for _ in range(len(TO_SLURM) + len(TO_INFERENCE) + len(BETWEEN_POOLS) + 2):
        if unhealthy and (side := stop_side(move)) is not None:
            return _stop(move, node, at, step, side, unhealthy)
        outcome: Outcome = PHASE_FUNCTIONS[move.phase](move, node, slurm, spec, now, step)
        match outcome:
            case Wait():
                step.move = move
                return step
            case Finish():
                step.move, step.settled, step.finished = None, move.target, move
                step.events.append(Event.normal(Reason.MoveCompleted, f"{node.name} now serves {move.target} (move {move.id})"))
                return step
            case Rollback(why=why):
                back = reverse(move, spec, now, cause=Cause.GIVEBACK if _giveback(move) else Cause.ROLLBACK)
                step.events.append(_rolled_back(move, node, back, why))
                step.hold_until = now + timedelta(seconds=seconds(spec.drain.timeout))
                step.actions, step.blocked_by, step.rolled_back = [], [], move
                move = back
                step.entered.append(back.phase)
            case Advance(to=phase):  # its ensure runs on the same observations
                step.events.append(Event.normal(Reason.MovePhase, f"{node.name}: {move.phase} -> {phase} (move {move.id} to {move.target})"))
                move = move.model_copy(update={"phase": phase, "since": now})
                step.entered.append(phase)
    step.move = move
    return step


def _giveback(move: MoveRecord) -> bool:
    """A move to Slurm that Slurm asked for (power saving: parking.py), not yet declined."""
    return move.cause == Cause.GIVEBACK and not move.rollback


def _rolled_back(move: MoveRecord, node: NodeView, back: MoveRecord, why: str) -> Event:
    if _giveback(move):  # the rollback drains the node: Slurm requeues the job that asked for it
        return Event.warning(Reason.GiveBackDeclined, f"{node.name}: give-back declined: {why}; returning to {back.target} "
                             f"(move {move.id}); Slurm requeues the job waiting for it")
    return Event.warning(Reason.MoveRolledBack, f"{node.name}: {why}; returning to {back.target} (move {move.id})")


# Where a move of an unhealthy node stops, by direction and phase (None: it goes on).
# To inference: Draining and StoppingSlurmd only take the node out of Slurm's service, so the
# move stops and the node stays in Slurm (our drain kept until it is healthy, its slurmd pod
# restarted by the upkeep); Relabeling was entered with its patch sent, so it finishes.
# To Slurm: Cordoning and Evicting only take it out of inference, so it stays in its pool,
# cordoned (a quarantine: on the inference side the cordon is people's); from StartingSlurmd on
# it is held drained in Slurm, so it stays there, drained, never resumed while unhealthy.
# Between inference pools nothing crosses: it goes on.
STOP_AT_SOURCE = {Direction.TO_INFERENCE: (Phase.DRAINING, Phase.STOPPING_SLURMD), Direction.TO_SLURM: (Phase.CORDONING, Phase.EVICTING)}
STOP_IN_SLURM = (Phase.STARTING_SLURMD, Phase.REGISTERING, Phase.RESUMING)


def stop_side(move: MoveRecord) -> str | None:
    """Where a move of an unhealthy node stops now: its source, Slurm, or None (it goes on). A
    declined give-back goes on: its drain is the decline, and the node never served Slurm."""
    if move.cause == Cause.GIVEBACK and move.rollback:
        return None
    if move.phase in STOP_AT_SOURCE.get(move.direction, ()):
        return move.source
    if move.direction == Direction.TO_SLURM and move.phase in STOP_IN_SLURM:
        return SLURM
    return None


def _stop(move: MoveRecord, node: NodeView, at: Pass, step: Step, side: str, why: str) -> Step:
    slurm, spec, now = at.slurm, at.spec, at.now
    step.move, step.stopped, step.blocked_by = None, move, []
    step.settled = side if side != NONE else None
    step.actions = [a for a in step.actions if not isinstance(a, Resume)]
    pool = _pool(spec, pool_of(side))
    if pool is not None:  # back in its inference pool, still cordoned: a quarantine
        step.actions.append(inference_shape(spec, node, pool, keep_cordon=True))
    sn = slurm.nodes.get(node.name) if slurm.available else None
    if side == SLURM and move.target == SLURM and sn is not None and not slurmstate.drain_set(sn):
        drain(step, node, drain_reason(move), now)  # held drained until healthy
    elif _giveback(move) and sn is not None and not slurmstate.drain_set(sn):
        drain(step, node, hold_reason(side), now)  # held in inference (parking.py): Slurm requeues the job
    if _giveback(move):
        step.events.append(Event.warning(Reason.GiveBackDeclined, f"{node.name}: give-back declined: unhealthy ({why}); "
                                         "drained in Slurm, which requeues the job waiting for it"))
    where = {SLURM: "stays in Slurm, drained until it is healthy", NONE: "stays unadopted"}.get(
        side, f"stays in {side}, cordoned (uncordon it once it is fixed)")
    step.events.append(Event.warning(Reason.MoveStopped, f"{node.name} is unhealthy ({why}): move {move.id} to {move.target} stopped "
                        f"in {move.phase}; the node {where}"))
    return step


def reverse(move: MoveRecord, spec: SlurmNodePoolSpec, now: datetime, cause: Cause) -> MoveRecord:
    """The move back to where `move` came from, through the normal phases."""
    source = move.source
    if source == NONE:  # an adopted node goes back to the most important inference pool
        top = max(spec.inference.pools, key=lambda p: (p.priority, [-ord(c) for c in p.name]))
        source = SLURM if move.target != SLURM else inference(top.name)
    return MoveRecord(
        id=f"{move.id}-rb",
        source=move.target,
        target=source,
        phase=first_phase(source, move.target),
        since=now,
        started=now,
        cause=cause,
        rollback=True,
    )


def _elapsed(move: MoveRecord, now: datetime) -> float:
    return (now - move.since).total_seconds()


# -- to inference


def _draining(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    if not slurm.available:
        step.blocked_by = list(SLURM_UNAVAILABLE)
        step.message = f"waiting for Slurm: {slurm.error or 'unavailable'}"
        return WAIT
    if move.source == SLURM and not move.rollback:
        restore_cordon(node, spec, step, f"during move {move.id} (Draining)")
    sn = slurm.nodes.get(node.name)
    if sn is None and move.source == SLURM and not move.rollback:
        # It served Slurm, so Slurm must list it: a wrong Slurm NodeName or a partial answer
        # is no proof that no job runs there. Fail closed: wait and say so (health: SlurmUnlisted).
        step.blocked_by = [Blocker(BlockerKind.SLURM_UNLISTED)]
        step.message = "Slurm does not list the node under its Slurm NodeName (spec.slurm.nodeName); not draining blind"
        return WAIT
    if sn is None:  # never registered (an adopted node, a move to Slurm turned back): nothing to drain
        return Advance(Phase.STOPPING_SLURMD)
    jobs = slurm.jobs_on(node.name)
    drain_set = slurmstate.drain_set(sn)
    foreign = drain_set and why_not_ours(node, sn)
    if not drain_set:
        drain(step, node, drain_reason(move), now)
        step.message = "draining in Slurm"
    elif foreign:
        step.message = f"already drained by someone else ({sn.reason}: {foreign}); not touching that drain"
    if slurmstate.drained(sn) and not jobs:
        if foreign:  # the node leaves Slurm drained either way; their drain stays
            step.events.append(Event.warning(Reason.ForeignDrain, f"{node.name} is drained by someone else ({sn.reason}: {foreign}) "
                                f"during move {move.id}; the move goes on and that drain is left in place"))
        return Advance(Phase.STOPPING_SLURMD)
    step.blocked_by = [Blocker(BlockerKind.JOB, j.job_id) for j in jobs]
    if jobs:
        step.message = f"waiting for {len(jobs)} job(s) to leave the node"
    late = _elapsed(move, now) - seconds(spec.drain.timeout)
    if late < 0:
        return WAIT
    policy = spec.drain.on_timeout
    running = tuple(j.job_id for j in jobs if j.state == "RUNNING")
    expiry = expire(policy, Overdue(running, late))
    if expiry.rollback:
        return Rollback(f"drain timed out after {spec.drain.timeout}")
    if ended := expiry.ended:
        step.actions.append(ended.action)
        step.events.append(Event.warning(ended.reason, f"{node.name}: drain timed out; {ended.verb} job(s) {', '.join(running)}"))
    step.message = f"drain timed out after {spec.drain.timeout} (onTimeout {policy}); " + step.message
    return WAIT


def _stopping_slurmd(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    if move.source == SLURM and not move.rollback:
        restore_cordon(node, spec, step, f"during move {move.id} (StoppingSlurmd)")
    pod = node.slurmd_pod
    if pod is None:
        return Advance(Phase.RELABELING)
    if not pod.deleting:
        step.actions.append(DeleteSlurmdPod(pod))
    step.message = f"stopping slurmd pod {pod.key}"
    return WAIT


def _relabeling(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    pool = _pool(spec, pool_of(move.target))
    if pool is None:  # the pool was removed from the spec mid-move: the planner turns the move back
        step.message = f"inference pool {pool_of(move.target)!r} no longer exists"
        step.blocked_by = [Blocker(BlockerKind.MISSING_POOL)]
        return WAIT
    patch = inference_shape(spec, node, pool, keep_cordon=between_pools(move.source, move.target))
    if shaped(node, patch):
        return Advance(Phase.EVICTING_MISFITS) if between_pools(move.source, move.target) else FINISH
    step.actions.append(patch)
    if step.refusal:
        step.message = str(step.refusal)
    if _bound_reached(move, spec, now):
        return Rollback(f"its labels and taints for {move.target} were not written within {spec.slurm.register_timeout}"
                        + (f" ({step.refusal})" if step.refusal else ""))
    return WAIT


def _evicting_misfits(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    """Pods the new pool's labels and taints would not admit leave through the Eviction API
    (PDBs honoured, never forced); pods that fit stay and keep serving."""
    misfits = [(p, why) for p in node.pods if p.evictable and (why := misfit(p.needs, node.labels, node.taints))]
    if not misfits:
        return FINISH
    step.actions.extend(Evict(p) for p, _ in misfits if not p.deleting)
    step.blocked_by = [Blocker(BlockerKind.POD, p.key) for p, _ in misfits]
    step.message = f"evicting {len(misfits)} pod(s) that do not fit {move.target} (" + "; ".join(
        f"{p.key}: {why}" for p, why in misfits[:3]) + ")"
    if _elapsed(move, now) >= seconds(spec.drain.eviction_timeout):
        if spec.drain.on_eviction_timeout == "Rollback":
            return Rollback(f"evictions refused for {spec.drain.eviction_timeout}")
        step.message = f"evictions timed out after {spec.drain.eviction_timeout} (onEvictionTimeout Wait); " + step.message
    return WAIT


# -- to Slurm


def _cordoning(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    patch = slurm_shape(spec, node, keep_pool_labels=True, claims_cordon=True)
    if node.unschedulable and node.has_taint(SLURM_TAINT_KEY, "NoSchedule"):
        return Advance(Phase.EVICTING)
    step.actions.append(patch)
    return WAIT


def _evicting(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    restore_cordon(node, spec, step, f"during move {move.id} (Evicting)")
    pending = [p for p in node.pods if p.evictable]
    if not pending:
        return Advance(Phase.STARTING_SLURMD)
    step.actions.extend(Evict(p) for p in pending if not p.deleting)
    step.blocked_by = [Blocker(BlockerKind.POD, p.key) for p in pending]
    step.message = f"evicting {len(pending)} pod(s)"
    if _elapsed(move, now) >= seconds(spec.drain.eviction_timeout):
        # A give-back cannot wait: Slurm's ResumeTimeout runs. Declined, its job is requeued.
        if spec.drain.on_eviction_timeout == "Rollback" or _giveback(move):
            return Rollback(f"evictions refused for {spec.drain.eviction_timeout}")
        step.message = f"evictions timed out after {spec.drain.eviction_timeout} (onEvictionTimeout Wait); " + step.message
    return WAIT


def _starting_slurmd(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    if not slurm.available:
        step.blocked_by = list(SLURM_UNAVAILABLE)
        step.message = f"waiting for Slurm: {slurm.error or 'unavailable'}"
        return WAIT
    # Hold the node drained in Slurm until we have checked it: no job lands before Resuming. Not
    # a give-back: a drain would requeue the job Slurm powers the node up for (its own hold).
    sn = slurm.nodes.get(node.name)
    held = sn is None or slurmstate.drain_set(sn) or _giveback(move)
    if not held:
        drain(step, node, drain_reason(move), now)
    patch = slurm_shape(spec, node)
    if not shaped(node, patch):
        step.actions.append(patch)
    pod = node.slurmd_pod
    running = ensure_slurmd_pod(node, step)
    if running and held and shaped(node, patch):
        return Advance(Phase.REGISTERING)
    if pod is not None and pod.deleting:
        step.message = "waiting for an old slurmd pod to go"
    if step.refusal:
        step.message = str(step.refusal)
    if _bound_reached(move, spec, now):
        return Rollback(f"its slurmd pod did not start within {spec.slurm.register_timeout}"
                        + (f" ({step.refusal})" if step.refusal else f" ({step.message})" if step.message else ""))
    return WAIT


def _registering(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    if not slurm.available:
        step.blocked_by = list(SLURM_UNAVAILABLE)
        step.message = f"waiting for Slurm: {slurm.error or 'unavailable'}"
        return WAIT
    restore_cordon(node, spec, step, f"during move {move.id} (Registering)")
    ensure_slurmd_pod(node, step)
    sn = slurm.nodes.get(node.name)
    problem = usable_problem(sn, spec) or stale_slurmd(sn, node.slurmd_pod)
    if problem is None:
        return Advance(Phase.RESUMING)
    step.message = f"waiting for slurmd to register: {problem}"
    step.blocked_by = [Blocker(BlockerKind.SLURMD_REGISTRATION)]
    if _elapsed(move, now) >= seconds(spec.slurm.register_timeout):
        return Rollback(f"slurmd did not register within {spec.slurm.register_timeout}: {problem}")
    return WAIT


# Slurm and Kubernetes clocks may differ a little; a slurmd this much older than its pod is not its.
CLOCK_SLACK = timedelta(seconds=5)


def stale_slurmd(sn: SlurmNode | None, pod: PodView | None) -> str | None:
    """Slurm still counts a stopped slurmd as responding for up to SlurmdTimeout: a node moved out
    and straight back looks registered although the new pod's slurmd never started. Registered
    means a slurmd started no earlier than the pod that should run it."""
    if sn is None or pod is None or sn.slurmd_start is None or pod.created is None:
        return None  # nothing to compare (a Slurm without SlurmdStartTime): trust the state
    if sn.slurmd_start < pod.created - CLOCK_SLACK:
        return f"Slurm still sees the slurmd started {sn.slurmd_start:%H:%M:%S}, before pod {pod.key}"
    return None


def usable_problem(sn: SlurmNode | None, spec: SlurmNodePoolSpec) -> str | None:
    """Why Slurm cannot use the node yet, or None."""
    if sn is None:
        return "Slurm does not know the node"
    if not slurmstate.responding(sn):
        return f"state {slurmstate.text(sn)}"
    if spec.slurm.gres and (short := gres_shortfall(spec.slurm.gres, sn.gres)):
        return f"GRES {sn.gres or 'none'} does not meet {spec.slurm.gres} ({short})"
    missing = set(spec.slurm.features) - set(sn.features)
    if missing:
        return f"missing features {sorted(missing)}"
    return None


def _resuming(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    restore_cordon(node, spec, step, f"during move {move.id} (Resuming)")
    if not slurm.available:
        step.blocked_by = list(SLURM_UNAVAILABLE)
        return WAIT
    sn = slurm.nodes.get(node.name)
    if sn is None or not slurmstate.drain_set(sn):
        step.drop_claim = True
        return FINISH
    if foreign := why_not_ours(node, sn):
        step.events.append(Event.warning(Reason.ForeignDrain, f"{node.name} is drained by someone else ({sn.reason}: {foreign}); left drained"))
        step.drop_claim = True
        return FINISH
    step.actions.append(Resume(node.name))
    return WAIT


# The table of phase functions (the phases themselves are in phases.py).
PHASE_FUNCTIONS: dict[Phase, Callable[[MoveRecord, NodeView, SlurmView, SlurmNodePoolSpec, datetime, Step], Outcome]] = {
    Phase.DRAINING: _draining,
    Phase.STOPPING_SLURMD: _stopping_slurmd,
    Phase.RELABELING: _relabeling,
    Phase.EVICTING_MISFITS: _evicting_misfits,
    Phase.CORDONING: _cordoning,
    Phase.EVICTING: _evicting,
    Phase.STARTING_SLURMD: _starting_slurmd,
    Phase.REGISTERING: _registering,
    Phase.RESUMING: _resuming,
}
assert set(PHASE_FUNCTIONS) == set(Phase), "every phase has its function"
