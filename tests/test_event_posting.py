"""Events are posted by the later lane's workers (kube.KubeAdapter._post_events): what the apiserver
says "not now" to is posted again, what it will never take is counted as refused."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from slurmpool.adapters import kube

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu01", "uid": "u"}}


class FakeCore:
    """create_namespaced_event answers each call with the next of `answers` (a status, or None: created)."""

    def __init__(self, answers):
        self.answers, self.calls, self.created = list(answers), 0, []

    def create_namespaced_event(self, namespace, body, **_):
        self.calls += 1
        status = self.answers.pop(0) if self.answers else None
        if status is not None:
            err = ApiException(status=status, reason="test")
            err.headers = {"Retry-After": "0"}
            raise err
        self.created.append((namespace, body["reason"]))


def dropped(why: str) -> float:
    return REGISTRY.get_sample_value("slurmpool_events_dropped_total", {"why": why}) or 0.0


def post(answers, calls: int) -> FakeCore:
    """Queue one Event and let a worker run until the fake was called `calls` times."""
    async def run():
        adapter = kube.KubeAdapter.__new__(kube.KubeAdapter)  # no API client: a fake core
        adapter.requests, adapter.core = 0, FakeCore(answers)
        adapter._later_pool = ThreadPoolExecutor(1)
        adapter._events = asyncio.Queue()
        adapter._events.put_nowait(kube._queued_event(NODE, "Normal", "MoveCompleted", "m"))
        worker = asyncio.create_task(adapter._post_events(adapter._events, retry_for=5.0))
        while adapter.core.calls < calls:
            await _real_sleep(0.01)
        await _real_sleep(0.05)  # a further call, if the worker wrongly made one, is seen
        worker.cancel()
        return adapter.core

    return asyncio.run(run())


def test_too_many_requests_is_posted_again_not_dropped(monkeypatch):
    monkeypatch.setattr(kube.asyncio, "sleep", _fast_sleep)
    before = dropped("refused"), dropped("gave_up")
    core = post([429, 429, 503], calls=4)
    assert core.created == [("default", "MoveCompleted")] and core.calls == 4
    assert (dropped("refused"), dropped("gave_up")) == before



def test_posts_again_after_1_2_4_s_and_jitter_only_shortens(monkeypatch):
    slept = []

    async def sleep(seconds, *args):
        slept.append(seconds)
        await _real_sleep(0.001)

    monkeypatch.setattr(kube.asyncio, "sleep", sleep)
    post([503] * 3, calls=4)  # within retry_for (5 s): given up only after a fourth failure
    assert len(slept) == 3
    assert all(0.8 * full <= got <= full for got, full in zip(slept, [1.0, 2.0, 4.0]))

def test_a_request_the_apiserver_will_never_take_is_refused_at_once(monkeypatch):
    monkeypatch.setattr(kube.asyncio, "sleep", _fast_sleep)
    before = dropped("refused")
    core = post([422], calls=1)
    assert core.created == [] and core.calls == 1
    assert dropped("refused") - before == 1


def test_refused_and_transient_statuses():
    assert kube._refused(ApiException(status=403)) and kube._refused(ApiException(status=422))
    assert not kube._refused(ApiException(status=429)) and not kube._refused(ApiException(status=408))
    assert not kube._refused(ApiException(status=500)) and not kube._refused(ConnectionError())


def flush(answers, queued: int, timeout: float) -> tuple[FakeCore, int]:
    """Queue `queued` Events through KubeAdapter.event (its workers start on the first), then flush."""
    async def run():
        adapter = kube.KubeAdapter.__new__(kube.KubeAdapter)
        adapter.requests, adapter.core = 0, FakeCore(answers)
        adapter._later_pool = ThreadPoolExecutor(1)
        adapter._events, adapter._events_unposted, adapter._event_tasks = None, 0, []
        for i in range(queued):
            await adapter.event(NODE, "Normal", "MoveStarted", f"m{i}")
        left = await adapter.flush_events(timeout)
        for task in adapter._event_tasks:
            task.cancel()
        return adapter.core, left

    return asyncio.run(run())


def test_a_graceful_stop_posts_what_is_queued_first():
    before = dropped("shutdown")
    core, left = flush([], queued=30, timeout=5.0)
    assert left == 0 and len(core.created) == 30
    assert dropped("shutdown") == before


def test_a_graceful_stop_waits_a_bounded_time_and_counts_what_it_left(monkeypatch):
    async def slow_sleep(seconds, *args):  # the apiserver answers 503 to every try: the workers back off
        await _real_sleep(0.05)

    monkeypatch.setattr(kube.asyncio, "sleep", slow_sleep)
    before = dropped("shutdown")
    core, left = flush([503] * 1000, queued=10, timeout=0.3)
    assert core.created == [] and core.calls >= kube.EVENT_WORKERS  # each worker tried its first
    assert left == 10  # six queued, four being posted again
    assert dropped("shutdown") - before == 10


def test_nothing_queued_flushes_at_once():
    core, left = flush([], queued=0, timeout=5.0)
    assert (core.calls, left) == (0, 0)


_real_sleep = asyncio.sleep


async def _fast_sleep(seconds, *args):
    await _real_sleep(min(seconds, 0.001), *args)
