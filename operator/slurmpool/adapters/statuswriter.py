"""Each pool's status, written beside its passes rather than by them.

A status patch is the slowest write of a pass (a full merge patch of a custom resource: the
apiserver tracks its managed fields and validates it against the schema), and a move's next
phase does not depend on it: what must survive a crash is on the nodes. So a pass hands its
status here and goes on:

- one write in flight per pool; a status handed in meanwhile waits, and only the newest is
  written (a pool that takes five quick passes writes two statuses, not five);
- a failed write is tried again after a backoff (1, 2, 4 ... x `backoff_base` (0.5) seconds, at
  most `backoff_max` (10), shortened by up to `jitter` of it), with the newest status by then;
  `on_error` hears of each distinct failure;
- the status a pool's next pass builds on (`wanted`) is the newest handed in, not what the watch
  last showed, which lags our own writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kubernetes.client.exceptions import ApiException

from slurmbridge.backoff import Backoff

from slurmpool.adapters import metrics
from slurmpool.core.interfaces import PoolRef

log = logging.getLogger("slurmpool.status")  # logger names stay as before the layout: sites filter on them
WATCH_LAG = 10.0  # seconds: a status written this recently is not written again for the watch to show it


@dataclass
class _Pool:
    ref: PoolRef
    wanted: dict
    written_at: float = float("-inf")  # when the apiserver last accepted one
    task: asyncio.Task | None = None
    dirty: bool = True  # wanted is still to be written
    failures: int = 0
    error: str | None = None  # the last failure's message, until a write succeeds
    idle: asyncio.Event = field(default_factory=asyncio.Event)


class StatusWriter:
    def __init__(self, write: Callable[[PoolRef, dict], Awaitable[None]],
                 on_error: Callable[[PoolRef, str], Awaitable[None]] | None = None,
                 backoff_base: float = 0.5, backoff_max: float = 10.0, jitter: float = 0.2):
        self._write, self._on_error = write, on_error
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        self.backoff = Backoff(backoff_base, backoff_max, jitter)
        self._pools: dict[tuple[str, str, str], _Pool] = {}

    @staticmethod
    def _key(pool: PoolRef) -> tuple[str, str, str]:
        return (pool.namespace, pool.name, pool.uid)  # a pool made again under its name starts afresh

    def wanted(self, pool: PoolRef) -> dict | None:
        """The newest status handed in for this pool (written or not yet), None if none."""
        state = self._pools.get(self._key(pool))
        return state.wanted if state else None

    def submit(self, pool: PoolRef, body: dict, shown: dict) -> None:
        """Have `body` written. `shown`: the status the watch shows now; a body it shows already,
        or one written lately (the watch lags), is not written again."""
        key = self._key(pool)
        state = self._pools.get(key)
        busy = state is not None and state.task is not None and not state.task.done()
        if state is None:
            if body == shown:
                return
            state = self._pools[key] = _Pool(pool, body)
        elif body == state.wanted and (busy or body == shown or time.monotonic() - state.written_at < WATCH_LAG):
            return  # being written, shown, or written lately
        state.ref, state.wanted, state.dirty = pool, body, True
        if not busy:
            state.idle.clear()
            state.task = asyncio.get_running_loop().create_task(self._drain(key, state), name=f"status {pool.key}")

    def forget(self, namespace: str, name: str) -> None:
        """The pool is gone: stop writing its status."""
        for key in [k for k in self._pools if k[:2] == (namespace, name)]:
            state = self._pools.pop(key)
            if state.task is not None:
                state.task.cancel()

    def close(self) -> None:
        for state in self._pools.values():
            if state.task is not None:
                state.task.cancel()
        self._pools.clear()

    async def flush(self) -> None:
        """Wait until every status handed in is written (or given up on: its pool is gone)."""
        for state in list(self._pools.values()):
            if state.task is not None and not state.task.done():
                await state.idle.wait()

    async def _drain(self, key, state: _Pool) -> None:
        try:
            while state.dirty:
                body, state.dirty = state.wanted, False
                started = time.monotonic()
                try:
                    await self._write(state.ref, body)
                    failure = None
                except ApiException as err:
                    if err.status == 404:  # the pool is gone (its deletion's watch event comes later)
                        self._pools.pop(key, None)
                        return
                    failure = f"{err.status} {err.reason}"
                except Exception as err:  # noqa: BLE001 - an unreachable apiserver: retried
                    failure = str(err)[:300] or type(err).__name__
                metrics.STATUS_WRITE_SECONDS.observe(time.monotonic() - started)
                if failure is not None:
                    await self._failed(state, failure)
                    continue
                metrics.STATUS_WRITES.labels(result="ok").inc()
                state.written_at, state.failures, state.error = time.monotonic(), 0, None
        finally:
            state.idle.set()

    async def _failed(self, state: _Pool, message: str) -> None:
        """Count and report the failure, wait out the backoff; the newest wanted status is tried next."""
        metrics.STATUS_WRITES.labels(result="error").inc()
        state.failures, state.dirty = state.failures + 1, True
        delay = self.backoff.delay(state.failures)
        log.warning("could not write the status of %s (try %d; again in %.1fs): %s",
                    state.ref.key, state.failures, delay, message)
        if self._on_error is not None and message != state.error:  # once per distinct failure
            state.error = message
            try:
                await self._on_error(state.ref, message)
            except Exception:  # noqa: BLE001 - reporting must not stop the retries
                log.exception("reporting a failed status write")
        await asyncio.sleep(delay)
