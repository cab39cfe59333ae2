"""A work queue keyed by pool, as Kubernetes controllers have (client-go's workqueue):

- a key waits in the queue at most once, however often it is added (a burst of watch events
  makes one pass);
- a key is never processed by two workers at once; added while processing, it is processed
  again once after;
- `add(key, after=s)` schedules it no sooner than that (the resync interval, a backoff);
  an earlier add wins;
- so a pool that hangs (its Slurm does not answer) or fails holds one worker, never the others.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Hashable


class WorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._due: dict[Hashable, float] = {}  # key -> when it may run (the earliest asked)
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        self._processing: set[Hashable] = set()
        self._again: dict[Hashable, float] = {}  # added while processing: when, once done
        self._wake = asyncio.Event()

    def add(self, key: Hashable, after: float = 0.0) -> None:
        when = self._clock() + max(0.0, after)
        if key in self._processing:
            self._again[key] = min(when, self._again.get(key, when))
            return
        if key in self._due and self._due[key] <= when:
            return
        self._due[key] = when
        heapq.heappush(self._heap, (when, next(self._seq), key))
        self._wake.set()

    def forget(self, key: Hashable) -> None:
        """The key's object is gone: drop what is queued for it."""
        self._due.pop(key, None)
        self._again.pop(key, None)

    def __len__(self) -> int:
        return len(self._due)

    async def get(self) -> Hashable:
        """The next due key, marked as processing; call done(key) after."""
        while True:
            now = self._clock()
            while self._heap:
                when, _, key = self._heap[0]
                if self._due.get(key) != when:  # superseded by an earlier add, or forgotten
                    heapq.heappop(self._heap)
                    continue
                if when > now:
                    break
                heapq.heappop(self._heap)
                del self._due[key]
                self._processing.add(key)
                return key
            timeout = self._heap[0][0] - now if self._heap else None
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    def done(self, key: Hashable) -> None:
        self._processing.discard(key)
        if key in self._again:
            when = self._again.pop(key)
            self.add(key, after=when - self._clock())


async def run_workers(queue: WorkQueue, work: Callable[[Hashable], Awaitable[None]], workers: int) -> None:
    """`workers` tasks taking keys from the queue; `work` must not raise (it schedules its own retry)."""

    async def worker() -> None:
        while True:
            key = await queue.get()
            try:
                await work(key)
            finally:
                queue.done(key)

    await asyncio.gather(*(worker() for _ in range(workers)))
