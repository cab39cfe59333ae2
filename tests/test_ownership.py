"""Drain ownership (ownership.py): slurmpool lifts only a drain it provably set, on every Slurm
version. The simulated world (sim.py) models each version's reasons: 22.05 clears the Reason on
RESUME; 23.11 and later keep it, and Slurm appends its own reasons and restamps them."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmpool.core.ownership import our_drain, why_not_ours
from slurmpool.core.view import ANN_DRAIN, ANN_MOVE, ANN_PLACEMENT, LABEL_SIDE, SLURM, DrainClaim, MoveRecord, NodeView

from .factories import NOW, make_spec, slurm_node
from .sim import VERSIONS, PoolWorld, World, parked

INFERENCE = "inference:default"
PARKED = "slurmpool: moving to inference:default"


def claimed(reason: str = PARKED, at=NOW, **annotations) -> NodeView:
    return NodeView("gpu01", annotations={ANN_PLACEMENT: INFERENCE, ANN_DRAIN: DrainClaim(reason, at).to_annotation(), **annotations})


def drained(reason: str, flags=(), when=NOW):
    return replace(slurm_node("gpu01", "IDLE", {"DRAIN", *flags}, reason=reason), reason_time=when)


# ---------------------------------------------------------------- the rule


def test_the_claimed_reason_is_ours_and_slurms_not_responding_suffix_does_not_change_that():
    assert our_drain(claimed(), drained(PARKED))
    assert our_drain(claimed(), drained(PARKED + " : Not responding", {"NOT_RESPONDING"}, NOW + timedelta(minutes=5)))


@pytest.mark.parametrize("sn, why", [
    (drained(PARKED + " : Kill task failed"), "not the one slurmpool set"),
    (drained(PARKED + " : gres/gpu count reported lower than configured (7 < 8)", {"INVALID_REG"}), "INVALID_REG"),
    (drained("admin: bad HBM"), "not the one slurmpool set"),
    (drained("NHC: check_hw_gpu failed"), "not the one slurmpool set"),
    (drained(PARKED, when=NOW - timedelta(hours=2)), "before slurmpool's claim"),
    (slurm_node("gpu01"), "not drained"),
    (None, "not drained"),
])
def test_anything_else_is_someone_elses(sn, why):
    assert why in why_not_ours(claimed(), sn)


def test_a_claimed_drain_whose_reason_slurm_dropped_on_a_power_up_is_ours_and_without_a_claim_is_not():
    """Issue 39, measured on 22.05: `state=POWER_UP` on our drained node leaves DRAIN with no reason.
    No person can drain without a reason, so under our claim it is ours (the move to Slurm goes on)."""
    powering_up = replace(drained("", {"POWERING_UP", "NOT_RESPONDING"}), reason_time=None)
    assert our_drain(claimed(), powering_up)
    assert our_drain(claimed(), replace(powering_up, flags=frozenset({"DRAIN"})))  # registered, still drained
    assert not our_drain(NodeView("gpu01", annotations={ANN_PLACEMENT: INFERENCE}), powering_up)


@pytest.mark.parametrize("behind, ours", [(0, True), (4, True), (10, True), (45, True), (60, True), (61, False), (600, False)])
def test_slurmctlds_clock_behind_ours_within_the_documented_skew_keeps_our_drain_ours(behind, ours):
    """Issue 25: slurmctld's `[user@time]` stamp is its clock; a few seconds behind made our own
    drain read as foreign (5 s slack). CLOCK_SKEW (60 s) is documented in ownership.py and docs/runbook.md."""
    assert our_drain(claimed(), drained(PARKED, when=NOW - timedelta(seconds=behind))) is ours


def test_without_a_claim_our_old_text_on_a_settled_slurm_node_is_not_ours():
    """The issue's case: after a RESUME that kept the Reason, Slurm drained the node itself."""
    node = NodeView("gpu01", annotations={ANN_PLACEMENT: SLURM})
    assert "set no drain" in why_not_ours(node, drained("slurmpool: moving to slurm"))
    assert "set no drain" in why_not_ours(node, drained(PARKED))


def test_a_node_an_older_version_parked_or_left_mid_move_is_read_as_claimed():
    parked_node = NodeView("gpu01", annotations={ANN_PLACEMENT: INFERENCE})
    assert our_drain(parked_node, drained(PARKED + " : Not responding"))
    assert not our_drain(parked_node, drained("slurmpool: moving to inference:other"))
    move = MoveRecord(id="m", source=SLURM, target=INFERENCE, phase="Draining", since=NOW, started=NOW)
    moving = NodeView("gpu01", annotations={ANN_PLACEMENT: SLURM, ANN_MOVE: move.to_annotation()})
    assert our_drain(moving, drained(PARKED))
    assert not our_drain(moving, drained("slurmpool: moving to slurm"))


def test_a_claim_people_broke_is_a_record_problem_and_never_ownership():
    for bad in ("{", '{"reason": "admin: x", "at": "2026-11-29T12:00:00Z"}', '{"reason": "slurmpool: x"}', "[]"):
        node = NodeView("gpu01", annotations={ANN_PLACEMENT: INFERENCE, ANN_DRAIN: bad})
        assert [p.annotation for p in node.problems] == [ANN_DRAIN] and node.drain_claim is None


# ---------------------------------------------------------------- whole passes, per Slurm version


def parked_world(version: str) -> World:
    node = NodeView("gpu01", annotations={ANN_PLACEMENT: INFERENCE}, labels={LABEL_SIDE: "inference", "pool": "default"},
                    taints=({"key": "inference", "value": "default", "effect": "NoSchedule"},))
    # Just parked: drained by us, its slurmd stopped a moment ago (Slurm has not noticed yet).
    node, sn = parked(node, slurm_node("gpu01"), "default", NOW - timedelta(hours=1))
    return World(node=node, slurm_node=sn, version=version, clock=NOW)


def pool_of(world: World, slurm_nodes: int) -> PoolWorld:
    return PoolWorld(spec=make_spec(slurm_nodes=slurm_nodes), worlds={"gpu01": world}, now=NOW)


def events(pool: PoolWorld) -> list[str]:
    return [r for d in pool.decisions for s in d.steps.values() for r in (e.reason for e in s.events)]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_node_slurm_drains_itself_after_we_resumed_it_is_never_resumed(version):
    world = parked_world(version)
    pool = pool_of(world, 1)
    pool.run(passes=15)
    assert world.node.placement == SLURM and not world.slurm_node.drain_set and world.node.drain_claim is None
    if version != "22.05":
        assert world.slurm_node.reason.startswith("slurmpool:")  # 23.11+: our text outlives the RESUME
    world.registers_short()  # slurmd came back with 7 of its 8 GPUs
    pool.run(passes=10)  # the sim fails the test if this resumes Slurm's drain
    assert world.slurm_node.drain_set and world.drain_owner == "slurm"
    pool.spec = make_spec(slurm_nodes=0)  # Slurm shrinks: an unhealthy node is never handed to inference (issue 15)
    pool.run(passes=15)
    assert world.node.placement == SLURM and world.node.move is None
    assert world.slurm_node.drain_set and world.drain_owner == "slurm"  # Slurm's drain, never lifted by us
    assert pool.status.slurm.unhealthy == 1 and pool.status.unhealthy_nodes[0].kind == "DrainedByOthers"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_parked_node_whose_reason_grew_not_responding_is_resumed_when_it_returns(version):
    world = parked_world(version)
    world.tick()
    assert world.slurm_node.reason.endswith(" : Not responding") == (version != "22.05")
    pool = pool_of(world, 1)
    pool.run(passes=15)
    assert world.node.placement == SLURM and not world.slurm_node.drain_set


OPS = st.sampled_from(["to_slurm", "to_inference", "admin_drains", "admin_resumes", "registers_short", "passes"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), ops=st.lists(OPS, min_size=1, max_size=8))
def test_whatever_happens_no_drain_but_ours_is_lifted(version, ops):
    """The sim raises if the operator resumes a drain Slurm or an admin set, or drains without a
    claim. Without any foreign drain, every move still reaches its side, resumed."""
    world = parked_world(version)
    pool = pool_of(world, 0)
    foreign = False
    for op in ops:
        if op == "to_slurm":
            pool.spec = make_spec(slurm_nodes=1)
        elif op == "to_inference":
            pool.spec = make_spec(slurm_nodes=0)
        elif op == "admin_drains":
            world.admin_drains("admin: bad HBM")
            foreign = True
        elif op == "admin_resumes" and world.slurm_node.drain_set:
            world.admin_resumes()
        elif op == "registers_short" and world.node.slurmd_pod is not None and "NOT_RESPONDING" not in world.slurm_node.flags:
            world.registers_short()
            foreign = True
        pool.run(passes=3)
    pool.run(passes=20)
    drained, reason = world.slurm_node.drain_set, world.slurm_node.reason
    if world.drain_owner in ("admin", "slurm"):  # a foreign drain in force: never lifted by slurmpool
        assert foreign and drained, reason
    elif world.node.move is None and world.node.placement == SLURM:  # serving Slurm: resumed
        assert not drained, reason
    else:  # parked in inference, or moving: a drain on it is slurmpool's, claimed on the Node
        claim = world.node.drain_claim
        assert not drained or (claim is not None and reason.startswith(claim.reason)), reason  # Slurm may append to it (24.11)
