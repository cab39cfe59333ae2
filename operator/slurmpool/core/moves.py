"""The per-node move state machine. Pure: given a move, what we observe, the spec and the
clock, it says which idempotent actions to take now and where the move stands.

Each phase (phases.py) has a function here: its *ensure* (actions that are safe to repeat)
and its *done* test on fresh observations, answering one typed outcome (Wait, Advance,
Finish, Rollback). A phase advances only when its done test passes. So an operator killed
at any instant re-observes, re-ensures and carries on: no step runs twice harmfully.

    to inference:  Draining -> StoppingSlurmd -> [PoweringDown] -> Relabeling -> settled inference:<pool>
    to Slurm:      Cordoning -> Evicting -> [PoweringUp] -> StartingSlurmd -> Registering -> Resuming -> settled slurm
    between pools: Relabeling -> EvictingMisfits -> settled inference:<other pool>   (no Slurm step)

The bracketed phases are power saving's (`spec.slurm.parking: PowerSave`): entered only when
their done test does not already pass, so a Drain pool's moves go as they always went.

A rollback is a move back the way it came, through the same phases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import ClassVar

from slurmbridge.models import SlurmJob, SlurmNode, gres_shortfall

from slurmpool.core import slurmstate
from slurmpool.core.events import Event, Reason
from slurmpool.core.checkpoint import CheckpointRecord
from slurmpool.core.expiry import Cancel, Expiry, Requeue, Signal, expire, overdue
from slurmpool.core.fit import misfit
from slurmpool.core.movejobs import MoveJobs
from slurmpool.core.ownership import claim, why_not_ours
from slurmpool.core.published import slurm_view as published_view
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
    iso,
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
class PowerDown:
    node: str


@dataclass(frozen=True)
class PowerDownAgain(PowerDown):
    """A power-down Slurm left queued (POWER_DOWN, never POWERING_DOWN), asked again: forced
    (POWER_DOWN_FORCE), which the drained node without jobs it is asked for loses nothing to."""


@dataclass(frozen=True)
class PowerUp:
    node: str


@dataclass(frozen=True)
class Evict:
    pod: PodView


@dataclass(frozen=True)
class CreateSlurmdPod:
    node: str
    boot: bool = False  # `slurmd -b`: Slurm is powering the node up and counts it booted only on a boot reported now


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


Action = Drain | Resume | PowerDown | PowerUp | Signal | Requeue | Cancel | Evict | CreateSlurmdPod | DeleteSlurmdPod | PatchNode


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
    checkpoint: CheckpointRecord | None = None  # written on the Node with the record, before the signal
    drop_checkpoint: bool = False  # the drain that signalled is over: its record goes
    entered: list[Phase] = field(default_factory=list)  # phases this step moved into
    finished: MoveRecord | None = None  # the move that completed in this step (metrics)
    rolled_back: MoveRecord | None = None  # the move this step turned back (metrics)
    stopped: MoveRecord | None = None  # the move this step stopped: its node is unhealthy (metrics)
    refusal: Refusal | None = None  # what the API server refused on this node last pass
    given_back: bool | None = None  # True: mark the node given back to Slurm's job (now); False: unmark; None: as it is
    power_down_asked: datetime | None = None  # keep_parked asked again now: written on the Node before the request
    jobs: MoveJobs | None = None  # Draining: the move's jobs as it saw and ended them (advance() puts them in the record)
    adopted: bool = False  # its adoption is done (adoption.py): slurmpool.io/adopt is removed


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
    the cordon stays as it is (on an inference node it is people's). Our cordon never stands
    without our taint (both are written and lifted in one patch): a cordon without it is someone
    else's, set after ours was lifted (the write repeated before the move's end is recorded)."""
    labels: dict[str, str | None] = {k: None for k in _pool_label_keys(spec) - set(pool.labels)}
    labels.update(pool.labels)
    labels[LABEL_SIDE] = "inference"
    taints = [t for t in node.taints if not _managed_taint(spec, t)]
    taints += [t.model_dump(exclude_defaults=False) for t in pool.taints]
    ours = node.unschedulable and node.has_taint(SLURM_TAINT_KEY, "NoSchedule") and not node.cordon_kept
    return PatchNode(node.name, labels, tuple(taints), unschedulable=False if ours and not keep_cordon else None)


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


def ensure_slurmd_pod(node: NodeView, step: Step, boot: bool = False) -> bool:
    """The node's slurmd pod is there and running (True), or is being made so. A pod that ended
    (evicted under memory pressure, refused at admission after a reboot) is a bare pod nothing
    else replaces: it is deleted, with a Warning naming the kubelet's reason, and created again
    once it is gone (its name is the node's). `boot`: Slurm shows the node POWERING_UP, so the
    new slurmd reports a boot (`-b`; on any other start it would be "unexpectedly rebooted")."""
    pod = node.slurmd_pod
    if pod is None:
        step.actions.append(CreateSlurmdPod(node.name, boot=boot))
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


# ---------------------------------------------------------------- power saving


def power_save_parking(spec: SlurmNodePoolSpec, slurm: SlurmView) -> bool:
    """Are parked nodes powered down? The pool asks for it (`spec.slurm.parking: PowerSave`) and
    Slurm's power saving is known to be on. Off or not known, they are parked by their drain
    meanwhile (status: PowerSaveReady), never powered down where Slurm could not bring them back."""
    return spec.slurm.parking == "PowerSave" and slurm.available and slurm.power_save is not None and slurm.power_save.on


def powers_down(spec: SlurmNodePoolSpec, slurm: SlurmView, sn: SlurmNode | None) -> bool:
    """Should Slurm power this node, leaving Slurm, down (PoweringDown)? When it parks by power
    saving, and, in any pool, when it is coming up with no slurmd to come (a power-up turned back):
    left so, Slurm marks it DOWN at ResumeTimeout."""
    return sn is not None and not slurmstate.parked(sn) and (power_save_parking(spec, slurm) or slurmstate.powering_up(sn))


def keep_parked(node: NodeView, at: Pass) -> Step | None:
    """Upkeep of a node settled in inference and parked under our drain: Slurm powers it down when
    `powers_down` says so (a Drain -> PowerSave switch converts parked nodes in place; a crash
    between a move's steps leaves the state on the Node and in Slurm, and this finishes it).
    A drain of someone else's, a lent node (no drain), or one with jobs is never touched."""
    sn = at.slurm.nodes.get(node.name) if at.slurm.available else None
    if sn is None or not powers_down(at.spec, at.slurm, sn) or slurmstate.parked(sn) or slurmstate.busy(sn):
        return None
    if not slurmstate.drain_set(sn) or why_not_ours(node, sn) or node.slurmd_pod is not None:
        return None
    if slurmstate.power_down_asked(sn):
        return _ask_again(node, sn, at)
    return Step(move=None, actions=[PowerDown(node.name)], power_down_asked=at.now,
                message=f"parked: powering down in Slurm (state {slurmstate.text(sn)})")


def _ask_again(node: NodeView, sn: SlurmNode, at: Pass) -> Step | None:
    """A power-down Slurm keeps queued (POWER_DOWN set, never POWERING_DOWN: a node whose slurmd
    never registered, measured on 22.05 as `drained!`) is asked again, forced, once per
    `registerTimeout` since the node parked or was last asked (ANN_POWER_DOWN_ASKED, written first),
    with a Warning each time. Idle and drained by us: forcing it ends no job."""
    bound = timedelta(seconds=seconds(at.spec.slurm.register_timeout))
    since = max((t for t in (node.settled_at, node.power_down_asked) if t is not None), default=None)
    if since is None:  # asked by no record this operator wrote (an older one's park): the bound starts now
        return Step(move=None, power_down_asked=at.now, message=f"parked: Slurm has not powered it down (state {slurmstate.text(sn)})")
    if at.now - since < bound:
        return None
    state = slurmstate.text(sn)
    return Step(move=None, actions=[PowerDownAgain(node.name)], power_down_asked=at.now,
                message=f"parked: Slurm has not powered it down (state {state}); asked again, forced",
                events=[Event.warning(Reason.NotPoweredDown, f"{node.name}: Slurm left its power-down queued for {at.spec.slurm.register_timeout} "
                                      f"(state {state}); asking again with POWER_DOWN_FORCE (it runs no job), at most once per "
                                      f"{at.spec.slurm.register_timeout} until Slurm powers it down")])


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
            return _forget_checkpoint(node, _stop(move, node, at, step, side, unhealthy))
        outcome: Outcome = PHASE_FUNCTIONS[move.phase](move, node, slurm, spec, now, step)
        if step.jobs is not None and step.jobs != (move.jobs or MoveJobs()):  # in the record before the requeue or signal it names
            move = move.model_copy(update={"jobs": step.jobs})
        step.jobs = None
        match outcome:
            case Wait():
                step.move = move
                return _forget_checkpoint(node, step)
            case Finish():
                step.move, step.settled, step.finished = None, move.target, move
                step.events.append(Event.normal(Reason.MoveCompleted, f"{node.name} now serves {move.target} (move {move.id})"))
                return _forget_checkpoint(node, step)
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
    return _forget_checkpoint(node, step)


def _forget_checkpoint(node: NodeView, step: Step) -> Step:
    """A checkpoint record lives as long as the Draining that signalled: once the move is past it
    (or turned back, or done) the record goes."""
    if node.checkpoint is not None and step.checkpoint is None and (step.move is None or step.move.phase != Phase.DRAINING):
        step.drop_checkpoint = True
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
# it is held drained in Slurm, so it stays there, drained, never resumed while unhealthy. PoweringDown
# finishes as Relabeling does (its slurmd is stopped); PoweringUp stops at the source, no slurmd
# started yet (a power-up it asked for is undone by the parked node's upkeep, keep_parked).
# Between inference pools nothing crosses: it goes on.
STOP_AT_SOURCE = {Direction.TO_INFERENCE: (Phase.DRAINING, Phase.STOPPING_SLURMD),
                  Direction.TO_SLURM: (Phase.CORDONING, Phase.EVICTING, Phase.POWERING_UP)}
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
    """The move back to where `move` came from, through the normal phases. An aborted move is in
    no history of its own (only a rolled-back one is, with its jobs): its jobs go on with the move back."""
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
        jobs=move.jobs if cause == Cause.ABORT else None,
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
    if sn is None and (unlisted := _unlisted(move, node, slurm)):
        # It served Slurm, so Slurm must list it: a wrong Slurm NodeName or a partial answer
        # is no proof that no job runs there. Fail closed: wait and say so (health: SlurmUnlisted).
        step.blocked_by = [Blocker(BlockerKind.SLURM_UNLISTED)]
        step.message = f"{unlisted}; not draining blind"
        return WAIT
    if sn is None:  # never registered (an adopted node, a move to Slurm turned back): nothing to drain
        return Advance(Phase.STOPPING_SLURMD)
    jobs = slurm.jobs_on(node.name)
    step.jobs = _jobs_seen(move, node, jobs)
    drain_set = slurmstate.drain_set(sn)
    foreign = drain_set and why_not_ours(node, sn)
    if not drain_set:
        drain(step, node, drain_reason(move), now)
        step.message = "draining in Slurm"
    elif not foreign and node.drain_claim is None:
        # Ours without a claim: a Node created again (ownership.py). Claimed as Slurm stamped it,
        # so the node keeps a claim it can read wherever the move ends.
        step.claim = DrainClaim(sn.reason or "", sn.reason_time)
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
    policy = spec.drain.on_timeout
    warned = policy == "Checkpoint" and node.checkpoint is not None and node.checkpoint.warned_for(
        tuple(j.job_id for j in jobs if j.state == "RUNNING"), now)
    if late < 0 and not warned:  # a planned handover warned them before the edge (warning.py): their grace is its own
        return WAIT
    expiry = expire(policy, overdue(jobs, late, spec.drain, node.checkpoint, now))
    if expiry.rollback:
        return Rollback(f"drain timed out after {spec.drain.timeout}")
    why = "drain timed out" if late >= 0 else "jobs warned before the handover's edge"
    for ended in expiry.ended:
        step.jobs = step.jobs.ending("requeued" if isinstance(ended.action, Requeue) else "cancelled", ended.action.job_ids)
        step.actions.append(ended.action)
        step.events.append(Event.warning(ended.reason, f"{node.name}: {why}; {ended.verb} job(s) {', '.join(ended.action.job_ids)}"))
    step.jobs = step.jobs.signalling(j for signal in expiry.signals for j in signal.job_ids)
    step.message = (f"drain timed out after {spec.drain.timeout}" if late >= 0 else why) + f" (onTimeout {policy}); " \
        + checkpointing(node.name, expiry, step, spec) + step.message
    return WAIT


def _jobs_seen(move: MoveRecord, node: NodeView, jobs: list[SlurmJob]) -> MoveJobs:
    """The move's jobs with those on the node now, and those the node's checkpoint record says
    were signalled (by this drain, or a handover's warning before the edge)."""
    seen = (move.jobs or MoveJobs()).seeing(j.job_id for j in jobs)
    return seen.signalling(j for j, _ in node.checkpoint.jobs) if node.checkpoint is not None else seen


def checkpointing(node: str, expiry: Expiry, step: Step, spec: SlurmNodePoolSpec) -> str:
    """The Checkpoint policy's signal and record into the step (the record is written first, with
    the step's patch); what the drain waits for, in words."""
    for signal in expiry.signals:
        step.actions.append(signal)
        step.checkpoint = expiry.record
        to = "the batch shell of" if signal.batch_only else "every step of"
        step.events.append(Event.warning(Reason.JobsSignalled, f"{node}: drain timed out; sent {signal.signal} to {to} job(s) "
                                         f"{', '.join(signal.job_ids)}; requeued after {spec.drain.checkpoint.grace} "
                                         "(or the job's own --signal time, if longer) unless they end"))
    words = []
    if expiry.in_grace_until is not None:
        words.append(f"jobs checkpointing until {iso(expiry.in_grace_until)}")
    if stuck := expiry.not_requeueable:
        words.append(f"job(s) {', '.join(stuck)} cannot be requeued (--no-requeue or not a batch job): waiting for them "
                     "(drain.checkpoint.notRequeueable: Cancel cancels them)")
    return "; ".join(words) + ("; " if words else "")


def _stopping_slurmd(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    if move.source == SLURM and not move.rollback:
        restore_cordon(node, spec, step, f"during move {move.id} (StoppingSlurmd)")
    pod = node.slurmd_pod
    if pod is None:
        sn = slurm.nodes.get(node.name) if slurm.available else None
        return Advance(Phase.POWERING_DOWN if powers_down(spec, slurm, sn) else Phase.RELABELING)
    if not pod.deleting and (back := _unsafe_to_stop(move, node, slurm, step)) is not None:
        return back
    if not pod.deleting:
        step.actions.append(DeleteSlurmdPod(pod))
    step.message = f"stopping slurmd pod {pod.key}"
    return WAIT


def _unlisted(move: MoveRecord, node: NodeView, slurm: SlurmView) -> str | None:
    """Why a node Slurm's view lacks may still run jobs, or None when its absence means it never
    registered (an adopted node, a move to Slurm turned back). A node with no valid Slurm name
    (its nodeNameLabel missing) cannot be looked up at all, adopted or not: never "nothing to drain"."""
    if node.name in slurm.unnamed:
        return "the node has no valid Slurm NodeName (spec.slurm.nodeName, nodeNameLabel), so Slurm cannot be asked about it"
    if move.source == SLURM and not move.rollback:
        return "Slurm does not list the node under its Slurm NodeName (spec.slurm.nodeName)"
    return None


def _unsafe_to_stop(move: MoveRecord, node: NodeView, slurm: SlurmView, step: Step) -> Outcome | None:
    """Slurm is looked at again right before slurmd stops: Draining's check may be passes old,
    and the drain can be lifted since (a slurmctld failover that lost its state save, an admin's
    resume sweep) and a job started. A node not drained, or holding a job, goes back to Draining
    (which drains it again and waits for the job); Slurm unseen, slurmd is not stopped blind."""
    if not slurm.available:
        step.blocked_by = list(SLURM_UNAVAILABLE)
        step.message = f"waiting for Slurm before stopping slurmd: {slurm.error or 'unavailable'}"
        return WAIT
    sn = slurm.nodes.get(node.name)
    if sn is None and (unlisted := _unlisted(move, node, slurm)):
        step.blocked_by = [Blocker(BlockerKind.SLURM_UNLISTED)]
        step.message = f"{unlisted}; not stopping slurmd blind"
        return WAIT
    if sn is None or (slurmstate.drain_set(sn) and slurmstate.drained(sn) and not slurm.jobs_on(node.name)):
        return None
    jobs = ", ".join(j.job_id for j in slurm.jobs_on(node.name)) or "none listed"
    lifted = "its drain was lifted" if not slurmstate.drain_set(sn) else "it is still busy"
    step.events.append(Event.warning(Reason.DrainLifted, f"{node.name}: {lifted} before slurmd stopped (state {slurmstate.text(sn)}, "
                                     f"jobs: {jobs}); slurmd kept, back to Draining (move {move.id})"))
    return Advance(Phase.DRAINING)


def _powering_down(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    """Slurm powers the drained node down, its slurmd stopped: parked as `drain~` (capacity Slurm
    shows, never schedules) until parking.py lends it. Done once Slurm shows it powered down or
    on its way, still drained. A node that need not be powered down (powers_down) goes on: parked
    by its drain. Bounded by registerTimeout, then parked by its drain: keep_parked asks again."""
    sn = slurm.nodes.get(node.name) if slurm.available else None
    if sn is not None and slurmstate.parked(sn) and not slurmstate.drain_set(sn):
        # Slurm lifts the drain of a node it powers down (26.05's power_save.c: "Clear
        # power_down_asap") or gives up on (ResumeTimeout): the park holds it, drained again.
        drain(step, node, drain_reason(move), now)
        step.message = "Slurm lifted the drain as it powered the node down: draining it again"
        return WAIT
    if sn is None and power_save_parking(spec, slurm):
        # Slurm's answer left the node out (a lying Slurm): neither known powered down nor known
        # up. Waiting, as for a power-down Slurm has not taken: done, it would count as parked
        # by its drain while Slurm powers it down, and a move back would start its slurmd there.
        step.message = "Slurm does not list the node: waiting for it to show the power-down"
        return _powered_down_within_bound(move, node, spec, now, step, "not listed")
    if not powers_down(spec, slurm, sn):
        return Advance(Phase.RELABELING)
    assert sn is not None, "powers_down needs the node in Slurm"
    if not slurmstate.power_down_asked(sn):
        step.actions.append(PowerDown(node.name))
    step.message = f"powering down in Slurm (state {slurmstate.text(sn)})"
    return _powered_down_within_bound(move, node, spec, now, step, f"state {slurmstate.text(sn)}")


def _powered_down_within_bound(move: MoveRecord, node: NodeView, spec: SlurmNodePoolSpec, now: datetime, step: Step, state: str) -> Outcome:
    """PoweringDown waits registerTimeout at most; then the node is parked by its drain, reported."""
    if _elapsed(move, now) >= seconds(spec.slurm.register_timeout):
        step.events.append(Event.warning(Reason.NotPoweredDown, f"{node.name}: Slurm did not power it down within "
                                         f"{spec.slurm.register_timeout} ({state}); parked drained meanwhile, "
                                         "powered down once Slurm takes the request"))
        return Advance(Phase.RELABELING)
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
        return Advance(_starting_phase(node, slurm))
    step.actions.extend(Evict(p) for p in pending if not p.deleting)
    step.blocked_by = [Blocker(BlockerKind.POD, p.key) for p in pending]
    step.message = f"evicting {len(pending)} pod(s)"
    if _elapsed(move, now) >= seconds(spec.drain.eviction_timeout):
        # A give-back cannot wait: Slurm's ResumeTimeout runs. Declined, its job is requeued.
        if spec.drain.on_eviction_timeout == "Rollback" or _giveback(move):
            return Rollback(f"evictions refused for {spec.drain.eviction_timeout}")
        step.message = f"evictions timed out after {spec.drain.eviction_timeout} (onEvictionTimeout Wait); " + step.message
    return WAIT


def _starting_phase(node: NodeView, slurm: SlurmView) -> Phase:
    """PoweringUp, unless Slurm shows the node powered, or powering up already, or does not list it."""
    sn = slurm.nodes.get(node.name) if slurm.available else None
    if slurm.available and (sn is None or slurmstate.up_or_coming_up(sn)):
        return Phase.STARTING_SLURMD
    return Phase.POWERING_UP


def _powering_up(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    """A node Slurm shows powered down is powered up before its slurmd starts, drained first (no
    job lands before Resuming). Done once Slurm shows it POWERING_UP (asked by us, or by Slurm for
    a job it placed there) or powered. One still on its way down is powered up once it is down."""
    restore_cordon(node, spec, step, f"during move {move.id} (PoweringUp)")
    if not slurm.available:
        step.blocked_by = list(SLURM_UNAVAILABLE)
        step.message = f"waiting for Slurm: {slurm.error or 'unavailable'}"
        return WAIT
    sn = slurm.nodes.get(node.name)
    if sn is None or slurmstate.up_or_coming_up(sn):
        return Advance(Phase.STARTING_SLURMD)
    if not slurmstate.drain_set(sn):
        drain(step, node, drain_reason(move), now)  # powered up once the drain is in
        step.message = "draining before powering up"
    else:
        _power_up(node, sn, step)
    if _bound_reached(move, spec, now):
        return Rollback(f"Slurm did not power it up within {spec.slurm.register_timeout} (state {slurmstate.text(sn)})")
    return WAIT


def _power_up(node: NodeView, sn: SlurmNode, step: Step) -> None:
    """Ask Slurm to power the (drained) node up once it is down; until then, wait for it."""
    if slurmstate.powered_down(sn):
        step.actions.append(PowerUp(node.name))
        step.message = "powering up in Slurm"
    else:
        step.message = f"waiting for Slurm to power it up (state {slurmstate.text(sn)})"


# How long after Slurm shows a node POWERING_UP its slurmd -b may start (see _starting_slurmd).
BOOT_AFTER_POWER_UP = timedelta(seconds=3)


def _starting_slurmd(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    if not slurm.available:
        step.blocked_by = list(SLURM_UNAVAILABLE)
        step.message = f"waiting for Slurm: {slurm.error or 'unavailable'}"
        return WAIT
    # Hold the node drained in Slurm until we have checked it: no job lands before Resuming. But
    # not a node Slurm has placed jobs on (it asked for it back: POWERING_UP for them), nor a
    # give-back: a drain would requeue them, and they wait for this slurmd anyway (Slurm starts
    # them once it registers).
    sn = slurm.nodes.get(node.name)
    held = sn is None or slurmstate.drain_set(sn) or slurmstate.busy(sn) or _giveback(move)
    if not held:
        drain(step, node, drain_reason(move), now)
    patch = slurm_shape(spec, node)
    if not shaped(node, patch):
        step.actions.append(patch)
    pod = node.slurmd_pod
    if sn is None and pod is None and _hidden_while_powered_down(move, node, spec, now):
        # Slurm's answer left out a node it last showed powered down: a slurmd registering there
        # would be "unexpectedly rebooted". It waits for Slurm to list the node again, half the
        # registerTimeout at most: a node Slurm still does not list is one it no longer knows
        # (a dynamic node deleted), started as any unlisted node.
        step.message = "Slurm does not list the node, last seen powered down: waiting for it before slurmd starts"
        running = False
    elif sn is not None and not slurmstate.up_or_coming_up(sn):
        # Powered down again (a power-up not answered within ResumeTimeout): no slurmd for a
        # powered-down node (Slurm would not count it booted); powered up first, held drained.
        if held:
            _power_up(node, sn, step)
        running = False
    elif slurmstate.powering_up(sn) and node.slurmd_pod is None and _since_power_up(move, now) < BOOT_AFTER_POWER_UP:
        # Slurm counts the node booted only if slurmd's boot time (`-b`: its start, in whole
        # seconds, less its uptime) is after the power-up request; a slurmd started within that
        # second was measured (22.05) to leave the node POWERING_UP until ResumeTimeout.
        step.message = "letting Slurm's power-up request age before slurmd -b starts"
        running = False
    else:
        running = ensure_slurmd_pod(node, step, boot=slurmstate.powering_up(sn))
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


def _since_power_up(move: MoveRecord, now: datetime) -> timedelta:
    """At least how long ago Slurm's power-up request was made: a give-back's came before the
    move began (Slurm asked, then the operator saw it; the cordon and evictions ran meanwhile),
    the operator's own before this phase (PoweringUp saw it taken)."""
    return now - (move.started if _giveback(move) else move.since)


def _hidden_while_powered_down(move: MoveRecord, node: NodeView, spec: SlurmNodePoolSpec, now: datetime) -> bool:
    """Did the operator last publish the node powered down or on its way down, not asked back
    (published.py), within half the registerTimeout of this phase?"""
    last = published_view([node]).nodes.get(node.name)
    return (last is not None and slurmstate.power_down_asked(last) and not slurmstate.up_or_coming_up(last)
            and _elapsed(move, now) < seconds(spec.slurm.register_timeout) / 2)


def _registering(move: MoveRecord, node: NodeView, slurm: SlurmView, spec: SlurmNodePoolSpec, now: datetime, step: Step) -> Outcome:
    if not slurm.available:
        step.blocked_by = list(SLURM_UNAVAILABLE)
        step.message = f"waiting for Slurm: {slurm.error or 'unavailable'}"
        return WAIT
    restore_cordon(node, spec, step, f"during move {move.id} (Registering)")
    sn = slurm.nodes.get(node.name)
    ensure_slurmd_pod(node, step, boot=slurmstate.powering_up(sn))
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
    Phase.POWERING_DOWN: _powering_down,
    Phase.RELABELING: _relabeling,
    Phase.EVICTING_MISFITS: _evicting_misfits,
    Phase.CORDONING: _cordoning,
    Phase.EVICTING: _evicting,
    Phase.POWERING_UP: _powering_up,
    Phase.STARTING_SLURMD: _starting_slurmd,
    Phase.REGISTERING: _registering,
    Phase.RESUMING: _resuming,
}
assert set(PHASE_FUNCTIONS) == set(Phase), "every phase has its function"
