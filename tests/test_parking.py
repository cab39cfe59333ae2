"""Power-save parking (core/parking.py): which parked nodes Slurm may ask back (lendable, `idle~`)
and which are held (`drain~`); a give-back at Slurm's request; its decline, which requeues the job."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmbridge import SlurmJob
from slurmpool.core import parking
from slurmpool.core.health import Finding, NodeHealth
from slurmpool.core.models import HealthKind
from slurmpool.core.moves import Drain, Resume
from slurmpool.core.planner import victim_order
from slurmpool.core.view import (
    ANN_GIVEN_BACK,
    ANN_HOLD_UNTIL,
    ANN_MOVE_NOW,
    ANN_PIN,
    ANN_PLACEMENT,
    LABEL_SIDE,
    SLURM,
    Cause,
    NodeView,
    PodView,
    SlurmView,
    iso,
)

from .factories import NOW, make_spec, slurm_node
from .sim import PoolWorld, World, merged, parked

DEFAULT = "inference:default"
POWERED_DOWN = {"POWERED_DOWN"}


def power_save(spec, **update):
    return spec.model_copy(update={"slurm": spec.slurm.model_copy(update={"parking": "PowerSave"}), **update})


def inference_node(name: str, pods: int = 0, annotations: dict | None = None, pool: str = "default") -> NodeView:
    return NodeView(
        name=name,
        annotations={ANN_PLACEMENT: f"inference:{pool}", **(annotations or {})},
        labels={LABEL_SIDE: "inference", "pool": pool},
        taints=({"key": "inference", "value": pool, "effect": "NoSchedule"},),
        pods=tuple(PodView("llm", f"{name}-p{i}", f"{name}-u{i}", owner_kinds=("ReplicaSet",)) for i in range(pods)),
    )


def held_parked(name: str, pods: int = 0, annotations: dict | None = None, pool: str = "default"):
    """A node parked held (`drain~`): our claim on the Node, our drain in Slurm, powered down."""
    node, sn = parked(inference_node(name, pods, annotations, pool), slurm_node(name), pool, NOW - timedelta(hours=1))
    return node, replace(sn, flags=sn.flags | POWERED_DOWN)


def lent_parked(name: str, pods: int = 0, annotations: dict | None = None):
    """A node parked lendable (`idle~`): our drain lifted on the powered-down node."""
    node, sn = held_parked(name, pods, annotations)
    return node, replace(sn, flags=frozenset(POWERED_DOWN), reason=None)


def asked_back(sn):
    """Slurm allocated a job on the lent node: MIXED+NOT_RESPONDING+POWERING_UP, the job CONFIGURING."""
    return replace(sn, state="MIXED", flags=frozenset({"POWERING_UP", "NOT_RESPONDING"}))


def job_on(name: str, job_id: str = "42", state: str = "CONFIGURING") -> SlurmJob:
    return SlurmJob(job_id=job_id, name="train", user="u", state=state, partition="gpu", nodes=(name,), gpus_per_node=8,
                    num_nodes=1, start_time=None, end_time=None, reason="None")


def settle(spec, pairs, health=None, jobs=(), window=None):
    nodes = [n for n, _ in pairs]
    view = SlurmView(True, nodes={sn.name: sn for _, sn in pairs}, jobs=tuple(jobs))
    return parking.settle(spec, nodes, view, health or {}, NOW, window)


# ---------------------------------------------------------------- lendable and held


def test_parked_nodes_are_lent_down_to_the_inference_floor_in_the_planners_order():
    spec = power_save(make_spec(slurm_nodes=0, min_inference=2))
    pairs = [held_parked("gpu01", pods=3), held_parked("gpu02", pods=0), held_parked("gpu03", pods=1), held_parked("gpu04", pods=2)]
    out = settle(spec, pairs)
    # fewest pods first (the planner's cost for inference nodes), as far as minInferenceNodes allows
    assert out.lendable == ["gpu02", "gpu03"]
    assert set(out.held) == {"gpu01", "gpu04"} and "below" in out.held["gpu01"]
    # lending lifts our drain (idle~); the held ones are drained already (drain~): nothing to do
    assert {n: [type(a) for a in s.actions] for n, s in out.steps.items()} == {"gpu02": [Resume], "gpu03": [Resume]}


def test_among_parked_nodes_the_lowest_slurm_weight_is_lent_first_equal_weights_keep_the_planners_order():
    spec = power_save(make_spec(slurm_nodes=0, min_inference=2))
    pairs = [held_parked("gpu01", pods=3), held_parked("gpu02", pods=0), held_parked("gpu03", pods=1), held_parked("gpu04", pods=2)]
    weighted = [(n, replace(sn, weight=w)) for (n, sn), w in zip(pairs, (10, 50, 10, 50))]
    assert settle(spec, weighted).lendable == ["gpu03", "gpu01"]  # Slurm picks weight 10 first; then fewest pods
    assert settle(spec, [(n, replace(sn, weight=1)) for n, sn in pairs]).lendable == ["gpu02", "gpu03"]
    unknown = [(n, replace(sn, weight=None if n.name == "gpu02" else 1)) for n, sn in pairs]  # shown by no path: Slurm's default 1
    assert settle(spec, unknown).lendable == ["gpu02", "gpu03"]


def test_each_bound_holds_nodes():
    pairs = [held_parked(f"gpu0{i}") for i in range(1, 5)]
    pools = [("default", 0, 3, None)]
    assert len(settle(power_save(make_spec(slurm_nodes=0, pools=pools)), pairs).lendable) == 1  # the pool's minNodes
    demand = power_save(make_spec(slurm_nodes=0)).model_copy(update={"demand": None})
    spec = power_save(make_spec(slurm_nodes=0))
    spec = spec.model_validate({**spec.model_dump(by_alias=True), "demand": {"inference": {"minNodes": 4}}})
    assert settle(spec, pairs).lendable == [] and len(settle(demand, pairs).lendable) == 4  # demand.inference.minNodes
    # an open schedule window keeps its split: its inference count is a floor
    assert settle(power_save(make_spec(slurm_nodes=0)), pairs, window={SLURM: 1, DEFAULT: 3}).lendable == ["gpu01"]
    assert "schedule window" in settle(power_save(make_spec(slurm_nodes=0)), pairs, window={SLURM: 0, DEFAULT: 4}).held["gpu01"]


def test_pins_move_now_holds_unhealthy_foreign_drains_and_pause_hold_a_node():
    spec = power_save(make_spec(slurm_nodes=0))
    later = iso(NOW + timedelta(minutes=5))
    pairs = [
        held_parked("gpu01", annotations={ANN_PIN: "inference"}),
        held_parked("gpu02", annotations={ANN_MOVE_NOW: "inference"}),
        held_parked("gpu03", annotations={ANN_HOLD_UNTIL: later}),
        held_parked("gpu04"),
        held_parked("gpu05"),
        held_parked("gpu06"),
    ]
    node6, sn6 = pairs[5]
    pairs[5] = (node6, replace(sn6, reason="admin: bad DIMM"))  # someone else's drain: never ours to lift
    sick = {"gpu04": NodeHealth((Finding(HealthKind.NOT_READY, "Kubernetes: NotReady", NOW),))}
    out = settle(spec, pairs, health=sick)
    assert out.lendable == ["gpu05"]
    assert "pinned" in out.held["gpu01"] and "move-now" in out.held["gpu02"] and "held after a rollback" in out.held["gpu03"]
    assert "unhealthy" in out.held["gpu04"] and "someone else" in out.held["gpu06"]
    assert list(out.steps) == ["gpu05"]  # nothing else is touched: the foreign drain stays
    paused = settle(power_save(make_spec(slurm_nodes=0, paused=True)), pairs)
    assert paused.lendable == [] and all("paused" in why for why in paused.held.values())


def test_holding_a_lent_node_again_writes_a_fresh_claim_before_its_drain():
    spec = power_save(make_spec(slurm_nodes=0, min_inference=1))
    out = settle(spec, [lent_parked("gpu01")])
    step = out.steps["gpu01"]
    assert out.held["gpu01"] and [type(a) for a in step.actions] == [Drain]
    assert step.claim is not None and step.claim.at == NOW and step.claim.reason == step.actions[0].reason == "slurmpool: parked for inference:default"


def test_drain_parking_holds_every_node_as_today():
    spec = make_spec(slurm_nodes=0)
    out = settle(spec, [held_parked("gpu01"), held_parked("gpu02")])
    assert out.lendable == [] and out.steps == {} and out.givebacks == [] and set(out.held) == {"gpu01", "gpu02"}
    # a node an earlier PowerSave left lent (idle~) is held again
    assert [type(a) for a in settle(spec, [lent_parked("gpu01")]).steps["gpu01"].actions] == [Drain]
    # nodes parked by Drain (slurmd stopped, not powered down) are not parking's at all
    node, sn = parked(inference_node("gpu01"), slurm_node("gpu01", state="DOWN", flags={"NOT_RESPONDING"}), "default", NOW)
    assert settle(power_save(spec), [(node, sn)]) == parking.Parking()


@settings(max_examples=60, deadline=None)
@given(pods=st.lists(st.integers(0, 4), min_size=1, max_size=8), floor=st.integers(0, 8))
def test_the_lent_nodes_are_the_first_of_the_planners_victims(pods, floor):
    spec = power_save(make_spec(slurm_nodes=0, min_inference=floor))
    pairs = [held_parked(f"gpu{i:02d}", pods=p) for i, p in enumerate(pods)]
    out = settle(spec, pairs)
    view = SlurmView(True, nodes={sn.name: sn for _, sn in pairs})
    order = [n.name for n in victim_order(spec, [n for n, _ in pairs], view, NOW, {})]
    assert out.lendable == order[: max(0, len(pods) - floor)]
    assert set(out.lendable) | set(out.held) == {n.name for n, _ in pairs} and not set(out.lendable) & set(out.held)


def test_a_job_waiting_only_on_held_nodes_is_reported():
    spec = power_save(make_spec(slurm_nodes=0))
    pending = replace(job_on("x", "7", "PENDING"), nodes=(), reason="ReqNodeNotAvail, UnavailableNodes:gpu[01-02]",
                      unavailable_nodes=("gpu01", "gpu02"))
    other = replace(pending, job_id="8", reason="ReqNodeNotAvail, UnavailableNodes:gpu[01-03]", unavailable_nodes=("gpu01", "gpu02", "gpu03"))
    view = SlurmView(True, jobs=(pending, other))
    assert parking.waiting_on_held(spec, view, ["gpu01", "gpu02"]) == ["job 7 waits on held node(s) gpu01, gpu02"]


# ---------------------------------------------------------------- give-back and decline, whole passes


class PowerWorld(World):
    """A node's world under Slurm's power saving: a powered-down node stays `idle~`/`drain~` with
    no slurmd; asked back (POWERING_UP), it registers once a slurmd starts (`-b`); a drain on it
    while it powers up for a job requeues the job (power_save notes, step 6)."""

    def tick(self) -> None:
        sn = self.slurm_node
        if sn is None or not {"POWERED_DOWN", "POWERING_UP"} & sn.flags:
            return super().tick()
        if "POWERING_UP" in sn.flags and self.node.slurmd_pod is not None and self.slurmd_registers:
            busy = any(self.node.name in j.nodes for j in self.jobs)
            self.slurm_node = replace(sn, state="MIXED" if busy else "IDLE", flags=sn.flags - {"POWERING_UP", "NOT_RESPONDING"})
            self.jobs = [replace(j, state="RUNNING") for j in self.jobs]
        self.node = replace(self.node, pods=tuple(p for p in self.node.pods if not p.deleting))

    def apply(self, action) -> None:
        powering_up = self.slurm_node is not None and "POWERING_UP" in self.slurm_node.flags
        super().apply(action)
        if isinstance(action, Drain) and powering_up and self.jobs:
            self.requeued += [j.job_id for j in self.jobs]
            self.jobs = []
            self.slurm_node = replace(self.slurm_node, state="IDLE")

    def slurm_asks(self, job_id: str = "42") -> None:
        self.slurm_node = asked_back(self.slurm_node)
        self.jobs = [job_on(self.node.name, job_id)]


def power_pool(spec, lent: int, held: int = 0, slurm: int = 1, pods: int = 0) -> PoolWorld:
    worlds = {}
    for i in range(slurm):
        name = f"gpu0{i + 1}"
        node = replace(inference_node(name), annotations={ANN_PLACEMENT: SLURM}, labels={LABEL_SIDE: "slurm"}, taints=(
            {"key": "slurmpool.io/slurm", "value": "true", "effect": "NoSchedule"},), unschedulable=True,
            pods=(PodView("slurm", f"slurmd-{name}", f"s-{name}", slurmd=True, ready=True),))
        worlds[name] = PowerWorld(node=node, slurm_node=slurm_node(name))
    for i in range(slurm, slurm + lent + held):
        name = f"gpu0{i + 1}"
        node, sn = (lent_parked if i < slurm + lent else held_parked)(name, pods)
        worlds[name] = PowerWorld(node=node, slurm_node=sn)
    return PoolWorld(spec=spec, worlds=worlds, now=NOW)


def events(pool: PoolWorld, reason: str):
    return [e for d in pool.decisions for s in d.steps.values() for e in s.events if e.reason == reason]


def test_a_give_back_starts_at_once_and_the_target_counts_it_while_slurms_job_holds_it():
    spec = power_save(make_spec(slurm_nodes=1, max_moves=1))
    pool = power_pool(spec, lent=2)
    pool.run(passes=2)
    assert pool.decisions[-1].starts == [] and pool.worlds["gpu02"].slurm_node.flags == POWERED_DOWN
    pool.worlds["gpu02"].slurm_asks()
    pool.run(passes=1)
    (start, move), = pool.decisions[-1].starts
    assert start.node == "gpu02" and start.cause == Cause.GIVEBACK and move.cause == Cause.GIVEBACK
    assert pool.worlds["gpu02"].node.given_back == NOW + timedelta(seconds=2)
    pool.worlds["gpu03"].slurm_asks("43")  # a second one while the first is in flight: maxConcurrentMoves does not bound them
    pool.run(passes=1)
    assert [s.node for s, _ in pool.decisions[-1].starts] == ["gpu03"]
    pool.run(passes=12)
    for name in ("gpu02", "gpu03"):
        world = pool.worlds[name]
        assert world.node.move is None and world.node.placement == SLURM and world.requeued == []
        assert world.slurm_node.state == "MIXED" and "DRAIN" not in world.slurm_node.flags  # never drained: its job ran
    # while Slurm's jobs hold them the split is 3 Slurm nodes: nothing is sent back for them
    assert pool.decisions[-1].target.slurm_nodes == 3 and "given back" in pool.decisions[-1].target.status.reason
    assert all(not d.starts or d.starts[0][0].cause == Cause.GIVEBACK for d in pool.decisions)
    for name in ("gpu02", "gpu03"):
        pool.worlds[name].finish_jobs()
    pool.run(passes=2)  # done: unmarked, and ordinary surplus the planner takes back
    assert all(ANN_GIVEN_BACK not in pool.worlds[n].node.annotations for n in ("gpu02", "gpu03"))
    assert pool.decisions[-1].target.slurm_nodes == 1
    assert any(s.cause == Cause.REBALANCE and s.target == DEFAULT for d in pool.decisions[-2:] for s, _ in d.starts)


def test_the_pass_that_starts_a_give_back_counts_it_on_the_slurm_side_and_moves_no_other_node():
    """Measured on the 22.05 lab: with moves to spare, the pass that started a give-back sent as many
    Slurm nodes to inference (rebalance: the target did not count it yet, its mark was not written),
    and the next passes sent them back. The target counts the give-backs it starts."""
    spec = power_save(make_spec(slurm_nodes=1, max_moves=8))
    pool = power_pool(spec, lent=2)
    pool.run(passes=2)
    assert pool.decisions[-1].starts == []
    pool.worlds["gpu02"].slurm_asks()
    pool.run(passes=1)
    assert [(s.node, s.cause) for s, _ in pool.decisions[-1].starts] == [("gpu02", Cause.GIVEBACK)]
    assert pool.decisions[-1].target.slurm_nodes == 2 and "given back" in pool.decisions[-1].target.status.reason
    pool.run(passes=12)
    assert all(s.cause == Cause.GIVEBACK for d in pool.decisions for s, _ in d.starts)


def test_a_give_back_whose_evictions_are_refused_is_declined_and_the_job_requeued():
    spec = power_save(make_spec(slurm_nodes=1, drain={"evictionTimeout": "5s"}))  # onEvictionTimeout stays Wait: a give-back cannot
    pool = power_pool(spec, lent=1, pods=1)
    world = pool.worlds["gpu02"]
    world.protected = {p.key for p in world.node.pods}
    world.slurm_asks()
    pool.run(passes=12)
    declined = events(pool, "GiveBackDeclined")
    assert len(declined) == 1 and "evictions refused" in declined[0].message
    assert world.requeued == ["42"] and world.jobs == []  # requeued by Slurm: not lost
    assert world.node.move is None and world.node.placement == DEFAULT and not world.node.unschedulable
    assert "DRAIN" in world.slurm_node.flags and world.node.drain_claim.reason == world.slurm_node.reason  # held, ours
    assert ANN_GIVEN_BACK not in world.node.annotations


def test_a_decline_in_flight_shows_in_the_status():
    spec = power_save(make_spec(slurm_nodes=1, drain={"evictionTimeout": "2s", "timeout": "1h"}))
    pool = power_pool(spec, lent=1, pods=1)
    world = pool.worlds["gpu02"]
    world.protected = {p.key for p in world.node.pods}
    world.jobs = []
    world.slurm_asks()
    world.slurm_registers = False
    pool.run(passes=4)
    lending = next(c for c in pool.status.conditions if c.type == "Lending")
    assert lending.reason == "GiveBackDeclined" and "gpu02" in lending.message


def test_an_unhealthy_node_declines_its_give_back():
    spec = power_save(make_spec(slurm_nodes=1))
    pool = power_pool(spec, lent=1, pods=1)
    world = pool.worlds["gpu02"]
    world.protected = {p.key for p in world.node.pods}  # keeps it in Evicting
    world.slurm_asks()
    pool.run(passes=2)
    assert world.node.move is not None and world.node.move.cause == Cause.GIVEBACK
    world.node = replace(world.node, ready=False)
    pool.run(passes=3)
    declined = events(pool, "GiveBackDeclined")
    assert len(declined) == 1 and "unhealthy" in declined[0].message
    assert world.requeued == ["42"] and world.node.move is None and world.node.placement == DEFAULT
    assert "DRAIN" in world.slurm_node.flags  # held: never lent while unhealthy


def test_a_request_on_a_node_a_bound_now_keeps_is_declined():
    spec = power_save(make_spec(slurm_nodes=1))
    pool = power_pool(spec, lent=1)
    world = pool.worlds["gpu02"]
    world.node = replace(world.node, annotations={**world.node.annotations, ANN_PIN: DEFAULT})
    world.slurm_asks()
    pool.run(passes=2)
    declined = events(pool, "GiveBackDeclined")
    assert len(declined) == 1 and "pinned" in declined[0].message
    assert world.requeued == ["42"] and world.node.move is None and "DRAIN" in world.slurm_node.flags
    assert all(not d.starts for d in pool.decisions)


def test_a_give_back_in_flight_that_a_bound_no_longer_allows_rolls_back():
    spec = power_save(make_spec(slurm_nodes=1))
    pool = power_pool(spec, lent=1, pods=1)
    world = pool.worlds["gpu02"]
    world.protected = {p.key for p in world.node.pods}
    world.slurm_asks()
    pool.run(passes=2)
    assert world.node.move.cause == Cause.GIVEBACK
    pool.spec = power_save(make_spec(slurm_nodes=1, min_inference=1))  # the floor rises under it
    pool.run(passes=6)
    declined = events(pool, "GiveBackDeclined")
    assert len(declined) == 1 and "minimum" in declined[0].message
    assert world.requeued == ["42"] and world.node.move is None and world.node.placement == DEFAULT


def test_a_crash_mid_give_back_resumes_from_the_node():
    spec = power_save(make_spec(slurm_nodes=1))
    pool = power_pool(spec, lent=1, pods=1)
    world = pool.worlds["gpu02"]
    world.slurm_asks()
    pool.run(passes=2)
    assert world.node.move is not None and world.node.given_back is not None
    # a new operator: no status, no memory; the Node and Slurm hold all it needs
    again = PoolWorld(spec=spec, worlds=pool.worlds, now=pool.now + timedelta(seconds=5))
    again.run(passes=1)
    assert again.decisions[0].target.slurm_nodes == 2  # the give-back still counts on the Slurm side
    again.run(passes=10)
    assert world.node.move is None and world.node.placement == SLURM and world.jobs and world.requeued == []
    assert sum(len(d.starts) for d in again.decisions) == 0  # nothing started twice, nothing sent back


def test_a_drain_pool_is_unchanged_and_has_no_lending_condition():
    spec = make_spec(slurm_nodes=1)
    pool = power_pool(spec, lent=0, held=2)
    for world in pool.worlds.values():
        if world.node.placement == DEFAULT:
            world.slurm_node = replace(world.slurm_node, flags=world.slurm_node.flags - POWERED_DOWN)
    before = {n: w.node for n, w in pool.worlds.items()}
    pool.run(passes=3)
    assert all(not d.steps and not d.starts for d in pool.decisions)
    assert {n: w.node for n, w in pool.worlds.items()} == before
    assert all(w.log == [] for w in pool.worlds.values())  # nothing done in Slurm
    assert not any(c.type == "Lending" for c in pool.status.conditions)


def test_a_given_back_mark_is_validated_when_read():
    node = merged(inference_node("gpu01"), {"metadata": {"annotations": {ANN_GIVEN_BACK: "yesterday"}}})
    assert [p.annotation for p in node.problems] == [ANN_GIVEN_BACK] and node.given_back is None


def test_lent_nodes_are_slurm_capacity_for_demand_and_held_ones_are_not():
    from slurmpool.core.demand.slurm_jobs import _usable_and_idle

    pairs = [lent_parked("gpu01"), lent_parked("gpu02"), held_parked("gpu03")]
    nodes, view = [n for n, _ in pairs], SlurmView(True, nodes={sn.name: sn for _, sn in pairs})
    assert _usable_and_idle(nodes, view, power_save=True) == (2, 2)  # idle~ counts; drain~ does not
    assert _usable_and_idle(nodes, view) == (0, 0)  # Drain parking: parked nodes are never Slurm's


def test_the_target_counts_given_back_nodes_on_the_slurm_side_within_the_pool():
    from slurmpool.core.target import decide_target, with_given_back

    spec = make_spec(slurm_nodes=3)
    base = decide_target(spec, 4, NOW, None)
    assert with_given_back(base, 0, 4) is base
    raised = with_given_back(base, 2, 4)
    assert raised.slurm_nodes == 4 and raised.status.source == base.status.source and "+1 given back" in raised.status.reason


@settings(max_examples=80, deadline=None)
@given(sizes=st.tuples(st.integers(0, 5), st.integers(0, 5)), mins=st.tuples(st.integers(0, 5), st.integers(0, 5)),
       floor=st.integers(0, 10), asked=st.sets(st.integers(0, 9)))
def test_lending_never_takes_a_pool_or_inference_below_its_floor(sizes, mins, floor, asked):
    spec = power_save(make_spec(slurm_nodes=0, min_inference=floor, pools=[("a", 1, mins[0], None), ("b", 0, mins[1], None)]))
    pairs = []
    for pool, size in zip("ab", sizes):
        for i in range(size):
            node, sn = held_parked(f"{pool}{i}", pool=pool)
            pairs.append((node, asked_back(replace(sn, flags=frozenset(POWERED_DOWN), reason=None)) if len(pairs) in asked else sn))
    out = settle(spec, pairs, jobs=[job_on(n.name) for n, sn in pairs if "POWERING_UP" in sn.flags])
    lent = set(out.lendable)
    for pool, size, least in zip("ab", sizes, mins):
        assert size - sum(n.startswith(pool) for n in lent) >= min(size, least)
    assert sum(sizes) - len(lent) >= min(sum(sizes), floor)
    # a request Slurm made is served (a give-back) or declined (held, drained), never left waiting
    for node, sn in pairs:
        if "POWERING_UP" in sn.flags:
            assert (node.name in lent) == any(s.node == node.name for s in out.givebacks)
            assert node.name in lent or [type(a) for a in out.steps[node.name].actions] == [Drain]
