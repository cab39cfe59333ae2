"""Schedule windows: which window is active now, the split it sets, and when that changes. Pure.

A window starts at each time its 5-field cron expression matches, read as wall-clock time in
the window's time zone, and lasts `duration` of real (elapsed) time. A one-off window (`at`, an
RFC 3339 time with its offset) starts once, then; everything below treats it as any other window.

Daylight-saving time, the rules of Vixie cron:
- a start that falls in the hour skipped when clocks spring forward (02:30 on a day the
  clock jumps from 02:00 to 03:00) starts at the jump, 03:00 local: the window still
  happens that day, shortened by nothing (it lasts its full duration from 03:00);
- a start that falls in the hour repeated when clocks fall back starts once, at its first
  occurrence (the earlier instant, still on summer time);
- the duration is elapsed time, so a window of 8h that spans a transition ends at a wall
  clock time one hour earlier or later than on other days.

Overlapping windows: among the active windows, the highest `priority` wins; then the one
that started last; then the first in the list. So a holiday window (priority 10) beats the
daily windows it overlaps, and among equals a window that opens inside another one takes
over until it ends (then the other, if still open, applies again).

Only pure functions of (windows, total nodes, now): the caller provides the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from slurmpool.core.models import ScheduleWindow, seconds

UTC = timezone.utc
_MAX_EDGES = 64  # edges examined when looking for the next change of the winner


def zone(name: str) -> ZoneInfo:
    try:
        return _zone(name)
    except (ZoneInfoNotFoundError, ValueError) as err:
        raise ValueError(f"unknown time zone {name!r}") from err


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def to_instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The instant (UTC) of a naive wall-clock time in `tz`, by the rules above: a repeated
    time is its first occurrence; a skipped time is the instant the clock jumped."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) == wall:
        return first
    # Skipped: fold=0 reads it with the offset before the jump, which lands after the jump.
    # The jump lies between the two readings; find it to the second (tzdata is in seconds).
    lo = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)  # reading with the later offset: before the jump
    lo, hi = min(lo, first), max(lo, first)
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(tz).replace(tzinfo=None) >= wall:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0)


def _wall(instant: datetime, tz: ZoneInfo) -> tuple[datetime, int]:
    local = instant.astimezone(tz)
    return local.replace(tzinfo=None), local.fold


def last_start(window: ScheduleWindow, now: datetime) -> datetime | None:
    """The latest start of the window at or before `now` (UTC), or None if none in 50 years."""
    one_off = window.opens_at
    if one_off is not None:
        return one_off.astimezone(UTC) if one_off <= now else None
    tz = zone(window.time_zone)
    wall, fold = _wall(now, tz)
    try:
        it = croniter(window.cron, wall + timedelta(microseconds=1))
        start = it.get_prev(datetime)
        # In the second pass of a repeated hour, starts later on the wall clock already happened
        # (at their first occurrence): step forward over them.
        if fold:
            fwd = croniter(window.cron, start)
            while True:
                nxt = fwd.get_next(datetime)
                if to_instant(nxt, tz) > now:
                    break
                start = nxt
    except Exception:  # noqa: BLE001 - croniter raises CroniterBadDateError (and others) when nothing matches
        return None
    return to_instant(start, tz)


def next_start(window: ScheduleWindow, now: datetime) -> datetime | None:
    """The first start of the window strictly after `now`, or None."""
    one_off = window.opens_at
    if one_off is not None:
        return one_off.astimezone(UTC) if one_off > now else None
    tz = zone(window.time_zone)
    wall, _ = _wall(now, tz)
    try:
        it = croniter(window.cron, wall)
        # Only in the second pass of a repeated hour does this loop more than once: starts
        # after the wall clock there already happened, at their first occurrence.
        for _ in range(10000):
            candidate = to_instant(it.get_next(datetime), tz)
            if candidate > now:
                return candidate
    except Exception:  # noqa: BLE001 - croniter raises CroniterBadDateError (and others) when nothing matches
        return None
    return None


def window_count(window: ScheduleWindow, total: int) -> int:
    """The Slurm node count a window sets: slurmNodes, or slurmPercent of the selected nodes
    rounded half up."""
    if window.slurm_nodes is not None:
        return window.slurm_nodes
    return (int(window.slurm_percent or 0) * total + 50) // 100


@dataclass(frozen=True)
class Active:
    name: str
    index: int
    slurm_nodes: int
    start: datetime
    end: datetime
    priority: int


@dataclass(frozen=True)
class ScheduleState:
    """The schedule's verdict at one instant."""

    active: Active | None  # the winning open window, if any
    next_change: datetime | None  # when the verdict (winner or its count) next changes

    @property
    def key(self) -> str:
        """Identifies one occurrence of a window (or none): changes exactly at the edges."""
        a = self.active
        return f"{a.name}@{a.start.isoformat()}" if a else "none"


def active_at(windows: list[ScheduleWindow], total: int, now: datetime) -> Active | None:
    best: Active | None = None
    for i, w in enumerate(windows):
        start = last_start(w, now)
        if start is None:
            continue
        end = start + timedelta(seconds=seconds(w.duration))
        if not start <= now < end:
            continue
        cand = Active(w.name, i, window_count(w, total), start, end, w.priority)
        if best is None or (cand.priority, cand.start, -cand.index) > (best.priority, best.start, -best.index):
            best = cand
    return best


def evaluate(windows: list[ScheduleWindow], total: int, now: datetime) -> ScheduleState:
    """The active window at `now` and the next instant at which that changes."""
    now = now.astimezone(UTC)
    active = active_at(windows, total, now)
    t = now
    for _ in range(_MAX_EDGES):
        edge = _next_edge(windows, t)
        if edge is None:
            return ScheduleState(active, None)
        later = active_at(windows, total, edge)
        if _verdict(later) != _verdict(active):
            return ScheduleState(active, edge)
        t = edge
    return ScheduleState(active, t)


def _verdict(a: Active | None) -> tuple[str, datetime, int] | None:
    return (a.name, a.start, a.slurm_nodes) if a else None


def _next_edge(windows: list[ScheduleWindow], t: datetime) -> datetime | None:
    """The first window start or end strictly after t."""
    edges = []
    for w in windows:
        start = last_start(w, t)
        if start is not None:
            end = start + timedelta(seconds=seconds(w.duration))
            if end > t:
                edges.append(end)
        nxt = next_start(w, t)
        if nxt is not None:
            edges.append(nxt)
    return min(edges) if edges else None
