"""The loop's error reporting: one ReconcileError Event per distinct failure, not one per pass."""

from __future__ import annotations

import asyncio

import kopf

from slurmpool import handlers

from .factories import make_spec


class Recorder:
    def __init__(self):
        self.events: list[tuple[str, str]] = []

    async def event(self, obj, type_, reason, message):
        self.events.append((reason, message))


class Access:
    def forget_views(self):
        pass


def test_a_failing_pool_gets_one_event_per_distinct_error(monkeypatch):
    failures = iter(["boom", "boom", "boom", "other", None, "boom"])

    async def reconcile_one(*_args, **_kw):
        error = next(failures)
        if error:
            raise RuntimeError(error)

    monkeypatch.setattr(handlers, "_reconcile_one", reconcile_one)
    memo = kopf.Memo(kube=Recorder(), access=Access())
    raw = {"spec": make_spec().model_dump(by_alias=True, exclude_none=True), "uid": "u1", "generation": 1}
    pools = {("ns", "gpu"): [raw]}
    for _ in range(6):
        asyncio.run(handlers.reconcile_all(memo, {}, {}, pools))
    # boom (once for three passes), other, then success clears it, so boom is new again.
    assert memo.kube.events == [("ReconcileError", "boom"), ("ReconcileError", "other"), ("ReconcileError", "boom")]
