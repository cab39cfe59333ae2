"""Where each access path shows a job's own `--signal` (sbatch --signal=B:USR1@300) and whether
Slurm can requeue it, read from real output (tests/fixtures/pending_reasons/: 22.05, 24.11 and
26.05, over SSH and locally, slurmrestd's v0.0.42 jobs). The Checkpoint policy depends on it:

- no path shows the job's own signal: squeue's -o has no field for it, `scontrol show job` prints
  none, and slurmrestd's job has no kill_warning_* (those are in the *description* of a submission
  only, data_parser's JOB_DESC_MSG, in every version v0.0.42 to v0.0.45 of 26.05's source). So every
  job gets drain.checkpoint.signal.
- whether Slurm can requeue it: slurmrestd's `requeue` and `batch_flag` (SlurmJob.requeue);
  `scontrol show job`'s Requeue=; squeue only with -O Requeue, which the bridge's -o poll does not use
  (SlurmJob.requeue None: a requeue Slurm refuses then fails as an action error, the job runs on)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmbridge.parse import DEFAULT_SEP, parse_squeue
from slurmbridge.rest import parse_rest_job

FIXTURES = Path(__file__).parent / "fixtures" / "pending_reasons"
CAPTURES = sorted(p.name for p in FIXTURES.iterdir())
REST = sorted(p.name for p in FIXTURES.iterdir() if (p / "jobs.json").exists())


def test_the_captures_cover_each_version_and_path():
    assert CAPTURES == ["22.05-local", "22.05-ssh", "24.11-local", "24.11-ssh", "26.05-local", "26.05-ssh"]
    assert REST == ["24.11-local", "26.05-local"]


@pytest.mark.parametrize("capture", REST)
def test_slurmrestd_shows_whether_a_job_can_be_requeued_but_not_its_own_signal(capture):
    raw = json.loads((FIXTURES / capture / "jobs.json").read_text())["jobs"]
    assert raw and not [k for job in raw for k in job if "warn" in k or "signal" in k]
    assert {parse_rest_job(job)[0].requeue for job in raw} == {True}  # sbatch's default: requeueable


@pytest.mark.parametrize("capture", CAPTURES)
def test_scontrol_shows_requeue_and_no_signal_and_squeue_neither(capture):
    text = (FIXTURES / capture / "scontrol-jobs.txt").read_text()
    records = [line for line in text.splitlines() if line.startswith("JobId=")]
    assert records and all(" Requeue=1 " in r for r in records)
    assert not [w for r in records for w in r.split() if "Signal" in w.split("=")[0] or "Warn" in w.split("=")[0]]
    jobs = parse_squeue((FIXTURES / capture / "squeue.txt").read_text(), DEFAULT_SEP)
    assert jobs and {j.requeue for j in jobs} == {None}
