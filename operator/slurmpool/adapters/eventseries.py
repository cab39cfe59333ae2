"""Events aggregated as client-go's EventCorrelator does: the same Event (object, type, reason,
message) posted again within WINDOW seconds of its first is not a new object but the same one,
its `count` and `lastTimestamp` raised (a PATCH). So a condition reported each pass (a shadow
pool's ShadowDecision, a blocked drain's warning) is one Event with a count, not one per pass.
Memory only: after a restart a repeat starts a new Event, as client-go's."""

from __future__ import annotations

import uuid

WINDOW = 600.0  # seconds: client-go's aggregation interval (10 minutes)
LIMIT = 4096  # series remembered (client-go's cache size); the oldest is forgotten first

Key = tuple  # (object reference, type, reason, message)


class EventSeries:
    def __init__(self) -> None:
        self._series: dict[Key, tuple[str, int, float]] = {}  # key -> (Event name, count, first post, monotonic)

    def add(self, key: Key, object_name: str, now: float) -> tuple[str, int]:
        """This post's Event name and its count: 1, a new Event to create under that name; more,
        the Event of that name to raise to the count."""
        name, count, first = self._series.get(key, ("", 0, now))
        if not count or now - first > WINDOW:
            return self.restart(key, object_name, now)
        self._series[key] = (name, count + 1, first)
        return name, count + 1

    def restart(self, key: Key, object_name: str, now: float) -> tuple[str, int]:
        """A new Event for the key (the first post, a series past its window, or one whose Event is gone)."""
        self._series.pop(key, None)
        if len(self._series) >= LIMIT:
            self._series.pop(next(iter(self._series)))
        name = f"{object_name}.{uuid.uuid4().hex[:16]}"  # as generateName would, but known before the answer
        self._series[key] = (name, 1, now)
        return name, 1
