"""Pending jobs' reasons as each Slurm version prints them over each access path (issue 24).

The fixtures under tests/fixtures/pending_reasons/<version>-<path>/ are real output captured by
e2e/lab/capture-pending-reasons.sh on a lab: the partition's last two nodes drained (parked, as
slurmpool parks them for inference), the others filled by one job, then jobs that wait for
different reasons. Each is parsed the way the bridge parses it and judged by demand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slurmbridge.models import SlurmJob
from slurmbridge.parse import DEFAULT_SEP, parse_squeue
from slurmbridge.rest import parse_rest_job
from slurmpool.core.demand import Seen, signals
from slurmpool.core.demand.slurm_jobs import job_waits_for_nodes, never_starts
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.placement import SLURM, Side
from slurmpool.core.view import ANN_PLACEMENT, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node

FIXTURES = Path(__file__).parent / "fixtures" / "pending_reasons"
CAPTURES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
# Job name (as the capture script submits it) -> does more nodes start it?
WAITS = {"gang": True, "pinned": True, "one": True, "two": True, "held": False, "later": False, "after": False}


def reasons_from_squeue(capture: str) -> dict[str, SlurmJob]:
    path = FIXTURES / capture / "squeue.txt"
    return {j.name: j for j in parse_squeue(path.read_text(), DEFAULT_SEP)} if path.exists() else {}


def reasons_from_scontrol(capture: str) -> dict[str, str]:
    path = FIXTURES / capture / "scontrol-jobs.txt"
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        name = re.search(r"\bJobName=(\S+)", line)
        reason = re.search(r"\bReason=(\S+)", line)
        if name and reason:
            out[name.group(1)] = reason.group(1)
    return out


def jobs_from_rest(capture: str) -> dict[str, SlurmJob]:
    path = FIXTURES / capture / "jobs.json"
    if not path.exists():
        return {}
    return {job.name: job for job in (parse_rest_job(raw)[0] for raw in json.loads(path.read_text())["jobs"])}


def test_every_capture_has_the_gang_job():
    assert CAPTURES, "no fixtures"
    for capture in CAPTURES:
        seen = reasons_from_squeue(capture) or jobs_from_rest(capture)
        assert "gang" in seen, capture


@pytest.mark.parametrize("capture", CAPTURES)
def test_squeue_and_rest_reasons_mean_what_they_say(capture):
    for jobs in (reasons_from_squeue(capture), jobs_from_rest(capture)):
        for name, waits in WAITS.items():
            if name in jobs:
                assert job_waits_for_nodes(jobs[name].reason) is waits, (capture, name, jobs[name].reason)


@pytest.mark.parametrize("capture", CAPTURES)
def test_scontrol_reasons_with_underscores_mean_the_same(capture):
    reasons = reasons_from_scontrol(capture)
    for name, waits in WAITS.items():
        if name in reasons:
            assert job_waits_for_nodes(reasons[name]) is waits, (capture, name, reasons[name])
    if reasons:
        assert "_" in reasons["gang"]  # the desc, spelt with underscores


def test_the_gang_jobs_desc_is_the_drained_nodes_one_on_the_command_line():
    for capture in CAPTURES:
        jobs = reasons_from_squeue(capture)
        if jobs:
            assert jobs["gang"].reason.startswith("Nodes required for job are DOWN, DRAINED"), capture
            # 22.05 names the unavailable nodes; 26.05 says "ReqNodeNotAvail, May be reserved for other job"
            assert jobs["pinned"].reason.startswith("ReqNodeNotAvail, "), capture


def captured_pool(capture: str) -> tuple[SlurmNodePoolSpec, list[NodeView], dict]:
    """The captured lab as a pool (notes.txt names its nodes and the parked ones): the parked
    nodes in inference (drained in Slurm), the others serving Slurm, busy with the filler job."""
    notes = (FIXTURES / capture / "notes.txt").read_text()
    listed = re.search(r"^nodes: (.*); parked \(drained\): (.*)$", notes, re.M)
    assert listed is not None, f"{capture}/notes.txt names no nodes"
    names, parked = listed.group(1).split(), listed.group(2).split(",")
    body = make_spec(slurm_nodes=len(names) - len(parked)).model_dump(by_alias=True, exclude_none=True)
    body["demand"] = {"cooldown": "0s"}
    spec = SlurmNodePoolSpec.model_validate(body)
    nodes = [NodeView(n, annotations={ANN_PLACEMENT: "inference:default" if n in parked else SLURM}) for n in names]
    states = {n: slurm_node(n, "IDLE", flags={"DRAIN"}) if n in parked else slurm_node(n, "ALLOCATED") for n in names}
    return spec, nodes, states


@pytest.mark.parametrize("capture", CAPTURES)
def test_demand_counts_the_gang_job_and_reports_the_one_no_split_starts(capture):
    for jobs in (j for j in (reasons_from_squeue(capture), jobs_from_rest(capture)) if j):
        demand_sees_the_gang_job(capture, jobs)


def demand_sees_the_gang_job(capture: str, jobs: dict) -> None:
    spec, nodes, states = captured_pool(capture)
    sig = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=tuple(jobs.values())), [], now=NOW))
    # gang asks for every node; two are parked: it lacks 2, whatever else waits.
    assert jobs["gang"].num_nodes == len(nodes) and "one asks for 2 node(s) more" in sig.what(Side.SLURM)
    assert sig.waiting(Side.SLURM) == 4  # gang, pinned, one, two
    # -N above the pool's node count: 22.05 and 26.05 keep it pending (PartitionNodeLimit) and
    # demand reports it; 24.11 refuses it at submit or fails it at once (BadConstraints): no demand.
    too_many = jobs.get("toomany")
    if too_many is not None and too_many.state == "PENDING":
        assert [w for w in sig.unstartable if f"job {too_many.job_id}:" in w] and never_starts(too_many, len(nodes), 8)
    else:
        assert capture.startswith("24.11") and sig.unstartable == ()
