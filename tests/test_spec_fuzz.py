"""Spec fuzzing through decide (issue 37, fault-suite addition 4): every value the CRD's patterns
and bounds accept either works or is refused by the model with a message (the CRD's CEL rule),
and `decide` never raises on a spec that passed validation (a 31-digit duration, year 9999 or
0001 in `at` raised OverflowError every pass and froze the pool's moves)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from slurmpool.core.models import CRON_PATTERN, DURATION_PATTERN, NODE_NAME_TEMPLATE_PATTERN, RFC3339_PATTERN, SlurmNodePoolSpec
from slurmpool.core.view import ANN_MOVE

from .factories import NOW, make_spec
from .sim import PoolWorld
from .test_decide import GOOD_MOVE, slurm_node_world

BASE = make_spec(slurm_nodes=1, max_moves=3).model_dump(by_alias=True, exclude_none=True)
DURATIONS = st.from_regex(DURATION_PATTERN, fullmatch=True).filter(lambda d: len(d) <= 32)
EXTREME_DURATIONS = st.sampled_from(["999999h999999h999999h999999h", "999999ms", "1ms", "0h1ms"])
YEARS = st.integers(1, 9999).map(lambda y: f"{y:04d}")
OFFSETS = st.sampled_from(["Z", "+01:00", "-12:00", "+23:59", "-23:59", "+14:00"])
AT = st.one_of(st.from_regex(RFC3339_PATTERN, fullmatch=True).filter(lambda a: len(a) <= 64),
               st.builds(lambda y, o: f"{y}-12-31T23:00:00{o}", YEARS, OFFSETS),
               st.builds(lambda y, o: f"{y}-01-01T00:00:00{o}", YEARS, OFFSETS))
TEMPLATES = st.from_regex(NODE_NAME_TEMPLATE_PATTERN, fullmatch=True).filter(lambda t: len(t) <= 128)


def _pass(body: dict) -> None:
    """Validate as the operator does (a refusal is the CRD's or the InvalidSpec report), then one
    pass on nodes of which one has a move in flight (its timeouts are computed)."""
    try:
        spec = SlurmNodePoolSpec.model_validate(body)
    except ValidationError:
        return
    worlds = {n: slurm_node_world(n) for n in ("gpu01", "gpu02", "gpu03")}
    moving = worlds["gpu01"]
    worlds["gpu01"] = replace(moving, node=replace(moving.node, annotations={**moving.node.annotations, ANN_MOVE: json.dumps(GOOD_MOVE)}))
    world = PoolWorld(spec, worlds, NOW)
    world.run(2)


def _window(**kw) -> dict:
    return {"name": "w", "duration": "1h", "slurmNodes": 0, **kw}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(at=AT, duration=st.one_of(DURATIONS, EXTREME_DURATIONS), lead=st.one_of(DURATIONS, EXTREME_DURATIONS),
       cap=st.one_of(DURATIONS, EXTREME_DURATIONS))
def test_decide_never_raises_on_a_schedule_or_handover_the_crd_accepts(at, duration, lead, cap):
    _pass({**BASE, "schedule": [_window(at=at, duration=duration), _window(name="c", cron="*/7 * * * *", duration=duration)],
           "handover": {"leadTime": lead, "maxLeadTime": cap}})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timeout=st.one_of(DURATIONS, EXTREME_DURATIONS), grace=st.one_of(DURATIONS, EXTREME_DURATIONS),
       register=st.one_of(DURATIONS, EXTREME_DURATIONS))
def test_decide_never_raises_on_drain_and_register_times_the_crd_accepts(timeout, grace, register):
    body = json.loads(json.dumps(BASE))
    body["drain"] = {"timeout": timeout, "grace": grace, "evictionTimeout": timeout, "minRuntime": grace}
    body["slurm"]["registerTimeout"] = register
    _pass(body)


@pytest.mark.parametrize("at", ["9999-12-31T23:00:00Z", "0001-01-01T00:00:00+01:00", "2026-13-01T00:00:00Z", "2026-12-24T18:00:00+99:00"])
def test_times_outside_the_range_the_pass_can_compute_are_refused_by_the_schema(at):
    with pytest.raises(ValidationError, match="should match pattern"):
        SlurmNodePoolSpec.model_validate({**BASE, "schedule": [_window(at=at)]})


@pytest.mark.parametrize("field", ["duration", "leadTime"])
def test_a_31_digit_duration_is_refused_by_the_schema(field):
    long = "9" * 31 + "s"
    body = {**BASE, "schedule": [_window(cron="0 * * * *", **({"duration": long} if field == "duration" else {}))]}
    if field == "leadTime":
        body["handover"] = {"leadTime": long}
    with pytest.raises(ValidationError, match="should match pattern"):
        SlurmNodePoolSpec.model_validate(body)


@settings(max_examples=60, deadline=None)
@given(at=AT)
def test_the_extremes_the_crd_accepts_work(at):
    _pass({**BASE, "schedule": [_window(at=at, duration="999999h999999h999999h999999h")]})


NODE_NAMES = st.lists(st.from_regex(r"\A[a-z0-9]{1,6}(\.[a-z0-9]{1,6}){0,2}\Z"), min_size=1, max_size=5, unique=True)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=TEMPLATES, names=NODE_NAMES)
def test_slurm_names_are_injective_or_the_collision_is_reported(template, names):
    from slurmpool.core.slurmnames import slurm_name

    body = json.loads(json.dumps(BASE))
    body["slurm"]["nodeName"] = template
    try:
        spec = SlurmNodePoolSpec.model_validate(body)
    except ValidationError:
        return
    world = PoolWorld(spec, {n: slurm_node_world(n) for n in names}, NOW)
    world.run(1)
    reported = {r.node for r in world.status.invalid_records}
    by_slurm: dict[str, list[str]] = {}
    for n in names:
        if (s := slurm_name(spec.slurm, n, {})) is not None:
            by_slurm.setdefault(s, []).append(n)
    for same in by_slurm.values():
        if len(same) > 1:
            assert set(same) <= reported and not any(n in world.decisions[0].steps for n in same)


CRONS = st.one_of(st.sampled_from(["0 0 29 2 1", "0 0 31 * *", "@yearly", "59 23 31 12 *", "0 0 29 2 *", "* * * * *", "0 0 1 1 1"]),
                  st.from_regex(CRON_PATTERN, fullmatch=True).filter(lambda c: len(c) <= 128))
ZONES = st.sampled_from(["UTC", "Pacific/Kiritimati", "America/Adak", "Europe/Berlin", "Asia/Kathmandu"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cron=CRONS, zone=ZONES, duration=st.one_of(DURATIONS, EXTREME_DURATIONS), lead=EXTREME_DURATIONS)
def test_decide_never_raises_on_a_recurring_window_the_crd_accepts(cron, zone, duration, lead):
    _pass({**BASE, "schedule": [_window(cron=cron, timeZone=zone, duration=duration)], "handover": {"leadTime": lead, "maxLeadTime": lead}})
