"""The kopf layer and the controller's pool pass: one ReconcileError Event per distinct failure,
backoff after a failure, and the next pass scheduled by what the pass did."""

from __future__ import annotations

import asyncio

import kopf

from slurmbridge.backoff import Backoff
from slurmpool.controller import handlers, records
from slurmpool.controller.pools import PoolController, PoolState
from slurmpool.controller.services import Services
from slurmpool.controller.settings import Settings
from slurmpool.controller.workqueue import WorkQueue

from .factories import make_spec
from .slurmfake import Refusing


class Recorder:
    api = None  # the watches the controller makes are never started here

    def __init__(self):
        self.events: list[tuple[str, str]] = []

    async def event(self, obj, type_, reason, message):
        self.events.append((reason, message))

    async def patch_pool_status(self, pool, status):
        return None


class Leader:
    leading = True


class Queue(WorkQueue):
    def __init__(self):
        super().__init__()
        self.scheduled: list[float] = []

    def add(self, key, after=0.0):
        self.scheduled.append(after)


def controller_for(pools=None, access=None) -> PoolController:
    settings = Settings(backoff_base=1, backoff_max=8)
    return PoolController(settings, Services(Recorder(), Leader(), access), pools or {}, queue=Queue(), backoff=Backoff(1, 8, jitter=0))


def test_a_failing_pool_gets_one_event_per_distinct_error_and_backs_off(monkeypatch):
    outcomes = iter(["boom", "boom", "boom", "other", None, "boom"])

    async def reconcile(*_args, **_kw):
        error = next(outcomes)
        if error:
            raise RuntimeError(error)
        return 1.0

    raw = {"spec": make_spec().model_dump(by_alias=True, exclude_none=True), "uid": "u1", "generation": 1}
    controller = controller_for({("ns", "gpu"): [raw]})
    monkeypatch.setattr(controller, "reconcile", reconcile)
    for _ in range(6):
        asyncio.run(controller.reconcile_key(("ns", "gpu")))
    # boom (once for three passes), other, then success clears it, so boom is new again.
    assert controller.kube.events == [("ReconcileError", "boom"), ("ReconcileError", "other"), ("ReconcileError", "boom")]
    # backoff 1, 2, 4, 8 (at most backoff_max), then the pass's own interval, then 1 again
    assert controller.queue.scheduled == [1, 2, 4, 8, 1.0, 1]


def test_the_pass_backoff_is_jittered_never_longer_than_its_bound(monkeypatch):
    async def reconcile(*_args, **_kw):
        raise RuntimeError("boom")

    controller = controller_for({("ns", "gpu"): [{"spec": {}, "uid": "u1", "generation": 1}]})
    assert controller.backoff.jitter == 0
    controller.backoff = Backoff(1, 8, jitter=0.2, rng=lambda: 1.0)  # the most jitter takes off
    monkeypatch.setattr(controller, "reconcile", reconcile)
    for _ in range(5):
        asyncio.run(controller.reconcile_key(("ns", "gpu")))
    assert controller.queue.scheduled == [0.8, 1.6, 3.2, 6.4, 6.4]
    assert PoolController(Settings(), Services(Recorder(), Leader(), None), {}).backoff.jitter > 0  # jitter on by default


def test_a_replica_that_does_not_lead_only_looks_again_later(monkeypatch):
    async def reconcile(*_args, **_kw):
        raise AssertionError("a follower must not reconcile")

    controller = controller_for({("ns", "gpu"): [{"uid": "u", "generation": 1, "spec": {}}]})
    monkeypatch.setattr(controller, "reconcile", reconcile)
    controller.leader.leading = False
    asyncio.run(controller.reconcile_key(("ns", "gpu")))
    assert controller.queue.scheduled == [controller.settings.interval] and controller.kube.events == []


def test_a_pass_waits_while_the_index_lags_our_own_record_writes(monkeypatch):
    from slurmpool.core.view import ANN_MOVE, NodeView

    state, watch = records.Written(), FakeNodeWatch()
    state.wrote({"gpu01": {ANN_MOVE: '{"id":"m2"}'}}, 1.0)
    old = NodeView("gpu01", annotations={ANN_MOVE: '{"id":"m1"}'})
    assert records.lags(state, [old], watch, 1.0, watch.list_began)  # the watch has not brought m2 back: no pass on m1
    new = NodeView("gpu01", annotations={ANN_MOVE: '{"id":"m2"}'})
    assert not records.lags(state, [new], watch, 1.0, watch.list_began) and state.expected == {}
    state.expected = {"gpu01": ({ANN_MOVE: None}, 1.0)}  # a removal: seen once the annotation is gone
    assert records.lags(state, [old], watch, 1.0, watch.list_began)
    assert records.lags(state, [old], watch, 100.0, watch.list_began)  # a lagging watch waits, never acts (issue 25) ...
    assert watch.relists == 1  # ... and lists the Nodes again, once
    assert records.lags(state, [old], watch, 100.0, watch.list_began) and watch.relists == 1
    watch.list_began = 50.0  # a full list began after the write: the views read before it say nothing of it ...
    assert records.lags(state, [old], watch, 100.0, 0.0) and watch.relists == 1
    # ... the views read after it, still with the old record, say someone changed it since
    assert not records.lags(state, [old], watch, 100.0, watch.list_began) and state.expected == {}


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


class ReservationBackend(Refusing):
    def __init__(self, names=()):
        self.deleted: list[str] = []
        self.names = names

    async def can_reserve(self):
        return True

    async def reservations(self):
        from slurmbridge import SlurmReservation
        return [SlurmReservation(name=n, nodes=("gpu01",), start=None, end=None, state="INACTIVE",
                                 flags=frozenset({"MAINT"} if n.endswith("person") else {"MAINT", "IGNORE_JOBS"})) for n in self.names]

    async def delete_reservation(self, name):
        self.deleted.append(name)


class RestLike(Refusing):
    """slurmrestd before v0.0.43: cannot reserve."""


class Access:
    def __init__(self, backend):
        self._backend = backend

    async def backend(self, namespace, access):
        return self._backend


def test_a_deleted_pool_takes_its_reservation_with_it_and_only_its_own():
    from slurmpool.core.handover import reservation_name
    from slurmpool.core.interfaces import PoolRef
    mine, other_install = reservation_name(PoolRef("ns", "gpu", "u1")), reservation_name(PoolRef("ns", "gpu", "u2"))
    names = (mine, other_install, "slurmpool-ns-gpu", "slurmpool-ns-gpu2", "slurmpool-ns-maintenance")
    controller = controller_for(access=Access(backend := ReservationBackend(names)))
    body = {"metadata": {"uid": "u1"}, "spec": make_spec().model_dump(by_alias=True)}
    asyncio.run(controller.release_reservation(("ns", "gpu"), body))
    assert backend.deleted == [mine, "slurmpool-ns-gpu"]  # and its old name (our flags)
    controller.access = Access(RestLike())  # nothing to delete over slurmrestd, and no error
    asyncio.run(controller.release_reservation(("ns", "gpu"), body))
    controller.leader = type("NotLeading", (), {"leading": False})()
    controller.access = Access(backend := ReservationBackend())
    asyncio.run(controller.release_reservation(("ns", "gpu"), body))
    assert backend.deleted == []  # only the leader acts


def test_a_pool_state_starts_empty():
    state = PoolState()
    assert (state.generation, state.failures, state.reconcile_error) == (None, 0, None)
    assert state.overlaps == frozenset()
    assert state.spec.raw is None and state.spec.parsed == (None, "")
    assert (state.slurm.changed_at, state.slurm.last_poll, state.slurm.waiting) == (None, None, False)
    other = PoolState()
    assert other.spec is not state.spec and other.slurm is not state.slurm  # nothing shared between pools


def test_a_record_written_by_one_pool_is_waited_for_by_the_pool_that_has_the_node_now():
    """The records this process wrote are kept by node, not by pool: a node whose pool was deleted
    and made again, or that a selector edit moved to another pool, is not moved again on its old
    record by the new pool."""
    from slurmpool.core.view import ANN_MOVE, NodeView

    controller = controller_for({})
    controller.state(("ns", "a"))
    controller.written.wrote({"gpu01": {ANN_MOVE: '{"id":"m2"}'}}, 1.0)  # by pool A's pass
    controller.pools.pop(("ns", "a"))  # pool A deleted (pool_changed drops its state so)
    assert "gpu01" in controller.written.expected and not hasattr(PoolState(), "expected")
    old = NodeView("gpu01", annotations={ANN_MOVE: '{"id":"m1"}'})
    assert records.lags(controller.written, [old], FakeNodeWatch(), 1.0, 0.0)  # pool B's pass waits too


def test_the_spec_is_parsed_once_per_uid_generation_and_content():
    from slurmpool.controller import snapshots

    state, raw = PoolState(), {"spec": make_spec().model_dump(by_alias=True, exclude_none=True), "uid": "u1", "generation": 1}
    spec, why = state.spec.parse(raw)
    assert spec is not None and why == ""
    assert state.spec.parse(raw)[0] is spec  # cached
    raw["spec"]["slurmNodes"] = 1  # the same generation, another content (an index replaced in place)
    assert state.spec.parse(raw)[0] is not spec and state.spec.parse(raw)[0].slurm_nodes == 1
    bad = {"spec": {"slurmNodes": "many"}, "uid": "u1", "generation": 2}
    assert state.spec.parse(bad)[0] is None and "slurmNodes" in state.spec.parse(bad)[1]
    assert snapshots.first([]) is None


def test_an_overlap_is_one_event_per_change_posted_by_the_pass():
    from slurmpool.core.interfaces import PoolRef

    class Owners:
        def owners(self, name):
            return {("ns", "gpu"), ("ns", "other")}

    controller = controller_for()
    controller.membership = Owners()
    pool, state = PoolRef("ns", "gpu"), PoolState()
    for overlaps in ({"gpu01"}, {"gpu01"}, {"gpu01", "gpu02"}, set(), {"gpu01"}):
        asyncio.run(controller.report_overlaps(pool, state, overlaps))
    assert [m for _, m in controller.kube.events] == ["nodes gpu01 are also selected by ns/other",
                                                     "nodes gpu01, gpu02 are also selected by ns/other",
                                                     "nodes gpu01 are also selected by ns/other"]
    assert state.overlaps == {"gpu01"}


def test_a_pool_seen_with_a_new_generation_is_queued_first_and_a_deleted_one_forgotten():
    class Writer:
        forgotten: list = []

        def forget(self, namespace, name):
            self.forgotten.append((namespace, name))

    class Urgent(Queue):
        def add(self, key, after=0.0, urgent=False):
            self.scheduled.append((key, urgent))

    controller = controller_for(access=Access(RestLike()))
    controller.queue, controller.status = Urgent(), Writer()
    body = {"metadata": {"generation": 1}, "spec": {}}
    for _ in range(2):  # our own status writes do not change the generation: no pass for them
        asyncio.run(controller.pool_changed("MODIFIED", ("ns", "gpu"), body))
    assert controller.queue.scheduled == [(("ns", "gpu"), True)] and controller.state(("ns", "gpu")).generation == 1
    assert controller.indexed.is_set()
    asyncio.run(controller.pool_changed("DELETED", ("ns", "gpu"), body))
    assert ("ns", "gpu") not in controller.pools and controller.status.forgotten == [("ns", "gpu")]


def test_a_spec_that_cannot_be_used_is_degraded_and_keeps_its_target_audit():
    from datetime import datetime, timezone

    from slurmpool.controller import reports
    from slurmpool.core.models import SlurmNodePoolStatus

    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    basis = reports.invalid_basis("gpu", 3, {"spec": {"paused": True, "slurmNodes": "many"}})
    assert (basis.name, basis.generation, basis.pools, basis.paused) == ("gpu", 3, (), True)
    status = reports.invalid_status(basis, None, "slurmNodes: not an integer", False, now)
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "InvalidSpec") and "slurmNodes: not an integer" in degraded.message
    assert next(c for c in status.conditions if c.type == "Progressing").reason == "Paused"
    assert status.observed_generation == 3 and status.inference.pools == [] and status.target is None
    previous = SlurmNodePoolStatus.model_validate({"target": {"slurmNodes": 2, "source": "Manual", "since": "2026-11-30T00:00:00Z"}})
    status = reports.invalid_status(reports.invalid_basis("gpu", 4, {"spec": {}}), previous, "hostPath /", True, now)
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert degraded.reason == "PolicyViolation" and previous.target is not None and status.target == previous.target
    assert next(c for c in status.conditions if c.type == "Progressing").reason == "Idle"
