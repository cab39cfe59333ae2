"""Whole passes as decide(snapshot), no fakes: a node whose record people broke is reported and
left alone, and every other node of the pool goes on moving."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from slurmpool.core.decide import decide
from slurmpool.core.view import (
    ANN_HOLD_UNTIL,
    ANN_MOVE,
    ANN_PIN,
    ANN_PLACEMENT,
    LABEL_SIDE,
    SLURM,
    SLURM_TAINT_KEY,
    NodeView,
    PodView,
)

from .factories import NOW, make_spec, slurm_node
from .sim import PoolWorld, World

INFERENCE = "inference:default"
GOOD_MOVE = {"id": "m1", "source": "slurm", "target": INFERENCE, "phase": "Draining",
             "since": "2026-11-29T11:59:00Z", "started": "2026-11-29T11:59:00Z"}


def slurm_node_world(name: str, annotations: dict | None = None) -> World:
    node = NodeView(
        name=name,
        annotations={ANN_PLACEMENT: SLURM, **(annotations or {})},
        labels={LABEL_SIDE: "slurm"},
        taints=({"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"},),
        unschedulable=True,
        pods=(PodView("slurm", f"slurmd-{name}", f"u-{name}", slurmd=True, ready=True),),
    )
    return World(node=node, slurm_node=slurm_node(name))


CORRUPT = {
    "not JSON": {ANN_MOVE: "{phase: Draining"},
    "unknown phase": {ANN_MOVE: json.dumps({**GOOD_MOVE, "phase": "Drainin"})},
    "phase of the other direction": {ANN_MOVE: json.dumps({**GOOD_MOVE, "phase": "Registering"})},
    "unknown placement in a move": {ANN_MOVE: json.dumps({**GOOD_MOVE, "target": "inferense"})},
    "move between two unknown pools": {ANN_MOVE: json.dumps({**GOOD_MOVE, "source": "inference:old", "target": "inference:gone", "phase": "Relabeling"})},
    "bad time in a move": {ANN_MOVE: json.dumps({**GOOD_MOVE, "since": "yesterday"})},
    "unknown placement": {ANN_PLACEMENT: "gpu-side"},
    "unknown pool": {ANN_PLACEMENT: "inference:nope"},
    "bad hold time": {ANN_HOLD_UNTIL: "tomorrow"},
    "bad pin": {ANN_PIN: "inferense:default"},
    "pin to an unknown pool": {ANN_PIN: "inference:nope"},
}
EXPECTED = {  # what the report names
    "not JSON": (ANN_MOVE, "not JSON"),
    "unknown phase": (ANN_MOVE, "unknown phase 'Drainin'"),
    "phase of the other direction": (ANN_MOVE, "not a phase of a move to inference:default"),
    "unknown placement in a move": (ANN_MOVE, "'inferense' is no placement"),
    "move between two unknown pools": (ANN_MOVE, "has neither"),
    "bad time in a move": (ANN_MOVE, "since"),
    "unknown placement": (ANN_PLACEMENT, "'gpu-side' is no placement"),
    "unknown pool": (ANN_PLACEMENT, "names inference pool 'nope'"),
    "bad hold time": (ANN_HOLD_UNTIL, "'tomorrow' is no RFC 3339 time"),
    "bad pin": (ANN_PIN, "'inferense:default' is no placement"),
    "pin to an unknown pool": (ANN_PIN, "names inference pool 'nope'"),
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_a_corrupt_record_on_one_node_is_reported_and_the_other_nodes_move(kind):
    worlds = {f"gpu0{i}": slurm_node_world(f"gpu0{i}") for i in range(1, 5)}
    bad = worlds["gpu01"]
    bad.node = replace(bad.node, annotations={**bad.node.annotations, **CORRUPT[kind]})
    before = (bad.node, bad.slurm_node)
    pool = PoolWorld(spec=make_spec(slurm_nodes=2, max_moves=2), worlds=worlds, now=NOW)
    pool.run(passes=20)

    # the bad node is left alone: no step, nothing written, nothing done in Slurm
    assert (bad.node, bad.slurm_node) == before and bad.log == []
    assert all("gpu01" not in d.steps for d in pool.decisions)
    # the others reached the split around it
    others = [w.node for n, w in worlds.items() if n != "gpu01"]
    assert all(n.move is None for n in others)
    on_inference = sum(n.placement == INFERENCE for n in others)
    # it counts where its record says it is, else on the side its label shows (Slurm): the split
    # (2 Slurm, 2 inference) is reached around it
    assert on_inference == 2
    assert pool.status.inference.ready == on_inference
    # reported where it is: status, Degraded with a reason of its own, one Warning naming node and annotation
    annotation, words = EXPECTED[kind]
    assert [(r.node, r.annotation) for r in pool.status.invalid_records] == [("gpu01", annotation)]
    assert words in pool.status.invalid_records[0].message
    degraded = next(c for c in pool.status.conditions if c.type == "Degraded")
    assert degraded.status == "True" and degraded.reason == "InvalidNodeRecord" and "gpu01" in degraded.message
    warnings = [e for d in pool.decisions for e in d.node_events if e.reason == "InvalidNodeRecord"]
    assert len(warnings) == 1 and warnings[0].node == "gpu01" and annotation in warnings[0].message


def test_a_fixed_record_is_reported_and_the_node_is_managed_again():
    worlds = {f"gpu0{i}": slurm_node_world(f"gpu0{i}") for i in range(1, 3)}
    bad = worlds["gpu01"]
    bad.node = replace(bad.node, annotations={**bad.node.annotations, ANN_MOVE: json.dumps({**GOOD_MOVE, "phase": "Drainin"})})
    pool = PoolWorld(spec=make_spec(slurm_nodes=2), worlds=worlds, now=NOW)
    pool.run(passes=2)
    bad.node = replace(bad.node, annotations={**bad.node.annotations, ANN_MOVE: json.dumps(GOOD_MOVE)})
    pool.run(passes=1)
    fixed = [e for e in pool.decisions[-1].node_events if e.reason == "NodeRecordFixed"]
    assert [e.node for e in fixed] == ["gpu01"] and pool.status.invalid_records == []
    pool.run(passes=20)  # the move it records goes on, and the split (2 Slurm) takes it back
    assert bad.node.move is None and bad.node.placement == SLURM


def test_a_move_now_rehomes_a_node_whose_pool_was_removed():
    worlds = {f"gpu0{i}": slurm_node_world(f"gpu0{i}") for i in range(1, 3)}
    gone = worlds["gpu01"]
    gone.node = replace(gone.node, annotations={ANN_PLACEMENT: "inference:retired", "slurmpool.io/move-now": SLURM})
    pool = PoolWorld(spec=make_spec(slurm_nodes=2), worlds=worlds, now=NOW)
    pool.run(passes=20)
    assert gone.node.placement == SLURM and pool.status.invalid_records == []


def test_the_same_snapshot_decides_the_same_pass():
    worlds = {f"gpu0{i}": slurm_node_world(f"gpu0{i}") for i in range(1, 5)}
    pool = PoolWorld(spec=make_spec(slurm_nodes=1, max_moves=3), worlds=worlds, now=NOW)
    snap = pool.snapshot()
    a, b = decide(snap), decide(snap)
    assert [(s.node, m.id) for s, m in a.starts] == [(s.node, m.id) for s, m in b.starts] and len(a.starts) == 3
    assert len({m.id for _, m in a.starts}) == 3


def test_a_node_with_an_unreadable_placement_and_no_side_label_counts_as_unadopted():
    from slurmpool.core.planner import counted_placement

    worlds = {f"gpu0{i}": slurm_node_world(f"gpu0{i}") for i in range(1, 5)}
    bad = worlds["gpu01"]
    bad.node = replace(bad.node, labels={}, annotations={ANN_PLACEMENT: "gpu-side"})
    assert counted_placement(bad.node, {SLURM, INFERENCE}) == "none"
    pool = PoolWorld(spec=make_spec(slurm_nodes=2, max_moves=2), worlds=worlds, now=NOW)
    pool.run(passes=20)
    # nothing moves to make up for it: one node goes (3 Slurm counted -> 2), the inference side stays short
    assert sum(w.node.placement == INFERENCE for w in worlds.values()) == 1 and bad.log == []
