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

from .models import TopologySpec
from .view import SLURM, NodeView, SlurmView

NO_BLOCK = (1 << 30, 0, "")  # ranks are (tier, order, block)


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
    sn = slurm.nodes.get(node.name)
    return node.move is not None or sn is None or (sn.responding and not sn.drain_set)


def ranks(
    topology: TopologySpec,
    nodes: Iterable[NodeView],
    slurm: SlurmView,
    placement_of: Callable[[NodeView], str],
    movable: Callable[[NodeView], bool],
    broken: Collection[str] = (),
) -> dict[str, tuple]:
    """node -> a rank tuple that sorts before the planner's own cost (lower moves first)."""
    if not topology.enabled:
        return {}
    # Each node's block, placement and movability once: this runs for every node of every pass.
    by_slurm = slurm.blocks(topology.slurm_level) if topology.from_slurm else {}
    label = topology.block_label
    blocks: dict[str, list[tuple[NodeView, str, bool]]] = defaultdict(list)
    for node in nodes:
        block = by_slurm.get(node.name) or (node.labels.get(label) if label else None)
        if block is not None:
            blocks[block].append((node, placement_of(node), movable(node)))
    out: dict[str, tuple] = {}
    whole_out: list[tuple[int, str]] = []  # (-movable count, block) of whole Slurm blocks
    into: list[tuple[int, str]] = []  # (missing, block) of blocks that can be completed
    broken_out: list[tuple[int, str]] = []  # (-movable count, block) of broken blocks
    for block, members in blocks.items():
        movable_count = sum(1 for _, p, m in members if m and p == SLURM)
        if all(usable_in_slurm(n, p, slurm, broken) for n, p, _ in members):
            whole_out.append((-movable_count, block))
        else:
            broken_out.append((-movable_count, block))
        missing = [m for _, p, m in members if p != SLURM]
        if missing and all(missing):
            into.append((len(missing), block))
    # Already broken: taking its nodes costs no whole block. The one with most movable nodes
    # first, taken whole before the next: a block broken only by a broken node is whole again
    # once that node is fixed, if its other nodes are still in Slurm.
    for order, (_, block) in enumerate(sorted(broken_out)):
        for n, p, _ in blocks[block]:
            if p == SLURM:
                out[n.name] = (0, order, block)
    for order, (_, block) in enumerate(sorted(whole_out)):
        for n, _, _ in blocks[block]:
            out[n.name] = (1, order, block)
    for order, (missing, block) in enumerate(sorted(into)):
        for n, p, _ in blocks[block]:
            if p != SLURM:
                out[n.name] = (0, order, block)
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


def whole_slurm_blocks(
    topology: TopologySpec, nodes: Iterable[NodeView], slurm: SlurmView, placement_of, broken: Collection[str] = ()
) -> int:
    """How many blocks Slurm can use whole (the benchmark's fragmentation figure)."""
    blocks: dict[str, bool] = {}
    for node in nodes:
        block = block_of(topology, node, slurm)
        if block is not None:
            blocks[block] = blocks.get(block, True) and usable_in_slurm(node, placement_of(node), slurm, broken)
    return sum(blocks.values())
