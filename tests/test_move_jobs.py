"""issue 38: each move in status.recentMoves names the Slurm jobs its drain waited for (drained),
requeued, cancelled or signalled. They live in the move's record on the Node, written before the
requeue or signal they name, so an operator restarted mid-move loses none; bounded on the Node
(movejobs.MAX_NAMED) and in the status (movejobs.SHOWN ids a move)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from slurmpool.core.bodies import node_view
from slurmpool.core.decide import decide
from slurmpool.core.history import RECENT_MOVES
from slurmpool.core.models import RecentMove, SlurmNodePoolStatus
from slurmpool.core.movejobs import MAX_NAMED, SHOWN, MoveJobs
from slurmpool.core.moves import Cancel, PatchNode, Requeue
from slurmpool.core.phases import Phase
from slurmpool.core.snapshot import ApplyResult, PoolSnapshot
from slurmpool.core.status import build_status
from slurmpool.core.view import ANN_MOVE, ANN_PLACEMENT, MAX_RECORD_CHARS, SLURM, MoveRecord, NodeView

from .factories import NOW, make_spec
from .sim import POOL, SLURM_ACTIONS, World
from .test_moves import slurm_world
from .test_planner import job

# ---------------------------------------------------------------- the record


def test_each_job_is_named_once_and_moves_to_how_it_left():
    jobs = MoveJobs().seeing(["42", "43", "44"]).seeing(["42", "43"])  # 44 ended on its own
    jobs = jobs.signalling(["42", "99"])  # 99 never ran here: not this move's
    jobs = jobs.ending("requeued", ["42"]).ending("cancelled", ["43"]).ending("requeued", ["42"])  # a requeue asked again
    assert (jobs.drained, jobs.requeued, jobs.cancelled, jobs.signalled, jobs.unnamed) == (["44"], ["42"], ["43"], ["42"], 0)


def test_beyond_the_bound_jobs_are_counted_once_not_named():
    many = [str(1000 + i) for i in range(MAX_NAMED + 6)]
    jobs = MoveJobs().seeing(many).seeing(many[3:]).seeing(many)  # seen pass after pass: not counted again
    assert len(jobs.drained) == MAX_NAMED and jobs.unnamed == 6
    jobs = jobs.ending("requeued", many)
    assert len(jobs.requeued) == MAX_NAMED and jobs.drained == [] and jobs.unnamed == 6
    record = MoveRecord(id="m1", source=SLURM, target="inference:a", phase=Phase.DRAINING, since=NOW, started=NOW,
                        jobs=jobs.signalling(many))
    assert len(record.to_annotation()) < MAX_RECORD_CHARS  # the fullest record is still a readable one
    assert MoveRecord.parse(record.to_annotation()) == record


def test_a_job_id_the_record_would_refuse_is_counted_never_named():
    jobs = MoveJobs().seeing(["42", "j7", "43_[1-3]"]).seeing(["42", "j7"])
    assert (jobs.drained, jobs.unnamed) == (["42"], 2)
    record = MoveRecord(id="m1", source=SLURM, target="inference:a", phase=Phase.DRAINING, since=NOW, started=NOW, jobs=jobs)
    assert MoveRecord.parse(record.to_annotation()) == record  # what the operator writes reads back valid


def test_the_status_shows_counts_and_at_most_SHOWN_ids_disruptive_first():
    jobs = MoveJobs().seeing([str(i) for i in range(1, 31)]).ending("requeued", [str(i) for i in range(20, 31)])
    groups = jobs.signalling(["20", "21"]).groups()
    assert [(g.how, g.count, len(g.ids)) for g in groups] == [("requeued", 11, 10), ("signalled", 2, 0), ("drained", 19, 0)]
    assert sum(len(g.ids) for g in groups) == SHOWN and MoveJobs().groups() == []


def test_a_move_without_jobs_writes_its_record_as_before():
    record = MoveRecord(id="m1", source=SLURM, target="inference:a", phase=Phase.DRAINING, since=NOW, started=NOW)
    assert "jobs" not in json.loads(record.to_annotation())


@pytest.mark.parametrize("jobs, said", [
    ({"requeued": ["42; rm -rf /"]}, "is no Slurm job id"),
    ({"drained": ["42"], "requeued": ["42"]}, "named twice"),
    ({"drained": [str(i) for i in range(MAX_NAMED + 1)]}, f"at most {MAX_NAMED}"),
    ({"unnamed": -1}, "unnamed"),
    ({"drained": "42"}, "drained"),
])
def test_a_bad_jobs_value_makes_the_record_a_reported_problem_of_its_node(jobs, said):
    body = {"id": "m1", "source": "slurm", "target": "inference:default", "phase": "Draining",
            "since": "2026-11-29T12:00:00Z", "started": "2026-11-29T12:00:00Z", "jobs": jobs}
    view = node_view({"metadata": {"name": "gpu01", "annotations": {ANN_MOVE: json.dumps(body), ANN_PLACEMENT: "slurm"}},
                      "spec": {}, "status": {}})
    assert view.move is None and [p.annotation for p in view.problems] == [ANN_MOVE] and said in view.problems[0].message
    snap = PoolSnapshot(pool=POOL, spec=make_spec(slurm_nodes=1), nodes=(view,), slurm=World(view, None).view(), now=NOW)
    decision = decide(snap)
    status = build_status(snap, decision, ApplyResult())
    assert [(r.node, r.annotation) for r in status.invalid_records] == [("gpu01", ANN_MOVE)] and "gpu01" not in decision.steps


# ---------------------------------------------------------------- the move machine, pass after pass


def _ends(step) -> bool:
    return step is not None and any(isinstance(a, Requeue | Cancel) for a in step.actions)


def _pass(world: World, spec, previous, now, crash_before_slurm=False):
    """One whole pass as the executor runs it: the node patch, then Slurm, then pods.
    `crash_before_slurm`: a pass that would requeue or cancel dies after its patch."""
    snap = PoolSnapshot(pool=POOL, spec=spec, nodes=(world.node,), slurm=world.view(), now=now, previous=previous)
    decision = decide(snap)
    world.clock = now
    step = decision.steps.get(world.node.name)
    world.write(decision.patches.get(world.node.name, {}))
    if step is not None and not (crash_before_slurm and _ends(step)):
        for action in [a for a in step.actions if isinstance(a, SLURM_ACTIONS)] + [
                a for a in step.actions if not isinstance(a, (PatchNode, *SLURM_ACTIONS))]:
            world.apply(action)
    world.tick()
    return build_status(snap, decision, ApplyResult()), step


def _restarted(world: World) -> None:
    """A new operator: nothing in memory, the Node read again from the API server."""
    n = world.node
    world.node = NodeView(n.name, labels=dict(n.labels), annotations=dict(n.annotations), taints=n.taints,
                          unschedulable=n.unschedulable, pods=n.pods)


def _move_out(policy: str, crash: str | None = None):
    """Node gpu01 leaves Slurm (slurmNodes 0) with jobs 42 and 43 on it: 43 ends on its own, 42
    outlasts drain.timeout (5s) and drain.onTimeout decides. `crash`: the operator restarts with
    no status after the pass that ended 42 ("after"), or dies after that pass's patch, before
    Slurm heard of it ("before")."""
    spec = make_spec(slurm_nodes=0, drain={"timeout": "5s", "onTimeout": policy, "checkpoint": {"grace": "3s"}})
    world = slurm_world(jobs=[job("42", ["gpu01"], end_in=3600), job("43", ["gpu01"], end_in=3600)])
    status, crashed = None, False
    for i in range(40):
        if i == 2:
            world.jobs = [j for j in world.jobs if j.job_id != "43"]
        status, step = _pass(world, spec, status, NOW + timedelta(seconds=i), crash_before_slurm=crash == "before" and not crashed)
        if crash and not crashed and _ends(step):
            crashed, status = True, None
            _restarted(world)
        if world.node.move is None and i > 0:
            break
    assert crashed or not crash
    return world, status


@pytest.mark.parametrize("policy, fate", [("Requeue", "requeued"), ("Cancel", "cancelled"), ("Checkpoint", "requeued")])
def test_history_names_the_jobs_the_move_drained_and_ended(policy, fate):
    world, status = _move_out(policy)
    assert world.node.placement == "inference:default" and world.node.move is None
    assert (world.requeued if fate == "requeued" else world.cancelled) == ["42"]
    [moved] = status.recent_moves
    jobs = {g.how: (g.count, g.ids) for g in moved.jobs}
    assert jobs.pop(fate) == (1, ["42"]) and jobs.pop("drained") == (1, ["43"])
    assert jobs == ({"signalled": (1, ["42"])} if policy == "Checkpoint" else {}) and moved.jobs_unnamed == 0
    assert world.signalled == (["42"] if policy == "Checkpoint" else [])


@pytest.mark.parametrize("crash", ["after", "before"])
def test_a_crash_between_the_requeue_and_the_end_of_the_move_loses_no_job(crash):
    """The pass that requeues 42 writes it in the move's record first; the operator dies after it
    (or after its patch, the requeue never sent) and starts again with no status: the move ends
    and its history still names 42 as requeued (sent once more when it was not) and 43 as drained."""
    world, status = _move_out("Requeue", crash=crash)
    assert world.node.move is None and world.requeued == ["42"] and world.jobs == []
    [moved] = status.recent_moves
    assert [(g.how, g.ids) for g in moved.jobs] == [("requeued", ["42"]), ("drained", ["43"])]


def test_a_move_turned_back_names_the_jobs_it_waited_for():
    spec = make_spec(slurm_nodes=0, drain={"timeout": "5s", "onTimeout": "Rollback"})
    world = slurm_world(jobs=[job("42", ["gpu01"], end_in=3600)])
    status = None
    for i in range(3):
        status, _ = _pass(world, spec, status, NOW + timedelta(seconds=3 * i))
    rolled = next(m for m in status.recent_moves if m.outcome == "RolledBack")
    assert [(g.how, g.ids) for g in rolled.jobs] == [("drained", ["42"])] and world.jobs  # still running: never ended by us


def test_a_move_the_split_no_longer_wants_names_the_jobs_it_waited_for_on_its_way_back():
    """An abort is in no history of its own: the move back (cause abort) carries its jobs."""
    spec = make_spec(slurm_nodes=0, drain={"timeout": "1h", "onTimeout": "Requeue"})
    world = slurm_world(jobs=[job("42", ["gpu01"], end_in=3600)])
    status = None
    for i in range(3):
        status, _ = _pass(world, spec, status, NOW + timedelta(seconds=i))
    assert world.node.move is not None and world.node.move.phase == Phase.DRAINING
    spec = make_spec(slurm_nodes=1, drain={"timeout": "1h", "onTimeout": "Requeue"})  # the split wants it in Slurm again
    for i in range(3, 40):
        status, _ = _pass(world, spec, status, NOW + timedelta(seconds=i))
        if world.node.move is None:
            break
    [back] = status.recent_moves
    assert (back.cause, back.outcome, back.to) == ("abort", "Completed", SLURM), back
    assert [(g.how, g.ids) for g in back.jobs] == [("drained", ["42"])] and world.jobs  # never ended by us


def test_the_history_with_every_move_full_of_jobs_stays_within_its_bound():
    jobs = MoveJobs().seeing([str(10_000_000 + i) for i in range(MAX_NAMED + 20)])
    jobs = jobs.ending("requeued", jobs.drained[:30]).signalling(jobs.drained[:30])
    move = MoveRecord(id="m", source=SLURM, target="inference:a", phase=Phase.DRAINING, since=NOW, started=NOW, jobs=jobs)
    full = [RecentMove(node=f"gpu{i:02d}", move_id=f"m{i}", from_="slurm", to="inference:a", cause="rebalance",  # type: ignore[call-arg]
                       started="2026-11-29T10:00:00Z", ended="2026-11-29T11:00:00Z", outcome="Completed",
                       jobs=move.jobs.groups(), jobs_unnamed=move.jobs.unnamed) for i in range(RECENT_MOVES)]
    status = SlurmNodePoolStatus(recent_moves=full)
    body = status.model_dump(by_alias=True, mode="json")["recentMoves"]
    assert all(sum(len(g["ids"]) for g in m["jobs"]) <= SHOWN for m in body) and body[0]["jobsUnnamed"] == 20
    assert len(json.dumps(body)) < 20 * 700  # 20 moves, each a few hundred characters at most
