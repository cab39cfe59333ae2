"""The data of one pass over one pool: what it knows (PoolSnapshot), what it decides to do
(PoolDecision, from the pure decide.py) and what came of doing it (ApplyResult, from
apply.py). The pool's status is built from all three (status.py), nothing mutated between."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slurmpool.core.demand import PendingPod
from slurmpool.core.demand.claims import Asks
from slurmpool.core.demand.pendingpod import PodGroupSizes
from slurmpool.core.events import Event
from slurmpool.core.health import NodeHealth
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.models import ReservedNode, SlurmNodePoolSpec, SlurmNodePoolStatus
from slurmpool.core.moves import Refusal, Step
from slurmpool.core.parking import Parking
from slurmpool.core.planner import Start
from slurmpool.core.handover import HandoverPlan
from slurmpool.core.target import Decision
from slurmpool.core.view import MoveRecord, NodeView, PodView, RecordProblem, SlurmView

@dataclass(frozen=True)
class PoolSnapshot:
    """Everything one pass of one pool knows. Built by the kopf layer from its indexes and one
    Slurm poll; nothing in it is fetched later."""

    pool: PoolRef
    spec: SlurmNodePoolSpec
    nodes: tuple[NodeView, ...]  # the nodes only this pool selects, with their pods
    slurm: SlurmView
    now: datetime
    previous: SlurmNodePoolStatus | None = None
    overlaps: tuple[str, ...] = ()  # nodes another pool selects too: never acted on
    orphans: tuple[PodView, ...] = ()  # this pool's slurmd pods bound to a Node that is gone
    # Nodes with this pool's move record that no pool selects now (relabelled mid-move): ended on a side
    strays: tuple[NodeView, ...] = ()
    pending: tuple[PendingPod, ...] = ()  # unschedulable GPU pods (demand's inference signal)
    claims: Mapping[str, Asks] = field(default_factory=dict)  # what DRA claims and templates ask for (demand/claims.py)
    pod_groups: PodGroupSizes = field(default_factory=dict)  # each PodGroup's gang minCount (demand/pod_groups.py)
    author: str | None = None  # who last wrote spec.slurmNodes (managedFields)


@dataclass
class PoolDecision:
    """What one pass does, computed without I/O (decide.py); apply.py carries it out."""

    target: Decision  # the Slurm count and per-pool counts in force, and why
    desired: dict[str, int]  # placement -> node count
    problems: list[str]  # the spec cannot be met: nothing moves
    steps: dict[str, Step]  # node -> what it does now (moves, aborts, starts, repairs)
    nodes_after: list[NodeView]  # the nodes as the steps leave them (for the status)
    starts: list[tuple[Start, MoveRecord]] = field(default_factory=list)
    pool_events: list[Event] = field(default_factory=list)  # on the pool only
    node_events: list[Event] = field(default_factory=list)  # on the pool and the node
    invalid: dict[str, tuple[RecordProblem, ...]] = field(default_factory=dict)  # nodes left alone
    orphans_to_delete: list[PodView] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # deleted Nodes whose slurmd pod is kept
    strays: list[str] = field(default_factory=list)  # nodes that left the selector mid-move, and where their move ends
    stray_pods: list[str] = field(default_factory=list)  # `<ns>/<pod> on <node>`: pods on nodes settled in Slurm
    publish: dict[str, str] = field(default_factory=dict)  # node -> new slurmpool.io/slurm value
    clear_move_now: list[Event] = field(default_factory=list)  # remove the annotation, then post
    health: dict[str, NodeHealth] = field(default_factory=dict)  # nodes with findings (health.py)
    held: list[str] = field(default_factory=list)  # unhealthy nodes whose pin or move-now waits (planner.Plan.refused)
    slurm_names: dict[str, str | None] = field(default_factory=dict)  # node -> its Slurm name, where not its own (slurmnames.py)
    handover: HandoverPlan | None = None  # the planned handover's reservation (handover.py)
    parking: Parking | None = None  # power-save parking: lendable and held parked nodes (parking.py)
    reserved: list[ReservedNode] = field(default_factory=list)  # nodes others' Slurm reservations hold (reservations.py)
    # node -> the merge patch of its step's record and shape (patch.node_patch, at the snapshot's now); apply sends it
    patches: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def starting(self) -> set[str]:
        """Nodes whose move starts this pass."""
        return {start.node for start, _ in self.starts}

    @property
    def ending(self) -> set[str]:
        """Nodes whose move ends this pass (completed or stopped): each frees a slot of
        maxConcurrentMoves, which the planner may give to a start of the same pass."""
        return {name for name, step in self.steps.items() if step.move is None and (step.finished or step.stopped)}

    def starts_may_follow(self, unwritten: set[str]) -> bool:
        """May the starts be written after the other patches, `unwritten` of them refused? Not when
        an ending is: its move stays in flight, and the start would take a slot that is not free."""
        return not (self.ending & unwritten)


@dataclass
class ApplyResult:
    errors: list[str] = field(default_factory=list)  # actions that failed (retried next pass)
    refused: dict[str, str | Refusal] = field(default_factory=dict)  # node -> an eviction refused (a PDB), or a write refused
    unwritten: set[str] = field(default_factory=set)  # nodes whose record could not be written
    acted: bool = False  # something was done that the next observation may show done
    slurm_changed: bool = False  # a Slurm update was sent: the next pass polls Slurm afresh
    records: dict[str, dict[str, str | None]] = field(default_factory=dict)  # node -> record annotations written
    handover_error: str | None = None  # the reservation could not be created or deleted (retried next pass; moves go on)
    shadow: bool = False  # a shadow pass: nothing was written (controller/shadow.py); the status shows what would have been
