"""The faster planner (issue 12) chooses exactly the moves the one before it did
(tests/planner_before.py, frozen): random pools with topology blocks (labels and Slurm's own),
whole blocks, moves in flight, pins, move-now requests, holds, health findings, jobs, pods."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmbridge import SlurmJob, TopologyGroup
from slurmpool.core.health import Finding, NodeHealth
from slurmpool.core.moves import first_phase
from slurmpool.core.planner import plan
from slurmpool.core.view import (ANN_FORCE, ANN_HOLD_UNTIL, ANN_MOVE, ANN_MOVE_NOW, ANN_PIN, ANN_PLACEMENT, NONE, SLURM, MoveRecord,
                            NodeView, PodView, SlurmView, iso)

from . import planner_before
from .factories import NOW, make_spec, slurm_node

BLOCK = "topology.slurmpool.io/block"
PLACES = [SLURM, SLURM, "inference:llm", "inference:batch", NONE]


@st.composite
def pools(draw):
    n = draw(st.integers(0, 30))
    blocks = draw(st.integers(1, 6))
    nodes, states, jobs, health = [], {}, [], {}
    for i in range(n):
        name = f"n{i:02d}"
        placement = draw(st.sampled_from(PLACES))
        ann = {} if placement == NONE else {ANN_PLACEMENT: placement}
        if draw(st.integers(0, 5)) == 0:
            target = draw(st.sampled_from([p for p in PLACES[1:4] if p != placement]))
            ann[ANN_MOVE] = MoveRecord(id="m", source=placement, target=target, phase=first_phase(target, placement),
                                       since=NOW, started=NOW, cause=draw(st.sampled_from(["rebalance", "pin"]))).to_annotation()
        extra = draw(st.integers(0, 12))
        if extra == 0:
            ann[ANN_PIN] = draw(st.sampled_from([SLURM, "inference:llm", "inference"]))
        elif extra == 1:
            ann[ANN_MOVE_NOW] = draw(st.sampled_from([SLURM, "inference:batch", "inference"]))
        elif extra == 2:
            ann[ANN_HOLD_UNTIL] = iso(NOW + timedelta(minutes=draw(st.sampled_from([-5, 5]))))
        if draw(st.integers(0, 8)) == 0:
            ann[ANN_FORCE] = "true"
        labels = {BLOCK: f"b{draw(st.integers(0, blocks - 1))}"} if draw(st.integers(0, 6)) else {}
        pods = tuple(PodView("ns", f"{name}-p{k}", f"u{i}-{k}", owner_kinds=draw(st.sampled_from([(), ("DaemonSet",)])))
                     for k in range(draw(st.integers(0, 2))))
        nodes.append(NodeView(name=name, labels=labels, annotations=ann, pods=pods, unschedulable=draw(st.booleans())))
        kind = draw(st.sampled_from(["IDLE", "IDLE", "MIXED", "DRAIN", "DOWN", "NOT_RESPONDING", "unreported", "job"]))
        if kind == "DRAIN":
            states[name] = slurm_node(name, "IDLE", {"DRAIN"}, "admin")
        elif kind == "NOT_RESPONDING":
            states[name] = slurm_node(name, "IDLE", {"NOT_RESPONDING"})
        elif kind == "job":
            states[name] = slurm_node(name, "MIXED")
            end = draw(st.sampled_from([None, 60, 600, 3600]))
            jobs.append(SlurmJob(job_id=f"j{i}", name="j", user="u", state="RUNNING", partition="gpu", nodes=(name,), gpus_per_node=8,
                                 num_nodes=1, start_time=NOW, end_time=None if end is None else NOW + timedelta(seconds=end), reason="None"))
        elif kind != "unreported":
            states[name] = slurm_node(name, kind)
        finding = draw(st.integers(0, 9))
        if finding <= 1:  # 0: unhealthy, 1: suspect (within its grace)
            health[name] = NodeHealth((Finding("SlurmDown", "down", NOW, None if finding == 0 else NOW + timedelta(minutes=1)),))
    groups = tuple(TopologyGroup(f"sw{b}", 0, tuple(n.name for n in nodes[b::3])) for b in range(2) if draw(st.booleans()))
    slurm_nodes = draw(st.integers(0, n + 1))
    spec = make_spec(
        slurm_nodes=slurm_nodes, min_slurm=draw(st.integers(0, min(2, slurm_nodes))), min_inference=draw(st.integers(0, 2)),
        max_moves=draw(st.integers(1, 8)), paused=draw(st.integers(0, 9)) == 0,
        pools=[("llm", draw(st.integers(-3, 3)), draw(st.integers(0, 2)), draw(st.sampled_from([None, 3, 10]))),
               ("batch", draw(st.integers(-3, 3)), 0, None)],
    )
    topo = draw(st.sampled_from(["none", "label", "slurm"]))
    if topo != "none":
        spec.topology.block_label = BLOCK
        spec.topology.from_slurm = topo == "slurm"
        spec.topology.whole_blocks = draw(st.booleans())
    spec.health.replace = draw(st.booleans())
    return spec, nodes, SlurmView(True, nodes=states, jobs=tuple(jobs), topology=groups), health


@settings(max_examples=400, deadline=None)
@given(pools())
def test_planner_same_plans(case):
    spec, nodes, view, health = case
    # Fresh views for each: caches on the Slurm view must not leak from one planner to the other.
    before = planner_before.plan(spec, nodes, SlurmView(True, nodes=view.nodes, jobs=view.jobs, topology=view.topology), NOW, health=health)
    now = plan(spec, nodes, SlurmView(True, nodes=view.nodes, jobs=view.jobs, topology=view.topology), NOW, health=health)
    assert now == before
