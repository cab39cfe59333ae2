"""Shared Slurm access: one poll per pass for all pools, and Slurm's topology at most once a minute."""

from __future__ import annotations

from slurmbridge import TopologyGroup
from slurmpool import access
from slurmpool.models import SlurmAccess

from .factories import slurm_node


class CountingBackend:
    def __init__(self):
        self.calls: list[str] = []

    async def nodes(self):
        self.calls.append("nodes")
        return {"n1": slurm_node("n1")}

    async def jobs(self):
        self.calls.append("jobs")
        return []

    async def topology(self):
        self.calls.append("topology")
        return [TopologyGroup("rack-1", 0, ("n1",))]


async def test_topology_is_polled_only_for_pools_that_want_it_and_at_most_once_a_minute(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(access.time, "monotonic", lambda: clock[0])
    pool = access.SlurmAccessPool(read_secret=None)
    fake = CountingBackend()

    async def build(namespace, spec):
        return fake

    monkeypatch.setattr(pool, "_build", build)
    spec = SlurmAccess(local={})
    _, view = await pool.observe("ns", spec, max_age=0.5)
    assert fake.calls == ["nodes", "jobs"] and view.topology == ()
    # Another pool of the same pass wants blocks: the view gains them without polling nodes again.
    _, view = await pool.observe("ns", spec, max_age=0.5, topology=True)
    assert fake.calls == ["nodes", "jobs", "topology"] and view.blocks(0) == {"n1": "rack-1"}
    for _ in range(10):  # ten passes within the minute: nodes and jobs each pass, topology not again
        clock[0] += 1
        _, view = await pool.observe("ns", spec, max_age=0.5, topology=True)
    assert fake.calls.count("topology") == 1 and fake.calls.count("nodes") == 11 and view.blocks(0) == {"n1": "rack-1"}
    clock[0] += access.TOPOLOGY_MAX_AGE
    await pool.observe("ns", spec, max_age=0.5, topology=True)
    assert fake.calls.count("topology") == 2
