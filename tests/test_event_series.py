"""Events aggregated as client-go's EventCorrelator: the same Event again within 10 minutes raises
the count of the one posted (adapters/eventseries.py, kube.KubeAdapter._post_events)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from kubernetes.client.exceptions import ApiException

from slurmpool.adapters import eventseries, kube

POOL = {"apiVersion": "slurmpool.io/v1alpha1", "kind": "SlurmNodePool", "metadata": {"name": "gpu", "namespace": "hpc", "uid": "u"}}


class Core:
    def __init__(self, gone: bool = False):
        self.created: list[dict] = []
        self.patched: list[tuple] = []
        self.gone = gone

    def create_namespaced_event(self, namespace, body, **_):
        self.created.append(body)

    def patch_namespaced_event(self, name, namespace, body, **_):
        if self.gone:
            raise ApiException(status=404, reason="NotFound")
        self.patched.append((name, namespace, body["count"]))


def posted(core: Core, messages: list[str]) -> Core:
    async def run():
        adapter = kube.KubeAdapter.__new__(kube.KubeAdapter)
        adapter.requests, adapter.core = 0, core
        adapter._later_pool = ThreadPoolExecutor(1)
        adapter._events, adapter._events_unposted, adapter._event_tasks = None, 0, []
        for message in messages:
            await adapter.event(POOL, "Normal", "ShadowDecision", message)
            await adapter.flush_events(5.0)  # one after the other, as passes post them
        for task in adapter._event_tasks:
            task.cancel()

    asyncio.run(run())
    return core


def test_the_same_event_again_raises_the_count_of_the_one_posted():
    core = posted(Core(), ["would start gpu01", "would start gpu01", "would start gpu01", "would start gpu02"])
    assert [b["message"] for b in core.created] == ["would start gpu01", "would start gpu02"]
    first = core.created[0]["metadata"]
    assert first["name"].startswith("gpu.") and first["namespace"] == "hpc" and "generateName" not in first
    assert core.patched == [(first["name"], "hpc", 2), (first["name"], "hpc", 3)]


def test_an_event_gone_meanwhile_is_posted_anew():
    core = posted(Core(gone=True), ["m", "m"])
    assert len(core.created) == 2 and core.created[0]["metadata"]["name"] != core.created[1]["metadata"]["name"]


def test_a_series_ends_after_its_window_and_the_memory_is_bounded(monkeypatch):
    series = eventseries.EventSeries()
    name, count = series.add(("k",), "gpu", 0.0)
    assert series.add(("k",), "gpu", 10.0) == (name, 2)
    later, count = series.add(("k",), "gpu", eventseries.WINDOW + 1)
    assert count == 1 and later != name
    monkeypatch.setattr(eventseries, "LIMIT", 3)
    for i in range(5):
        series.add((i,), "gpu", 0.0)
    assert len(series._series) == 3
