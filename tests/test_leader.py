"""leader.py judges the Lease by when this replica saw it change (its own monotonic clock), as
client-go does, never by the holder's renewTime against the local wall clock (issue 25)."""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime, timedelta, timezone

from kubernetes import client
from kubernetes.client.rest import ApiException

from slurmpool.adapters.leader import Lease, LeaderElector


class FakeLeases:
    """One Lease, with resourceVersion checks, as the API server keeps it."""

    def __init__(self):
        self.lease: client.V1Lease | None = None
        self.version = 0

    def read_namespaced_lease(self, name, namespace):
        if self.lease is None:
            raise ApiException(status=404)
        return copy.deepcopy(self.lease)

    def create_namespaced_lease(self, namespace, body):
        if self.lease is not None:
            raise ApiException(status=409)
        self._store(body)

    def replace_namespaced_lease(self, name, namespace, body):
        if body.metadata.resource_version != self.lease.metadata.resource_version:
            raise ApiException(status=409)
        self._store(body)

    def _store(self, body):
        self.version += 1
        body.metadata.resource_version = str(self.version)
        self.lease = copy.deepcopy(body)

    def held_by(self, holder: str, renewed: datetime):
        spec = client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=15, acquire_time=renewed, renew_time=renewed,
                                  lease_transitions=0)
        self._store(client.V1Lease(metadata=client.V1ObjectMeta(name="slurmpool", namespace="ns"), spec=spec))


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def elector(leases: FakeLeases, clock: Clock, identity="b") -> LeaderElector:
    e = LeaderElector(client.ApiClient(), Lease(namespace="ns", identity=identity), clock=clock)
    e.api = leases
    return e


def ensure(e: LeaderElector) -> bool:
    return asyncio.run(e.ensure())


def test_a_lease_renewed_long_ago_by_the_holders_clock_is_not_taken_at_first_sight():
    """The holder's clock is 10 minutes behind ours: its fresh renewTime looks expired. The old
    rule took the Lease at once, and both replicas acted."""
    leases, clock = FakeLeases(), Clock()
    leases.held_by("a", datetime.now(timezone.utc) - timedelta(minutes=10))
    b = elector(leases, clock)
    assert not ensure(b)
    clock.t += 14
    assert not ensure(b)
    clock.t += 2  # 16 s without a change, by our clock: expired
    assert ensure(b) and leases.lease.spec.holder_identity == "b"
    assert leases.lease.spec.lease_transitions == 1


def test_a_holder_that_keeps_renewing_keeps_the_lease_whatever_its_clock_says():
    leases, clock = FakeLeases(), Clock()
    skewed = datetime.now(timezone.utc) - timedelta(hours=1)
    leases.held_by("a", skewed)
    b = elector(leases, clock)
    for i in range(10):  # a renews every 3 s (its clock an hour behind); b looks every 3 s for 30 s
        clock.t += 3
        leases.held_by("a", skewed + timedelta(seconds=3 * (i + 1)))
        assert not ensure(b)


def test_a_lease_stamped_in_the_future_is_taken_once_it_stops_changing():
    """The holder's clock an hour ahead: the old rule waited an hour for a dead holder."""
    leases, clock = FakeLeases(), Clock()
    leases.held_by("a", datetime.now(timezone.utc) + timedelta(hours=1))
    b = elector(leases, clock)
    assert not ensure(b)
    clock.t += 16
    assert ensure(b)


def test_our_own_lease_is_renewed_at_once_and_a_missing_one_created():
    leases, clock = FakeLeases(), Clock()
    b = elector(leases, clock)
    assert ensure(b) and leases.lease.spec.holder_identity == "b"
    clock.t += 4
    restarted = elector(leases, clock)  # the same pod's new container
    assert ensure(restarted)


def test_a_leader_that_cannot_renew_stops_acting_before_others_may_take_over():
    leases, clock = FakeLeases(), Clock()
    b = elector(leases, clock)
    assert ensure(b)
    leases.read_namespaced_lease = lambda *_: (_ for _ in ()).throw(ApiException(status=500))
    clock.t += 9
    assert ensure(b) is True  # within renew_deadline (10 s)
    clock.t += 2
    assert ensure(b) is False


# ---------------------------------------------------------------- released on SIGTERM (issue 38)


def test_a_released_lease_is_taken_by_another_replica_at_once():
    """client-go's ReleaseOnCancel: the holder clears holderIdentity; the others need not wait a
    whole Lease duration (15 s) for it to expire, as after a crash."""
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    assert ensure(a) and not ensure(b)
    clock.t += 1
    asyncio.run(a.release())
    spec = leases.lease.spec
    assert spec.holder_identity is None and spec.lease_duration_seconds == 1 and not a.leading
    assert ensure(b) and leases.lease.spec.holder_identity == "b"  # no wait
    assert leases.lease.spec.lease_transitions == 1 and leases.lease.spec.lease_duration_seconds == 15
    clock.t += 5
    assert not ensure(a)  # a stopped replica never takes it again
    assert leases.lease.spec.holder_identity == "b"


def test_a_replica_that_steps_down_stops_acting_at_once_and_never_writes_the_lease_again():
    leases, clock = FakeLeases(), Clock()
    a = elector(leases, clock, "a")
    assert ensure(a) and a.leading
    a.step_down()
    assert not a.leading  # within its renew deadline, but stopping: no pass starts
    version = leases.version
    clock.t += 4
    assert not ensure(a) and leases.version == version  # not renewed either
    asyncio.run(a.release())
    assert leases.lease.spec.holder_identity is None


def test_release_leaves_a_lease_it_does_not_hold_and_survives_an_api_failure():
    leases, clock = FakeLeases(), Clock()
    leases.held_by("a", datetime.now(timezone.utc))
    b = elector(leases, clock)
    assert not ensure(b)
    asyncio.run(b.release())  # never led: not even read
    assert leases.lease.spec.holder_identity == "a"
    # b led once, then a took over (b did not see it): b's release leaves a's Lease alone
    leases2, clock2 = FakeLeases(), Clock()
    c = elector(leases2, clock2, "c")
    assert ensure(c)
    leases2.held_by("d", datetime.now(timezone.utc))
    asyncio.run(c.release())
    assert leases2.lease.spec.holder_identity == "d"
    # the API away: logged, and the others wait for the Lease to expire as after a crash
    leases3, clock3 = FakeLeases(), Clock()
    e = elector(leases3, clock3, "e")
    assert ensure(e)
    leases3.read_namespaced_lease = lambda *_: (_ for _ in ()).throw(ApiException(status=500))
    asyncio.run(e.release())
    assert not e.leading and leases3.lease.spec.holder_identity == "e"


async def _stopping(stop_seconds: float, pass_seconds: float | None) -> list[str]:
    """PoolController.close with a pass under way for `pass_seconds` (None: one that never ends)."""
    from slurmpool.controller import pools

    from .test_handlers import controller_for

    said: list[str] = []

    class Leader:
        leading, renew_every = True, 1.0

        def step_down(self):
            said.append("step down")

        async def release(self):
            said.append("release")

    class Kube:
        async def flush_events(self, seconds):
            said.append("events")

    class Access:
        async def close(self):
            said.append("access")

    controller = controller_for()
    controller.leader, controller.access = Leader(), Access()
    controller.kube = Kube()
    controller.queue = pools.WorkQueue()

    async def worker():
        controller.queue.add(("ns", "p"))
        key = await controller.queue.get()
        try:
            await asyncio.sleep(3600 if pass_seconds is None else pass_seconds)
            said.append("pass ended")
        except asyncio.CancelledError:
            said.append("pass cancelled")
            raise
        finally:
            controller.queue.done(key)

    controller.tasks = [asyncio.create_task(worker())]
    await asyncio.sleep(0.01)
    pools.STOP_SECONDS, saved = stop_seconds, pools.STOP_SECONDS
    try:
        await controller.close()
    finally:
        pools.STOP_SECONDS = saved
    return said


def test_on_sigterm_the_controller_stops_acting_then_releases_the_lease():
    """The pass under way ends first (no write of this replica after the other may act), then the
    Lease goes, then the Events are flushed (they may take seconds: nobody waits for them)."""
    assert asyncio.run(_stopping(1.0, 0.05)) == ["step down", "pass ended", "release", "events", "access"]
    # a pass that hangs (Slurm not answering) is cancelled after STOP_SECONDS: the Lease is released anyway
    assert asyncio.run(_stopping(0.05, None)) == ["step down", "pass cancelled", "release", "events", "access"]
