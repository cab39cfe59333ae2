"""The pool work queue: coalescing, no key processed twice at once, delays, isolation."""

from __future__ import annotations

import asyncio

from slurmpool.controller.settings import Settings
from slurmpool.core.poolpolicy import PoolPolicy
from slurmpool.controller.workqueue import WorkQueue, run_workers

import pytest


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


async def test_a_burst_of_adds_makes_one_item_and_an_earlier_add_wins():
    clock = Clock()
    q = WorkQueue(clock)
    q.add("a", after=5)
    for _ in range(10):
        q.add("a", after=1)
    q.add("a", after=3)  # later than the one queued: ignored
    assert len(q) == 1
    clock.t = 1
    assert await asyncio.wait_for(q.get(), 1) == "a"
    assert len(q) == 0


async def test_a_key_added_while_processing_runs_again_once_after():
    q = WorkQueue()
    q.add("a")
    key = await q.get()
    q.add("a")
    q.add("a")
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(q.get(), 0.05)  # not while it is processed
    q.done(key)
    assert await asyncio.wait_for(q.get(), 1) == "a"
    q.done("a")
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(q.get(), 0.05)  # once


async def test_forget_drops_a_queued_key():
    q = WorkQueue()
    q.add("a", after=0.01)
    q.forget("a")
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(q.get(), 0.05)


async def test_a_hung_pool_holds_one_worker_and_the_others_go_on():
    q = WorkQueue()
    done: list[str] = []
    hang = asyncio.Event()

    async def work(key):
        if key == "hung":
            await hang.wait()
        done.append(key)

    workers = asyncio.create_task(run_workers(q, work, workers=2))
    q.add("hung")
    await asyncio.sleep(0)
    for i in range(5):
        q.add(f"p{i}")
    for _ in range(100):
        if len(done) == 5:
            break
        await asyncio.sleep(0.01)
    assert sorted(done) == [f"p{i}" for i in range(5)]
    hang.set()
    workers.cancel()


def test_settings_come_from_the_environment_and_bad_values_are_refused():
    policy = {"SLURMPOOL_POOL_POLICY": '{"imagePrefixes": ["registry.example.com/hpc/"]}'}  # required
    s = Settings.from_env({"SLURMPOOL_INTERVAL": "0.5", "SLURMPOOL_LEASE_DURATION": "6", "SLURMPOOL_LEASE_RENEW": "1", "POD_NAME": "op-1", **policy})
    assert (s.interval, s.lease_duration, s.lease_renew, s.identity) == (0.5, 6.0, 1.0, "op-1")
    assert Settings.from_env(policy) == Settings(pool_policy=PoolPolicy(image_prefixes=("registry.example.com/hpc/",)))
    with pytest.raises(ValueError, match="SLURMPOOL_INTERVAL"):
        Settings.from_env({"SLURMPOOL_INTERVAL": "soon", **policy})
    with pytest.raises(ValueError, match="2/3"):
        Settings.from_env({"SLURMPOOL_LEASE_DURATION": "3", "SLURMPOOL_LEASE_RENEW": "3", **policy})


async def test_an_urgent_key_goes_before_every_due_key_that_is_not():
    clock = Clock()
    q = WorkQueue(clock)
    q.add("follow-up-1")
    q.add("follow-up-2")
    q.add("changed", urgent=True)
    q.add("changed-too", urgent=True)
    q.add("changed")  # once more, not urgent: still queued once, still first
    assert len(q) == 4
    got = [await asyncio.wait_for(q.get(), 1) for _ in range(4)]
    assert got == ["changed", "changed-too", "follow-up-1", "follow-up-2"]
    assert len(q) == 0


async def test_a_key_made_urgent_while_waiting_is_taken_once():
    clock = Clock()
    q = WorkQueue(clock)
    q.add("a", after=5)
    q.add("b")
    q.add("a", urgent=True)
    assert [await asyncio.wait_for(q.get(), 1) for _ in range(2)] == ["a", "b"]
    clock.t = 10  # a's old schedule at 5 was superseded by the urgent pass
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(q.get(), 0.05)


async def test_an_urgent_add_while_processing_is_urgent_once_done_and_forget_drops_it():
    q = WorkQueue()
    q.add("a")
    q.add("b")
    assert await q.get() == "a"
    q.add("a", urgent=True)
    q.done("a")
    assert await asyncio.wait_for(q.get(), 1) == "a"  # before b, which was due first
    q.add("c", urgent=True)
    q.forget("c")
    assert await asyncio.wait_for(q.get(), 1) == "b"
    assert len(q) == 0
