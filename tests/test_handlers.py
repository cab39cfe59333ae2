"""The kopf layer's pool pass: one ReconcileError Event per distinct failure, backoff after a
failure, and the next pass scheduled by what the pass did."""

from __future__ import annotations

import asyncio

import kopf

from slurmpool.controller import handlers
from slurmpool.controller.settings import Settings
from slurmpool.controller.workqueue import WorkQueue

from .factories import make_spec


class Recorder:
    def __init__(self):
        self.events: list[tuple[str, str]] = []

    async def event(self, obj, type_, reason, message):
        self.events.append((reason, message))


class Leader:
    leading = True


class Queue(WorkQueue):
    def __init__(self):
        super().__init__()
        self.scheduled: list[float] = []

    def add(self, key, after=0.0):
        self.scheduled.append(after)


def memo_for() -> kopf.Memo:
    return kopf.Memo(kube=Recorder(), leader=Leader(), queue=Queue(), settings=Settings(backoff_base=1, backoff_max=8),
                     failures={}, reconcile_errors={})


def test_a_failing_pool_gets_one_event_per_distinct_error_and_backs_off(monkeypatch):
    outcomes = iter(["boom", "boom", "boom", "other", None, "boom"])

    async def reconcile(*_args, **_kw):
        error = next(outcomes)
        if error:
            raise RuntimeError(error)
        return 1.0

    monkeypatch.setattr(handlers, "_reconcile", reconcile)
    memo = memo_for()
    raw = {"spec": make_spec().model_dump(by_alias=True, exclude_none=True), "uid": "u1", "generation": 1}
    pools = {("ns", "gpu"): [raw]}
    for _ in range(6):
        asyncio.run(handlers.reconcile_key(memo, ("ns", "gpu"), {}, {}, pools))
    # boom (once for three passes), other, then success clears it, so boom is new again.
    assert memo.kube.events == [("ReconcileError", "boom"), ("ReconcileError", "other"), ("ReconcileError", "boom")]
    # backoff 1, 2, 4, 8 (at most backoff_max), then the pass's own interval, then 1 again
    assert memo.queue.scheduled == [1, 2, 4, 8, 1.0, 1]


def test_a_replica_that_does_not_lead_only_looks_again_later(monkeypatch):
    async def reconcile(*_args, **_kw):
        raise AssertionError("a follower must not reconcile")

    monkeypatch.setattr(handlers, "_reconcile", reconcile)
    memo = memo_for()
    memo.leader.leading = False
    asyncio.run(handlers.reconcile_key(memo, ("ns", "gpu"), {}, {}, {("ns", "gpu"): [{"uid": "u", "generation": 1, "spec": {}}]}))
    assert memo.queue.scheduled == [memo.settings.interval] and memo.kube.events == []


def test_a_pass_waits_while_the_index_lags_our_own_record_writes(monkeypatch):
    from slurmpool.core.view import ANN_MOVE, NodeView

    memo = memo_for()
    memo.nodes, memo.relisting = FakeNodeWatch(), {}
    memo.expected = {"gpu01": ({ANN_MOVE: '{"id":"m2"}'}, 1.0)}
    monkeypatch.setattr(handlers.time, "monotonic", lambda: 1.0)
    old = NodeView("gpu01", annotations={ANN_MOVE: '{"id":"m1"}'})
    assert handlers._index_lags(memo, [old])  # the watch has not brought m2 back: no pass on m1
    new = NodeView("gpu01", annotations={ANN_MOVE: '{"id":"m2"}'})
    assert not handlers._index_lags(memo, [new]) and memo.expected == {}
    memo.expected = {"gpu01": ({ANN_MOVE: None}, 1.0)}  # a removal: seen once the annotation is gone
    assert handlers._index_lags(memo, [old])
    monkeypatch.setattr(handlers.time, "monotonic", lambda: 100.0)
    assert handlers._index_lags(memo, [old])  # a lagging watch waits, never acts (issue 25) ...
    assert memo.nodes.relists == 1  # ... and lists the Nodes again, once
    assert handlers._index_lags(memo, [old]) and memo.nodes.relists == 1
    memo.nodes.list_began = 50.0  # a full list begun after the write still shows the old record: someone changed it
    assert not handlers._index_lags(memo, [old]) and memo.expected == {}


class FakeNodeWatch:
    def __init__(self):
        self.list_began, self.relists = 0.0, 0

    def request_relist(self):
        self.relists += 1


def test_no_handler_needs_the_diff_that_no_diff_base_skips():
    # handlers.NoDiffBase gives kopf an empty diff base: right only while no handler reads a diff.
    registry = kopf.get_default_registry()
    assert registry._indexing.get_all_handlers() and registry._watching.get_all_handlers()  # the registry is ours
    assert not registry._changing.get_all_handlers() and not registry._spawning.get_all_handlers()
    assert handlers.NoDiffBase().build(body=kopf.Body({"spec": {"a": 1}, "metadata": {"labels": {"x": "y"}}})) == {}


def test_a_slurmd_registering_is_looked_at_again_soon_a_move_blocked_by_jobs_is_not():
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from slurmpool.core.moves import Step
    from slurmpool.core.phases import Phase
    from slurmpool.core.view import MoveRecord

    def decision(phase: Phase, blocked_by: list[str]):
        now = datetime(2026, 12, 1, tzinfo=timezone.utc)
        to_slurm = phase not in (Phase.DRAINING, Phase.STOPPING_SLURMD)
        source, target = ("inference:llm", "slurm") if to_slurm else ("slurm", "inference:llm")
        move = MoveRecord(id="m", source=source, target=target, phase=phase, since=now, started=now)
        return SimpleNamespace(steps={"gpu01": Step(move=move, blocked_by=blocked_by)})

    # Registering sets blocked_by ["slurmd-registration"]: that wait is Slurm's to end within a second
    assert handlers.waiting_on_slurm(decision(Phase.REGISTERING, ["slurmd-registration"]))
    assert handlers.waiting_on_slurm(decision(Phase.RESUMING, []))
    assert not handlers.waiting_on_slurm(decision(Phase.DRAINING, ["job/42"]))  # jobs take minutes
    assert not handlers.waiting_on_slurm(decision(Phase.REGISTERING, ["slurm-unavailable"]))  # polls back off
    assert not handlers.waiting_on_slurm(decision(Phase.EVICTING, []))  # a watch event wakes it
    assert not handlers.waiting_on_slurm(SimpleNamespace(steps={"gpu01": Step(move=None, settled="slurm")}))


class ReservationBackend:
    def __init__(self):
        self.deleted: list[str] = []

    async def reservations(self):
        return []

    async def delete_reservation(self, name):
        self.deleted.append(name)


class RestLike:
    """slurmrestd: no reservation calls."""


class Access:
    def __init__(self, backend):
        self._backend = backend

    async def backend(self, namespace, access):
        return self._backend


def test_a_deleted_pool_takes_its_reservation_with_it_and_only_its_own():
    memo = memo_for()
    body = {"spec": make_spec().model_dump(by_alias=True)}
    memo.access = Access(backend := ReservationBackend())
    asyncio.run(handlers._release_reservation(memo, "ns", "gpu", body))
    assert backend.deleted == ["slurmpool-ns-gpu"]
    memo.access = Access(RestLike())  # nothing to delete over slurmrestd, and no error
    asyncio.run(handlers._release_reservation(memo, "ns", "gpu", body))
    memo.leader = type("NotLeading", (), {"leading": False})()
    memo.access = Access(backend := ReservationBackend())
    asyncio.run(handlers._release_reservation(memo, "ns", "gpu", body))
    assert backend.deleted == []  # only the leader acts


def test_a_pool_with_demand_on_sees_slurm_no_older_than_its_pass_interval():
    from slurmpool.controller.handlers import SLURM_MAX_AGE, slurm_max_age
    from tests.factories import make_spec

    off = make_spec()
    on = off.model_copy(update={"demand": type(off).model_validate({**off.model_dump(by_alias=True), "demand": {}}).demand})
    assert on.demand is not None and on.demand.enabled
    assert slurm_max_age(off, 1.0) == SLURM_MAX_AGE  # shared polls, as before
    assert slurm_max_age(on, 1.0) == 1.0  # a pending job is seen at the next pass's poll, not up to 2 s later
    assert slurm_max_age(on, 5.0) == SLURM_MAX_AGE
