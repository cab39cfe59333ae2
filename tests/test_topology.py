"""Topology-aware victim choice: whole Slurm blocks kept, compared with exhaustive search."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmpool.core.planner import plan
from .blocks import whole_slurm_blocks
from slurmpool.core.view import ANN_PLACEMENT, SLURM, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node

BLOCK = "topology.slurmpool.io/block"
INF = "inference:default"


def cluster(blocks: dict[str, list[str]], placement: dict[str, str] | None = None):
    placement = placement or {}
    return [
        NodeView(name=n, labels={BLOCK: b}, annotations={ANN_PLACEMENT: placement.get(n, SLURM)})
        for b, names in blocks.items()
        for n in names
    ]


def topo_spec(slurm_nodes, whole_blocks=False, max_moves=100):
    spec = make_spec(slurm_nodes=slurm_nodes, max_moves=max_moves)
    spec.topology.block_label = BLOCK
    spec.topology.whole_blocks = whole_blocks
    return spec


def after(nodes, result):
    moved = {s.node: s.target for s in result.starts}
    return lambda n: moved.get(n.name, n.placement)


def blocks_of(n_blocks, size):
    return {f"b{b}": [f"b{b}n{i}" for i in range(size)] for b in range(n_blocks)}


def test_takes_from_an_already_broken_block_first():
    nodes = cluster(blocks_of(4, 4))
    view = SlurmView(True, nodes={n.name: slurm_node(n.name) for n in nodes})
    view.nodes["b2n0"] = slurm_node("b2n0", "IDLE", {"DRAIN"}, reason="bad gpu")  # b2 is broken
    result = plan(topo_spec(16 - 3), nodes, view, NOW)
    assert sorted(s.node for s in result.starts) == ["b2n0", "b2n1", "b2n2"]
    assert whole_slurm_blocks(topo_spec(0).topology, nodes, view, after(nodes, result)) == 3


def test_breaks_one_block_rather_than_one_node_of_each():
    nodes = cluster(blocks_of(4, 4))
    view = SlurmView(True, nodes={n.name: slurm_node(n.name) for n in nodes})
    result = plan(topo_spec(16 - 3), nodes, view, NOW)
    assert len({s.node[:2] for s in result.starts}) == 1
    assert whole_slurm_blocks(topo_spec(0).topology, nodes, view, after(nodes, result)) == 3


def test_joining_slurm_completes_the_block_missing_fewest_nodes():
    blocks = blocks_of(3, 4)
    placement = {"b0n0": INF, "b0n1": INF, "b0n2": INF, "b1n3": INF, "b2n0": INF, "b2n1": INF}
    nodes = cluster(blocks, placement)
    view = SlurmView(True, nodes={n.name: slurm_node(n.name) for n in nodes})
    result = plan(topo_spec(6 + 1), nodes, view, NOW)
    assert [s.node for s in result.starts] == ["b1n3"]


def test_whole_blocks_only():
    nodes = cluster(blocks_of(3, 4))
    view = SlurmView(True, nodes={n.name: slurm_node(n.name) for n in nodes})
    assert plan(topo_spec(12 - 2, whole_blocks=True), nodes, view, NOW).starts == []
    result = plan(topo_spec(12 - 4, whole_blocks=True), nodes, view, NOW)
    assert len(result.starts) == 4 and len({s.node[:2] for s in result.starts}) == 1


def test_without_topology_the_order_is_unchanged():
    nodes = cluster(blocks_of(2, 2))
    spec = make_spec(slurm_nodes=3)
    result = plan(spec, nodes, SlurmView(True, nodes={n.name: slurm_node(n.name) for n in nodes}), NOW)
    assert [s.node for s in result.starts] == ["b0n0"]


@st.composite
def fragmented(draw):
    n_blocks, size = draw(st.integers(2, 4)), draw(st.integers(2, 4))
    blocks = blocks_of(n_blocks, size)
    names = [n for ns in blocks.values() for n in ns]
    states = {n: draw(st.sampled_from(["IDLE", "IDLE", "MIXED", "DRAINED"])) for n in names}
    k = draw(st.integers(1, len(names) - 1))
    return blocks, states, k


def optimum(nodes, view, k, topology) -> int:
    best = 0
    for chosen in itertools.combinations([n.name for n in nodes], k):
        moved = set(chosen)
        best = max(best, whole_slurm_blocks(topology, nodes, view, lambda n, moved=moved: INF if n.name in moved else n.placement))
    return best


@settings(max_examples=150, deadline=None)
@given(fragmented())
def test_planner_keeps_as_many_whole_blocks_as_exhaustive_search(case):
    blocks, states, k = case
    nodes = cluster(blocks)
    view = SlurmView(
        True,
        nodes={
            n: slurm_node(n, "IDLE", {"DRAIN"}, reason="admin") if st_ == "DRAINED" else slurm_node(n, st_)
            for n, st_ in states.items()
        },
    )
    spec = topo_spec(len(nodes) - k)
    result = plan(spec, nodes, view, NOW)
    assert len(result.starts) == k
    got = whole_slurm_blocks(spec.topology, nodes, view, after(nodes, result))
    assert got == optimum(nodes, view, k, spec.topology)


def test_blocks_can_come_from_slurms_topology():
    from slurmbridge import TopologyGroup

    from slurmpool.core.models import TopologySpec
    from slurmpool.core.topology import block_of, ranks

    groups = (TopologyGroup("rack-1", 0, ("n1", "n2")), TopologyGroup("rack-2", 0, ("n3", "n4")),
              TopologyGroup("block-1", 1, ("n1", "n2", "n3", "n4")), TopologyGroup("spine", 2, ("n1", "n2", "n3", "n4", "n5")))
    slurm = SlurmView(True, nodes={f"n{i}": slurm_node(f"n{i}") for i in range(1, 6)}, topology=groups)
    topo = TopologySpec(from_slurm=True, slurm_level=0, block_label="blk")
    n5 = NodeView("n5", labels={"blk": "from-label"})
    assert block_of(topo, NodeView("n3"), slurm) == "rack-2"
    assert block_of(topo, n5, slurm) == "from-label"  # no leaf switch: the label decides
    assert block_of(TopologySpec(from_slurm=True, slurm_level=1), NodeView("n3"), slurm) == "block-1"
    # ranks follow Slurm's blocks: with n2 drained, rack-1 is broken, so n1 and n2 go first.
    drained = SlurmView(True, nodes={**slurm.nodes, "n2": slurm_node("n2", "IDLE", {"DRAIN"}, reason="bad")}, topology=groups)
    nodes = [NodeView(f"n{i}", annotations={ANN_PLACEMENT: SLURM}) for i in range(1, 5)]
    got = ranks(topo, nodes, drained, lambda n: n.placement, lambda n: True)
    assert got["n1"][0] == 0 and got["n2"][0] == 0 and got["n3"][0] == 1 and got["n4"][0] == 1
