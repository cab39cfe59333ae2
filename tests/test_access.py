"""Shared Slurm access: one poll per pass for all pools, Slurm's topology at most once a minute, and
a growing back-off while Slurm fails, reset by a success."""

from __future__ import annotations

import asyncio

from slurmbridge import SlurmUnavailable, TopologyGroup
from slurmbridge.backoff import Backoff
from slurmpool.adapters import access
from slurmpool.adapters.access import SlurmAccessPool, Wanted
from slurmpool.core.models import SlurmAccess

from .factories import slurm_node
from .slurmfake import Refusing


class CountingBackend(Refusing):
    def __init__(self):
        self.calls: list[str] = []

    async def nodes(self, names=None):
        self.calls.append("nodes")
        return {"n1": slurm_node("n1")}

    async def jobs(self, partition=None, states=None):
        self.calls.append("jobs")
        return []

    async def topology(self):
        self.calls.append("topology")
        return [TopologyGroup("rack-1", 0, ("n1",))]


async def test_topology_is_polled_only_for_pools_that_want_it_and_at_most_once_a_minute(monkeypatch):
    clock = Clock()
    clock.t = 1000.0
    pool = access.SlurmAccessPool(read_secret=None, clock=clock)  # its clock, for the topology's age too
    fake = CountingBackend()
    backend_is(monkeypatch, pool, fake)
    spec = SlurmAccess(local={})
    _, view = await pool.observe("ns", spec, Wanted(max_age=0.5))
    assert fake.calls == ["nodes", "jobs"] and view.topology == ()
    # Another pool of the same pass wants blocks: the view gains them without polling nodes again.
    _, view = await pool.observe("ns", spec, Wanted(max_age=0.5, topology=True))
    assert fake.calls == ["nodes", "jobs", "topology"] and view.blocks(0) == {"n1": "rack-1"}
    for _ in range(10):  # ten passes within the minute: nodes and jobs each pass, topology not again
        clock.t += 1
        _, view = await pool.observe("ns", spec, Wanted(max_age=0.5, topology=True))
    assert fake.calls.count("topology") == 1 and fake.calls.count("nodes") == 11 and view.blocks(0) == {"n1": "rack-1"}
    clock.t += access.TOPOLOGY_MAX_AGE
    await pool.observe("ns", spec, Wanted(max_age=0.5, topology=True))
    assert fake.calls.count("topology") == 2


def backend_is(monkeypatch, pool: SlurmAccessPool, backend) -> None:
    """Every access of `pool` is served by `backend`."""

    async def build(namespace, spec):
        return backend

    monkeypatch.setattr(pool, "_build", build)


class Clock:
    t = 0.0

    def __call__(self):
        return self.t


class Backend(Refusing):
    def __init__(self):
        self.up, self.polls = False, 0

    async def nodes(self, names=None):
        self.polls += 1
        if not self.up:
            raise SlurmUnavailable("Munge encode failed")
        return {}

    async def jobs(self, partition=None, states=None):
        return []


async def test_failures_back_off_and_a_success_resets():
    clock, backend = Clock(), Backend()
    pool = SlurmAccessPool(lambda *_: None, backoff=Backoff(1, 4, jitter=0), clock=clock)
    access = SlurmAccess.model_validate({"local": {}})
    pool._backends[("local", None)] = backend
    polls_at = []
    for tick in range(40):  # 20 s of passes every 0.5 s
        clock.t = tick * 0.5
        before = backend.polls
        _, view = await pool.observe("ns", access, Wanted(max_age=0))
        if backend.polls > before:
            polls_at.append(clock.t)
        assert not view.available and "Munge" in view.error
    assert polls_at[:5] == [0.0, 1.0, 3.0, 7.0, 11.0]  # 1, 2, 4, then at most 4 s apart
    assert "next try in 4s" in view.error
    backend.up = True
    clock.t = 100
    _, view = await pool.observe("ns", access, Wanted(max_age=0))
    assert view.available
    backend.up = False
    clock.t = 100.5
    _, view = await pool.observe("ns", access, Wanted(max_age=0))
    assert "failed 1 time(s)" in view.error  # the count starts again


async def test_pools_on_one_slurm_share_a_poll_unless_slurm_changed_since_it_began(monkeypatch):
    clock = Clock()
    pool = SlurmAccessPool(read_secret=None, clock=clock)
    fake = CountingBackend()
    backend_is(monkeypatch, pool, fake)
    spec = SlurmAccess(local={})
    await pool.observe("ns", spec, Wanted(max_age=0.5))
    clock.t += 0.1
    await pool.observe("ns", spec, Wanted(max_age=0.5))  # another pool, same half interval: shared
    assert fake.calls.count("nodes") == 1
    changed = clock.t  # a pool drained a node: its next look must see the drain
    await pool.observe("ns", spec, Wanted(max_age=0.5, since=changed))
    assert fake.calls.count("nodes") == 2
    clock.t += 0.1
    await pool.observe("ns", spec, Wanted(max_age=0.5, since=changed))  # that poll began after the change: shared again
    assert fake.calls.count("nodes") == 2


async def test_pools_that_wait_for_another_pools_poll_take_it_instead_of_polling_after_it(monkeypatch):
    import asyncio

    clock = Clock()
    pool = SlurmAccessPool(read_secret=None, clock=clock)
    fake = CountingBackend()
    polled = fake.nodes

    async def slow_nodes():  # a poll that takes longer than max_age (500 nodes over SSH, a busy slurmctld)
        await asyncio.sleep(0.01)
        clock.t += 2.0
        return await polled()

    fake.nodes = slow_nodes
    backend_is(monkeypatch, pool, fake)
    spec = SlurmAccess(local={})
    views = await asyncio.gather(*(pool.observe("ns", spec, Wanted(max_age=0.5)) for _ in range(5)))
    assert fake.calls.count("nodes") == 1 and len({id(v) for _, v in views}) == 1


async def test_while_a_pool_polls_another_takes_a_slightly_older_view_rather_than_wait(monkeypatch):
    import asyncio

    clock = Clock()
    pool = SlurmAccessPool(read_secret=None, clock=clock)
    fake = CountingBackend()
    release = asyncio.Event()
    polled = fake.nodes

    async def nodes():
        if fake.calls.count("nodes") >= 1:
            await release.wait()  # the second poll hangs until released
        return await polled()

    fake.nodes = nodes
    backend_is(monkeypatch, pool, fake)
    spec = SlurmAccess(local={})
    _, first = await pool.observe("ns", spec, Wanted(max_age=0.5))
    clock.t = 1.0  # older than max_age, within the slack
    polling = asyncio.create_task(pool.observe("ns", spec, Wanted(max_age=0.5)))
    await asyncio.sleep(0.01)
    _, view = await asyncio.wait_for(pool.observe("ns", spec, Wanted(max_age=0.5)), 1)
    assert view is first  # did not wait for the poll in progress
    # but after a change of ours, only a newer poll will do
    waiting = asyncio.create_task(pool.observe("ns", spec, Wanted(max_age=0.5, since=clock.t)))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    release.set()
    await polling
    await waiting


class FilteringBackend(Refusing):
    """squeue's filters, as ScontrolBackend passes them (-t, -p)."""

    def __init__(self, jobs, filters=True):
        self.all, self.asked, self.filters_jobs = jobs, [], filters

    async def nodes(self, names=None):
        return {"n1": slurm_node("n1")}

    async def jobs(self, partition=None, states=None):
        self.asked.append((partition, tuple(states) if states else None))
        return [j for j in self.all if (partition is None or partition in j.partition.split(","))
                and (states is None or j.state in states)]


def job(job_id, state, partition):
    from slurmbridge import SlurmJob

    return SlurmJob(job_id=job_id, name="j", user="u", state=state, partition=partition, nodes=("n1",) if state != "PENDING" else (),
                    gpus_per_node=8, num_nodes=1, start_time=None, end_time=None, reason="Resources")


JOBS = [job("1", "RUNNING", "other"), job("2", "PENDING", "gpu"), job("3", "PENDING", "other"), job("4", "COMPLETING", "gpu"),
        job("5", "PENDING", "gpu,other")]


async def test_job_polls_read_running_jobs_everywhere_and_pending_ones_of_the_pools_with_demand_only(monkeypatch):
    """Issue 25: 100k pending jobs were 17 MB per poll, unfiltered."""
    pool = access.SlurmAccessPool(read_secret=None)
    fake = FilteringBackend(JOBS)
    backend_is(monkeypatch, pool, fake)
    spec = SlurmAccess(local={})
    _, view = await pool.observe("ns", spec, Wanted(max_age=0.5, pool="a"))  # no demand: no pending job read
    assert sorted(j.job_id for j in view.jobs) == ["1", "4"] and not view.has_pending("gpu")
    assert fake.asked == [(None, tuple(sorted(access.ACTIVE_JOB_STATES)))]
    fake.asked.clear()
    # A pool with demand on: the cached view lacks its partition's pending jobs, so it polls again.
    _, view = await pool.observe("ns", spec, Wanted(max_age=0.5, pool="b", pending="gpu"))
    assert fake.asked == [(None, tuple(sorted(access.ACTIVE_JOB_STATES))), ("gpu", ("PENDING",))]
    assert sorted(j.job_id for j in view.jobs) == ["1", "2", "4", "5"] and view.has_pending("gpu") and not view.has_pending("other")


async def test_a_partition_stops_being_polled_once_no_pool_with_demand_asked_for_it_lately(monkeypatch):
    """A deleted pool (or one whose demand went off) asks no more: its partition's squeue goes after PENDING_FOR."""
    clock = Clock()
    pool = access.SlurmAccessPool(read_secret=None, clock=clock)
    fake = FilteringBackend(JOBS)
    backend_is(monkeypatch, pool, fake)
    spec = SlurmAccess(local={})
    await pool.observe("ns", spec, Wanted(max_age=0.5, pool="b", pending="gpu"))
    assert ("gpu", ("PENDING",)) in fake.asked
    fake.asked.clear()
    clock.t += access.PENDING_FOR + 1
    _, view = await pool.observe("ns", spec, Wanted(max_age=0.5, pool="a"))
    assert fake.asked == [(None, tuple(sorted(access.ACTIVE_JOB_STATES)))] and not view.has_pending("gpu")


async def test_slurmrestd_answers_every_job_once_and_the_poll_filters_it(monkeypatch):
    fake = FilteringBackend(JOBS, filters=False)
    view = await access.observe_slurm(fake, frozenset({"gpu"}))
    assert fake.asked == [(None, tuple(sorted(access.ACTIVE_JOB_STATES | {"PENDING"})))]  # one GET /jobs/, kept as needed
    assert sorted(j.job_id for j in view.jobs) == ["1", "2", "4", "5"]


def test_a_view_without_the_pools_partition_is_no_demand_signal():
    from slurmpool.core.decide import decide
    from slurmpool.core.interfaces import PoolRef
    from slurmpool.core.models import DemandSpec
    from slurmpool.core.snapshot import PoolSnapshot
    from slurmpool.core.view import SlurmView

    from .factories import NOW, make_spec

    spec = make_spec(slurm_nodes=1).model_copy(update={"demand": DemandSpec()})
    blind = SlurmView(True, nodes={}, jobs=(), pending_partitions=frozenset({"other"}))
    decision = decide(PoolSnapshot(pool=PoolRef("ns", "gpu", "u"), spec=spec, nodes=(), slurm=blind, now=NOW))
    assert "no signals" in decision.target.status.demand.message  # held, not read as "no pending jobs"
    seen = SlurmView(True, nodes={}, jobs=(), pending_partitions=frozenset({"gpu"}))
    decision = decide(PoolSnapshot(pool=PoolRef("ns", "gpu", "u"), spec=spec, nodes=(), slurm=seen, now=NOW))
    assert decision.target.status.demand is not None and "no signals" not in (decision.target.status.demand.message or "")


async def test_a_rotated_ssh_key_or_host_key_is_read_again_without_a_restart(monkeypatch):
    """Issue 25: the SSH Secret was read once; a rotated key failed every poll until a restart."""
    runners = []

    class Runner:
        def __init__(self, **kw):
            self.kw = kw
            runners.append(self)

        async def close(self):
            self.closed = True

    secret = {"ssh-privatekey": "key-1", "known_hosts": "hosts-1"}
    reads = []

    async def read_secret(namespace, name):
        reads.append(name)
        return dict(secret)

    monkeypatch.setattr(access, "SshRunner", Runner)
    monkeypatch.setattr(access, "load_client_key", lambda b: b.decode())  # stand-ins: only their change matters
    monkeypatch.setattr(access, "load_known_hosts", lambda b: b.decode())
    clock = Clock()
    pool = SlurmAccessPool(read_secret=read_secret, clock=clock)
    spec = SlurmAccess.model_validate({"ssh": {"host": "slurm", "user": "root", "secretRef": {"name": "ssh"}}})
    first = await pool.backend("ns", spec)
    clock.t += 10
    assert await pool.backend("ns", spec) is first and len(reads) == 1  # read at most every 30 s
    clock.t += access.SECRET_MAX_AGE
    assert await pool.backend("ns", spec) is first and len(reads) == 2  # read again, unchanged: same connection
    secret["ssh-privatekey"] = "key-2"
    clock.t += access.SECRET_MAX_AGE
    second = await pool.backend("ns", spec)
    assert second is not first and runners[-1].kw["client_key"] == "key-2"
    secret["known_hosts"] = "hosts-2"  # a failed poll (a host key mismatch) reads it again at once
    pool._ssh_read.pop(access.access_key("ns", spec))
    third = await pool.backend("ns", spec)
    assert third is not second and runners[-1].kw["known_hosts"] == "hosts-2"
    # A replaced connection is closed RETIRE_AFTER later by the pool's clock (a drain may be running on it).
    assert not any(getattr(r, "closed", False) for r in runners)
    clock.t += access.RETIRE_AFTER
    assert await pool.backend("ns", spec) is third
    assert not any(getattr(r, "closed", False) for r in runners)  # closed in tasks of their own, never inside the poll
    await asyncio.gather(*pool._closing)
    assert [getattr(r, "closed", False) for r in runners] == [True, True, False]


class ReservingBackend(CountingBackend):
    def __init__(self, fail=False, makes=True):
        super().__init__()
        self.fail, self.makes = fail, makes

    async def reservations(self):
        self.calls.append("reservations")
        if self.fail:
            raise SlurmUnavailable("scontrol: error: slurm_load_reservations: timed out")
        return []

    async def partition_max_times(self):
        self.calls.append("partition_max_times")
        return {"gpu": None}

    async def can_reserve(self):
        return self.makes

    async def create_reservation(self, *args):
        raise AssertionError("not called by a poll")


async def test_reservations_are_read_with_every_poll_also_where_the_access_cannot_make_them(monkeypatch):
    """Every pool's planner keeps the nodes of others' reservations in Slurm (issue 37), handover or
    not: one read per poll, shared by the pools on that Slurm."""
    pool = access.SlurmAccessPool(read_secret=None)
    fake = ReservingBackend()
    backend_is(monkeypatch, pool, fake)
    spec = SlurmAccess(local={})
    _, view = await pool.observe("ns", spec, Wanted(max_age=0.5, pool="a"))
    assert fake.calls.count("reservations") == 1 and view.reservations == () and view.max_times == {"gpu": None}
    _, view = await pool.observe("ns", spec, Wanted(max_age=0.5, pool="b"))  # shared: no second read
    assert fake.calls.count("reservations") == 1 and view.reservations == ()
    listing = ReservingBackend(makes=False)  # lists, cannot make them (slurmrestd before v0.0.43)
    rest = await access.observe_slurm(listing, None)
    assert rest.available and rest.reservations == () and not rest.reservations_api and listing.calls.count("reservations") == 1
    failed = await access.observe_slurm(ReservingBackend(fail=True, makes=False), None)
    assert failed.reservations is None and "timed out" in failed.reservations_error and not failed.reservations_api


async def test_a_failed_read_of_reservations_is_the_handovers_error_only():
    view = await access.observe_slurm(ReservingBackend(fail=True), None)
    assert view.available and view.nodes and view.reservations is None and "timed out" in view.reservations_error
