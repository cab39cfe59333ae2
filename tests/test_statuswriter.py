"""The status writer (statuswriter.py): one write in flight per pool, the newest status wins,
failures retried with backoff and reported once, nothing written twice for the watch's lag."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes.client.exceptions import ApiException

from slurmpool.core.interfaces import PoolRef
from slurmpool.adapters import statuswriter
from slurmpool.adapters.statuswriter import StatusWriter

POOL = PoolRef("ns", "gpu", "uid-1", 1)
OTHER = PoolRef("ns", "cpu", "uid-2", 1)


class Api:
    """Records every status write; each waits for `gate` (a write in flight) and may fail."""

    def __init__(self, failures: list[Exception] | None = None):
        self.writes: list[tuple[str, dict]] = []
        self.failures = list(failures or [])
        self.gate = asyncio.Event()
        self.gate.set()

    async def write(self, pool: PoolRef, body: dict) -> None:
        await self.gate.wait()
        if self.failures:
            raise self.failures.pop(0)
        self.writes.append((pool.name, body))


def run(coro):
    return asyncio.run(coro)


def test_only_the_newest_status_is_written_after_the_one_in_flight():
    async def scenario():
        api = Api()
        writer = StatusWriter(api.write)
        api.gate.clear()
        writer.submit(POOL, {"moving": 1}, {})
        await asyncio.sleep(0)  # the first write is in flight, held at the gate
        writer.submit(POOL, {"moving": 2}, {})
        writer.submit(POOL, {"moving": 3}, {})
        assert writer.wanted(POOL) == {"moving": 3}  # what the next pass builds on
        api.gate.set()
        await writer.flush()
        return api.writes

    assert run(scenario()) == [("gpu", {"moving": 1}), ("gpu", {"moving": 3})]


def test_pools_are_written_side_by_side():
    async def scenario():
        api = Api()
        writer = StatusWriter(api.write)
        api.gate.clear()
        writer.submit(POOL, {"moving": 1}, {})
        writer.submit(OTHER, {"moving": 5}, {})
        await asyncio.sleep(0)
        api.gate.set()
        await writer.flush()
        return sorted(api.writes, key=str)

    assert run(scenario()) == [("cpu", {"moving": 5}), ("gpu", {"moving": 1})]


def test_a_status_shown_or_written_lately_is_not_written_again():
    async def scenario():
        api = Api()
        writer = StatusWriter(api.write)
        writer.submit(POOL, {"moving": 0}, {"moving": 0})  # the watch shows it already
        await writer.flush()
        assert api.writes == []
        writer.submit(POOL, {"moving": 1}, {"moving": 0})
        await writer.flush()
        writer.submit(POOL, {"moving": 1}, {"moving": 0})  # written, not yet back through the watch
        writer.submit(POOL, {"moving": 1}, {"moving": 1})
        await writer.flush()
        return api.writes

    assert run(scenario()) == [("gpu", {"moving": 1})]


def test_a_status_changed_behind_our_back_is_written_again_once_the_watch_had_time(monkeypatch):
    async def scenario():
        api = Api()
        writer = StatusWriter(api.write)
        writer.submit(POOL, {"moving": 1}, {})
        await writer.flush()
        monkeypatch.setattr("slurmpool.adapters.statuswriter.WATCH_LAG", 0.0)
        writer.submit(POOL, {"moving": 1}, {"moving": 7})  # someone else wrote 7
        await writer.flush()
        return api.writes

    assert run(scenario()) == [("gpu", {"moving": 1}), ("gpu", {"moving": 1})]


def test_a_failed_write_is_retried_with_the_newest_status_and_reported_once_per_failure():
    async def scenario():
        api = Api([ApiException(status=500, reason="Internal"), ApiException(status=500, reason="Internal"),
                   ApiException(status=429, reason="TooManyRequests")])
        reported = []

        async def on_error(pool, message):
            reported.append((pool.name, message))

        writer = StatusWriter(api.write, on_error, backoff_base=0.01, backoff_max=0.02)
        writer.submit(POOL, {"moving": 1}, {})
        await asyncio.sleep(0.005)  # the first try failed, the retry waits out its backoff
        writer.submit(POOL, {"moving": 2}, {})
        await asyncio.wait_for(writer.flush(), 5)
        return api.writes, reported

    writes, reported = run(scenario())
    assert writes == [("gpu", {"moving": 2})]
    assert reported == [("gpu", "500 Internal"), ("gpu", "429 TooManyRequests")]



def test_the_retries_back_off_from_base_to_max_and_jitter_only_shortens(monkeypatch):
    slept = []
    real_sleep = asyncio.sleep

    async def sleep(seconds, *args):
        slept.append(seconds)
        await real_sleep(0)

    async def scenario():
        api = Api([ApiException(status=500, reason="Internal")] * 5)
        writer = StatusWriter(api.write, backoff_base=1.0, backoff_max=4.0)
        monkeypatch.setattr(statuswriter.asyncio, "sleep", sleep)
        writer.submit(POOL, {"moving": 1}, {})
        await asyncio.wait_for(writer.flush(), 5)
        return api.writes

    assert run(scenario()) == [("gpu", {"moving": 1})]
    assert len(slept) == 5
    assert all(0.8 * full <= got <= full for got, full in zip(slept, [1.0, 2.0, 4.0, 4.0, 4.0]))

def test_a_pool_that_is_gone_is_not_retried():
    async def scenario():
        api = Api([ApiException(status=404, reason="Not Found")])
        reported = []

        async def on_error(pool, message):
            reported.append(message)

        writer = StatusWriter(api.write, on_error, backoff_base=0.01)
        writer.submit(POOL, {"moving": 1}, {})
        await asyncio.wait_for(writer.flush(), 5)
        return api.writes, reported, writer.wanted(POOL)

    assert run(scenario()) == ([], [], None)


def test_forget_stops_the_writes_of_a_deleted_pool():
    async def scenario():
        api = Api()
        writer = StatusWriter(api.write)
        api.gate.clear()
        writer.submit(POOL, {"moving": 1}, {})
        await asyncio.sleep(0)
        writer.forget("ns", "gpu")
        api.gate.set()
        await asyncio.sleep(0.01)
        return api.writes, writer.wanted(POOL)

    assert run(scenario()) == ([], None)


@pytest.mark.parametrize("uid", ["uid-1", "uid-new"])
def test_a_pool_made_again_under_its_name_starts_afresh(uid):
    async def scenario():
        api = Api()
        writer = StatusWriter(api.write)
        writer.submit(POOL, {"moving": 1}, {})
        await writer.flush()
        again = PoolRef("ns", "gpu", uid, 1)
        return writer.wanted(again)

    assert run(scenario()) == ({"moving": 1} if uid == "uid-1" else None)
