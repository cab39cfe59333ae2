"""Several inference pools: moves between two pools (relabel, evict what no longer fits, no
Slurm step), explicit per-pool counts, and schedules and demand that name pools."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmpool.core.demand import Base, PendingPod, Seen, decide_demand, signals
from slurmpool.core.fit import PodNeeds, misfit, needs_of
from slurmpool.core.models import GPU, SlurmNodePoolSpec
from slurmpool.core.moves import Pass, advance, disturbed_pods, first_phase
from slurmpool.core.placement import Side
from slurmpool.core.planner import Goal, desired_split, plan
from slurmpool.core.target import decide_target
from slurmpool.core.view import ANN_MOVE, ANN_PLACEMENT, LABEL_SIDE, Direction, MoveRecord, NodeView, PodView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .sim import World, run_move, start

LLM, BATCH = "inference:llm", "inference:batch"
TWO_POOLS = [("llm", 10, 0, None), ("batch", 0, 0, None)]


def llm_node(pods=()) -> NodeView:
    return NodeView(
        name="gpu01",
        annotations={ANN_PLACEMENT: LLM},
        labels={LABEL_SIDE: "inference", "pool": "llm", "zone": "a"},
        taints=({"key": "inference", "value": "llm", "effect": "NoSchedule"},),
        pods=tuple(pods),
    )


def pod(name, **spec) -> PodView:
    return PodView("serve", name, f"uid-{name}", owner_kinds=("ReplicaSet",), needs=needs_of(spec))


LLM_POD = pod("llm-0", nodeSelector={"pool": "llm"}, tolerations=[{"key": "inference", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}])
ANYWHERE = pod("any-0", tolerations=[{"key": "inference", "operator": "Exists"}])
ZONE_A = pod("zone-0", tolerations=[{"operator": "Exists"}],
             affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                 {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}})
DAEMON = PodView("kube-system", "exporter-x", "uid-d", owner_kinds=("DaemonSet",), needs=PodNeeds(node_selector=(("pool", "llm"),)))


# ---------------------------------------------------------------- fit


def test_misfit_reads_node_selector_affinity_and_taints():
    labels = {"pool": "batch", "zone": "a", "rank": "5"}
    batch_taint = [{"key": "inference", "value": "batch", "effect": "NoSchedule"}]
    assert misfit(LLM_POD.needs, labels, batch_taint) == "nodeSelector pool=llm"
    assert misfit(ANYWHERE.needs, labels, batch_taint) is None
    assert misfit(ZONE_A.needs, labels, batch_taint) is None
    assert misfit(ZONE_A.needs, {"zone": "b"}, []) == "required node affinity"
    assert misfit(pod("p").needs, labels, batch_taint) == "taint inference=batch:NoSchedule"
    assert misfit(pod("p").needs, labels, [{"key": "x", "effect": "PreferNoSchedule"}]) is None
    gt = needs_of({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["7"]}]},
        {"matchExpressions": [{"key": "rank", "operator": "Lt", "values": ["6"]}, {"key": "zone", "operator": "NotIn", "values": ["b"]}]},
    ]}}}})
    assert misfit(gt, labels, []) is None  # the second term holds
    assert misfit(gt, {**labels, "zone": "b"}, []) == "required node affinity"
    only_noexecute = needs_of({"tolerations": [{"key": "inference", "operator": "Exists", "effect": "NoExecute"}]})
    assert misfit(only_noexecute, labels, batch_taint) == "taint inference=batch:NoSchedule"


# ---------------------------------------------------------------- the move


def test_a_move_between_pools_relabels_evicts_only_misfits_and_never_touches_slurm():
    spec = make_spec(pools=TWO_POOLS)
    world = World(node=llm_node([LLM_POD, ANYWHERE, ZONE_A, DAEMON]), slurm_node=slurm_node("gpu01", "IDLE", {"DRAIN"}, reason="slurmpool: parked"))
    start(world, LLM, BATCH, NOW)
    assert world.node.move.phase == "Relabeling" and world.node.move.direction == Direction.BETWEEN_POOLS
    run_move(world, spec, NOW)
    n = world.node
    assert n.move is None and n.placement == BATCH
    assert n.labels["pool"] == "batch" and n.labels[LABEL_SIDE] == "inference" and not n.unschedulable
    assert {(t["key"], t["value"]) for t in n.taints} == {("inference", "batch")}
    gone = {p.name for p in n.pods} ^ {"llm-0", "any-0", "zone-0", "exporter-x"}
    assert gone == {"llm-0"}
    assert not any(name in ("Drain", "Resume", "Requeue", "Cancel", "CreateSlurmdPod", "DeleteSlurmdPod") for name in world.log)


def test_a_refused_eviction_blocks_then_rolls_back_to_the_old_pool():
    spec = make_spec(pools=TWO_POOLS, drain={"evictionTimeout": "10s", "onEvictionTimeout": "Rollback"})
    world = World(node=llm_node([LLM_POD]), slurm_node=None, protected={"serve/llm-0"})
    start(world, LLM, BATCH, NOW)
    # Relabel, then the refused eviction names the pod.
    run_move(world, spec, NOW, rounds=3)
    step = advance(world.node.move, world.node, Pass(world.view(), spec, NOW + timedelta(seconds=3)))
    assert world.node.move.phase == "EvictingMisfits" and [str(b) for b in step.blocked_by] == ["pod/serve/llm-0"]
    assert "nodeSelector pool=llm" in step.message
    run_move(world, spec, NOW + timedelta(seconds=3), rounds=30)
    assert world.node.move is None and world.node.placement == LLM
    assert world.node.labels["pool"] == "llm" and {p.name for p in world.node.pods} == {"llm-0"}


@settings(max_examples=60, deadline=None)
@given(crash_at=st.integers(0, 6), protected_for=st.integers(0, 3))
def test_a_crash_at_any_round_still_settles_a_move_between_pools(crash_at, protected_for):
    spec = make_spec(pools=TWO_POOLS)
    world = World(node=llm_node([LLM_POD, ANYWHERE]), slurm_node=None, protected={"serve/llm-0"} if protected_for else set())
    start(world, LLM, BATCH, NOW)
    run_move(world, spec, NOW, rounds=crash_at + 1, crash_at=crash_at)
    world.protected = set()
    run_move(world, spec, NOW + timedelta(seconds=crash_at + 1))
    assert world.node.move is None and world.node.placement == BATCH
    assert {p.name for p in world.node.pods} == {"any-0"}


def test_first_phase_and_disturbed_pods_per_direction():
    spec = make_spec(pools=TWO_POOLS)
    assert first_phase(BATCH, LLM) == "Relabeling"
    assert first_phase(BATCH, "slurm") == "Draining" and first_phase("slurm", LLM) == "Cordoning"
    node = llm_node([LLM_POD, ANYWHERE, DAEMON])
    assert [p.name for p in disturbed_pods(spec, node, BATCH)] == ["llm-0"]
    assert [p.name for p in disturbed_pods(spec, node, "slurm")] == ["llm-0", "any-0"]


# ---------------------------------------------------------------- the split


def test_explicit_pool_counts_are_served_before_priority():
    spec = make_spec(slurm_nodes=2, pools=TWO_POOLS)
    assert desired_split(spec, 8)[0] == {"slurm": 2, LLM: 6, BATCH: 0}
    assert desired_split(spec, 8, pool_counts={"batch": 2})[0] == {"slurm": 2, LLM: 4, BATCH: 2}
    # A request the nodes cannot meet: the higher priority is served first.
    assert desired_split(spec, 8, 6, {"llm": 2, "batch": 3})[0] == {"slurm": 6, LLM: 2, BATCH: 0}
    # Both counted and a leftover: pools without a count first, then by priority.
    spec3 = make_spec(slurm_nodes=0, pools=[*TWO_POOLS, ("embed", 5, 0, 1)])
    assert desired_split(spec3, 8, None, {"llm": 2, "batch": 3})[0] == {"slurm": 0, LLM: 4, BATCH: 3, "inference:embed": 1}
    # The spec's own per-pool counts are the default.
    body = spec.model_dump(by_alias=True, exclude_none=True)
    body["inference"]["pools"][1]["nodes"] = 3
    assert desired_split(SlurmNodePoolSpec.model_validate(body), 8)[0] == {"slurm": 2, LLM: 3, BATCH: 3}


def settled_nodes(llm: int, batch: int) -> list[NodeView]:
    nodes = [llm_node() for _ in range(llm)]
    nodes = [NodeView(f"l{i}", annotations=n.annotations, labels=n.labels, taints=n.taints) for i, n in enumerate(nodes)]
    nodes += [NodeView(f"b{i}", annotations={ANN_PLACEMENT: BATCH}, labels={"pool": "batch"}) for i in range(batch)]
    return nodes


def test_the_planner_moves_nodes_between_pools_and_turns_them_back():
    spec = make_spec(slurm_nodes=0, max_moves=4, pools=TWO_POOLS)
    nodes = settled_nodes(4, 0)
    result = plan(spec, nodes, SlurmView(True), NOW, Goal(pool_counts={"batch": 2}))
    assert [(s.source, s.target) for s in result.starts] == [(LLM, BATCH)] * 2
    # The count drops back while those moves are in flight: they are turned back.
    moving = [
        NodeView(n.name, annotations={**n.annotations, ANN_MOVE: MoveRecord(
            id="m", source=LLM, target=BATCH, phase="EvictingMisfits", since=NOW, started=NOW).to_annotation()})
        if n.name in {s.node for s in result.starts} else n
        for n in nodes
    ]
    again = plan(spec, moving, SlurmView(True), NOW, Goal(pool_counts={}))
    assert sorted(again.aborts) == sorted(s.node for s in result.starts) and not again.starts


# ---------------------------------------------------------------- schedules and demand name pools


def spec_with(**extra) -> SlurmNodePoolSpec:
    body = make_spec(slurm_nodes=4, pools=TWO_POOLS).model_dump(by_alias=True, exclude_none=True)
    body.update(extra)
    return SlurmNodePoolSpec.model_validate(body)


def test_an_open_window_sets_pool_counts_and_they_end_with_it():
    window = {"name": "night", "cron": "0 11 * * *", "duration": "2h", "slurmNodes": 2, "inference": {"batch": 5}}
    spec = spec_with(schedule=[window])
    inside = decide_target(spec, 8, NOW, None)
    assert inside.status.source == "Schedule" and inside.pool_counts == {"batch": 5}
    assert desired_split(spec, 8, inside.slurm_nodes, inside.pool_counts)[0] == {"slurm": 2, LLM: 1, BATCH: 5}
    after = decide_target(spec, 8, NOW + timedelta(hours=2), inside.status)
    assert after.status.source == "Manual" and after.pool_counts == {}


def waiting(name, gpus, pool) -> PendingPod:
    return PendingPod("serve", name, ((GPU, gpus),), node_selector=(("pool", pool),),
                      tolerations=(("inference", "Exists", "", ""),))


def test_demand_counts_pending_pods_per_pool_and_asks_for_that_pool():
    spec = spec_with(demand={"cooldown": "1m", "slurm": {"minNodes": 4}})  # Slurm may not shrink
    nodes = settled_nodes(4, 0) + [NodeView(f"s{i}", annotations={ANN_PLACEMENT: "slurm"}) for i in range(4)]
    slurm = SlurmView(True, nodes={f"s{i}": slurm_node(f"s{i}", "ALLOCATED") for i in range(4)})
    both = signals(Seen(spec, nodes, slurm, [waiting("b-0", 8, "batch"), waiting("b-1", 8, "batch"), waiting("l-0", 4, "llm")], now=NOW))
    assert both.pool_nodes == {"batch": 2, "llm": 1} and dict(both.placed.pool_here) == {"llm": 4}
    # Both pools wait and Slurm may not shrink: the higher priority keeps its nodes.
    out = decide_demand(spec, 8, Base(4, "k", NOW - timedelta(hours=1)), None, both, NOW)
    assert out.status.pools == {"batch": 2, "llm": 5}
    assert desired_split(spec, 8, 4, out.status.pools)[0] == {"slurm": 4, LLM: 4, BATCH: 0}
    # Only batch waits: it asks for its count, and llm gives.
    sig = signals(Seen(spec, nodes, slurm, [waiting("b-0", 8, "batch"), waiting("b-1", 8, "batch")], now=NOW))
    out = decide_demand(spec, 8, Base(4, "k", NOW - timedelta(hours=1)), None, sig, NOW)
    assert out.changed and out.slurm_nodes == 4  # at its bound: nodes come from the pools instead
    assert out.status.pools == {"batch": 2}
    # The planner then moves llm nodes to batch (llm keeps what is left).
    result = plan(spec, nodes, slurm, NOW, Goal(4, out.status.pools))
    assert result.desired[BATCH] == 2 and {(s.source, s.target) for s in result.starts} == {(LLM, BATCH)}
    # Once the moves are on their way, nothing more is asked, and the counts hold.
    sig2 = replace(sig, placed=replace(sig.placed, pool_incoming=(("batch", 2),), pool_here=(("batch", 2), ("llm", 2))))
    again = decide_demand(spec, 8, Base(4, "k", NOW - timedelta(hours=1)), out.status, sig2, NOW + timedelta(minutes=5))
    assert not again.changed
    assert again.status.pools == {"batch": 2} and again.status.pool_wants == {}


def test_demand_pool_counts_reach_the_target():
    spec = spec_with(demand={"cooldown": "1m"})
    nodes = settled_nodes(2, 2) + [NodeView(f"s{i}", annotations={ANN_PLACEMENT: "slurm"}) for i in range(4)]
    slurm = SlurmView(True, nodes={f"s{i}": slurm_node(f"s{i}", "ALLOCATED") for i in range(4)})
    sig = signals(Seen(spec, nodes, slurm, [waiting("b-0", 8, "batch")], now=NOW))
    first = decide_target(spec, 8, NOW, None, signals=sig)
    later = decide_target(spec, 8, NOW + timedelta(minutes=2), first.status, signals=sig)
    assert later.slurm_nodes == 3 and later.pool_counts == {"batch": 3}
    assert any(reason == "DemandChanged" and "pool batch - -> 3" in msg for reason, msg in ((e.reason, e.message) for e in later.events))


def test_demand_reads_the_node_affinity_of_waiting_pods():
    spec = spec_with(demand={})
    zone_nodes = [NodeView(f"n{i}", labels={"zone": z}) for i, z in enumerate(["a", "a", "b"])]

    def wants(expressions) -> PendingPod:
        needs = needs_of({"tolerations": [{"key": "inference", "operator": "Exists"}],
                          "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                              "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}})
        return PendingPod("serve", "p", ((GPU, 8),), tolerations=needs.tolerations, affinity=needs.affinity)

    sig = signals(Seen(spec, zone_nodes, SlurmView(True), [
        wants([{"key": "zone", "operator": "In", "values": ["b"]}]),  # a zone some node is in
        wants([{"key": "zone", "operator": "In", "values": ["c"]}]),  # no node is in zone c
        wants([{"key": "pool", "operator": "In", "values": ["batch"]}, {"key": "zone", "operator": "NotIn", "values": ["a"]}]),
    ], now=NOW))
    # The first fits llm (highest priority); the third only batch, on the zone-b node.
    assert sig.waiting(Side.INFERENCE) == 2 and sig.pool_nodes == {"llm": 1, "batch": 1}


def test_a_move_to_a_pool_removed_from_the_spec_goes_back_whatever_its_phase():
    spec = make_spec(slurm_nodes=0, pools=[("llm", 10, 0, None)])  # batch is gone
    record = MoveRecord(id="m", source=LLM, target=BATCH, phase="EvictingMisfits", since=NOW, started=NOW)
    from_slurm = MoveRecord(id="s", source="slurm", target=BATCH, phase="Relabeling", since=NOW, started=NOW)
    nodes = [NodeView("a", annotations={ANN_PLACEMENT: LLM, ANN_MOVE: record.to_annotation()}),
             NodeView("b", annotations={ANN_PLACEMENT: "slurm", ANN_MOVE: from_slurm.to_annotation()})]
    result = plan(spec, nodes, SlurmView(True), NOW)
    assert sorted(result.aborts) == ["a", "b"] and not result.problems


def test_a_cordon_set_by_a_person_survives_a_move_between_pools():
    spec = make_spec(pools=TWO_POOLS)
    cordoned = NodeView("gpu01", annotations={ANN_PLACEMENT: LLM}, labels={"pool": "llm"}, unschedulable=True,
                        taints=({"key": "inference", "value": "llm", "effect": "NoSchedule"},))
    world = World(node=cordoned, slurm_node=None)
    start(world, LLM, BATCH, NOW)
    run_move(world, spec, NOW)
    assert world.node.placement == BATCH and world.node.labels["pool"] == "batch" and world.node.unschedulable
