"""The Slurm-freshness rule (controller/freshness.py): which poll a pool's pass may use. Plain: no I/O."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

from slurmpool.controller.freshness import SLURM_MAX_AGE, Freshness, SlurmFreshness, max_age, needs_fresh_slurm, waiting_on_slurm
from slurmpool.core.expiry import Cancel, Requeue
from slurmpool.core.moves import Blocker, BlockerKind, Resume, Step
from slurmpool.core.phases import Phase
from slurmpool.core.view import MoveRecord, SlurmView

from .factories import make_spec


REGISTRATION = Blocker(BlockerKind.SLURMD_REGISTRATION)


def demand_on():
    off = make_spec()
    return off.model_copy(update={"demand": type(off).model_validate({**off.model_dump(by_alias=True), "demand": {}}).demand})


def decision(phase: Phase | None = None, blocked_by=(), actions=(), starts=()):
    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    if phase is None:
        step = Step(move=None, settled="slurm", actions=list(actions))
    else:
        to_slurm = phase not in (Phase.DRAINING, Phase.STOPPING_SLURMD)
        source, target = ("inference:llm", "slurm") if to_slurm else ("slurm", "inference:llm")
        move = MoveRecord(id="m", source=source, target=target, phase=phase, since=now, started=now)
        step = Step(move=move, blocked_by=list(blocked_by), actions=list(actions))
    return SimpleNamespace(steps={"gpu01": step}, starts=list(starts))


def test_a_pool_with_demand_on_sees_slurm_no_older_than_its_pass_interval():
    on = demand_on()
    assert on.demand is not None and on.demand.enabled
    assert max_age(make_spec(), 1.0) == SLURM_MAX_AGE  # shared polls, as before
    assert max_age(on, 1.0) == 1.0  # a pending job is seen at the next pass's poll, not up to 2 s later
    assert max_age(on, 5.0) == SLURM_MAX_AGE


def test_a_power_save_pool_sees_a_give_back_no_older_than_its_pass_interval():
    spec = make_spec()
    lending = spec.model_copy(update={"slurm": spec.slurm.model_copy(update={"parking": "PowerSave"})})
    assert max_age(lending, 1.0) == 1.0 and max_age(lending, 5.0) == SLURM_MAX_AGE


def test_a_slurmd_registering_is_looked_at_again_soon_a_move_blocked_by_jobs_is_not():
    # Registering waits for slurmd-registration: that wait is Slurm's to end within a second
    assert waiting_on_slurm(decision(Phase.REGISTERING, [REGISTRATION]))
    assert waiting_on_slurm(decision(Phase.RESUMING, []))
    assert not waiting_on_slurm(decision(Phase.DRAINING, [Blocker(BlockerKind.JOB, "42")]))  # jobs take minutes
    assert not waiting_on_slurm(decision(Phase.REGISTERING, [Blocker(BlockerKind.SLURM_UNAVAILABLE)]))  # polls back off
    assert not waiting_on_slurm(decision(Phase.EVICTING, []))  # a watch event wakes it
    assert not waiting_on_slurm(decision())


def test_a_move_to_start_or_a_resume_requeue_cancel_needs_a_fresh_poll():
    assert needs_fresh_slurm(decision(starts=["gpu01"]))
    for action in (Resume("gpu01"), Requeue(job_ids=("42",)), Cancel(job_ids=("42",))):
        assert needs_fresh_slurm(decision(Phase.RESUMING, actions=[action]))
    assert not needs_fresh_slurm(decision(Phase.REGISTERING, [REGISTRATION]))
    assert not needs_fresh_slurm(decision())


def test_a_pass_shares_any_recent_poll_until_its_pool_changes_slurm():
    fresh = SlurmFreshness()
    assert fresh.want(make_spec(), 1.0) == Freshness(SLURM_MAX_AGE, None, None)
    fresh.changed(5.0)
    assert fresh.want(make_spec(), 1.0) == Freshness(SLURM_MAX_AGE, None, 5.0)  # a poll begun at or after it
    assert fresh.want(demand_on(), 1.0).max_age == 1.0


def test_a_pool_waiting_on_slurm_asks_once_for_a_poll_newer_than_its_last():
    fresh = SlurmFreshness()
    fresh.used(SlurmView(available=True, polled_at=3.0))
    assert not fresh.passed(decision(Phase.DRAINING, [Blocker(BlockerKind.JOB, "42")])) and not fresh.waiting
    assert fresh.want(make_spec(), 1.0).newer_than is None
    assert fresh.passed(decision(Phase.REGISTERING, [REGISTRATION]))
    assert fresh.want(make_spec(), 1.0).newer_than == 3.0  # newer than the poll it used
    assert fresh.want(make_spec(), 1.0).newer_than is None  # answered by that one look
    fresh.passed(decision(Phase.REGISTERING, [REGISTRATION]))
    assert fresh.want(make_spec(), 1.0, newer_than=7.0).newer_than == 7.0  # the pass's second look wins


def test_a_pass_that_would_start_a_move_decides_again_on_a_poll_begun_after_it():
    fresh, starts = SlurmFreshness(), decision(starts=["gpu01"])
    assert fresh.decide_again(SlurmView(available=True, polled_at=9.0), 10.0, starts)
    assert not fresh.decide_again(SlurmView(available=True, polled_at=10.5), 10.0, starts)  # already after the pass began
    assert not fresh.decide_again(SlurmView(available=False, polled_at=9.0), 10.0, starts)  # Slurm away: no move starts anyway
    assert not fresh.decide_again(SlurmView(available=True, polled_at=9.0), 10.0, decision())
