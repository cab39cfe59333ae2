"""The recorded planner cases (tests/fixtures/plans/): random pools described as plain JSON, the
objects the planner takes built from them, and the planner's Plan as JSON.

`describe` draws one pool from a seeded random.Random: topology blocks (from labels and from
Slurm's own groups, whole blocks or not), moves in flight, pins, move-now requests, holds, force,
health findings (unhealthy and within their grace), jobs with and without an end, pods. It is the
same distribution test_planner_same_plans drew with hypothesis before the plans were recorded.
`build` turns a description into (spec, nodes, SlurmView, health); `recorded` a Plan into JSON."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from slurmbridge import SlurmJob, SlurmNode, TopologyGroup
from slurmpool.core.health import Finding, NodeHealth
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.moves import first_phase
from slurmpool.core.planner import Plan
from slurmpool.core.view import (ANN_FORCE, ANN_HOLD_UNTIL, ANN_MOVE, ANN_MOVE_NOW, ANN_PIN, ANN_PLACEMENT, NONE, SLURM, MoveRecord,
                                 NodeView, PodView, SlurmView, iso)

from .factories import make_spec

BLOCK = "topology.slurmpool.io/block"
PLACES = [SLURM, SLURM, "inference:llm", "inference:batch", NONE]
TOPOLOGIES = ["none", "label", "slurm"]  # case `seed` has TOPOLOGIES[seed % 3]: each a third of the cases
SLURM_KINDS = ["IDLE", "IDLE", "MIXED", "DRAIN", "DOWN", "NOT_RESPONDING", "unreported", "job"]


def describe(seed: int, now: datetime) -> dict:
    """One random pool as JSON: {"spec", "nodes", "slurm", "jobs", "topology", "health"}."""
    rng = random.Random(seed)
    n, blocks = rng.randint(0, 30), rng.randint(1, 6)
    nodes, slurm, jobs, health = [], {}, [], {}
    for i in range(n):
        name = f"n{i:02d}"
        placement = rng.choice(PLACES)
        ann = {} if placement == NONE else {ANN_PLACEMENT: placement}
        if rng.randint(0, 5) == 0:
            target = rng.choice([p for p in PLACES[1:4] if p != placement])
            ann[ANN_MOVE] = MoveRecord(id="m", source=placement, target=target, phase=first_phase(target, placement),
                                       since=now, started=now, cause=rng.choice(["rebalance", "pin"])).to_annotation()
        extra = rng.randint(0, 12)
        if extra == 0:
            ann[ANN_PIN] = rng.choice([SLURM, "inference:llm", "inference"])
        elif extra == 1:
            ann[ANN_MOVE_NOW] = rng.choice([SLURM, "inference:batch", "inference"])
        elif extra == 2:
            ann[ANN_HOLD_UNTIL] = iso(now + timedelta(minutes=rng.choice([-5, 5])))
        if rng.randint(0, 8) == 0:
            ann[ANN_FORCE] = "true"
        node: dict = {"name": name}
        if rng.randint(0, 6):
            node["labels"] = {BLOCK: f"b{rng.randint(0, blocks - 1)}"}
        if ann:
            node["annotations"] = ann
        pods = [["ns", f"{name}-p{k}", f"u{i}-{k}", rng.choice([[], ["DaemonSet"]])] for k in range(rng.randint(0, 2))]
        if pods:
            node["pods"] = pods
        if rng.random() < 0.5:
            node["unschedulable"] = True
        nodes.append(node)
        kind = rng.choice(SLURM_KINDS)
        if kind == "DRAIN":
            slurm[name] = ["IDLE", ["DRAIN"], "admin"]
        elif kind == "NOT_RESPONDING":
            slurm[name] = ["IDLE", ["NOT_RESPONDING"], None]
        elif kind == "job":
            slurm[name] = ["MIXED", [], None]
            jobs.append([f"j{i}", name, rng.choice([None, 60, 600, 3600])])  # id, node, seconds to its end
        elif kind != "unreported":
            slurm[name] = [kind, [], None]
        finding = rng.randint(0, 9)
        if finding <= 1:  # 0: unhealthy, 1: suspect (within its grace of 60 s)
            health[name] = None if finding == 0 else 60
    names = [node["name"] for node in nodes]
    topology = [[f"sw{b}", names[b::3]] for b in range(2) if rng.random() < 0.5]
    slurm_nodes = rng.randint(0, n + 1)
    spec = make_spec(
        slurm_nodes=slurm_nodes, min_slurm=rng.randint(0, min(2, slurm_nodes)), min_inference=rng.randint(0, 2),
        max_moves=rng.randint(1, 8), paused=rng.randint(0, 9) == 0,
        pools=[("llm", rng.randint(-3, 3), rng.randint(0, 2), rng.choice([None, 3, 10])), ("batch", rng.randint(-3, 3), 0, None)],
    )
    topo = TOPOLOGIES[seed % len(TOPOLOGIES)]
    if topo != "none":
        spec.topology.block_label = BLOCK
        spec.topology.from_slurm = topo == "slurm"
        spec.topology.whole_blocks = rng.random() < 0.5
    spec.health.replace = rng.random() < 0.5
    return {"spec": spec.model_dump(mode="json", by_alias=True, exclude_defaults=True), "nodes": nodes, "slurm": slurm,
            "jobs": jobs, "topology": topology, "health": health}


def build(case: dict, now: datetime) -> tuple[SlurmNodePoolSpec, list[NodeView], SlurmView, dict[str, NodeHealth]]:
    """The planner's input described by `case` (a fresh SlurmView each time: its caches never leak)."""
    spec = SlurmNodePoolSpec.model_validate(case["spec"])
    nodes = [NodeView(name=n["name"], labels=n.get("labels", {}), annotations=n.get("annotations", {}),
                      pods=tuple(PodView(ns, name, uid, owner_kinds=tuple(kinds)) for ns, name, uid, kinds in n.get("pods", ())),
                      unschedulable=n.get("unschedulable", False))
             for n in case["nodes"]]
    slurm = {name: SlurmNode(name=name, state=state, flags=frozenset(flags), reason=reason, gres="gpu:h100:8",
                             gres_used="gpu:h100:0", features=(), partitions=("gpu",))
             for name, (state, flags, reason) in case["slurm"].items()}
    jobs = tuple(SlurmJob(job_id=job_id, name="j", user="u", state="RUNNING", partition="gpu", nodes=(node,), gpus_per_node=8,
                          num_nodes=1, start_time=now, end_time=None if end is None else now + timedelta(seconds=end), reason="None")
                 for job_id, node, end in case["jobs"])
    groups = tuple(TopologyGroup(name, 0, tuple(members)) for name, members in case["topology"])
    health = {name: NodeHealth((Finding("SlurmDown", "down", now, None if grace is None else now + timedelta(seconds=grace)),))
              for name, grace in case["health"].items()}
    return spec, nodes, SlurmView(True, nodes=slurm, jobs=jobs, topology=groups), health


def recorded(plan: Plan) -> dict:
    """A Plan as JSON: every field, the order of each list kept (the order moves start in)."""
    return {"desired": plan.desired, "problems": plan.problems,
            "starts": [[s.node, s.source, s.target, s.cause] for s in plan.starts],
            "aborts": plan.aborts, "forced": plan.forced, "refused": plan.refused}
