"""One exponential backoff with jitter, for every retry the operator schedules.

Jitter spreads retries that failed together (every pool on one Slurm when slurmctld restarts, every
watch when the API server does) so that they do not return together. It only ever shortens a delay,
down to (1 - jitter) of it: no retry waits longer than the bound its caller documents."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backoff:
    base: float  # seconds after the first failure
    cap: float  # the longest delay
    jitter: float = 0.2  # a delay is drawn from [(1 - jitter) * d, d]
    rng: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def delay(self, failures: int) -> float:
        """The wait after `failures` failures in a row (1 for the first): base, 2 base, 4 base ... cap."""
        if failures <= 0:
            return 0.0
        full = min(self.cap, self.base * 2.0 ** min(failures - 1, 64))
        return full * (1.0 - self.jitter * self.rng())

    def delays(self) -> Iterator[float]:
        """Successive waits of one retry loop."""
        failures = 0
        while True:
            failures += 1
            yield self.delay(failures)
