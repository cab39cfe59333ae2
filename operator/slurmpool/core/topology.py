"""Topology-aware victim order. Pure.

A *block* is a set of nodes that a job wants whole (an NVLink domain exposed to Slurm as a
topology block), named by a node label (`spec.topology.blockLabel`) or read from Slurm's own
topology (`fromSlurm`: the switches of one level of topology/tree, or topology/block's blocks). A block is *whole* when
every node of it serves Slurm and Slurm can use it (not drained, not down, not unhealthy: health.py): taking one node
from each of four whole blocks leaves 89% of the GPUs free and no block an 18-node job can use.

Objective order, leaving Slurm (to inference):
  1. keep as many whole blocks as possible: take nodes of already-broken blocks first, the one
     with most movable nodes first and taken whole before the next (so a block broken only by
     an unhealthy node keeps its other nodes where it can, and is whole again once fixed);
  2. when a whole block must break, break as few as possible: the block with the most
     movable nodes first, and take it all before breaking another;
  3. among equals, the planner's usual order (drained, idle, soonest free).
Joining Slurm (from inference):
  1. complete as many blocks as possible: blocks missing the fewest nodes first (only
     blocks whose every missing node may move);
  2. among equals, the usual order (cordoned, fewest pods).
`wholeBlocks` moves whole blocks only: a node of a whole block leaves Slurm only when the
whole block fits in what is still to move.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable

from slurmpool.core.models import TopologySpec
from slurmpool.core.view import SLURM, NodeView, SlurmView

Rank = tuple[int, int, str]  # (tier, order, block)
NO_BLOCK: Rank = (1 << 30, 0, "")


def block_of(topology: TopologySpec, node: NodeView, slurm: SlurmView | None = None) -> str | None:
    if topology.from_slurm and slurm is not None:
        block = slurm.blocks(topology.slurm_level).get(node.name)
        if block is not None:
            return block
    return node.labels.get(topology.block_label) if topology.block_label else None


def usable_in_slurm(node: NodeView, placement: str, slurm: SlurmView, broken: Collection[str] = ()) -> bool:
    """Serves Slurm and Slurm can use it. A node on its way into Slurm counts (it is held
    drained only until it is resumed); one Slurm does not report cannot be proven unusable.
    An unhealthy node (`broken`) is unusable whatever Slurm says: it breaks its block."""
    if placement != SLURM or node.name in broken:
        return False
    return node.move is not None or node.name not in slurm.unusable


class _Block:
    """What ranks() needs of one block, gathered in one pass over the nodes."""

    __slots__ = ("in_slurm", "elsewhere", "movable_in_slurm", "whole", "joinable")

    def __init__(self) -> None:
        self.in_slurm: list[str] = []  # names of its nodes serving Slurm
        self.elsewhere: list[str] = []  # names of its nodes that do not
        self.movable_in_slurm = 0
        self.whole = True  # every node serves Slurm and Slurm can use it
        self.joinable = True  # every node not in Slurm may move (it can be completed)


def ranks(
    topology: TopologySpec,
    nodes: Iterable[NodeView],
    slurm: SlurmView,
    placement_of: Callable[[NodeView], str],
    movable: Callable[[NodeView], bool],
    broken: Collection[str] = (),
) -> dict[str, Rank]:
    """node -> a rank tuple that sorts before the planner's own cost (lower moves first)."""
    if not topology.enabled:
        return {}
    # One pass over the nodes, keeping per block only names and counts: this runs for every
    # node of every pass, and a tuple per node made the garbage collector walk the whole heap
    # at 50k nodes (e2e/bench.py).
    by_slurm = slurm.blocks(topology.slurm_level) if topology.from_slurm else {}
    label = topology.block_label
    blocks: dict[str, _Block] = {}
    for node in nodes:
        name = node.name
        block = (by_slurm.get(name) if by_slurm else None) or (node.labels.get(label) if label else None)
        if block is None:
            continue
        b = blocks.get(block)
        if b is None:
            b = blocks[block] = _Block()
        if placement_of(node) == SLURM:
            b.in_slurm.append(name)
            if movable(node):
                b.movable_in_slurm += 1
            if b.whole and not usable_in_slurm(node, SLURM, slurm, broken):
                b.whole = False
        else:
            b.elsewhere.append(name)
            b.whole = False
            if b.joinable and not movable(node):
                b.joinable = False
    whole_out = sorted((-b.movable_in_slurm, block) for block, b in blocks.items() if b.whole)
    broken_out = sorted((-b.movable_in_slurm, block) for block, b in blocks.items() if not b.whole)
    into = sorted((len(b.elsewhere), block) for block, b in blocks.items() if b.elsewhere and b.joinable)
    out: dict[str, Rank] = {}
    # Already broken: taking its nodes costs no whole block. The one with most movable nodes
    # first, taken whole before the next: a block broken only by a broken node is whole again
    # once that node is fixed, if its other nodes are still in Slurm.
    # (One rank tuple per block, shared by its nodes.)
    for order, (_, block) in enumerate(broken_out):
        out.update(dict.fromkeys(blocks[block].in_slurm, (0, order, block)))
    for order, (_, block) in enumerate(whole_out):
        out.update(dict.fromkeys(blocks[block].in_slurm, (1, order, block)))
    for order, (_, block) in enumerate(into):
        out.update(dict.fromkeys(blocks[block].elsewhere, (0, order, block)))
    return out


def whole_block_sizes(
    topology: TopologySpec, nodes: Iterable[NodeView], movable: Callable[[NodeView], bool], slurm: SlurmView | None = None
) -> dict[str, int]:
    """block -> its number of movable nodes: what `wholeBlocks` must move at once."""
    sizes: dict[str, int] = defaultdict(int)
    for node in nodes:
        block = block_of(topology, node, slurm)
        if block is not None and movable(node):
            sizes[block] += 1
    return dict(sizes)
