"""Schedule windows with a controllable clock: edges, time zones, daylight saving, overlaps."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from slurmpool.core.models import ScheduleWindow, SlurmNodePoolSpec
from slurmpool.core.schedule import evaluate, last_start, next_start, to_instant, window_count, zone

from .factories import make_spec

UTC = timezone.utc


def w(name="night", cron="0 22 * * *", duration="8h", tz="Europe/Berlin", nodes=6, percent=None, priority=0) -> ScheduleWindow:
    body = {"name": name, "cron": cron, "duration": duration, "timeZone": tz, "priority": priority}
    body.update({"slurmPercent": percent} if percent is not None else {"slurmNodes": nodes})
    return ScheduleWindow.model_validate(body)


def at(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_window_opens_and_closes_at_its_edges_in_its_time_zone():
    night = [w()]  # 22:00-06:00 Berlin = 21:00-05:00 UTC in winter
    assert evaluate(night, 8, at(2026, 11, 29, 20, 59, 59)).active is None
    s = evaluate(night, 8, at(2026, 11, 29, 21, 0, 0))
    assert s.active and s.active.name == "night" and s.active.slurm_nodes == 6
    assert s.next_change == at(2026, 11, 30, 5, 0)
    assert evaluate(night, 8, at(2026, 11, 30, 4, 59, 59)).active is not None
    closed = evaluate(night, 8, at(2026, 11, 30, 5, 0, 0))
    assert closed.active is None and closed.next_change == at(2026, 11, 30, 21, 0)
    # summer time: the same wall clock is an hour earlier in UTC
    assert evaluate(night, 8, at(2026, 7, 1, 20, 0)).active is not None


def test_same_cron_in_another_zone_is_another_instant():
    tokyo = [w(tz="Asia/Tokyo")]
    s = evaluate(tokyo, 8, at(2026, 11, 29, 13, 0))  # 22:00 JST
    assert s.active is not None and s.active.start == at(2026, 11, 29, 13, 0)


def test_spring_forward_start_in_the_skipped_hour_opens_at_the_jump():
    # Europe/Berlin 2026-03-29: 02:00 CET -> 03:00 CEST (01:00 UTC). 02:30 does not exist.
    win = [w(cron="30 2 * * *", duration="1h")]
    day_before = evaluate(win, 8, at(2026, 3, 28, 1, 30))
    assert day_before.active and day_before.active.start == at(2026, 3, 28, 1, 30)  # 02:30 CET
    s = evaluate(win, 8, at(2026, 3, 29, 1, 0))
    assert s.active is not None and s.active.start == at(2026, 3, 29, 1, 0)  # 03:00 CEST: at the jump
    assert s.active.end == at(2026, 3, 29, 2, 0)  # full hour of elapsed time
    assert evaluate(win, 8, at(2026, 3, 29, 0, 59, 59)).active is None
    assert evaluate(win, 8, at(2026, 3, 29, 0, 59, 59)).next_change == at(2026, 3, 29, 1, 0)
    assert to_instant(datetime(2026, 3, 29, 2, 30), zone("Europe/Berlin")) == at(2026, 3, 29, 1, 0)


def test_fall_back_repeated_hour_opens_once_at_the_first_occurrence():
    # Europe/Berlin 2026-10-25: 03:00 CEST -> 02:00 CET (01:00 UTC). 02:30 happens twice.
    win = [w(cron="30 2 * * *", duration="20m")]
    first = at(2026, 10, 25, 0, 30)  # 02:30 CEST
    s = evaluate(win, 8, first)
    assert s.active is not None and s.active.start == first and s.next_change == first + timedelta(minutes=20)
    second = at(2026, 10, 25, 1, 30)  # 02:30 CET, the repeat: no second opening
    assert evaluate(win, 8, second).active is None
    assert last_start(win[0], second) == first
    assert next_start(win[0], second) == at(2026, 10, 26, 1, 30)  # tomorrow 02:30 CET


def test_hourly_window_during_the_repeated_hour_fires_once_per_wall_clock_time():
    win = w(cron="15 * * * *", duration="10m")
    starts, t = [], at(2026, 10, 24, 23, 0)
    while t < at(2026, 10, 25, 3, 0):
        t = next_start(win, t)
        starts.append(t)
    local = [s.astimezone(zone("Europe/Berlin")).strftime("%H:%M%z") for s in starts if s < at(2026, 10, 25, 3, 0)]
    assert local == ["01:15+0200", "02:15+0200", "03:15+0100"]  # 02:15 CET (the repeat) is skipped


def test_duration_is_elapsed_time_across_a_transition():
    win = [w(cron="0 22 * * *", duration="8h")]  # Sat 24 Oct 22:00 CEST -> 8h later is 05:00 CET
    s = evaluate(win, 8, at(2026, 10, 24, 20, 0))
    assert s.active.end == at(2026, 10, 25, 4, 0)
    assert s.active.end.astimezone(zone("Europe/Berlin")).hour == 5


def test_overlap_latest_started_wins_then_the_first_again():
    day = w("day", "0 8 * * *", "12h", tz="UTC", nodes=2)
    lunch = w("lunch", "0 12 * * *", "1h", tz="UTC", nodes=5)
    s = evaluate([day, lunch], 8, at(2026, 11, 29, 12, 30))
    assert s.active.name == "lunch" and s.next_change == at(2026, 11, 29, 13, 0)
    after = evaluate([day, lunch], 8, at(2026, 11, 29, 13, 0))
    assert after.active.name == "day" and after.next_change == at(2026, 11, 29, 20, 0)


def test_overlap_priority_beats_a_later_start_and_ties_go_to_list_order():
    day = w("day", "0 8 * * *", "12h", tz="UTC", nodes=2)
    holiday = w("holiday", "0 0 29 11 *", "24h", tz="UTC", nodes=8, priority=10)
    s = evaluate([day, holiday], 8, at(2026, 11, 29, 9, 0))
    assert s.active.name == "holiday"
    assert s.next_change == at(2026, 11, 30, 0, 0)  # the day window's start at 08:00 changes nothing
    a = w("a", "0 8 * * *", "1h", tz="UTC", nodes=1)
    b = w("b", "0 8 * * *", "1h", tz="UTC", nodes=7)
    assert evaluate([a, b], 8, at(2026, 11, 29, 8, 30)).active.name == "a"
    assert evaluate([b, a], 8, at(2026, 11, 29, 8, 30)).active.name == "b"


def test_percent_rounds_half_up_of_the_selected_nodes():
    assert window_count(w(percent=50), 7) == 4
    assert window_count(w(percent=25), 10) == 3
    assert window_count(w(percent=0), 10) == 0 and window_count(w(percent=100), 10) == 10


@pytest.mark.parametrize(
    "change,message",
    [
        ({"timeZone": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "0 0 30 2 *"}, "never matches"),
        ({"cron": "61 * * * *"}, "invalid cron"),
        ({"cron": "* * * * * *"}, "pattern"),
        ({"slurmPercent": 10}, "exactly one of slurmNodes and slurmPercent"),
        ({"duration": "0s"}, "duration must be positive"),
    ],
)
def test_invalid_windows_are_refused(change, message):
    body = {"name": "x", "cron": "0 22 * * *", "duration": "8h", "timeZone": "UTC", "slurmNodes": 3, **change}
    spec = make_spec().model_dump(by_alias=True, exclude_none=True)
    spec["schedule"] = [body]
    with pytest.raises(ValidationError, match=message):
        SlurmNodePoolSpec.model_validate(spec)


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "America/Sao_Paulo"]


@settings(max_examples=150, deadline=None)
@given(
    zone_name=st.sampled_from(ZONES),
    minute=st.integers(0, 59),
    hour=st.integers(0, 23),
    minutes=st.integers(1, 600),
    offset=st.integers(0, 366 * 24 * 60),
)
def test_edges_are_consistent(zone_name, minute, hour, minutes, offset):
    """At any instant: the active window started at or before it and has not ended; the next
    change is later, and just before it the verdict is the same as now."""
    win = [w(cron=f"{minute} {hour} * * *", duration=f"{minutes}m", tz=zone_name)]
    now = at(2026, 1, 1) + timedelta(minutes=offset, seconds=17)
    s = evaluate(win, 8, now)
    if s.active:
        assert s.active.start <= now < s.active.end
    assert s.next_change is not None and s.next_change > now
    before = evaluate(win, 8, s.next_change - timedelta(seconds=1))
    assert (before.active and before.active.start) == (s.active and s.active.start)
    after = evaluate(win, 8, s.next_change)
    assert (after.active and after.active.start) != (s.active and s.active.start)
    # a start is a wall-clock match: in its zone, the minute is the cron's minute (or a DST jump)
    start = last_start(win[0], now)
    local = start.astimezone(zone(zone_name))
    assert local.minute == minute or local.utcoffset() != (start - timedelta(hours=3)).astimezone(zone(zone_name)).utcoffset()


def once(name="maint", when="2026-12-24T18:00:00+01:00", duration="2h", nodes=2, priority=0) -> ScheduleWindow:
    return ScheduleWindow.model_validate({"name": name, "at": when, "duration": duration, "slurmNodes": nodes, "priority": priority})


def test_a_one_off_window_opens_once_at_its_time_and_closes_after_its_duration():
    window = [once()]  # 18:00 +01:00 = 17:00 UTC, for 2h
    before = evaluate(window, 8, at(2026, 12, 24, 16, 59, 59))
    assert before.active is None and before.next_change == at(2026, 12, 24, 17, 0)
    open_ = evaluate(window, 8, at(2026, 12, 24, 17, 0))
    assert open_.active and open_.active.slurm_nodes == 2 and open_.next_change == at(2026, 12, 24, 19, 0)
    after = evaluate(window, 8, at(2026, 12, 24, 19, 0))
    assert after.active is None and after.next_change is None  # never again
    assert last_start(window[0], at(2027, 6, 1)) == at(2026, 12, 24, 17, 0) and next_start(window[0], at(2027, 6, 1)) is None


def test_a_one_off_window_overlaps_recurring_ones_by_the_same_rules():
    daily = w(cron="0 12 * * *", tz="UTC", duration="12h", nodes=6)
    holiday = once(when="2026-12-24T15:00:00Z", duration="1h", nodes=1, priority=10)
    assert evaluate([daily, holiday], 8, at(2026, 12, 24, 15, 30)).active.name == "maint"
    s = evaluate([daily, holiday], 8, at(2026, 12, 24, 16, 0))
    assert s.active.name == "night" and s.next_change == at(2026, 12, 25, 0, 0)


@pytest.mark.parametrize("body, why", [
    ({"duration": "1h", "slurmNodes": 2}, "exactly one of cron and at"),
    ({"cron": "0 1 * * *", "at": "2026-12-24T18:00:00Z", "duration": "1h", "slurmNodes": 2}, "exactly one of cron and at"),
    ({"at": "2026-12-24T18:00:00", "duration": "1h", "slurmNodes": 2}, "should match pattern"),  # no offset: not guessed
    ({"at": "next tuesday", "duration": "1h", "slurmNodes": 2}, "should match pattern"),
    ({"at": "2026-13-45T18:00:00Z", "duration": "1h", "slurmNodes": 2}, "should match pattern"),  # fields out of their ranges
    ({"at": "2026-02-30T18:00:00Z", "duration": "1h", "slurmNodes": 2}, "not an RFC 3339 time"),  # the form, not a date
])
def test_a_window_needs_exactly_one_of_cron_and_an_at_with_its_offset(body, why):
    with pytest.raises(ValidationError, match=why):
        ScheduleWindow.model_validate({"name": "x", **body})
