"""Node health (health.py) and what it changes: no unhealthy node is chosen, handed across,
resumed or counted as capacity; moves stop where it is safe; replace makes up for broken nodes."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from slurmpool.core import health as H
from slurmpool.core.decide import decide
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.models import SlurmNodePoolSpec, UnhealthyNode
from slurmpool.core.moves import Drain, Pass, PatchNode, Resume, advance, stop_side
from slurmpool.core.phases import Phase
from slurmpool.core.planner import current_placement, healthy_split, plan
from slurmpool.core.snapshot import ApplyResult, PoolSnapshot
from slurmpool.core.status import build_status
from .blocks import whole_slurm_blocks
from slurmpool.core.view import (
    ANN_DRAIN,
    ANN_FORCE,
    ANN_MOVE,
    ANN_PLACEMENT,
    LABEL_SIDE,
    SLURM,
    SLURM_TAINT_KEY,
    DrainClaim,
    MoveRecord,
    NodeCondition,
    NodeView,
    PodView,
    SlurmView,
    iso,
)

from .factories import NOW, make_spec, slurm_node
from .test_planner import job, node

INF = "inference:default"
OURS = "slurmpool: moving to inference:default"
ADMIN = "admin: bad HBM"


def with_health(spec: SlurmNodePoolSpec, **health) -> SlurmNodePoolSpec:
    return spec.model_copy(update={"health": spec.health.model_validate({**spec.health.model_dump(by_alias=True), **health})})


def moving(name, source, target, phase, rollback=False, **kw) -> NodeView:
    rec = MoveRecord(id="m1", source=source, target=target, phase=phase, since=NOW, started=NOW, rollback=rollback)
    return NodeView(name=name, annotations={ANN_PLACEMENT: source, ANN_MOVE: rec.to_annotation()}, **kw)


def claimed(n: NodeView, reason: str) -> NodeView:
    """The node with the claim slurmpool writes before it drains (ownership.py)."""
    return replace(n, annotations={**n.annotations, ANN_DRAIN: DrainClaim(reason, NOW).to_annotation()})


def assess(spec, n: NodeView, sn=None, now=NOW, seen=None, available=True) -> H.NodeHealth:
    slurm = SlurmView(available, nodes={n.name: sn} if sn else {})
    return H.assess(spec.health, n, slurm, now, seen)


# ---------------------------------------------------------------- health.py


def test_a_node_parked_in_inference_looks_down_to_slurm_and_is_healthy():
    spec = make_spec()
    parked = slurm_node("a", "DOWN", {"DRAIN", "NOT_RESPONDING"}, reason=OURS)
    assert assess(spec, node("a", placement=INF), parked).findings == ()


@pytest.mark.parametrize("phase", [Phase.CORDONING, Phase.EVICTING, Phase.STARTING_SLURMD, Phase.REGISTERING])
def test_a_node_moving_in_before_registering_may_look_down(phase):
    n = moving("a", INF, SLURM, phase)
    assert assess(make_spec(), n, slurm_node("a", "DOWN", {"DRAIN", "NOT_RESPONDING"}, reason=OURS)).findings == ()


@pytest.mark.parametrize("phase", [Phase.STOPPING_SLURMD, Phase.RELABELING])
def test_a_node_moving_out_after_draining_may_look_down(phase):
    n = moving("a", SLURM, INF, phase)
    assert assess(make_spec(), n, slurm_node("a", "DOWN", {"DRAIN", "NOT_RESPONDING"}, reason=OURS)).findings == ()


def test_a_slurm_node_down_is_suspect_within_the_grace_then_unhealthy():
    spec = with_health(make_spec(), notRespondingGrace="2m")
    down = slurm_node("a", "IDLE", {"NOT_RESPONDING"})
    first = assess(spec, node("a"), down)
    assert first.suspect and not first.unhealthy and first.findings[0].grace_until == NOW + timedelta(minutes=2)
    seen = {("a", "SlurmDown"): first.findings[0]}
    later = assess(spec, node("a"), down, now=NOW + timedelta(minutes=3), seen=seen)
    assert later.unhealthy and "IDLE+NOT_RESPONDING" in later.reason
    # FAIL counts as down
    assert assess(spec, node("a"), slurm_node("a", "IDLE", {"FAIL"}), now=NOW + timedelta(minutes=3), seen=seen).unhealthy


@pytest.mark.parametrize("placement", [SLURM, INF, "none"])
def test_a_drain_by_others_is_unhealthy_on_any_side_at_once(placement):
    h = assess(make_spec(), node("a", placement=placement), slurm_node("a", "IDLE", {"DRAIN"}, reason=ADMIN))
    assert h.unhealthy and h.reason == f"drained in Slurm by others: {ADMIN}"


def test_slurms_own_drain_of_a_registering_node_is_unhealthy():
    n = moving("a", INF, SLURM, Phase.REGISTERING)
    sn = slurm_node("a", "IDLE", {"DRAIN"}, reason="gres/gpu count reported lower than configured (4 < 8)", gres="gpu:h100:4")
    assert assess(make_spec(), n, sn).unhealthy


def test_our_drain_is_not_a_finding_and_an_unclaimed_one_is():
    drained = slurm_node("a", "IDLE", {"DRAIN"}, reason=OURS)
    assert assess(make_spec(), claimed(node("a"), OURS), drained).findings == ()
    assert assess(make_spec(), node("a"), drained).unhealthy  # our text, but no claim: not ours (ownership.py)


def test_not_ready_and_unreachable():
    gone = node("a", ready=False, conditions=(NodeCondition("Ready", "Unknown", NOW - timedelta(hours=1)),))
    h = assess(make_spec(), gone, slurm_node("a"))
    assert h.unhealthy and "unreachable" in h.reason and h.findings[0].since == NOW - timedelta(hours=1)
    assert "NotReady (Ready=False)" in assess(make_spec(), node("a", ready=False, conditions=(NodeCondition("Ready", "False"),))).reason


def test_a_listed_condition_counts_after_its_minimum_age():
    spec = with_health(make_spec(), conditions=[{"type": "GpuXid", "minAge": "1m"}, {"type": "NicDown", "status": "Unknown"}])
    young = node("a", conditions=(NodeCondition("GpuXid", "True", NOW - timedelta(seconds=30)),))
    h = assess(spec, young, slurm_node("a"))
    assert h.suspect and not h.unhealthy and h.drain_condition is None
    old = node("a", conditions=(NodeCondition("GpuXid", "True", NOW - timedelta(minutes=2)),))
    assert assess(spec, old, slurm_node("a")).drain_condition == "GpuXid"
    assert assess(spec, node("a", conditions=(NodeCondition("NicDown", "Unknown"),)), slurm_node("a")).drain_condition == "NicDown"
    assert assess(spec, node("a", conditions=(NodeCondition("GpuXid", "False"),)), slurm_node("a")).findings == ()  # another status
    assert assess(spec, node("a", conditions=(NodeCondition("Other", "True"),)), slurm_node("a")).findings == ()  # not listed


def test_slurm_unavailable_keeps_the_last_slurm_findings():
    previous = [UnhealthyNode(node="a", side="slurm", kind="DrainedByOthers", reason=f"drained in Slurm by others: {ADMIN}", since=iso(NOW))]
    out = H.assess_all(make_spec().health, [node("a"), node("b")], SlurmView(False, error="down"), NOW, previous)
    assert set(out) == {"a"} and out["a"].unhealthy


def test_slurmpools_own_old_drain_on_a_node_registered_again_is_no_failure():
    old = slurm_node("a", "IDLE", {"DRAIN"}, reason="slurmpool: moving to inference:default")
    assert assess(make_spec(), node("a", placement="none"), old).findings == ()  # its Node was deleted, the claim with it
    verdict = slurm_node("a", "IDLE", {"DRAIN", "INVALID_REG"}, reason="slurmpool: moving to inference:default")
    assert assess(make_spec(), node("a", placement="none"), verdict).unhealthy  # Slurm's own verdict
    settled = assess(make_spec(), node("a"), old)  # on a settled Slurm node it is not provably ours: reported
    assert settled.unhealthy and "slurmpool set no drain on this node" in settled.reason


def test_health_drains_and_ownership_go_through_one_function():
    assert H.health_drain_reason("GpuXid") == "slurmpool: health: GpuXid"
    reason = H.health_drain_reason("GpuXid")
    assert not H.drained_by_others(claimed(node("a"), reason), slurm_node("a", "IDLE", {"DRAIN"}, reason=reason))
    assert H.drained_by_others(node("a"), slurm_node("a", "IDLE", {"DRAIN"}, reason=None))


def test_a_force_annotation_is_validated_like_the_others():
    assert node("a", annotations={ANN_FORCE: "true"}).force
    bad = node("a", annotations={ANN_FORCE: "yes"})
    assert not bad.force and [p.annotation for p in bad.problems] == [ANN_FORCE]


# ---------------------------------------------------------------- moves stop where it is safe


@pytest.mark.parametrize("direction,phase,where", [
    ("ToInference", Phase.DRAINING, SLURM),
    ("ToInference", Phase.STOPPING_SLURMD, SLURM),
    ("ToInference", Phase.RELABELING, None),
    ("ToSlurm", Phase.CORDONING, INF),
    ("ToSlurm", Phase.EVICTING, INF),
    ("ToSlurm", Phase.STARTING_SLURMD, SLURM),
    ("ToSlurm", Phase.REGISTERING, SLURM),
    ("ToSlurm", Phase.RESUMING, SLURM),
])
def test_which_phases_stop_and_where(direction, phase, where):
    source, target = (SLURM, INF) if direction == "ToInference" else (INF, SLURM)
    rec = MoveRecord(id="m", source=source, target=target, phase=phase, since=NOW, started=NOW)
    assert stop_side(rec) == where


def test_moves_between_pools_go_on():
    rec = MoveRecord(id="m", source=INF, target="inference:other", phase=Phase.RELABELING, since=NOW, started=NOW)
    assert stop_side(rec) is None


def _slurm_shaped(n: NodeView) -> NodeView:
    return replace(n, unschedulable=True, labels={LABEL_SIDE: "slurm"}, taints=({"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"},))


def test_an_unhealthy_node_draining_out_of_slurm_stays_in_slurm_and_is_never_relabelled():
    spec = make_spec()
    n = _slurm_shaped(moving("a", SLURM, INF, Phase.DRAINING))
    sn = slurm_node("a", "IDLE", {"DRAIN"}, reason=ADMIN)
    step = advance(n.move, n, Pass(SlurmView(True, nodes={"a": sn}), spec, NOW), unhealthy=f"drained in Slurm by others: {ADMIN}")
    assert step.move is None and step.settled == SLURM and step.stopped is not None
    assert not any(isinstance(a, PatchNode) for a in step.actions)  # still cordoned and tainted: Slurm's
    assert [e.reason for e in step.events] == ["MoveStopped"]
    # healthy, the same move would have gone on to StoppingSlurmd
    assert advance(n.move, n, Pass(SlurmView(True, nodes={"a": sn}), spec, NOW)).move is not None


def test_an_unhealthy_node_moving_to_slurm_before_slurmd_stays_in_inference_cordoned():
    spec = make_spec()
    n = _slurm_shaped(moving("a", INF, SLURM, Phase.EVICTING, pods=(PodView("web", "p", "u", owner_kinds=("ReplicaSet",)),)))
    step = advance(n.move, n, Pass(SlurmView(True), spec, NOW), unhealthy="Kubernetes: NotReady")
    assert step.settled == INF and step.move is None
    shape = next(a for a in step.actions if isinstance(a, PatchNode))
    assert n.unschedulable and shape.unschedulable is None, "the cordon is left as it is: cordoned"
    assert shape.labels[LABEL_SIDE] == "inference"
    assert all(t.get("key") != SLURM_TAINT_KEY for t in shape.taints)
    assert not any(type(a).__name__ == "Evict" for a in step.actions)


def test_an_unhealthy_node_about_to_resume_stays_drained_in_slurm():
    spec = make_spec()
    n = _slurm_shaped(moving("a", INF, SLURM, Phase.RESUMING, pods=(PodView("slurm", "slurmd-a", "u", slurmd=True),)))
    sn = slurm_node("a", "IDLE", {"DRAIN"}, reason="slurmpool: moving to slurm")
    step = advance(n.move, n, Pass(SlurmView(True, nodes={"a": sn}), spec, NOW), unhealthy="condition GpuXid=True")
    assert step.settled == SLURM and not any(isinstance(a, Resume) for a in step.actions)
    healthy = advance(n.move, n, Pass(SlurmView(True, nodes={"a": sn}), spec, NOW))
    assert any(isinstance(a, Resume) for a in healthy.actions)


def test_relabeling_already_sent_finishes():
    spec = make_spec()
    n = moving("a", SLURM, INF, Phase.RELABELING)
    step = advance(n.move, n, Pass(SlurmView(True), spec, NOW), unhealthy="Kubernetes: NotReady")
    assert step.stopped is None and step.move is not None and step.move.phase == Phase.RELABELING


# ---------------------------------------------------------------- the planner


def _health(spec, nodes, slurm, now=NOW):
    return H.assess_all(spec.health, nodes, slurm, now)


def article(blocks=4, per_block=18, slurm_nodes=64, max_moves=8):
    """The reference article's example: every block has a long job on one node and an admin drain on another."""
    spec = make_spec(slurm_nodes=slurm_nodes, max_moves=max_moves)
    spec = spec.model_copy(update={"topology": spec.topology.model_validate({"blockLabel": "block"})})
    nodes, states, jobs = [], {}, []
    for b in range(blocks):
        for i in range(per_block):
            name = f"b{b}n{i:02d}"
            nodes.append(node(name, labels={"block": f"b{b}"}))
            states[name] = slurm_node(name, "IDLE", {"DRAIN"}, reason=ADMIN) if i == 0 else slurm_node(name, "MIXED" if i == 1 else "IDLE")
            if i == 1:
                jobs.append(job(f"j{b}", [name], end_in=86400))
    return spec, nodes, SlurmView(True, nodes=states, jobs=tuple(jobs))


def test_the_articles_example_never_hands_an_admin_drained_node_to_inference():
    spec, nodes, slurm = article()
    result = plan(spec, nodes, slurm, NOW, health=_health(spec, nodes, slurm))
    chosen = [s.node for s in result.starts]
    assert len(chosen) == 8 and not any(c.endswith("n00") for c in chosen)
    # the healthy nodes taken first come from one block already broken by its drain, taken whole
    assert all(s.target == INF for s in result.starts)


def test_the_articles_example_without_health_took_the_drained_nodes_first():
    spec, nodes, slurm = article()
    chosen = [s.node for s in plan(spec, nodes, slurm, NOW).starts]
    assert any(c.endswith("n00") for c in chosen)  # what issue 15 reported: drained first


def test_an_unhealthy_node_breaks_its_block():
    spec, nodes, slurm = article()
    sick = node("b0n05", labels={"block": "b0"}, ready=False)
    nodes = [sick if n.name == "b0n05" else n for n in nodes]
    slurm = SlurmView(True, nodes={k: slurm_node(k) for k in slurm.nodes})  # no drains: only the NotReady node
    assert whole_slurm_blocks(spec.topology, nodes, slurm, current_placement) == 4
    assert whole_slurm_blocks(spec.topology, nodes, slurm, current_placement, {"b0n05"}) == 3


def test_nodes_within_their_grace_go_after_idle_healthy_ones_and_before_busy_ones():
    """After a slurmctld restart every node shows NOT_RESPONDING for a while: suspect, not broken.
    Taking the busy node because the idle ones are suspect would drain a running job."""
    spec = make_spec(slurm_nodes=2, max_moves=2)
    nodes = [node("busy"), node("idle"), node("quiet"), node("down")]
    slurm = SlurmView(True, nodes={"busy": slurm_node("busy", "MIXED"), "idle": slurm_node("idle"),
                                   "quiet": slurm_node("quiet", "IDLE", {"NOT_RESPONDING"}), "down": slurm_node("down", "DOWN", {"NOT_RESPONDING"})},
                      jobs=(job("1", ["busy"], end_in=60),))
    health = _health(spec, nodes, slurm)
    assert health["quiet"].suspect and not health["quiet"].unhealthy
    assert [s.node for s in plan(spec, nodes, slurm, NOW, health=health).starts] == ["idle", "down"]


def test_a_pin_of_an_unhealthy_node_waits_for_force():
    spec = make_spec(slurm_nodes=1, max_moves=2)
    admin = slurm_node("a", "IDLE", {"DRAIN"}, reason=ADMIN)
    pinned = node("a", pin=INF)
    slurm = SlurmView(True, nodes={"a": admin, "b": slurm_node("b")})
    nodes = [pinned, node("b", placement=INF)]
    result = plan(spec, nodes, slurm, NOW, health=_health(spec, nodes, slurm))
    assert result.starts == [] and result.refused == ["a"]
    forced = [node("a", pin=INF, annotations={ANN_FORCE: "true"}), nodes[1]]
    result = plan(spec, forced, slurm, NOW, health=_health(spec, forced, slurm))
    assert [(s.node, s.target, s.cause) for s in result.starts][0] == ("a", INF, "pin") and result.forced == ["a"]


def test_replace_makes_up_for_a_broken_slurm_node_from_inference():
    spec = with_health(make_spec(slurm_nodes=3, max_moves=4), replace=True)
    nodes = [node("s1"), node("s2"), node("s3"), node("i1", placement=INF), node("i2", placement=INF)]
    slurm = SlurmView(True, nodes={"s1": slurm_node("s1", "IDLE", {"DRAIN"}, reason=ADMIN), "s2": slurm_node("s2"), "s3": slurm_node("s3")})
    health = _health(spec, nodes, slurm)
    result = plan(spec, nodes, slurm, NOW, health=health)
    assert [(s.node, s.target) for s in result.starts] == [("i1", SLURM)]
    assert result.desired == {SLURM: 3, INF: 1}
    # without replace, the broken node counts: nothing moves
    assert plan(make_spec(slurm_nodes=3, max_moves=4), nodes, slurm, NOW, health=health).starts == []


def test_replace_stays_within_the_inference_floor():
    spec = with_health(make_spec(slurm_nodes=3, max_moves=4, min_inference=2), replace=True)
    assert healthy_split(spec, 4) == {SLURM: 2, INF: 2}
    assert healthy_split(with_health(make_spec(slurm_nodes=3, min_slurm=3, min_inference=2), replace=True), 4) is None


# ---------------------------------------------------------------- property tests


@st.composite
def sick_clusters(draw, replace_=None):
    n = draw(st.integers(1, 30))
    nodes, states = [], {}
    for i in range(n):
        name = f"n{i:03d}"
        placement = draw(st.sampled_from([SLURM, SLURM, INF, "inference:llm", "none"]))
        pin = draw(st.sampled_from([None, None, None, None, SLURM, INF]))
        force = draw(st.booleans()) and draw(st.booleans())
        ready = draw(st.sampled_from([True, True, True, False]))
        ann = {ANN_FORCE: "true"} if force else {}
        nodes.append(node(name, placement=placement, pin=pin, ready=ready, annotations=ann))
        kind = draw(st.sampled_from(["ok", "ok", "ok", "admin", "down", "ours"]))
        states[name] = {
            "ok": slurm_node(name, draw(st.sampled_from(["IDLE", "MIXED"]))),
            "admin": slurm_node(name, "IDLE", {"DRAIN"}, reason=ADMIN),
            "down": slurm_node(name, "DOWN", {"NOT_RESPONDING"}),
            "ours": slurm_node(name, "DOWN", {"DRAIN", "NOT_RESPONDING"}, reason=OURS),
        }[kind]
    slurm_nodes = draw(st.integers(0, n))
    spec = make_spec(
        slurm_nodes=slurm_nodes, min_slurm=draw(st.integers(0, slurm_nodes)), min_inference=draw(st.integers(0, 3)),
        max_moves=draw(st.integers(1, 8)), pools=[("default", 1, draw(st.integers(0, 2)), None), ("llm", 0, 0, None)],
    )
    spec = with_health(spec, replace=draw(st.booleans()) if replace_ is None else replace_, notRespondingGrace="0s")
    return spec, nodes, SlurmView(True, nodes=states)


@settings(max_examples=300, deadline=None)
@given(sick_clusters())
def test_no_plan_moves_an_unhealthy_node_unless_forced_and_budget_and_floors_hold(cluster):
    spec, nodes, slurm = cluster
    health = _health(spec, nodes, slurm)
    result = plan(spec, nodes, slurm, NOW, health=health)
    by_name = {n.name: n for n in nodes}
    for s in result.starts:
        if s.node in health and health[s.node].unhealthy:
            assert by_name[s.node].force and s.cause in ("pin", "move-now") and s.node in result.forced
    assert len(result.starts) <= spec.max_concurrent_moves
    if result.problems:
        assert result.starts == []
    # floors: the rebalance never takes a side below its floor (pins may: the on-call's word)
    broken = {n for n, h in health.items() if h.unhealthy} if spec.health.replace else set()
    if broken and healthy_split(spec, len(nodes) - len(broken)) is None:
        broken = set()  # the healthy nodes cannot hold both floors: the split counts all nodes

    def side_count(side, moved) -> int:
        where = {n.name: current_placement(n) for n in nodes}
        for s in moved:
            where[s.node] = s.target
        return sum(1 for name, p in where.items() if name not in broken and p.split(":")[0] == side)

    for side, floor in ((SLURM, spec.min_slurm_nodes), ("inference", spec.min_inference_nodes)):
        pinned_out = sum(1 for s in result.starts if s.cause != "rebalance" and current_placement(by_name[s.node]).split(":")[0] == side
                         and s.node not in broken)
        assert side_count(side, result.starts) >= min(side_count(side, []), floor) - pinned_out


@settings(max_examples=300, deadline=None)
@given(sick_clusters(replace_=True))
def test_with_replace_the_healthy_slurm_count_reaches_the_target_whenever_inference_can_give(cluster):
    spec, nodes, slurm = cluster
    nodes = [replace(n, annotations={k: v for k, v in n.annotations.items() if k != "slurmpool.io/pin"}) for n in nodes]
    spec = spec.model_copy(update={"max_concurrent_moves": 1000})
    health = _health(spec, nodes, slurm)
    result = plan(spec, nodes, slurm, NOW, health=health)
    assume(not result.problems)
    broken = {n for n, h in health.items() if h.unhealthy}
    healthy = [n for n in nodes if n.name not in broken]
    where = {n.name: current_placement(n) for n in healthy}
    for s in result.starts:
        where[s.node] = s.target
    slurm_after = sum(1 for p in where.values() if p == SLURM)
    floor = max(spec.min_inference_nodes, sum(p.min_nodes for p in spec.inference.pools))
    assume(len(healthy) >= spec.min_slurm_nodes + floor)  # else both floors cannot hold: replace stands aside
    want = min(spec.slurm_nodes, len(healthy) - floor)
    # the other side can give when its healthy, movable nodes cover the gap
    givers = sum(1 for n in healthy if current_placement(n) != SLURM and n.name not in health)
    have = sum(1 for n in healthy if current_placement(n) == SLURM)
    suspects_in_slurm = sum(1 for n in healthy if current_placement(n) == SLURM and n.name in health)
    # Every example: toward the target, never past it. Onto it whenever the other side can give.
    if want >= have:
        assert have <= slurm_after <= want, (have, slurm_after, want)
        if givers >= want - have:
            assert slurm_after == want
    else:
        assert want <= slurm_after <= have, (have, slurm_after, want)
        if have - suspects_in_slurm >= have - want:
            assert slurm_after == want


# ---------------------------------------------------------------- whole passes: health drains both ways


def _slurm_node_view(name, **kw) -> NodeView:
    return NodeView(
        name=name, annotations={ANN_PLACEMENT: SLURM}, labels={LABEL_SIDE: "slurm"}, unschedulable=True,
        taints=({"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"},),
        pods=(PodView("slurm", f"slurmd-{name}", f"u-{name}", slurmd=True, ready=True),), **kw)


def _decide(spec, nodes, slurm, previous=None, now=NOW):
    snap = PoolSnapshot(pool=PoolRef("ns", "gpu", "uid"), spec=spec, nodes=tuple(nodes), slurm=slurm, now=now, previous=previous)
    decision = decide(snap)
    return decision, build_status(snap, decision, ApplyResult())


def test_a_listed_condition_drains_a_slurm_node_and_its_clearing_resumes_it():
    spec = with_health(make_spec(slurm_nodes=1), conditions=[{"type": "GpuXid"}])
    sick = _slurm_node_view("a", conditions=(NodeCondition("GpuXid", "True", NOW),))
    running = SlurmView(True, nodes={"a": slurm_node("a", "MIXED")}, jobs=(job("7", ["a"], end_in=600),))
    decision, status = _decide(spec, [sick], running)
    assert Drain("a", "slurmpool: health: GpuXid") in decision.steps["a"].actions
    assert decision.steps["a"].claim.reason == "slurmpool: health: GpuXid"  # claimed with the drain
    sick = claimed(sick, "slurmpool: health: GpuXid")
    assert status.slurm.unhealthy == 1 and status.slurm.ready == 0 and status.unhealthy_nodes[0].kind == "Condition"
    # drained by us, job still running: no resume while the condition holds, no requeue or cancel
    drained = SlurmView(True, nodes={"a": slurm_node("a", "MIXED", {"DRAIN"}, reason="slurmpool: health: GpuXid")}, jobs=running.jobs)
    decision, _ = _decide(spec, [sick], drained, status)
    assert "a" not in decision.steps or not decision.steps["a"].actions
    # the condition clears: resumed
    well = replace(sick, conditions=(NodeCondition("GpuXid", "False", NOW),))
    decision, status = _decide(spec, [well], drained, status)
    assert Resume("a") in decision.steps["a"].actions and "HealthResume" in [e.reason for e in decision.steps["a"].events]
    assert status.unhealthy == 0


def test_an_admins_drain_is_never_resumed_and_never_redrained():
    spec = with_health(make_spec(slurm_nodes=1), conditions=[{"type": "GpuXid"}])
    sick = _slurm_node_view("a", conditions=(NodeCondition("GpuXid", "True", NOW),))
    admin = SlurmView(True, nodes={"a": slurm_node("a", "IDLE", {"DRAIN"}, reason=ADMIN)})
    for n in (sick, replace(sick, conditions=())):
        decision, status = _decide(spec, [n], admin)
        assert not decision.steps.get("a") or not any(isinstance(a, (Drain, Resume)) for a in decision.steps["a"].actions)
        assert status.slurm.unhealthy == 1


def test_our_move_drain_left_on_an_unhealthy_node_is_not_resumed():
    spec = make_spec(slurm_nodes=1)
    n = claimed(_slurm_node_view("a", ready=False), OURS)
    decision, _ = _decide(spec, [n], SlurmView(True, nodes={"a": slurm_node("a", "IDLE", {"DRAIN"}, reason=OURS)}))
    step = decision.steps.get("a")
    assert step is None or not any(isinstance(a, Resume) for a in step.actions)
    # once Ready again, our drain is resumed (it outlived its move)
    decision, _ = _decide(spec, [replace(n, ready=True)], SlurmView(True, nodes={"a": slurm_node("a", "IDLE", {"DRAIN"}, reason=OURS)}))
    assert Resume("a") in decision.steps["a"].actions


def test_status_counts_unhealthy_nodes_per_side_and_the_split_still_counts_them_without_replace():
    spec = make_spec(slurm_nodes=2)
    nodes = [_slurm_node_view("a"), _slurm_node_view("b"), node("c", placement=INF, ready=False)]
    slurm = SlurmView(True, nodes={"a": slurm_node("a", "IDLE", {"DRAIN"}, reason=ADMIN), "b": slurm_node("b")})
    _, status = _decide(spec, nodes, slurm)
    assert (status.slurm.ready, status.slurm.unhealthy, status.inference.ready, status.inference.unhealthy) == (1, 1, 0, 1)
    assert status.unhealthy == 2 and {r.node: r.side for r in status.unhealthy_nodes} == {"a": "slurm", "c": "inference"}
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.status == "True" and "2 unhealthy" in ready.message


def test_a_held_pin_is_reported_once_and_in_the_status():
    spec = make_spec(slurm_nodes=1)
    sick = _slurm_node_view("a", ready=False)
    nodes = [replace(sick, annotations={**sick.annotations, "slurmpool.io/pin": INF}), node("b", placement=INF)]
    slurm = SlurmView(True, nodes={"a": slurm_node("a"), "b": slurm_node("b")})
    decision, status = _decide(spec, nodes, slurm)
    assert not decision.starts and [e.reason for e in decision.node_events] == ["UnhealthyNodeHeld"]
    assert status.unhealthy_nodes[0].held
    decision, status = _decide(spec, nodes, slurm, status)
    assert decision.node_events == [] and status.unhealthy_nodes[0].held  # not again while it waits


# ---------------------------------------------------------------- whole passes: a move whose node breaks


def test_a_node_an_admin_drains_while_it_drains_out_of_slurm_stays_in_slurm_and_another_goes():
    from .sim import PoolWorld
    from .test_decide import slurm_node_world

    worlds = {n: slurm_node_world(n) for n in ("gpu01", "gpu02")}
    worlds["gpu01"].jobs = [job("1", ["gpu01"], end_in=60)]  # ends first: the first victim
    worlds["gpu02"].jobs = [job("2", ["gpu02"], end_in=600)]
    pool = PoolWorld(spec=make_spec(slurm_nodes=1), worlds=worlds, now=NOW)
    pool.run(passes=2)
    assert worlds["gpu01"].node.move is not None and worlds["gpu01"].node.move.phase == Phase.DRAINING
    worlds["gpu01"].admin_drains(ADMIN)  # over our drain: a bad GPU, the admin says
    pool.run(passes=3)
    sick, other = worlds["gpu01"], worlds["gpu02"]
    assert sick.node.move is None and sick.node.placement == SLURM and sick.drain_owner == "admin"
    assert sick.node.labels.get(LABEL_SIDE) == "slurm" and sick.node.unschedulable  # never relabelled for inference
    assert other.node.move is not None and other.node.move.target == INF  # the split is made with a healthy node
    assert "MoveStopped" in [r for d in pool.decisions for s in d.steps.values() for r in (e.reason for e in s.events)]
    for w in worlds.values():
        w.jobs = []
    pool.run(passes=10)
    assert other.node.placement == INF and sick.node.placement == SLURM and sick.slurm_node.reason == ADMIN
    assert pool.status.slurm.unhealthy == 1 and pool.status.inference.ready == 1



@pytest.mark.parametrize("policy, action", [("Wait", None), ("Requeue", "Requeue"), ("Cancel", "Cancel")])
def test_a_health_drains_jobs_end_by_the_drain_policy(policy, action):
    spec = with_health(make_spec(slurm_nodes=1, drain={"timeout": "10m", "onTimeout": policy}), conditions=[{"type": "GpuXid"}])
    sick = claimed(_slurm_node_view("a", conditions=(NodeCondition("GpuXid", "True", NOW),)), "slurmpool: health: GpuXid")
    slurm = SlurmView(True, nodes={"a": slurm_node("a", "MIXED", {"DRAIN"}, reason="slurmpool: health: GpuXid")},
                      jobs=(job("7", ["a"], end_in=3600),))
    before, _ = _decide(spec, [sick], slurm, now=NOW + timedelta(minutes=9))
    assert not before.steps.get("a") or not [a for a in before.steps["a"].actions if type(a).__name__ in ("Requeue", "Cancel")]
    after, _ = _decide(spec, [sick], slurm, now=NOW + timedelta(minutes=11))
    done = [type(a).__name__ for a in (after.steps["a"].actions if "a" in after.steps else [])]
    assert done == ([action] if action else [])


def test_a_slurm_node_slurm_does_not_list_is_unhealthy_at_once():
    """Fail closed (issue 25): a node the pool holds in Slurm that Slurm does not list (a wrong
    Slurm NodeName, a partial answer) is unhealthy: never a victim, its move stops in Slurm."""
    settled = node("a")
    h = assess(make_spec(), settled, None)
    assert h.unhealthy and [f.kind for f in h.findings] == ["SlurmUnlisted"]
    assert assess(make_spec(), settled, slurm_node("a")).findings == ()
    assert assess(make_spec(), settled, None, available=False).findings == ()  # unseen is not unlisted


def test_a_rebalance_never_takes_inference_below_its_floor_for_nodes_that_cannot_join_yet():
    """Found by the property above: the split wants 3 Slurm / 3 inference, counting two
    unadopted nodes that are not Ready. Slurm's missing node must not come from inference's last
    two (minInferenceNodes 2); the surplus llm node goes to the default pool instead."""
    spec = make_spec(slurm_nodes=3, min_inference=2, max_moves=1,
                     pools=[("default", 1, 0, None), ("llm", 0, 0, None)])
    spec = with_health(spec, replace=False, notRespondingGrace="0s")
    nodes = [node("n000", placement="inference:llm"), node("n001", placement="none", ready=False),
             node("n002", placement="inference:default"), node("n003", placement="none", ready=False),
             node("n004", placement=SLURM), node("n005", placement=SLURM)]
    slurm = SlurmView(True, nodes={n.name: slurm_node(n.name) for n in nodes})
    result = plan(spec, nodes, slurm, NOW, health=_health(spec, nodes, slurm))
    assert [(s.node, s.target) for s in result.starts] == [("n000", "inference:default")]
