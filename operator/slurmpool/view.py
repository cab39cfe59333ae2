"""What the operator knows about one node: the pure core's input, built by the adapters.

A node's *placement* is where it serves: "slurm", or "inference:<pool>" for a named
inference pool. A node the operator has not adopted yet has placement "none".
The placement and any move in flight live in the Node's annotations, so they survive
an operator restart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ValidationError

from slurmbridge import SlurmJob, SlurmNode, TopologyGroup

from .fit import PodNeeds

PREFIX = "slurmpool.io"
ANN_POOL = f"{PREFIX}/pool"  # namespace/name of the pool that owns the node
ANN_PLACEMENT = f"{PREFIX}/placement"  # settled placement
ANN_MOVE = f"{PREFIX}/move"  # JSON MoveRecord while a move is in flight
ANN_PIN = f"{PREFIX}/pin"  # on-call: keep (or bring) the node at this placement
ANN_HOLD_UNTIL = f"{PREFIX}/hold-until"  # no new move before this time (after a rollback)
ANN_MOVE_NOW = f"{PREFIX}/move-now"  # on-call: move this node now (a one-shot pin, cleared when done)
ANN_SLURM = f"{PREFIX}/slurm"  # published by the operator: the node's Slurm state and jobs (JSON)
ANN_SETTLED = f"{PREFIX}/settled-at"  # when the node last settled at its placement
LABEL_SIDE = f"{PREFIX}/side"  # "slurm" or "inference": for selectors and humans
LABEL_POOL = f"{PREFIX}/pool"  # on slurmd pods: the owning SlurmNodePool's name
LABEL_COMPONENT = f"{PREFIX}/component"  # "slurmd" on slurmd pods (the lab agent's contract)
SLURM_TAINT_KEY = f"{PREFIX}/slurm"  # NoSchedule taint that keeps inference pods off Slurm nodes
REASON_PREFIX = "slurmpool:"  # every Slurm drain we set; we never touch a drain without it

SLURM = "slurm"
NONE = "none"


def inference(pool: str) -> str:
    return f"inference:{pool}"


def pool_of(placement: str) -> str | None:
    return placement.split(":", 1)[1] if placement.startswith("inference:") else None


def side_of(placement: str) -> str:
    return placement.split(":", 1)[0]


Direction = Literal["ToSlurm", "ToInference", "BetweenPools"]


class MoveRecord(BaseModel):
    """A move in flight, stored as JSON in the node's slurmpool.io/move annotation."""

    id: str
    source: str
    target: str
    phase: str
    since: datetime  # start of the current phase
    started: datetime
    cause: str = "rebalance"  # rebalance | pin | rollback
    rollback: bool = False

    @property
    def direction(self) -> Direction:
        if pool_of(self.source) and pool_of(self.target):
            return "BetweenPools"
        return "ToSlurm" if self.target == SLURM else "ToInference"

    def to_annotation(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_annotation(cls, text: str | None) -> MoveRecord | None:
        if not text:
            return None
        try:
            return cls.model_validate(json.loads(text))
        except (ValueError, ValidationError):
            return None


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    uid: str
    owner_kinds: tuple[str, ...] = ()
    phase: str = "Running"
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
    def evictable(self) -> bool:
        """What `kubectl drain` evicts: not DaemonSet pods, static pods, finished pods or ours."""
        return not (
            self.slurmd or self.mirror or "DaemonSet" in self.owner_kinds or self.phase in ("Succeeded", "Failed")
        )


@dataclass(frozen=True)
class NodeView:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    exists: bool = True
    pods: tuple[PodView, ...] = ()
    gpus: int = 0  # allocatable nvidia.com/gpu (metrics only)

    # Computed once per view: the planner reads them for every node, several times per pass
    # (the JSON parse of the move record dominated the profile). Views are immutable.
    placement: str = field(init=False, repr=False)
    move: MoveRecord | None = field(init=False, repr=False)
    pin: str | None = field(init=False, repr=False)
    move_now: str | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        get = self.annotations.get
        text = get(ANN_MOVE)
        object.__setattr__(self, "placement", get(ANN_PLACEMENT) or NONE)
        object.__setattr__(self, "move", MoveRecord.from_annotation(text) if text else None)
        object.__setattr__(self, "pin", get(ANN_PIN) or None)
        object.__setattr__(self, "move_now", get(ANN_MOVE_NOW) or None)

    @property
    def slurmd_pod(self) -> PodView | None:
        return next((p for p in self.pods if p.slurmd), None)

    def hold_until(self) -> datetime | None:
        value = self.annotations.get(ANN_HOLD_UNTIL)
        try:
            return datetime.fromisoformat(value) if value else None
        except ValueError:
            return None

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
    _blocks: dict = field(default_factory=dict, compare=False, repr=False)  # level -> {node: block}

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

    def jobs_on(self, node: str) -> list[SlurmJob]:
        """Jobs holding the node (running, completing, suspended...)."""
        return self._jobs_by_node.get(node, [])


ACTIVE_JOB_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING", "STAGE_OUT"})
