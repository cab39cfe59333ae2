"""The planned handover's checkpoint warning (issue 36, warning.py): a job on the leaving nodes that
will still run at the edge gets its signal `grace` before it, once (the record survives a restart),
status.handover says "checkpoint at T", and at the edge the move's Draining requeues it at once."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from slurmbridge import SlurmJob
from slurmbridge.models import DeclaredSignal
from slurmpool.core.checkpoint import CheckpointRecord
from slurmpool.core.decide import _warn, decide
from slurmpool.core.expiry import Requeue, Signal
from slurmpool.core.handover import PoolView, reconcile
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.moves import Pass, Step, advance
from slurmpool.core.phases import Phase
from slurmpool.core.snapshot import PoolDecision, PoolSnapshot
from slurmpool.core.view import ANN_CHECKPOINT, ANN_PLACEMENT, SLURM, MoveRecord, NodeView, SlurmView
from slurmpool.core.warning import warn

from .factories import NOW, make_spec, slurm_node

POOL = PoolRef("ns", "gpu")
EDGE = NOW + timedelta(minutes=30)  # "30 12 * * *" opens a window of 0 Slurm nodes: all five leave


def spec(policy="Checkpoint", grace="10m") -> SlurmNodePoolSpec:
    body = make_spec(slurm_nodes=5, max_moves=8, drain={"onTimeout": policy, "checkpoint": {"grace": grace}}).model_dump(by_alias=True)
    body["schedule"] = [{"name": "day", "cron": "30 12 * * *", "duration": "1h", "slurmNodes": 0}]
    body["handover"] = {"enabled": True, "leadTime": "4h"}
    return SlurmNodePoolSpec.model_validate(body)


def job(job_id, nodes, minutes=None, declared=None):
    end = None if minutes is None else NOW + timedelta(minutes=minutes)
    return SlurmJob(job_id=job_id, name="train", user="u", state="RUNNING", partition="gpu", nodes=tuple(nodes), gpus_per_node=8,
                    num_nodes=len(nodes), start_time=NOW - timedelta(hours=3), end_time=end, reason="None", declared_signal=declared)


JOBS = (job("1", ["gpu01", "gpu02"]), job("2", ["gpu03"], minutes=90), job("3", ["gpu04"], minutes=10))


def world(jobs=JOBS, records=None):
    records = records or {}
    nodes = [NodeView(f"gpu0{i}", annotations={ANN_PLACEMENT: SLURM, **({ANN_CHECKPOINT: json.dumps(records[f"gpu0{i}"].body())}
                                                                       if f"gpu0{i}" in records else {})}) for i in range(1, 6)]
    busy = {n for j in jobs for n in j.nodes}
    states = {n.name: slurm_node(n.name, "ALLOCATED" if n.name in busy else "IDLE") for n in nodes}
    return nodes, SlurmView(True, nodes=states, jobs=tuple(jobs), reservations=(), reservations_api=True)


def warnings_at(now, s=None, jobs=JOBS, records=None):
    nodes, slurm = world(jobs, records)
    view = PoolView(s or spec(), nodes, slurm, now)
    return warn(reconcile(POOL, view, 5), view)


def test_each_job_that_outlives_the_edge_is_listed_with_its_checkpoint_time_and_none_is_signalled_early():
    w = warnings_at(NOW)
    assert [(j.job, j.nodes, j.at, j.signal, j.signalled) for j in w.jobs] == [
        ("1", ("gpu01", "gpu02"), EDGE - timedelta(minutes=10), "USR1", None),
        ("2", ("gpu03",), EDGE - timedelta(minutes=10), "USR1", None),
    ]  # job 3 ends before the edge: not warned
    assert w.signals == {} and w.records == {} and w.drop == []


def test_at_the_edge_less_the_grace_each_job_is_signalled_once_and_recorded_on_each_of_its_leaving_nodes():
    at = EDGE - timedelta(minutes=10)
    w = warnings_at(at)
    assert w.signals == {"gpu01": [Signal(("1",), "USR1", True)], "gpu03": [Signal(("2",), "USR1", True)]}
    assert set(w.records) == {"gpu01", "gpu02", "gpu03"}
    assert all(r.at(j) == at and r.before == EDGE for n, r in w.records.items() for j in (("1",) if n != "gpu03" else ("2",)))
    assert [j.signalled for j in w.jobs] == [at, at]


def test_a_restart_reads_the_record_back_no_second_signal_and_the_time_it_was_sent():
    sent = EDGE - timedelta(minutes=10)
    record = CheckpointRecord("USR1", "Batch", (("1", sent),), before=EDGE)
    w = warnings_at(sent + timedelta(minutes=3), records={"gpu01": record, "gpu02": record})
    assert "gpu01" not in w.signals and "gpu02" not in w.records
    assert w.jobs[0].signalled == sent


def test_a_record_for_another_edge_does_not_count_the_job_is_warned_again_for_this_one():
    old = CheckpointRecord("USR1", "Batch", (("1", NOW - timedelta(days=1)),), before=NOW - timedelta(hours=20))
    w = warnings_at(EDGE - timedelta(minutes=5), records={"gpu01": old})
    assert w.signals["gpu01"] == [Signal(("1",), "USR1", True)] and w.records["gpu01"].before == EDGE


def test_a_job_that_declared_its_own_signal_gets_it_at_its_own_time_when_longer():
    own = (job("1", ["gpu01"], declared=DeclaredSignal("USR2", False, 1800)),)
    w = warnings_at(NOW, jobs=own)
    assert (w.jobs[0].at, w.jobs[0].signal) == (EDGE - timedelta(minutes=30), "USR2")
    assert warnings_at(NOW, jobs=own).signals == {"gpu01": [Signal(("1",), "USR2", False)]}


def test_no_warning_without_the_checkpoint_policy():
    w = warnings_at(EDGE - timedelta(minutes=1), s=spec("Requeue"))
    assert w.jobs == [] and w.signals == {}


def test_a_record_no_handover_takes_any_more_goes():
    record = CheckpointRecord("USR1", "Batch", (("1", NOW),), before=EDGE)
    body = make_spec(slurm_nodes=5, max_moves=8, drain={"onTimeout": "Checkpoint"})  # no schedule: no edge
    assert warnings_at(NOW, s=body, records={"gpu01": record}).drop == ["gpu01"]
    assert warnings_at(NOW, records={"gpu01": record}).drop == []  # still leaving


def test_the_record_keeps_its_edge_through_its_body():
    record = CheckpointRecord("USR1", "Batch", (("1", NOW),), before=EDGE)
    assert CheckpointRecord.from_body(record.body()) == record
    assert CheckpointRecord.from_body({"signal": "USR1", "to": "Batch", "jobs": {}}).before is None


def test_the_pass_writes_the_record_with_the_signal_and_the_status_says_checkpoint_at():
    nodes, slurm = world()
    at = EDGE - timedelta(minutes=10)
    decision = decide(PoolSnapshot(pool=POOL, spec=spec(), nodes=tuple(nodes), slurm=slurm, now=at))
    step = decision.steps["gpu01"]
    assert Signal(("1",), "USR1", True) in step.actions and step.checkpoint is not None and step.checkpoint.at("1") == at
    assert json.loads(decision.patches["gpu01"]["metadata"]["annotations"][ANN_CHECKPOINT])["before"] == "2026-11-29T12:30:00Z"
    assert decision.steps["gpu02"].checkpoint is not None and not any(isinstance(a, Signal) for a in decision.steps["gpu02"].actions)
    checkpoints = decision.handover.status.checkpoints
    assert [(c.job, c.at, c.signalled) for c in checkpoints] == [("1", "2026-11-29T12:20:00Z", "2026-11-29T12:20:00Z"),
                                                                 ("2", "2026-11-29T12:20:00Z", "2026-11-29T12:20:00Z")]


def test_a_settled_nodes_upkeep_keeps_a_handover_record_until_its_edge():
    record = CheckpointRecord("USR1", "Batch", (("1", NOW),), before=EDGE)
    nodes, slurm = world(records={"gpu01": record, "gpu02": record})
    decision = decide(PoolSnapshot(pool=POOL, spec=spec(), nodes=tuple(nodes), slurm=slurm, now=NOW + timedelta(minutes=1)))
    assert not any(s.drop_checkpoint for s in decision.steps.values())


def test_at_the_edge_the_draining_requeues_the_warned_jobs_without_waiting_for_the_drain_timeout():
    record = CheckpointRecord("USR1", "Batch", (("1", EDGE - timedelta(minutes=10)),), before=EDGE)
    nodes, slurm = world(records={"gpu01": record})
    node = nodes[0]
    move = MoveRecord(id="m1", source=SLURM, target="inference:default", phase=Phase.DRAINING, since=EDGE, started=EDGE, cause="rebalance")
    draining = {**slurm.nodes, "gpu01": slurm_node("gpu01", "ALLOCATED", {"DRAIN"}, reason="slurmpool: move m1")}
    slurm = SlurmView(True, nodes=draining, jobs=slurm.jobs)
    step = advance(move, node, Pass(slurm, spec(), EDGE))
    assert Requeue(("1",)) in step.actions and "warned before the handover's edge" in step.message
    # a job the handover did not warn waits for drain.timeout as before
    other = replace(node, annotations={ANN_PLACEMENT: SLURM})
    assert not any(isinstance(a, Requeue) for a in advance(move, other, Pass(slurm, spec(), EDGE)).actions)


def test_a_handover_warning_keeps_the_jobs_a_health_drain_signalled_in_the_same_pass():
    """Found in review: _warn replaced a health drain's record of the same pass, so its jobs were
    signalled again next pass. The two records are merged."""
    nodes, slurm = world()
    at = EDGE - timedelta(minutes=10)
    view = PoolView(spec(), nodes, slurm, at)
    drained = CheckpointRecord("USR1", "Batch", (("9", at),))
    decision = PoolDecision(target=None, desired={}, problems=[], steps={"gpu02": Step(move=None, checkpoint=drained)},  # type: ignore[arg-type]
                            nodes_after=[], handover=reconcile(POOL, view, 5))
    _warn(decision, view)
    record = decision.steps["gpu02"].checkpoint
    assert record is not None and record.at("1") == at and record.at("9") == at and record.before == EDGE
