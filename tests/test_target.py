"""Precedence between manual changes, the schedule and demand; the audit in status.target."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.target import author, decide_target

from .factories import make_spec

UTC = timezone.utc
T0 = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)  # 21:00 Berlin; the night window opens at 22:00 (21:00 UTC)


def spec(slurm_nodes=2, schedule=None, **kw) -> SlurmNodePoolSpec:
    body = make_spec(slurm_nodes=slurm_nodes, **kw).model_dump(by_alias=True, exclude_none=True)
    body["schedule"] = schedule if schedule is not None else [
        {"name": "night", "cron": "0 22 * * *", "duration": "8h", "timeZone": "Europe/Berlin", "slurmNodes": 6}
    ]
    return SlurmNodePoolSpec.model_validate(body)


def run(timeline, total=8):
    """timeline: [(minutes after T0, spec)] -> decisions, each fed the previous status."""
    prev, out = None, []
    for minutes, s in timeline:
        d = decide_target(s, total, T0 + timedelta(minutes=minutes), prev, by="kubectl (update scale)")
        out.append(d)
        prev = d.status
    return out


def test_outside_windows_spec_holds_and_names_its_author():
    [d] = run([(0, spec(2))])
    t = d.status
    assert (t.slurm_nodes, t.source, t.window, t.by) == (2, "Manual", None, "kubectl (update scale)")
    assert t.next_change == "2026-11-29T21:00:00Z" and "no schedule window open" in t.reason


def test_window_sets_the_target_at_its_edge_and_returns_to_spec_after():
    s = spec(2)
    before, opened, inside, closed = run([(59, s), (60, s), (300, s), (60 * 9, s)])
    assert before.slurm_nodes == 2 and opened.slurm_nodes == 6 and inside.slurm_nodes == 6 and closed.slurm_nodes == 2
    assert opened.status.source == "Schedule" and opened.status.window == "night" and opened.status.since == "2026-11-29T21:00:00Z"
    assert [e.reason for e in opened.events] == ["ScheduleWindowStarted"]
    assert inside.events == []
    assert [e.reason for e in closed.events] == ["ScheduleWindowEnded"] and closed.status.source == "Manual"


def test_manual_change_during_a_window_holds_until_the_next_edge():
    d = run([(70, spec(2)), (80, spec(4)), (200, spec(4)), (60 * 9 + 1, spec(4)), (60 * 25 + 1, spec(4))])
    in_window, manual, still, after_close, next_night = d
    assert in_window.slurm_nodes == 6
    assert manual.slurm_nodes == 4 and manual.status.source == "Manual"
    assert manual.status.manual_until == "2026-11-30T05:00:00Z" and "during window night" in manual.status.reason
    assert [e.reason for e in manual.events] == ["ManualChange"] and "2 -> 4 by kubectl" in manual.events[0].message
    assert still.slurm_nodes == 4 and still.status.source == "Manual"
    assert after_close.slurm_nodes == 4 and after_close.status.manual_until is None  # outside windows spec holds anyway
    assert next_night.slurm_nodes == 6 and next_night.status.source == "Schedule"  # the next edge: the schedule rules again


def test_manual_change_outside_windows_lasts_until_the_next_window_opens():
    d = run([(0, spec(2)), (10, spec(3)), (61, spec(3))])
    assert d[1].slurm_nodes == 3 and d[1].status.manual_until is None
    assert d[2].slurm_nodes == 6 and d[2].status.source == "Schedule"


def test_schedule_counts_are_clamped_to_the_floors():
    s = spec(3, min_slurm=3, schedule=[{"name": "w", "cron": "0 * * * *", "duration": "1h", "timeZone": "UTC", "slurmNodes": 1}])
    [d] = run([(0, s)])
    assert d.slurm_nodes == 3 and "raised to minSlurmNodes 3" in d.status.reason


def test_percent_windows_follow_the_selected_nodes():
    s = spec(2, schedule=[{"name": "w", "cron": "0 * * * *", "duration": "1h", "timeZone": "UTC", "slurmPercent": 50}])
    assert run([(0, s)], total=10)[0].slurm_nodes == 5
    assert run([(0, s)], total=7)[0].slurm_nodes == 4


def test_restart_keeps_the_manual_hold():
    """The decision only depends on the previous status: a new process continues the same."""
    d = run([(70, spec(2)), (80, spec(4))])
    again = decide_target(spec(4), 8, T0 + timedelta(minutes=90), d[1].status.model_copy(deep=True), by="kubectl")
    assert again.slurm_nodes == 4 and again.events == []


def test_author_is_the_latest_manager_of_slurm_nodes():
    fields = [
        {"manager": "kubectl-client-side-apply", "operation": "Update", "time": "2026-11-29T10:00:00Z",
         "fieldsV1": {"f:spec": {"f:slurmNodes": {}, "f:slurm": {}}}},
        {"manager": "slurmpool", "operation": "Update", "subresource": "status", "time": "2026-11-29T12:00:00Z",
         "fieldsV1": {"f:status": {}}},
        {"manager": "kubectl", "operation": "Update", "subresource": "scale", "time": "2026-11-29T11:00:00Z",
         "fieldsV1": {"f:spec": {"f:slurmNodes": {}}}},
    ]
    assert author(fields) == "kubectl (update scale)"
    assert author([]) is None
