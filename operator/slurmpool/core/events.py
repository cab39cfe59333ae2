"""The Kubernetes Events the operator posts: `Event` (what the core decides to say) and `Reason`
(every reason it posts). A leaf module. The reasons' text is an interface: tests, docs/, the
e2e suite and people's alerts match it, so a member's value never changes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal


class Reason(StrEnum):
    """Every reason the operator posts, named as posted (its value is its name)."""

    # a move's life (moves.py, decide.py)
    MoveStarted = "MoveStarted"
    MovePhase = "MovePhase"
    MoveCompleted = "MoveCompleted"
    MoveAborted = "MoveAborted"
    MoveRolledBack = "MoveRolledBack"
    MoveStopped = "MoveStopped"
    ForeignDrain = "ForeignDrain"
    JobsRequeued = "JobsRequeued"
    JobsSignalled = "JobsSignalled"  # drain.onTimeout Checkpoint: each job warned once, then given its grace
    JobsCancelled = "JobsCancelled"
    CordonRestored = "CordonRestored"
    SlurmdPodReplaced = "SlurmdPodReplaced"
    NotPoweredDown = "NotPoweredDown"
    DrainLifted = "DrainLifted"  # StoppingSlurmd found the node undrained or busy: back to Draining
    # power-save parking (parking.py): Slurm asked a parked node back and slurmpool refused
    GiveBackDeclined = "GiveBackDeclined"
    # health (decide.py)
    HealthDrain = "HealthDrain"
    HealthResume = "HealthResume"
    UnhealthyNodeHeld = "UnhealthyNodeHeld"
    UnhealthyNodeForced = "UnhealthyNodeForced"
    # records people write (decide.py)
    InvalidNodeRecord = "InvalidNodeRecord"
    NodeRecordFixed = "NodeRecordFixed"
    MoveNowDone = "MoveNowDone"
    MoveNowIgnored = "MoveNowIgnored"
    AdoptionStarted = "AdoptionStarted"  # slurmpool.io/adopt: placed in Slurm as it is (adoption.py)
    AdoptionCompleted = "AdoptionCompleted"
    # nodes deleted from Kubernetes (decide.py)
    NodeDeleted = "NodeDeleted"
    OrphanSlurmdDeleted = "OrphanSlurmdDeleted"
    StrayPod = "StrayPod"  # a pod on a node settled in Slurm (reported, never evicted)
    NodeLeftSelector = "NodeLeftSelector"  # a node with a move in flight no pool selects now
    # the target (target.py)
    ManualChange = "ManualChange"
    ManualHoldEnded = "ManualHoldEnded"
    ScheduleWindowStarted = "ScheduleWindowStarted"
    ScheduleWindowEnded = "ScheduleWindowEnded"
    DemandChanged = "DemandChanged"
    UnstartableJobs = "UnstartableJobs"
    # the planned handover (handover.py, apply.py)
    HandoverReserved = "HandoverReserved"
    HandoverReplanned = "HandoverReplanned"
    HandoverCancelled = "HandoverCancelled"
    HandoverDone = "HandoverDone"
    HandoverUnavailable = "HandoverUnavailable"
    HandoverFailed = "HandoverFailed"
    # others' Slurm reservations (reservations.py, decide.py)
    ReservedNodeKept = "ReservedNodeKept"  # a node someone else's reservation holds stays in Slurm
    ReservedNodeMoved = "ReservedNodeMoved"  # a pin or move-now takes one out of Slurm anyway
    # the controller (controller/pools.py)
    ReconcileError = "ReconcileError"
    NodeOverlap = "NodeOverlap"
    StatusWriteFailed = "StatusWriteFailed"
    # shadow mode (controller/shadow.py): a move the pool would have started
    ShadowDecision = "ShadowDecision"


EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class Event:
    """One Event. `node`: the Node it is about, posted on it and on the pool (a move's phase step,
    MovePhase, on the Node only: apply.NODE_ONLY); None: on the pool only, or, in a step's
    events, the step's node (apply fills it in)."""

    node: str | None
    type: EventType
    reason: Reason
    message: str

    def __post_init__(self) -> None:
        if self.type not in ("Normal", "Warning"):
            raise ValueError(f"an Event's type is Normal or Warning, not {self.type!r}")
        object.__setattr__(self, "reason", Reason(self.reason))  # a str of a known reason only

    @classmethod
    def normal(cls, reason: Reason, message: str, node: str | None = None) -> Event:
        return cls(node, "Normal", reason, message)

    @classmethod
    def warning(cls, reason: Reason, message: str, node: str | None = None) -> Event:
        return cls(node, "Warning", reason, message)

    def on(self, node: str) -> Event:
        return replace(self, node=node)
