"""The planner run wave after wave, each wave's moves (and the moves in flight) assumed done,
until the split is reached: which nodes a goal moves and in what order. The planned handover
(handover.py: the nodes an edge takes out of Slurm) and the plugin's dry-run `plan` both read it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from slurmpool.core.health import NodeHealth
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.planner import Goal, Plan, Start, plan
from slurmpool.core.view import ANN_MOVE, ANN_MOVE_NOW, ANN_PLACEMENT, SLURM, NodeView, SlurmView

MAX_WAVES = 100


@dataclass(frozen=True)
class Wave:
    """One run of the planner: its plan, and each node it starts or turns back a move of, as the
    wave found it."""

    number: int
    plan: Plan
    moved: dict[str, NodeView]


def waves(spec: SlurmNodePoolSpec, nodes: list[NodeView], slurm: SlurmView, now: datetime, goal: Goal,
          health: Mapping[str, NodeHealth] | None = None) -> Iterator[Wave]:
    """Every wave up to and including the first that moves nothing (its problems are the plan's)."""
    current = list(nodes)
    place = {n.name: i for i, n in enumerate(current)}  # the same order wave after wave: only the nodes a wave moves change
    for number in range(1, MAX_WAVES + 1):
        result = plan(spec, current, slurm, now, goal, health)
        starts = {s.node: s for s in result.starts}
        yield Wave(number, result, {name: current[place[name]] for name in (*starts, *result.aborts)})
        if not result.starts and not result.aborts:
            return
        for name in {*starts, *result.aborts, *(n.name for n in current if n.move)}:  # the rest stay as they are
            current[place[name]] = settle(current[place[name]], result, starts.get(name))


def settle(node: NodeView, result: Plan, start: Start | None = None) -> NodeView:
    """The node once this wave (and any move in flight) is done; `start`: this wave's start of it."""
    move = node.move
    target = start.target if start else (move.source if node.name in result.aborts and move else (move.target if move else None))
    if target is None:
        return node
    ann = {k: v for k, v in node.annotations.items() if k not in (ANN_MOVE, ANN_MOVE_NOW)}
    ann[ANN_PLACEMENT] = target
    return replace(node, annotations=ann, pods=tuple(p for p in node.pods if not p.evictable) if target == SLURM else node.pods)
