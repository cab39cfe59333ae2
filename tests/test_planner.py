"""The planner: desired split, victim order, and its invariants under generated clusters."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmbridge import SlurmJob
from slurmpool.core.planner import Goal, current_placement, desired_split, plan
from slurmpool.core.moves import abortable, first_phase
from slurmpool.core.view import ANN_HOLD_UNTIL, ANN_MOVE, ANN_PIN, ANN_PLACEMENT, NONE, SLURM, MoveRecord, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node


def node(name, placement=SLURM, move_target=None, pin=None, **kw) -> NodeView:
    ann = {}
    if placement != NONE:
        ann[ANN_PLACEMENT] = placement
    if move_target:
        ann[ANN_MOVE] = MoveRecord(id="m", source=placement, target=move_target, phase=first_phase(move_target, placement), since=NOW, started=NOW).to_annotation()
    if pin:
        ann[ANN_PIN] = pin
    ann.update(kw.pop("annotations", {}))
    return NodeView(name=name, annotations=ann, **kw)


def job(job_id, nodes, end_in=None, state="RUNNING"):
    return SlurmJob(
        job_id=job_id, name="j", user="u", state=state, partition="gpu", nodes=tuple(nodes), gpus_per_node=8, num_nodes=len(nodes),
        start_time=NOW, end_time=NOW + timedelta(seconds=end_in) if end_in is not None else None, reason="None",
    )


def test_desired_split_fills_minimums_then_priority():
    spec = make_spec(slurm_nodes=4, pools=[("llm", 10, 1, 3), ("batch", 0, 1, None)])
    desired, problems = desired_split(spec, 10)
    assert problems == []
    assert desired == {SLURM: 4, "inference:llm": 3, "inference:batch": 3}


def test_growing_slurm_takes_from_the_lower_priority_pool_first():
    spec = make_spec(slurm_nodes=7, pools=[("llm", 10, 0, None), ("batch", 0, 0, None)])
    desired, _ = desired_split(spec, 10)
    assert desired == {SLURM: 7, "inference:llm": 3, "inference:batch": 0}


def test_more_wanted_than_selected_is_a_problem_and_nothing_moves():
    spec = make_spec(slurm_nodes=9)
    nodes = [node(f"n{i}", placement="inference:default") for i in range(4)]
    result = plan(spec, nodes, SlurmView(True), NOW)
    assert result.starts == []
    assert "9 Slurm nodes wanted but only 4 nodes are selected" in result.problems[0]


def test_floors_that_cannot_hold_are_reported():
    spec = make_spec(slurm_nodes=2, min_slurm=2, min_inference=3)
    result = plan(spec, [node(f"n{i}") for i in range(4)], SlurmView(True), NOW)
    assert result.starts == [] and any("minInferenceNodes" in p for p in result.problems)


def test_victims_idle_and_draining_first_then_soonest_job_end():
    spec = make_spec(slurm_nodes=1, max_moves=3)
    nodes = [node("a"), node("b"), node("c"), node("d")]
    slurm = SlurmView(
        True,
        nodes={"a": slurm_node("a", "MIXED"), "b": slurm_node("b", "ALLOCATED"), "c": slurm_node("c", "IDLE"), "d": slurm_node("d", "IDLE", {"DRAIN"})},
        jobs=(job("1", ["a"], end_in=600), job("2", ["b"], end_in=60)),
    )
    result = plan(spec, nodes, slurm, NOW)
    assert [s.node for s in result.starts] == ["d", "c", "b"]
    assert all(s.target == "inference:default" for s in result.starts)


def _started(job_id, nodes, ran, end_in=None, num_nodes=None):
    """A running job that started `ran` seconds ago."""
    j = job(job_id, nodes, end_in=end_in)
    return replace(j, start_time=NOW - timedelta(seconds=ran), num_nodes=num_nodes or len(nodes))


def _busy_plan(drain, jobs, slurm_nodes=3):
    spec = make_spec(slurm_nodes=slurm_nodes, max_moves=1, drain=drain)
    nodes = [node(n) for n in "abcd"]
    slurm = SlurmView(True, nodes={n: slurm_node(n, "ALLOCATED") for n in "abcd"}, jobs=jobs)
    return [s.node for s in plan(spec, nodes, slurm, NOW).starts]


def test_when_the_drain_ends_jobs_the_busy_node_whose_jobs_lose_the_least_work_goes_first():
    jobs = (_started("1", ["a"], ran=3600, end_in=7200), _started("2", ["b"], ran=600, end_in=9000),
            _started("3", ["c", "d"], ran=400, end_in=9000))  # 400 s on 2 nodes: 800 node-seconds
    assert _busy_plan({"timeout": "5m", "onTimeout": "Requeue"}, jobs) == ["b"]
    assert _busy_plan({"timeout": "5m", "onTimeout": "Checkpoint"}, jobs) == ["b"]
    # the drain waits for them (Wait): nothing is lost, the soonest free goes first, as before
    assert _busy_plan({"timeout": "5m", "onTimeout": "Wait"}, jobs) == ["a"]


def test_a_job_that_ends_before_the_drain_would_end_it_loses_nothing():
    jobs = (_started("1", ["a"], ran=36000, end_in=200), _started("2", ["b"], ran=60, end_in=9000),
            _started("3", ["c"], ran=600, end_in=9000), _started("4", ["d"], ran=600, end_in=9000))
    assert _busy_plan({"timeout": "5m", "onTimeout": "Requeue"}, jobs) == ["a"]
    # with Checkpoint the grace counts too: a job ending within timeout + grace leaves by itself
    jobs = (_started("1", ["a"], ran=36000, end_in=500),) + jobs[1:]
    assert _busy_plan({"timeout": "5m", "onTimeout": "Checkpoint", "checkpoint": {"grace": "5m"}}, jobs) == ["a"]
    assert _busy_plan({"timeout": "5m", "onTimeout": "Requeue"}, jobs) == ["b"]


def test_a_node_with_a_job_younger_than_min_runtime_is_taken_only_when_no_other_would_do():
    drain = {"timeout": "5m", "onTimeout": "Requeue", "minRuntime": "30m"}
    jobs = (_started("1", ["a"], ran=60, end_in=9000), _started("2", ["b"], ran=7200, end_in=9000),
            _started("3", ["c"], ran=7200, end_in=9000), _started("4", ["d"], ran=7200, end_in=9000))
    assert _busy_plan(drain, jobs) == ["b"]  # the youngest job loses the least, but it is protected
    assert _busy_plan({k: v for k, v in drain.items() if k != "minRuntime"}, jobs) == ["a"]
    young = tuple(_started(str(i), [n], ran=60, end_in=9000) for i, n in enumerate("abcd"))
    assert _busy_plan(drain, young) == ["a"]  # every node runs a young job: one is still taken


def test_pinned_nodes_never_chosen_and_pins_pull_their_node():
    spec = make_spec(slurm_nodes=2, max_moves=4)
    nodes = [node("a", pin=SLURM), node("b", pin=SLURM), node("c"), node("d", placement="inference:default", pin=SLURM)]
    result = plan(spec, nodes, SlurmView(True, nodes={n: slurm_node(n) for n in "abc"}), NOW)
    moved = {s.node: (s.target, s.cause) for s in result.starts}
    assert moved["d"] == (SLURM, "pin")
    assert "a" not in moved and "b" not in moved
    assert moved["c"] == ("inference:default", "rebalance")


def test_paused_starts_nothing_and_hold_is_respected():
    spec = make_spec(slurm_nodes=0, paused=True)
    assert plan(spec, [node("a")], SlurmView(True), NOW).starts == []
    spec = make_spec(slurm_nodes=0)
    held = node("a", annotations={ANN_HOLD_UNTIL: (NOW + timedelta(minutes=5)).isoformat()})
    assert plan(spec, [held], SlurmView(True), NOW).starts == []


def test_a_draining_move_the_split_no_longer_wants_is_turned_back():
    spec = make_spec(slurm_nodes=2, max_moves=2)
    nodes = [node("a"), node("b", move_target="inference:default")]  # b draining; now 2 Slurm nodes wanted
    result = plan(spec, nodes, SlurmView(True), NOW)
    assert result.aborts == ["b"] and result.starts == []


def test_no_new_move_while_slurm_cannot_be_seen():
    spec = make_spec(slurm_nodes=0)
    assert plan(spec, [node("a")], SlurmView(False, error="ssh refused"), NOW).starts == []


def test_unadopted_nodes_are_placed_first():
    spec = make_spec(slurm_nodes=2, max_moves=10)
    nodes = [node(f"n{i}", placement=NONE) for i in range(4)]
    result = plan(spec, nodes, SlurmView(True), NOW)
    targets = sorted(s.target for s in result.starts)
    assert targets == ["inference:default", "inference:default", SLURM, SLURM]
    assert all(s.source == NONE for s in result.starts)


def test_slurm_takes_the_nodes_jobs_name_before_cheaper_ones():
    spec = make_spec(slurm_nodes=4, max_moves=4)
    nodes = [node(f"s{i}") for i in range(2)] + [node(f"i{i}", placement="inference:default") for i in range(4)]
    assert sorted(s.node for s in plan(spec, nodes, SlurmView(True), NOW).starts) == ["i0", "i1"]  # by cost
    result = plan(spec, nodes, SlurmView(True), NOW, Goal(named=("i3", "s0", "i2", "gone")))
    assert sorted((s.node, s.target) for s in result.starts) == [("i2", SLURM), ("i3", SLURM)]
    # One node short: the first named goes; the rest of the split still by cost.
    one = plan(make_spec(slurm_nodes=3, max_moves=4), nodes, SlurmView(True), NOW, Goal(named=("i3", "i2")))
    assert [s.node for s in one.starts] == ["i3"]


def test_named_nodes_respect_floors_holds_and_pins_and_serve_no_other_pool():
    spec = make_spec(slurm_nodes=3, min_inference=3, max_moves=4)
    nodes = [node(f"s{i}") for i in range(2)] + [node(f"i{i}", placement="inference:default") for i in range(4)]
    assert plan(spec, nodes, SlurmView(True), NOW, Goal(named=("i3",))).starts[0].node == "i3"
    held = [node("i3", placement="inference:default", annotations={ANN_HOLD_UNTIL: (NOW + timedelta(minutes=5)).isoformat()})
            if n.name == "i3" else n for n in nodes]
    assert [s.node for s in plan(spec, held, SlurmView(True), NOW, Goal(named=("i3",))).starts] == ["i0"]
    # Between pools a named node stays: it waits for Slurm.
    pools = make_spec(slurm_nodes=0, max_moves=4, pools=[("llm", 10, 0, None), ("batch", 0, 0, None)])
    spread = [node("a0", placement="inference:batch"), node("a1", placement="inference:batch")]
    moved = plan(pools, spread, SlurmView(True), NOW, Goal(slurm_nodes=0, pool_counts={"llm": 1}, named=("a0",)))
    assert [(s.node, s.target) for s in moved.starts] == [("a1", "inference:llm")]


# ---------------------------------------------------------------- properties

PLACEMENTS = [SLURM, "inference:llm", "inference:batch", NONE]


@st.composite
def clusters(draw):
    n = draw(st.integers(0, 40))
    nodes = []
    for i in range(n):
        placement = draw(st.sampled_from(PLACEMENTS))
        moving = draw(st.booleans()) and draw(st.booleans())
        target = draw(st.sampled_from(PLACEMENTS[:3])) if moving else None
        pin = draw(st.sampled_from([None, None, None, SLURM, "inference:llm"]))
        nodes.append(node(f"n{i:03d}", placement=placement, move_target=target, pin=pin, unschedulable=draw(st.booleans())))
    slurm_nodes = draw(st.integers(0, n + 2))
    min_slurm = draw(st.integers(0, slurm_nodes))
    min_inf = draw(st.integers(0, 5))
    llm_min = draw(st.integers(0, 3))
    llm_max = draw(st.sampled_from([None, 2, 8]))  # never below minNodes: the CRD refuses that
    spec = make_spec(
        slurm_nodes=slurm_nodes, min_slurm=min_slurm, min_inference=min_inf, max_moves=draw(st.integers(1, 6)),
        paused=draw(st.booleans()) and draw(st.booleans()),
        pools=[("llm", draw(st.integers(-5, 5)), llm_min, None if llm_max is None else max(llm_min, llm_max)),
               ("batch", draw(st.integers(-5, 5)), 0, None)],
    )
    states = {f"n{i:03d}": slurm_node(f"n{i:03d}", draw(st.sampled_from(["IDLE", "MIXED", "ALLOCATED", "DOWN"]))) for i in range(n)}
    named = draw(st.lists(st.sampled_from([n.name for n in nodes] + ["elsewhere"]), max_size=4)) if nodes else []
    return spec, nodes, SlurmView(True, nodes=states), tuple(named)


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_plan_invariants(cluster):
    spec, nodes, slurm, named = cluster
    result = plan(spec, nodes, slurm, NOW, Goal(named=named))
    by_name = {n.name: n for n in nodes}
    started = [s.node for s in result.starts]
    in_flight = sum(1 for n in nodes if n.move)
    # each node at most once, never one already moving
    assert len(started) == len(set(started))
    assert all(by_name[s].move is None for s in started)
    # never more than maxConcurrentMoves in flight (counting those already flying)
    assert len(started) <= max(0, spec.max_concurrent_moves - in_flight)
    if spec.paused or result.problems:
        assert started == []
    # a pinned node is only ever moved to its pin; a node jobs name, not in Slurm, is rebalanced to Slurm only
    for s in result.starts:
        if by_name[s.node].pin:
            assert s.target == by_name[s.node].pin and s.cause == "pin"
        if s.node in named and s.cause == "rebalance" and by_name[s.node].placement != SLURM:
            assert s.target == SLURM
    # counts add up, and rebalancing never overshoots: no group crosses its desired count
    before: dict[str, int] = {}
    for n in nodes:
        p = current_placement(n)
        before[p] = before.get(p, 0) + 1
    after = dict(before)
    for name in result.aborts:  # a turned-back move counts at its source again
        move = by_name[name].move
        assert abortable(move) and name not in started  # nothing irreversible done yet (or between pools)
        after[move.target] -= 1
        src = move.source if move.source in PLACEMENTS[:3] else NONE
        after[src] = after.get(src, 0) + 1
    for s in result.starts:
        src = current_placement(by_name[s.node])
        after[src] -= 1
        after[s.target] = after.get(s.target, 0) + 1
    assert sum(after.values()) == len(nodes)
    pinned_out = {g: sum(1 for s in result.starts if s.cause == "pin" and current_placement(by_name[s.node]) == g) for g in after}
    for group, want in result.desired.items():
        have_before, have_after = before.get(group, 0), after.get(group, 0)
        if have_before >= want:  # floors and desired counts are never crossed by rebalancing
            assert have_after >= want - pinned_out.get(group, 0)
        else:
            assert have_after <= max(want, have_before + sum(1 for s in result.starts if s.cause == "pin" and s.target == group))


def test_large_pool_starts_exactly_the_budget():
    spec = make_spec(slurm_nodes=5000, max_moves=50)
    nodes = [node(f"n{i:05d}") for i in range(10000)]
    result = plan(spec, nodes, SlurmView(True), NOW)
    assert len(result.starts) == 50
    assert {s.target for s in result.starts} == {"inference:default"}
