"""The planner run wave after wave, each wave's moves assumed done before the next is planned,
until the split is reached: which nodes a goal moves, in what order. The planned handover
(handover.py: the nodes an edge takes out of Slurm) and the plugin's dry-run `plan` both run it;
they differ only in what they assume done (`STARTS_DONE`, `EVERY_MOVE_DONE`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from slurmpool.core.health import NodeHealth
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.planner import Goal, Plan, plan
from slurmpool.core.placement import SLURM
from slurmpool.core.view import ANN_MOVE, ANN_MOVE_NOW, ANN_PLACEMENT, NodeView, SlurmView

MAX_WAVES = 100


@dataclass(frozen=True)
class PoolView:
    """The pool as the planner sees it in a pass: the spec, its nodes (as this pass's steps and
    starts leave them), Slurm, the clock and each node's health (None: all healthy)."""

    spec: SlurmNodePoolSpec
    nodes: list[NodeView]
    slurm: SlurmView
    now: datetime
    health: Mapping[str, NodeHealth] | None = None
    held: frozenset[str] = frozenset()  # in someone else's Slurm reservation (reservations.py): never chosen to leave Slurm


@dataclass(frozen=True)
class Wave:
    """One run of the planner: its plan, and each node it starts or turns back a move of, as the
    wave found it."""

    number: int
    plan: Plan
    moved: dict[str, NodeView]


# What a wave leaves done before the next: the nodes it changes, by name.
Assume = Callable[[Sequence[NodeView], Plan], dict[str, NodeView]]


def starts_done(nodes: Sequence[NodeView], result: Plan) -> dict[str, NodeView]:
    """The operator's handover: the wave's starts done; the moves in flight still going (they hold
    their share of maxConcurrentMoves), move-now and pods as they are."""
    starts = {s.node: s.target for s in result.starts}
    return {n.name: _placed(n, starts[n.name], keep=(ANN_MOVE_NOW,)) for n in nodes if n.name in starts}


def every_move_done(nodes: Sequence[NodeView], result: Plan) -> dict[str, NodeView]:
    """The plugin's forecast: the wave's starts, its turned back moves and the moves in flight
    done, each move-now fulfilled, the pods of a node gone to Slurm evicted."""
    starts = {s.node: s.target for s in result.starts}
    out = {}
    for node in nodes:
        move = node.move
        if node.name in starts:
            target = starts[node.name]
        elif move is None:
            continue
        else:
            target = move.source if node.name in result.aborts else move.target
        settled = _placed(node, target)
        out[node.name] = replace(settled, pods=tuple(p for p in node.pods if not p.evictable)) if target == SLURM else settled
    return out


def _placed(node: NodeView, placement: str, keep: tuple[str, ...] = ()) -> NodeView:
    """The node settled at `placement`, its move record (and move-now, unless kept) gone."""
    annotations = {k: v for k, v in node.annotations.items() if k not in {ANN_MOVE, ANN_MOVE_NOW} - set(keep)}
    return replace(node, annotations={**annotations, ANN_PLACEMENT: placement})


def waves(view: PoolView, goal: Goal, assume: Assume) -> Iterator[Wave]:
    """Every wave up to and including the last, the first that moves nothing or changes nothing
    (its problems are the plan's)."""
    current = list(view.nodes)
    place = {n.name: i for i, n in enumerate(current)}  # the same order wave after wave: only the nodes a wave moves change
    for number in range(1, MAX_WAVES + 1):
        result = plan(view.spec, current, view.slurm, view.now, goal, view.health)
        yield Wave(number, result, {name: current[place[name]] for name in (*(s.node for s in result.starts), *result.aborts)})
        changed = assume(current, result) if result.starts or result.aborts else {}
        if not changed:
            return
        for name, node in changed.items():
            current[place[name]] = node
