"""The slurmpool.io/move-now annotation: a one-shot pin that swaps one named node."""

from __future__ import annotations

from datetime import timedelta

from slurmpool.core.planner import move_now_done, plan
from slurmpool.core.moves import first_phase
from slurmpool.core.view import ANN_HOLD_UNTIL, ANN_MOVE, ANN_MOVE_NOW, ANN_PIN, ANN_PLACEMENT, SLURM, MoveRecord, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node


def node(name, placement=SLURM, move_now=None, pin=None, move_target=None, cause="move-now", **extra) -> NodeView:
    ann = {ANN_PLACEMENT: placement, **extra}
    if move_now:
        ann[ANN_MOVE_NOW] = move_now
    if pin:
        ann[ANN_PIN] = pin
    if move_target:
        ann[ANN_MOVE] = MoveRecord(id="m", source=placement, target=move_target, phase=first_phase(move_target, placement), since=NOW, started=NOW,
                                   cause=cause).to_annotation()
    return NodeView(name=name, annotations=ann)


INF = "inference:default"
SLURM_VIEW = SlurmView(True, nodes={n: slurm_node(n) for n in ("a", "b", "c", "d")})


def test_move_now_moves_the_named_node_and_another_node_swaps_back():
    spec = make_spec(slurm_nodes=2, max_moves=2)
    nodes = [node("a"), node("b", move_now=INF), node("c", INF), node("d", INF)]
    result = plan(spec, nodes, SLURM_VIEW, NOW)
    assert [(s.node, s.target, s.cause) for s in result.starts] == [("b", INF, "move-now"), ("c", SLURM, "rebalance")]


def test_move_now_waits_for_budget_and_respects_paused():
    spec = make_spec(slurm_nodes=2, max_moves=1)
    nodes = [node("a", move_target=INF, cause="rebalance"), node("b", move_now=INF), node("c", INF), node("d", INF)]
    assert plan(spec, nodes, SLURM_VIEW, NOW).starts == []
    paused = make_spec(slurm_nodes=2, max_moves=4, paused=True)
    assert plan(paused, [node("a"), node("b", move_now=INF), node("c", INF), node("d", INF)], SLURM_VIEW, NOW).starts == []


def test_move_now_overrides_a_hold_but_never_a_pin():
    spec = make_spec(slurm_nodes=2, max_moves=4)
    held = node("b", move_now=INF, **{ANN_HOLD_UNTIL: (NOW + timedelta(hours=1)).isoformat()})
    result = plan(spec, [node("a"), held, node("c", INF), node("d", INF)], SLURM_VIEW, NOW)
    assert ("b", INF) in [(s.node, s.target) for s in result.starts]
    pinned = node("b", move_now=INF, pin=SLURM)
    result = plan(spec, [node("a"), pinned, node("c", INF), node("d", INF)], SLURM_VIEW, NOW)
    assert result.starts == []


def test_plain_inference_picks_the_pool_short_of_nodes():
    spec = make_spec(slurm_nodes=1, max_moves=4, pools=[("llm", 10, 0, 1), ("batch", 0, 0, None)])
    nodes = [node("a"), node("b", move_now="inference"), node("c", "inference:llm"), node("d", "inference:batch")]
    result = plan(spec, nodes, SLURM_VIEW, NOW)
    assert ("b", "inference:batch", "move-now") in [(s.node, s.target, s.cause) for s in result.starts]


def test_a_move_now_node_is_never_a_victim_and_its_move_is_never_turned_back():
    spec = make_spec(slurm_nodes=2, max_moves=4)
    # b arrived in inference by move-now; counts are off by one: the victim must be c or d, never b
    nodes = [node("a"), node("b", INF, move_now=INF), node("c", INF), node("d", INF)]
    result = plan(spec, nodes, SLURM_VIEW, NOW)
    assert [s.node for s in result.starts] == ["c"]
    # b still draining toward inference while the split wants it in Slurm: not aborted
    flying = [node("a"), node("b", move_now=INF, move_target=INF), node("c", INF), node("d", INF)]
    assert plan(spec, flying, SLURM_VIEW, NOW).aborts == []


def test_the_annotation_goes_once_the_node_is_there_and_the_split_is_whole():
    spec = make_spec(slurm_nodes=2, max_moves=4)
    moving = [node("a"), node("b", move_now=INF, move_target=INF), node("c", INF), node("d", INF)]
    assert move_now_done(spec, moving) == []
    arrived = [node("a"), node("b", INF, move_now=INF), node("c", INF), node("d", INF)]
    assert move_now_done(spec, arrived) == []  # the swap partner has not left yet
    swapping = [node("a"), node("b", INF, move_now=INF), node("c", INF, move_target=SLURM, cause="rebalance"), node("d", INF)]
    assert move_now_done(spec, swapping) == ["b"]
    assert move_now_done(spec, [node("a", move_now="inference:nope"), node("b")], 2) == ["a"]  # names nothing: dropped
    assert move_now_done(spec, [node("a", move_now=INF, pin=SLURM), node("b"), node("c", INF), node("d", INF)]) == ["a"]
