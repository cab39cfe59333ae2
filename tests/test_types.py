"""The core's types where strings were (issue 28): Placement, Direction, Reason and Event, and
the node patch that decide's view of a node after its step is derived from."""

from __future__ import annotations

import ast
import re
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import slurmpool
from slurmpool.core import decide as decidemod
from slurmpool.core.events import Event, Reason
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.moves import Step
from slurmpool.core.patch import RECORD, after, annotations_of, node_patch
from slurmpool.core.phases import Phase
from slurmpool.core.placement import NONE_PLACEMENT, SLURM_PLACEMENT, Direction, Placement, Side, placement_problem, pool_of, side_of
from slurmpool.core.view import ANN_DRAIN, ANN_HOLD_UNTIL, ANN_MOVE, ANN_PLACEMENT, DrainClaim, MoveRecord, NodeView, iso

from .factories import NOW

POOL = PoolRef("ns", "gpu", "uid-1", 3)
SRC = Path(slurmpool.__file__).parent


# ---------------------------------------------------------------- Placement


@pytest.mark.parametrize("text, side, pool", [
    ("slurm", Side.SLURM, None),
    ("none", Side.NONE, None),
    ("inference:default", Side.INFERENCE, "default"),
    ("inference:a", Side.INFERENCE, "a"),
    ("inference:llm-7b", Side.INFERENCE, "llm-7b"),
    ("inference:" + "a" * 40, Side.INFERENCE, "a" * 40),  # 50 characters in all
])
def test_every_placement_form_parses_and_prints_back_byte_for_byte(text, side, pool):
    p = Placement.parse(text)
    assert (p.side, p.pool) == (side, pool) and str(p) == text
    assert p.is_slurm == (side == Side.SLURM) and p.is_inference == (side == Side.INFERENCE) and p.is_none == (side == Side.NONE)
    assert pool_of(text) == pool and side_of(text) == str(side)


@pytest.mark.parametrize("text", [
    "", "Slurm", "slurm ", "slurm\n", "inference", "inference:", "inference:Default", "inference:-a", "inference:a-",
    "inference:a_b", "inference:a:b", "inference: a", "kubernetes", "inference:" + "a" * 41, "none:x", "x" * 500,
])
def test_a_bad_placement_is_refused_with_a_message_for_people(text):
    with pytest.raises(ValueError, match="is no placement: expected 'slurm' or 'inference:<pool>'"):
        Placement.parse(text)
    assert placement_problem(text) is not None and pool_of(text) is None
    assert len(str(placement_problem(text))) < 140  # a huge value is cut in the message


def test_none_is_a_placement_only_where_a_node_may_be_unadopted():
    assert Placement.parse("none") is NONE_PLACEMENT and Placement.parse("slurm") is SLURM_PLACEMENT
    with pytest.raises(ValueError):
        Placement.parse("none", none_ok=False)
    assert placement_problem("none") is not None and placement_problem("none", allow=("none",)) is None
    with pytest.raises(ValueError):
        Placement(Side.INFERENCE)  # an inference placement names its pool
    with pytest.raises(ValueError):
        Placement(Side.SLURM, "a")


def test_a_node_keeps_an_unreadable_placement_as_a_problem_and_counts_as_unadopted():
    node = NodeView("a", annotations={ANN_PLACEMENT: "inference:Bad_Pool"})
    assert node.placement == "none" and [p.annotation for p in node.problems] == [ANN_PLACEMENT]
    assert "'inference:Bad_Pool' is no placement" in node.problems[0].message
    assert not NodeView("a", annotations={ANN_PLACEMENT: "none"}).problems  # as before: "none" is unadopted
    assert NodeView("a", annotations={ANN_PLACEMENT: "inference:x"}).placement == "inference:x"


def test_no_placement_is_parsed_by_hand_outside_placement_py():
    hand = re.compile(r'startswith\("inference|split\(":"|"inference:"\s*\+|f"inference:\{')
    offenders = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py") if p.name != "placement.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if hand.search(line)]
    assert offenders == []


# ---------------------------------------------------------------- Direction


def test_direction_has_one_spelling_the_metric_label():
    assert [d.value for d in Direction] == ["to_slurm", "to_inference", "between_pools"]
    record = MoveRecord(id="m", source="inference:a", target="inference:b", phase=Phase.RELABELING, since=NOW, started=NOW)
    assert record.direction is Direction.BETWEEN_POOLS
    assert Direction.of("slurm", "inference:a") is Direction.TO_INFERENCE
    assert Direction.of("none", "slurm") is Direction.TO_SLURM


# ---------------------------------------------------------------- Reason and Event


def _posted_reasons() -> set[str]:
    """Every reason named where an Event is made or posted in the operator's code."""
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Reason":
                found.add(node.attr)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "event" and len(node.args) == 4:
                if isinstance(node.args[2], ast.Constant):  # kube.event(obj, type, "Reason", message)
                    found.add(node.args[2].value)
    return found


def test_reason_lists_every_reason_the_operator_posts_with_its_text_as_its_name():
    assert all(r.name == r.value for r in Reason)
    posted = _posted_reasons()
    assert posted and posted <= {r.value for r in Reason}, posted - {r.value for r in Reason}
    assert {"MoveStarted", "MoveCompleted", "CordonRestored", "NodeDeleted", "InvalidNodeRecord", "HandoverFailed"} <= posted


def test_no_event_is_a_tuple_any_more():
    tuple_event = re.compile(r'\(\s*"(Normal|Warning)",\s*"[A-Z]')
    offenders = [f"{p.relative_to(SRC)}:{i}" for p in (SRC / "core").rglob("*.py") if p.name != "events.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if tuple_event.search(line)]
    assert offenders == []


def test_an_event_takes_known_types_and_reasons_only():
    ev = Event.warning(Reason.MoveStopped, "m")
    assert (ev.node, ev.type, ev.reason, ev.message) == (None, "Warning", "MoveStopped", "m")
    assert ev.on("gpu01").node == "gpu01" and ev.node is None  # frozen: a copy
    assert Event("n", "Normal", "MoveCompleted", "m").reason is Reason.MoveCompleted
    with pytest.raises(ValueError):
        Event(None, "Normal", "NoSuchReason", "m")
    with pytest.raises(ValueError):
        Event(None, "Error", Reason.MoveStarted, "m")


# ---------------------------------------------------------------- the patch and the view after it


def _old_after(node: NodeView, step: Step) -> NodeView:
    """decide._after as it was before the patch was computed once (the meaning kept)."""
    from dataclasses import replace

    annotations = dict(node.annotations)
    annotations[ANN_MOVE] = step.move.to_annotation() if step.move else ""
    if step.settled:
        annotations[ANN_PLACEMENT] = step.settled
    if step.hold_until:
        annotations[ANN_HOLD_UNTIL] = iso(step.hold_until)
    if step.claim:
        annotations[ANN_DRAIN] = step.claim.to_annotation()
    elif step.drop_claim:
        annotations.pop(ANN_DRAIN, None)
    return replace(node, annotations={k: v for k, v in annotations.items() if v})


PLACES = st.sampled_from(["slurm", "inference:default", "inference:llm"])
MOVES = st.one_of(st.none(), st.sampled_from([
    MoveRecord(id="m1", source="slurm", target="inference:default", phase=Phase.DRAINING, since=NOW, started=NOW),
    MoveRecord(id="m1", source="slurm", target="inference:default", phase=Phase.RELABELING, since=NOW, started=NOW),
    MoveRecord(id="m2", source="inference:default", target="slurm", phase=Phase.CORDONING, since=NOW, started=NOW),
    MoveRecord(id="m3", source="inference:default", target="inference:llm", phase=Phase.RELABELING, since=NOW, started=NOW),
]))
CLAIMS = st.one_of(st.none(), st.sampled_from([DrainClaim("slurmpool: moving to inference:default", NOW),
                                               DrainClaim("slurmpool: health: GpuXid", NOW - timedelta(minutes=3))]))


@settings(max_examples=300, deadline=None)
@given(placement=st.one_of(st.none(), PLACES), current=MOVES, claim=CLAIMS, move=MOVES, settled=st.one_of(st.none(), PLACES),
       hold=st.booleans(), new_claim=CLAIMS, drop=st.booleans(), kept=st.booleans())
def test_the_view_after_a_step_is_its_patch_applied_and_means_what_it_always_did(
        placement, current, claim, move, settled, hold, new_claim, drop, kept):
    annotations = {ANN_PLACEMENT: placement, ANN_MOVE: current.to_annotation() if current else None,
                   ANN_DRAIN: claim.to_annotation() if claim else None, "slurmpool.io/cordon-kept": "true" if kept else None}
    node = NodeView("a", annotations={k: v for k, v in annotations.items() if v})
    step = Step(move=move, settled=settled, hold_until=NOW + timedelta(minutes=5) if hold else None, claim=new_claim, drop_claim=drop)
    patch = node_patch(POOL, node, step, NOW)
    new, old = decidemod._after(POOL, node, step, NOW), _old_after(node, step)
    assert new == after(node, patch)
    assert (new.placement, new.move, new.drain_claim, new.held_until, new.problems) == \
        (old.placement, old.move, old.drain_claim, old.held_until, old.problems)
    # every record annotation the patch writes is what the view after it shows
    for key, value in annotations_of(patch).items():
        if key in RECORD:
            assert new.annotations.get(key) == value
    if settled and settled != node.placement:
        assert annotations_of(patch)["slurmpool.io/settled-at"] == iso(NOW)  # the snapshot's clock, not the wall's


def test_decide_hands_apply_the_patches_it_derived_its_views_from():
    from .test_apply import POOL as APOOL, slurm_nodes
    from .factories import make_spec
    from slurmpool.core.snapshot import PoolSnapshot

    nodes, view = slurm_nodes(4)
    decision = decidemod.decide(PoolSnapshot(pool=APOOL, spec=make_spec(slurm_nodes=2, max_moves=2), nodes=tuple(nodes), slurm=view, now=NOW))
    assert len(decision.patches) == 2 and set(decision.patches) == set(decision.steps)
    by_name = {n.name: n for n in decision.nodes_after}
    for name, patch in decision.patches.items():
        assert by_name[name] == after(next(n for n in nodes if n.name == name), patch)


def test_the_plugin_sends_any_inference_pool_name_on_for_the_admission_policy_to_judge():
    """`kubectl slurmpool move --to`: the side is checked here, the pool name by the apiserver,
    whose refusal names the pools allowed (e2e/test_oncall_role.py)."""
    from slurmpool.core.placement import names_a_side

    assert all(names_a_side(t) for t in ("slurm", "inference", "inference:llm", "inference:Llm"))
    assert not any(names_a_side(t) for t in ("kubernetes", "Slurm", "", "inf"))


# ---------------------------------------------------------------- Blocker, Refusal, Cause, Settled (issue 35)


def test_a_blocker_is_written_in_the_status_as_the_strings_it_replaced():
    from slurmpool.core.moves import Blocker, BlockerKind

    assert [str(b) for b in (Blocker(BlockerKind.JOB, "42"), Blocker(BlockerKind.POD, "web/web-1"), Blocker(BlockerKind.SLURMD_REGISTRATION),
                             Blocker(BlockerKind.SLURM_UNAVAILABLE), Blocker(BlockerKind.SLURM_UNLISTED), Blocker(BlockerKind.MISSING_POOL))] == [
        "job/42", "pod/web/web-1", "slurmd-registration", "slurm-unavailable", "slurm-unlisted", "missing-pool"]
    assert [k for k in BlockerKind if Blocker(k, "x").workload] == [BlockerKind.JOB, BlockerKind.POD]


def test_a_refusal_is_the_status_message_it_was_and_is_read_back_from_it():
    from slurmpool.core.moves import Refusal

    refusal = Refusal.of("patch node gpu01", "(422) metadata.labels: Invalid value")
    assert str(refusal) == "refused by the API server: patch node gpu01: (422) metadata.labels: Invalid value"
    assert Refusal.read(str(refusal)) == refusal
    assert Refusal.read("eviction of web/web-1 refused: PDB") is None and Refusal.read("") is None
    assert len(str(Refusal.of("patch node gpu01", "x" * 1000))) == 500


def test_a_moves_cause_keeps_its_string_in_the_record():
    from slurmpool.core.view import Cause

    assert [c.value for c in Cause] == ["rebalance", "pin", "move-now", "rollback", "abort", "give-back"]
    move = MoveRecord(id="m", source="slurm", target="inference:a", phase=Phase.DRAINING, since=NOW, started=NOW, cause=Cause.MOVE_NOW)
    assert '"cause":"move-now"' in move.to_annotation() and MoveRecord.parse(move.to_annotation()).cause is Cause.MOVE_NOW
    assert MoveRecord.parse(move.to_annotation().replace('"cause":"move-now",', "")).cause is Cause.REBALANCE  # records without one


def test_a_node_with_no_move_is_settled_in_the_phase_column():
    from slurmpool.core.phases import SETTLED, phase_label

    assert phase_label(None) == SETTLED == "Settled" and phase_label(Phase.DRAINING) == "Draining"
