"""issue 38: status.recentMoves and who asked (managedFields), the Events' log lines, and shadow
mode (spec.mode Shadow, `slurmpool run --dry-run`): a shadow pass writes nothing to Nodes, pods or Slurm."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import timedelta

from slurmpool.adapters import metrics
from slurmpool.controller.apply import ApplyContext, apply
from slurmpool.controller.posting import post
from slurmpool.core.bodies import annotation_writers, node_view
from slurmpool.core.decide import decide
from slurmpool.core.events import Event, Reason
from slurmpool.core.history import RECENT_MOVES, recent_moves
from slurmpool.core.models import RecentMove, SlurmNodePoolStatus
from slurmpool.core.moves import Step
from slurmpool.core.phases import Phase
from slurmpool.core.snapshot import ApplyResult, PoolDecision, PoolSnapshot
from slurmpool.core.status import build_status
from slurmpool.core.view import ANN_MOVE, ANN_PIN, ANN_PLACEMENT, Cause, MoveRecord, NodeView, PodView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .test_apply import POOL, slurm_nodes


class Recorder:
    """A Kube and a Slurm that record every call by name: whatever the executor calls is seen."""

    def __init__(self):
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        async def call(*args, **kwargs):
            self.calls.append((name, *args))
        return call

    def writes(self):
        return [c for c in self.calls if c[0] != "event"]


def shadow_spec(**kw):
    return make_spec(**kw).model_copy(update={"mode": "Shadow"})


async def shadow_pass(spec, nodes, view, previous=None, dry_run=False):
    kube, slurm = Recorder(), Recorder()
    snap = PoolSnapshot(pool=POOL, spec=spec, nodes=tuple(nodes), slurm=view, now=NOW, previous=previous)
    decision = decide(snap)
    result = await apply(ApplyContext(POOL, spec, nodes, kube, slurm, dry_run=dry_run), decision)
    return build_status(snap, decision, result), kube, slurm


async def test_a_shadow_pool_writes_nothing_and_reports_the_moves_it_would_start():
    nodes, view = slurm_nodes(6)
    status, kube, slurm = await shadow_pass(shadow_spec(slurm_nodes=3, max_moves=3), nodes, view)
    assert kube.writes() == [] and slurm.calls == []
    assert status.shadow is not None and len(status.shadow.would_start) == 3
    assert all("slurm -> inference:default (rebalance" in line for line in status.shadow.would_start)
    assert status.moving == 0 and status.moves == [] and status.recent_moves == []  # nothing happened
    reasons = [c[3] for c in kube.calls if c[0] == "event"]
    assert reasons.count(Reason.ShadowDecision) == 6  # on the pool and on each node
    assert metrics.SHADOW_MOVES.labels(pool=POOL.key, direction="to_inference")._value.get() == 3
    assert metrics.SHADOW_MOVES.labels(pool=POOL.key, direction="to_slurm")._value.get() == 0


async def test_a_pool_that_acts_again_has_no_shadow_series():
    nodes, view = slurm_nodes(4)
    await shadow_pass(shadow_spec(slurm_nodes=2, max_moves=2), nodes, view)
    assert metrics.SHADOW_MOVES.labels(pool=POOL.key, direction="to_inference")._value.get() == 2
    status, kube, _ = await shadow_pass(make_spec(slurm_nodes=2, max_moves=2), nodes, view)
    assert status.shadow is None and kube.writes()  # it acts
    assert not [s for m in metrics.SHADOW_MOVES.collect() for s in m.samples if s.labels["pool"] == POOL.key]


async def test_dry_run_makes_an_active_pool_shadow():
    nodes, view = slurm_nodes(4)
    status, kube, slurm = await shadow_pass(make_spec(slurm_nodes=2, max_moves=2), nodes, view, dry_run=True)
    assert kube.writes() == [] and slurm.calls == [] and status.shadow is not None and len(status.shadow.would_start) == 2


async def test_a_move_in_flight_under_shadow_is_left_where_it_is_and_its_step_reported():
    """A pool switched to Shadow mid-move: the move's evictions are not made, only reported."""
    web = PodView("web", "web-1", "u9", owner_kinds=("ReplicaSet",))
    move = MoveRecord(id="m1", source="inference:default", target="slurm", phase=Phase.EVICTING, since=NOW, started=NOW)
    node = NodeView(name="gpu09", annotations={ANN_PLACEMENT: "inference:default", ANN_MOVE: move.to_annotation()},
                    unschedulable=True, taints=({"key": "slurmpool.io/slurm", "value": "true", "effect": "NoSchedule"},), pods=(web,))
    view = SlurmView(True, nodes={"gpu09": slurm_node("gpu09", "DOWN", {"DRAIN"}, reason="slurmpool: moving to slurm")})
    status, kube, slurm = await shadow_pass(shadow_spec(slurm_nodes=1), [node], view)
    assert kube.writes() == [] and slurm.calls == []
    assert status.shadow is not None and any(line.startswith("gpu09: ") and "Evict" in line for line in status.shadow.would_do)
    assert [m.phase for m in status.moves] == ["Evicting"]  # as observed


async def test_shadow_since_holds_while_the_decision_repeats():
    nodes, view = slurm_nodes(2)
    first, _, _ = await shadow_pass(shadow_spec(slurm_nodes=1), nodes, view)
    again, _, _ = await shadow_pass(shadow_spec(slurm_nodes=1), nodes, view, previous=first.model_copy(
        update={"shadow": first.shadow.model_copy(update={"since": "2026-11-29T11:00:00Z"})}))
    assert again.shadow is not None and again.shadow.since == "2026-11-29T11:00:00Z"


async def test_an_active_pool_records_who_asked_in_the_move():
    nodes, view = slurm_nodes(2)
    nodes[1] = replace(nodes[1], annotations={**nodes[1].annotations, ANN_PIN: "inference:default"}, writers={ANN_PIN: "kubectl-annotate"})
    kube = Recorder()
    spec = make_spec(slurm_nodes=2)
    snap = PoolSnapshot(pool=POOL, spec=spec, nodes=tuple(nodes), slurm=view, now=NOW)
    decision = decide(snap)
    await apply(ApplyContext(POOL, spec, nodes, kube, Recorder()), decision)
    record = next(json.loads(c[2]["metadata"]["annotations"][ANN_MOVE]) for c in kube.calls if c[0] == "patch_node" and c[1] == "gpu01")
    assert record["cause"] == "pin" and record["by"] == "kubectl-annotate"


def test_the_writer_of_a_pin_or_move_now_comes_from_managed_fields():
    managed = [
        {"manager": "kubelet", "time": "2026-11-29T10:00:00Z", "fieldsV1": {"f:metadata": {"f:labels": {}}}},
        {"manager": "alice-tool", "time": "2026-11-29T10:00:00Z",
         "fieldsV1": {"f:metadata": {"f:annotations": {"f:slurmpool.io/pin": {}}}}},
        {"manager": "kubectl-slurmpool", "time": "2026-11-29T11:00:00Z",
         "fieldsV1": {"f:metadata": {"f:annotations": {"f:slurmpool.io/pin": {}, "f:slurmpool.io/move-now": {}}}}},
    ]
    assert annotation_writers(managed) == {"slurmpool.io/pin": "kubectl-slurmpool", "slurmpool.io/move-now": "kubectl-slurmpool"}
    assert annotation_writers("not a list") == {} and annotation_writers([{"fieldsV1": None}]) == {}
    view = node_view({"metadata": {"name": "gpu01", "managedFields": managed}})
    assert view.writers["slurmpool.io/pin"] == "kubectl-slurmpool"


def _ended(node="gpu01", outcome="finished", move_id="m1"):
    move = MoveRecord(id=move_id, source="slurm", target="inference:default", phase=Phase.RELABELING,
                      since=NOW - timedelta(minutes=1), started=NOW - timedelta(minutes=5), cause=Cause.MOVE_NOW, by="kubectl-slurmpool")
    node_view_ = NodeView(name=node, annotations={ANN_PLACEMENT: "slurm", ANN_MOVE: move.to_annotation()})
    step = Step(move=None, settled="inference:default", finished=move) if outcome == "finished" else Step(move=None, rolled_back=move)
    return node_view_, step


def _history(nodes_steps, previous=None, result=None):
    snap = PoolSnapshot(pool=POOL, spec=make_spec(), nodes=tuple(n for n, _ in nodes_steps), slurm=SlurmView(True), now=NOW,
                        previous=previous)
    decision = PoolDecision(target=None, desired={}, problems=[], steps={n.name: s for n, s in nodes_steps}, nodes_after=[])  # type: ignore[arg-type]
    return recent_moves(snap, decision, result or ApplyResult())


def test_recent_moves_records_each_move_that_ended_newest_first_and_bounded():
    [done] = _history([_ended()])
    assert (done.node, done.move_id, done.from_, done.to, done.cause, done.by, done.outcome) == (
        "gpu01", "m1", "slurm", "inference:default", "move-now", "kubectl-slurmpool", "Completed")
    assert done.started == "2026-11-29T11:55:00Z" and done.ended == "2026-11-29T12:00:00Z"
    old = [RecentMove(node=f"gpu{i:02d}", move_id=f"o{i}", from_="slurm", to="inference:a", cause="rebalance",  # type: ignore[call-arg]
                      started="2026-11-29T10:00:00Z", ended="2026-11-29T11:00:00Z", outcome="Completed") for i in range(RECENT_MOVES)]
    both = _history([_ended(outcome="rolled back", move_id="m2")], previous=SlurmNodePoolStatus(recent_moves=old))
    assert len(both) == RECENT_MOVES and both[0].outcome == "RolledBack" and both[1].move_id == "o0"


def test_an_end_not_written_or_in_shadow_is_not_history():
    assert _history([_ended()], result=ApplyResult(unwritten={"gpu01"})) == []
    assert _history([_ended()], result=ApplyResult(shadow=True)) == []


async def test_every_event_is_a_log_line_with_pool_node_and_move_id(caplog):
    with caplog.at_level(logging.INFO, logger="slurmpool.moves"):
        await post(Recorder(), POOL, Event.normal(Reason.MoveStarted, "gpu01: slurm -> inference:a", "gpu01"), "m1")
    [record] = caplog.records
    assert (record.pool, record.node, record.moveId, record.reason) == (POOL.key, "gpu01", "m1", "MoveStarted")
