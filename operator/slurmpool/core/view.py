"""What the operator knows about one node: the pure core's input, built by the adapters.

A node's *placement* is where it serves: "slurm", or "inference:<pool>" for a named
inference pool. A node the operator has not adopted yet has placement "none".
The placement and any move in flight live in the Node's annotations, so they survive
an operator restart.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError, model_validator

from slurmbridge.models import PowerSave, SlurmJob, SlurmNode, SlurmReservation, TopologyGroup

from slurmpool.core import slurmstate
from slurmpool.core.checkpoint import CheckpointRecord
from slurmpool.core.fit import PodNeeds
from slurmpool.core.movejobs import MoveJobs
from slurmpool.core.phases import BETWEEN_POOLS, TO_INFERENCE, TO_SLURM, Phase
# Placements are parsed and printed in placement.py only; re-exported here for every caller.
from slurmpool.core.placement import (  # noqa: F401
    NONE as NONE, SLURM as SLURM, Direction as Direction, Placement as Placement, Side as Side, inference as inference, placement_problem as placement_problem, pool_of as pool_of, side_of as side_of,
)

T = TypeVar("T")

PREFIX = "slurmpool.io"
ANN_POOL = f"{PREFIX}/pool"  # namespace/name of the pool that owns the node
ANN_PLACEMENT = f"{PREFIX}/placement"  # settled placement
ANN_MOVE = f"{PREFIX}/move"  # JSON MoveRecord while a move is in flight
ANN_PIN = f"{PREFIX}/pin"  # on-call: keep (or bring) the node at this placement
ANN_HOLD_UNTIL = f"{PREFIX}/hold-until"  # no new move before this time (after a rollback)
ANN_MOVE_NOW = f"{PREFIX}/move-now"  # on-call: move this node now (a one-shot pin, cleared when done)
ANN_SLURM = f"{PREFIX}/slurm"  # published by the operator: the node's Slurm state and jobs (JSON)
ANN_SETTLED = f"{PREFIX}/settled-at"  # when the node last settled at its placement
ANN_DRAIN = f"{PREFIX}/drain"  # JSON DrainClaim: the Slurm drain the operator set (ownership.py)
# When Slurm asked the node back (power saving: a job allocated on it while it was parked, lent);
# while Slurm's jobs hold it the target counts it on the Slurm side (parking.py, target.py).
ANN_GIVEN_BACK = f"{PREFIX}/given-back"
ANN_CHECKPOINT = f"{PREFIX}/checkpoint"  # JSON CheckpointRecord: the jobs signalled to checkpoint, and when
# When a parked node Slurm left not powered down was last asked again (moves.keep_parked): once per registerTimeout.
ANN_POWER_DOWN_ASKED = f"{PREFIX}/power-down-asked"
ANN_FORCE = f"{PREFIX}/force"  # on-call: "true" lets a pin or move-now move an unhealthy node
# A person: this unplaced node's slurmd runs outside Kubernetes today; take it into the Slurm side
# as it is (adoption.py). Removed by the operator once the node's slurmd pod has registered.
ANN_ADOPT = f"{PREFIX}/adopt"
# "true": the node was already cordoned by someone else when a move took it to Slurm; that cordon
# is theirs, so it stays when the node returns to inference (moves.inference_shape; patch.py writes it).
ANN_CORDON_KEPT = f"{PREFIX}/cordon-kept"
LABEL_SIDE = f"{PREFIX}/side"  # "slurm" or "inference": for selectors and humans
LABEL_POOL = f"{PREFIX}/pool"  # on slurmd pods: the owning SlurmNodePool's name
LABEL_COMPONENT = f"{PREFIX}/component"  # "slurmd" on slurmd pods (the lab agent's contract)
SLURM_TAINT_KEY = f"{PREFIX}/slurm"  # NoSchedule taint that keeps inference pods off Slurm nodes
REASON_PREFIX = "slurmpool:"  # every Slurm drain we set; we never touch a drain without it
OUR_RESERVATIONS = "slurmpool-"  # every reservation name we make (handover.reservation_name; the bridge refuses others)

def counts_at(node: NodeView) -> str:
    """The placement a node counts at: its move's target while one is in flight, else where it is
    settled (NONE: not adopted). The split, the status, demand and the metrics all count by it."""
    move = node.move
    return move.target if move else node.placement


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    """The inverse of iso(), tolerant: None for an empty or malformed value."""
    try:
        return read_time(value)
    except ValueError:
        return None


def read_time(value: str | None) -> datetime | None:
    """An RFC 3339 time as the operator writes it; None for an empty value. Raises ValueError."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone")
    return parsed


MAX_RECORD_CHARS = 4096  # a record the operator writes is ~300 characters
MAX_RECORD_DEPTH = 4  # and flat: one object of strings


def json_object(text: str) -> dict[str, Any]:
    """An annotation's JSON object; ValueError with a message for people otherwise. Anyone with
    Node patch rights can write these: a huge or deeply nested value is refused before parsing
    (json.loads of 1,000 nested arrays raised RecursionError, which escaped the Node watch)."""
    if len(text) > MAX_RECORD_CHARS:
        raise ValueError(f"too large ({len(text)} characters; at most {MAX_RECORD_CHARS})")
    if _depth(text) > MAX_RECORD_DEPTH:
        raise ValueError(f"nested deeper than {MAX_RECORD_DEPTH}")
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"not JSON ({err})") from None
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    return body


def _depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings (an upper bound for malformed text)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


@dataclass(frozen=True)
class RecordProblem:
    """An annotation of a node that the operator cannot act on: the node is left alone."""

    annotation: str
    message: str

    def __post_init__(self) -> None:
        # Bounded: the value is anyone's text, and the status and Events quote the message.
        if len(self.message) > 300:
            object.__setattr__(self, "message", self.message[:297] + "...")

    def __str__(self) -> str:
        return f"{self.annotation}: {self.message}"


class Cause(StrEnum):
    """Why a move started: the record's `cause`, the `cause` label of slurmpool_moves_started_total
    and the plan's `cause` column. The planner starts moves for the first three; a move turned
    back is a new move, for ROLLBACK or ABORT; parking.py starts GIVEBACK."""

    REBALANCE = "rebalance"  # the split (manual, schedule or demand) wants it
    PIN = "pin"  # slurmpool.io/pin names another placement
    MOVE_NOW = "move-now"  # slurmpool.io/move-now asks for it
    ROLLBACK = "rollback"  # its move failed (a timeout, refused evictions): back the way it came
    ABORT = "abort"  # the split no longer wants a move still abortable: back the way it came
    # Slurm asked a lendable parked node back (parking.py): the move to Slurm; its decline, a
    # rollback, keeps the cause (rollback=True) so the status can say it was declined.
    GIVEBACK = "give-back"


class Adopt(StrEnum):
    """The values of slurmpool.io/adopt: what becomes of a drain someone else set on the node."""

    KEEP_DRAIN = "true"  # a drain of someone else's stays, reported (they resume it)
    RESUME_DRAIN = "resume-drain"  # the person hands their drain over: resumed once the slurmd pod has registered


class MoveRecord(BaseModel):
    """A move in flight, stored as JSON in the node's slurmpool.io/move annotation."""

    id: str
    source: str
    target: str
    phase: Phase
    since: datetime  # start of the current phase
    started: datetime
    cause: Cause = Cause.REBALANCE
    rollback: bool = False
    by: str | None = None  # who asked: the writer of the pin or move-now (managedFields), or what set the split
    jobs: MoveJobs | None = None  # the Slurm jobs its Draining waited for, requeued, cancelled or signalled (movejobs.py)

    @property
    def direction(self) -> Direction:
        return Direction.of(self.source, self.target)

    @model_validator(mode="after")
    def _consistent(self) -> MoveRecord:
        for which in ("source", "target"):
            problem = placement_problem(getattr(self, which), allow=(NONE,) if which == "source" else ())
            if problem:
                raise ValueError(f"{which} {problem}")
        if self.since.tzinfo is None or self.started.tzinfo is None:
            raise ValueError("since and started need a time zone")
        phases = {Direction.BETWEEN_POOLS: BETWEEN_POOLS, Direction.TO_SLURM: TO_SLURM, Direction.TO_INFERENCE: TO_INFERENCE}[self.direction]
        if self.phase not in phases:
            raise ValueError(f"phase {self.phase.value} is not a phase of a move to {self.target} ({', '.join(phases)})")
        return self

    def to_annotation(self) -> str:
        return self.model_dump_json(exclude={"jobs"} if self.jobs is None else None)

    @classmethod
    def parse(cls, text: str) -> MoveRecord:
        """Raises ValueError with a message for people (the record's annotation is writable)."""
        body = json_object(text)
        try:
            return cls.model_validate(body)
        except ValidationError as err:
            raise ValueError(_short(err, body)) from None

    @classmethod
    def from_annotation(cls, text: str | None) -> MoveRecord | None:
        """The record, or None when absent or unreadable (NodeView reports the latter)."""
        if not text:
            return None
        try:
            return cls.parse(text)
        except ValueError:
            return None


def _short(err: ValidationError, body: dict[str, Any]) -> str:
    parts = []
    for e in err.errors()[:3]:
        field_ = ".".join(str(p) for p in e["loc"])
        if field_ == "phase" and e["type"] == "enum":
            parts.append(f"unknown phase {body.get('phase')!r} (known: {', '.join(p.value for p in Phase)})")
        elif field_:
            parts.append(f"{field_}: {e['msg']}")
        else:
            parts.append(e["msg"].removeprefix("Value error, "))
    return "; ".join(parts)


@dataclass(frozen=True)
class DrainClaim:
    """The drain the operator is about to set, written on the Node before the drain itself:
    its exact reason and the time. Only a drain that matches it is the operator's to lift."""

    reason: str
    at: datetime | None  # None: a drain set by a version that wrote no claim (ownership.py)

    def to_annotation(self) -> str:
        return json.dumps({"reason": self.reason, "at": iso(self.at) if self.at else None})

    @classmethod
    def parse(cls, text: str) -> DrainClaim:
        """Raises ValueError with a message for people (the annotation is writable)."""
        body = json_object(text)
        reason, at = body.get("reason"), body.get("at")
        if not isinstance(reason, str) or not reason.startswith(REASON_PREFIX) or len(reason) > 200:
            raise ValueError(f"reason must be a string starting with {REASON_PREFIX!r}")
        if not isinstance(at, str):
            raise ValueError("at must be an RFC 3339 time")
        return cls(reason, read_time(at))


MAX_RESOURCES = 32  # anyone with nodes/status access can add resources: keep the view bounded


def is_extended(name: str) -> bool:
    """A device plugin's or DRA mapping's resource: domain-qualified, outside kubernetes.io."""
    domain, slash, _ = name.partition("/")
    return bool(slash) and domain != "kubernetes.io" and not domain.endswith(".kubernetes.io")


def count(quantity: Any) -> int:
    """A whole count of an extended resource ("8"; a fraction rounds up; unreadable: 0)."""
    try:
        return max(0, math.ceil(float(str(quantity))))
    except (TypeError, ValueError, OverflowError):
        return 0


def extended_resources(amounts: object) -> tuple[tuple[str, int], ...]:
    """The extended resources of a resource list (a Node's allocatable, a container's requests)."""
    if not isinstance(amounts, dict):
        return ()
    found = ((sys.intern(str(k)[:317]), count(v)) for k, v in amounts.items() if isinstance(k, str) and is_extended(k))
    return tuple(sorted((k, n) for k, n in found if n > 0))[:MAX_RESOURCES]


@dataclass(frozen=True, slots=True)  # slots: one per Node and pod, thousands held
class PodView:
    namespace: str
    name: str
    uid: str
    owner_kinds: tuple[str, ...] = ()
    phase: str = "Running"
    reason: str = ""  # status.reason: why the kubelet ended it (Evicted, UnexpectedAdmissionError ...)
    message: str = ""  # status.message
    deleting: bool = False
    ready: bool = False
    slurmd: bool = False  # our slurmd pod (labelled slurmpool.io/component=slurmd)
    mirror: bool = False  # static pod: cannot be evicted
    needs: PodNeeds = PodNeeds()  # what it asks of a node (a move between inference pools checks it)
    node: str = ""  # spec.nodeName
    created: datetime | None = None  # metadata.creationTimestamp
    pool: str = ""  # slurmd pods: the owning pool's name (label slurmpool.io/pool)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ended(self) -> bool:
        """Failed or Succeeded: its containers will not run again (an evicted pod, one refused at
        admission after a reboot). A bare pod has no controller to replace it: we must."""
        return self.phase in ("Failed", "Succeeded")

    @property
    def evictable(self) -> bool:
        """What `kubectl drain` evicts: not DaemonSet pods, static pods, finished pods or ours."""
        return not (
            self.slurmd or self.mirror or "DaemonSet" in self.owner_kinds or self.phase in ("Succeeded", "Failed")
        )


@dataclass(frozen=True, slots=True)  # slots: one per Node and pod, thousands held
class NodeCondition:
    """One of the Node's status conditions (kubelet's Ready, node-problem-detector's, DCGM's...)."""

    type: str
    status: str
    since: datetime | None = None  # lastTransitionTime; None when absent or unreadable


@dataclass(frozen=True, slots=True)  # slots: one per Node and pod, thousands held
class NodeView:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()
    unschedulable: bool = False
    ready: bool = True
    pods: tuple[PodView, ...] = ()
    resources: tuple[tuple[str, int], ...] = ()  # allocatable extended resources (amd.com/gpu: 8)
    devices: tuple[tuple[str, int], ...] = ()  # devices in its ResourceSlices, per DRA driver (gpu.nvidia.com: 8)
    conditions: tuple[NodeCondition, ...] = ()  # status.conditions (health.py)
    flagged: tuple[RecordProblem, ...] = ()  # problems only the pool's spec reveals (decide.py)
    # metadata.resourceVersion: the precondition of a write of its taints (patch.shape_write).
    # Not compared: a new version alone changes nothing the operator decides on.
    version: str = field(default="", compare=False)
    # annotation -> the field manager that last wrote it (managedFields), for pin and move-now: who asked for a move
    writers: dict[str, str] = field(default_factory=dict, compare=False)

    # Computed once per view: the planner reads them for every node, several times per pass
    # (the JSON parse of the move record dominated the profile). Views are immutable.
    placement: str = field(init=False, repr=False)
    move: MoveRecord | None = field(init=False, repr=False)
    pin: str | None = field(init=False, repr=False)
    move_now: str | None = field(init=False, repr=False)
    held_until: datetime | None = field(init=False, repr=False)
    drain_claim: DrainClaim | None = field(init=False, repr=False)
    given_back: datetime | None = field(init=False, repr=False)  # ANN_GIVEN_BACK: Slurm asked for it then
    checkpoint: CheckpointRecord | None = field(init=False, repr=False)  # the jobs signalled to checkpoint
    power_down_asked: datetime | None = field(init=False, repr=False)  # ANN_POWER_DOWN_ASKED
    # ANN_SETTLED: when its last move ended (or it was adopted); None when absent or unreadable
    # (informative only: an unreadable value leaves the node in the operator's hands).
    settled_at: datetime | None = field(init=False, repr=False)
    force: bool = field(init=False, repr=False)  # slurmpool.io/force=true: pin/move-now may move it unhealthy
    adopt: Adopt | None = field(init=False, repr=False)  # slurmpool.io/adopt: take it into Slurm as it is
    # Annotations that could not be read (people can write them): the node is left alone.
    problems: tuple[RecordProblem, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        get = self.annotations.get
        problems: list[RecordProblem] = []
        move = held = None
        placement = get(ANN_PLACEMENT) or NONE
        try:
            Placement.parse(placement)
        except ValueError as err:
            problems.append(RecordProblem(ANN_PLACEMENT, str(err)))
            placement = NONE
        if text := get(ANN_MOVE):
            try:
                move = MoveRecord.parse(text)
            except ValueError as err:
                problems.append(RecordProblem(ANN_MOVE, str(err)))
        pin = get(ANN_PIN) or None
        if pin and (why := placement_problem(pin, allow=("inference",))):
            problems.append(RecordProblem(ANN_PIN, why))

        def time_of(key: str) -> datetime | None:
            try:
                return read_time(get(key))
            except ValueError:
                problems.append(RecordProblem(key, f"{get(key)!r} is no RFC 3339 time"))
                return None

        held = time_of(ANN_HOLD_UNTIL)
        object.__setattr__(self, "given_back", time_of(ANN_GIVEN_BACK))
        object.__setattr__(self, "power_down_asked", time_of(ANN_POWER_DOWN_ASKED))
        object.__setattr__(self, "settled_at", parse_time(get(ANN_SETTLED)))
        claim = None
        if text := get(ANN_DRAIN):
            try:
                claim = DrainClaim.parse(text)
            except ValueError as err:
                problems.append(RecordProblem(ANN_DRAIN, str(err)))
        object.__setattr__(self, "drain_claim", claim)
        checkpoint = None
        if text := get(ANN_CHECKPOINT):
            try:
                checkpoint = CheckpointRecord.from_body(json_object(text))
            except ValueError as err:
                problems.append(RecordProblem(ANN_CHECKPOINT, str(err)))
        object.__setattr__(self, "checkpoint", checkpoint)
        force = get(ANN_FORCE) or None
        if force not in (None, "true"):
            problems.append(RecordProblem(ANN_FORCE, f"{force[:40]!r} is not 'true' (remove the annotation to stop forcing)"))
        object.__setattr__(self, "force", force == "true")
        adopt = get(ANN_ADOPT) or None
        known = {a.value for a in Adopt}
        if adopt is not None and adopt not in known:
            problems.append(RecordProblem(ANN_ADOPT, f"{adopt[:40]!r} is not one of {', '.join(sorted(known))}"))
        object.__setattr__(self, "adopt", Adopt(adopt) if adopt in known else None)
        object.__setattr__(self, "placement", placement)
        object.__setattr__(self, "move", move)
        object.__setattr__(self, "pin", pin)
        object.__setattr__(self, "move_now", get(ANN_MOVE_NOW) or None)
        object.__setattr__(self, "held_until", held)
        object.__setattr__(self, "problems", tuple(problems) + self.flagged)

    @property
    def slurmd_pod(self) -> PodView | None:
        return next((p for p in self.pods if p.slurmd), None)

    def condition(self, type_: str) -> NodeCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def gpus(self, resources: Iterable[str], drivers: Iterable[str] = ()) -> int:
        """The GPUs the node offers: its allocatable of the resources, or its devices of the DRA
        drivers, whichever is more (a driver's extended-resource mapping may show the same
        devices both ways; never counted twice)."""
        names, served = set(resources), set(drivers)
        return max(sum(n for r, n in self.resources if r in names), sum(n for d, n in self.devices if d in served))

    @property
    def cordon_kept(self) -> bool:
        """The cordon is someone else's, found when the node was taken to Slurm (ANN_CORDON_KEPT)."""
        return self.annotations.get(ANN_CORDON_KEPT) == "true"

    def has_taint(self, key: str, effect: str) -> bool:
        return any(t.get("key") == key and t.get("effect") == effect for t in self.taints)


@dataclass(frozen=True)
class SlurmView:
    """One poll of Slurm: all nodes and all jobs, or unavailable (then nothing is drained)."""

    available: bool
    nodes: dict[str, SlurmNode] = field(default_factory=dict)
    jobs: tuple[SlurmJob, ...] = ()
    error: str | None = None
    topology: tuple[TopologyGroup, ...] = ()  # polled only for pools with topology.fromSlurm
    polled_at: float = field(default=0.0, compare=False)  # when its poll began (monotonic): access.py
    pending_partitions: frozenset[str] | None = None  # whose pending jobs were read (None: every partition's)
    # Every reservation, the operator's (`slurmpool-` names) and others'; None: not read (the read
    # failed: then `reservations_error`; or Slurm did not answer).
    reservations: tuple[SlurmReservation, ...] | None = None
    reservations_error: str | None = None
    reservations_api: bool = True  # False: this access lists reservations but cannot make them (slurmrestd < v0.0.43)
    max_times: dict[str, timedelta | None] = field(default_factory=dict, compare=False)  # partition -> MaxTime (None: UNLIMITED), read with the reservations
    # Slurm's power saving as slurm.conf sets it, polled for PowerSave pools about once a minute
    # (access.py); None: not known (not asked, unreadable, or this access cannot tell).
    power_save: PowerSave | None = field(default=None, compare=False)
    # Nodes with no valid Slurm NodeName (slurmnames.by_node): absent from `nodes`, yet no proof of "not in Slurm"
    unnamed: frozenset[str] = frozenset()
    _blocks: dict[int, dict[str, str]] = field(default_factory=dict, compare=False, repr=False)  # level -> {node: block}
    _of_pending: dict[object, object] = field(default_factory=dict, compare=False, repr=False)  # of_pending's, once each

    def has_pending(self, partition: str | None) -> bool:
        """Were the partition's pending jobs read? A view without them is no "no demand"."""
        return partition is None or self.pending_partitions is None or partition in self.pending_partitions

    def blocks(self, level: int) -> dict[str, str]:
        """node -> its block: the switch of that level (topology/tree) or its block (topology/block)."""
        if level not in self._blocks:
            self._blocks[level] = {
                node: g.name for g in self.topology if g.kind == "block" or g.level == level for node in g.nodes
            }
        return self._blocks[level]

    @cached_property
    def _jobs_by_node(self) -> dict[str, list[SlurmJob]]:
        index: dict[str, list[SlurmJob]] = {}
        for job in self.jobs:
            if job.state in ACTIVE_JOB_STATES:
                for node in job.nodes:
                    index.setdefault(node, []).append(job)
        return index

    @cached_property
    def reserved(self) -> frozenset[str]:
        """Nodes in a planned handover's reservation (ours, `slurmpool-`): no job that outlasts its
        edge starts there, and the planner takes them first (planner._cost)."""
        return frozenset(self.reserved_from)

    @cached_property
    def reserved_from(self) -> dict[str, datetime | None]:
        """Each node of our reservations, and when the earliest of them starts (None: not said)."""
        out: dict[str, datetime | None] = {}
        for r in self.reservations or ():
            if r.name.startswith(OUR_RESERVATIONS):
                for n in r.nodes:
                    before = out.get(n, r.start)
                    out[n] = None if before is None or r.start is None else min(before, r.start)
        return out

    def pending_in(self, partition: str) -> list[SlurmJob]:
        """The partition's pending jobs (a job pending in several is in each), indexed once per
        poll: every pool on this Slurm asks for its own (200 pools walking 100,000 jobs each were
        20 s of CPU a round)."""
        return self.of_pending("pending_in", self._index_pending).get(partition, [])

    def _index_pending(self) -> dict[str, list[SlurmJob]]:
        index: dict[str, list[SlurmJob]] = {}
        for job in self.jobs:
            if job.state != "PENDING":
                continue
            if "," not in job.partition:  # most jobs: one partition
                index.setdefault(job.partition, []).append(job)
                continue
            for name in dict.fromkeys(job.partition.split(",")):
                index.setdefault(name, []).append(job)
        return index

    def of_pending(self, key: object, make: Callable[[], T]) -> T:
        """What `make` derives from the pending jobs, made once per poll under `key`, and shared by
        copies that keep the jobs (`replace`): every pool on this Slurm asks the same of one
        partition's queue."""
        if key not in self._of_pending:
            self._of_pending[key] = make()
        return cast(T, self._of_pending[key])

    def jobs_on(self, node: str) -> list[SlurmJob]:
        """Jobs holding the node (running, completing, suspended...)."""
        return self._jobs_by_node.get(node, [])

    @cached_property
    def not_responding(self) -> frozenset[str]:
        """Reported nodes no slurmd answers for (slurmstate.responding). Sets computed once
        per poll: the planner asks for every node of every pool on this Slurm."""
        return frozenset(name for name, sn in self.nodes.items() if not slurmstate.responding(sn))

    @cached_property
    def drain_flagged(self) -> frozenset[str]:
        """Reported nodes with Slurm's DRAIN flag set (draining or drained)."""
        return frozenset(name for name, sn in self.nodes.items() if slurmstate.drain_set(sn))

    @cached_property
    def unusable(self) -> frozenset[str]:
        """Reported nodes Slurm cannot run jobs on: not responding or drain set."""
        return self.not_responding | self.drain_flagged


ACTIVE_JOB_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING", "STAGE_OUT"})
