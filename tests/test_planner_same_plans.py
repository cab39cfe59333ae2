"""The planner makes the plans recorded in tests/fixtures/plans/: 400 random pools (tests/plancases.py)
with topology blocks (from labels and from Slurm's own groups, whole blocks or not), moves in
flight, pins, move-now requests, holds, force, health findings, jobs and pods, and the plan the
planner made of each when they were recorded (the same plans as the planner before issue 12's
faster one, which this test compared against until issue 28).

After a planner change MEANT to change plans, re-record:

    PYTHONPATH=operator:bridge python tests/fixtures/plans/record.py

and commit plans.json with the change: re-recording is a decision, reviewed in the diff of
plans.json (one plan a line: the diff names every case whose plan changed, and how). inputs.json
does not change unless plancases.py draws pools differently."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from slurmpool.core.planner import plan

from .plancases import build, recorded

PLANS = Path(__file__).parent / "fixtures" / "plans"
INPUTS = json.loads((PLANS / "inputs.json").read_text())
EXPECTED = {p["seed"]: p for p in json.loads((PLANS / "plans.json").read_text())}


def test_every_recorded_input_has_its_plan():
    assert len(INPUTS) == 400 and sorted(EXPECTED) == [case["seed"] for case in INPUTS]


@pytest.mark.parametrize("case", INPUTS, ids=lambda case: f"seed{case['seed']}")
def test_planner_makes_the_recorded_plan(case):
    now = datetime.fromisoformat(case["now"])
    spec, nodes, slurm, health = build(case, now)
    assert {"seed": case["seed"], **recorded(plan(spec, nodes, slurm, now, health=health))} == EXPECTED[case["seed"]]
