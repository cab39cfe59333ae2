"""A work queue keyed by pool, as Kubernetes controllers have (client-go's workqueue):

- a key waits in the queue at most once, however often it is added (a burst of watch events
  makes one pass);
- a key is never processed by two workers at once; added while processing, it is processed
  again once after;
- `add(key, after=s)` schedules it no sooner than that (the resync interval, a backoff);
  an earlier add wins;
- `add(key, urgent=True)`: due now and ahead of every key that is not urgent (a spec somebody
  just changed goes before the follow-up passes of moves already going);
- so a pool that hangs (its Slurm does not answer) or fails holds one worker, never the others.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)  # a key: the controller's is (namespace, name)


class WorkQueue(Generic[K]):
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._due: dict[K, float] = {}  # key -> when it may run (the earliest asked)
        self._heap: list[tuple[float, int, K]] = []
        self._seq = itertools.count()
        self._processing: set[K] = set()
        self._again: dict[K, float] = {}  # added while processing: when, once done
        self._urgent: deque[K] = deque()  # due now, before the heap
        self._urgent_again: set[K] = set()
        self._wake = asyncio.Event()

    def add(self, key: K, after: float = 0.0, urgent: bool = False) -> None:
        when = self._clock() + max(0.0, after)
        urgent = urgent and after <= 0
        if key in self._processing:
            self._again[key] = min(when, self._again.get(key, when))
            if urgent:
                self._urgent_again.add(key)
            return
        if urgent and key not in self._urgent:
            self._due[key] = min(when, self._due.get(key, when))
            self._urgent.append(key)
            self._wake.set()
            return
        if key in self._due and self._due[key] <= when:
            return
        self._due[key] = when
        heapq.heappush(self._heap, (when, next(self._seq), key))
        self._wake.set()

    def forget(self, key: K) -> None:
        """The key's object is gone: drop what is queued for it."""
        self._due.pop(key, None)
        self._again.pop(key, None)
        self._urgent_again.discard(key)
        if key in self._urgent:
            self._urgent.remove(key)

    def __len__(self) -> int:
        return len(self._due)

    async def idle(self, timeout: float, poll: float = 0.01) -> bool:
        """Wait, at most `timeout` seconds, until no key is being processed; whether none is."""
        deadline = self._clock() + timeout
        while self._processing and self._clock() < deadline:
            await asyncio.sleep(poll)
        return not self._processing

    async def get(self) -> K:
        """The next due key, marked as processing; call done(key) after."""
        while True:
            now = self._clock()
            if self._urgent:
                key = self._urgent.popleft()
                self._due.pop(key, None)  # its heap entry, if any, is skipped as superseded
                self._processing.add(key)
                return key
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

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._again:
            when = self._again.pop(key)
            urgent = key in self._urgent_again
            self._urgent_again.discard(key)
            self.add(key, after=when - self._clock(), urgent=urgent)


async def run_workers(queue: WorkQueue[K], work: Callable[[K], Awaitable[None]], workers: int) -> None:
    """`workers` tasks taking keys from the queue; `work` must not raise (it schedules its own retry)."""

    async def worker() -> None:
        while True:
            key = await queue.get()
            try:
                await work(key)
            finally:
                queue.done(key)

    await asyncio.gather(*(worker() for _ in range(workers)))
