"""The fragmentation yardstick of the topology tests and `make bench`: how many Slurm blocks a
placement leaves whole. Not the operator's: it only measures the planner's choices."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from slurmpool.core.models import TopologySpec
from slurmpool.core.topology import block_of, usable_in_slurm
from slurmpool.core.view import NodeView, SlurmView


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
