"""Where each access path shows a job's own `--signal` (sbatch --signal=B:USR1@300) and whether
Slurm can requeue it, read from real output (tests/fixtures/pending_reasons/: 22.05, 24.11 and
26.05, over SSH and locally, slurmrestd's v0.0.42 jobs; tests/fixtures/checkpoint/26.05-local and
24.11-local: jobs with --signal and --no-requeue on sbatch's command line, every REST version of
26.05.3 and of 24.11.5 (the lab's), and what a signal and a refused requeue answered). The Checkpoint
policy depends on it:

- no field shows the job's own signal: squeue's -o has none, `scontrol show job` prints none, and
  slurmrestd's job has no kill_warning_* (those are in the *description* of a submission only,
  data_parser's JOB_DESC_MSG, v0.0.42 to v0.0.45). Only the submit line does, when the option was on
  sbatch's command line (an #SBATCH line is in no output): `SubmitLine=` of 26.05's scontrol (24.11's prints none), which the
  bridge does not read, and slurmrestd's `submit_line` from v0.0.44 (SlurmJob.declared_signal).
- whether Slurm can requeue it: slurmrestd's `requeue` and `batch_flag` (SlurmJob.requeue);
  `scontrol show job`'s Requeue=; squeue only with -O Requeue, which the bridge's -o poll does not use
  (SlurmJob.requeue None: a requeue Slurm refuses then fails as an action error, the job runs on)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slurmbridge import SlurmJob, validate
from slurmbridge.models import DeclaredSignal
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


# ---------------------------------------------------------------- a capture with --signal and --no-requeue (26.05.3)

CHECKPOINT = Path(__file__).parent / "fixtures" / "checkpoint" / "26.05-local"
VERSIONS = ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")


def _rest_jobs(version: str) -> dict[str, SlurmJob]:
    raw = json.loads((CHECKPOINT / f"jobs-{version}.json").read_text())["jobs"]
    return {j.name: j for j in (parse_rest_job(r)[0] for r in raw)}


@pytest.mark.parametrize("version", VERSIONS)
def test_slurmrestd_shows_no_requeue_in_every_version_and_a_command_line_signal_from_v0044(version):
    """Jobs `warned` (sbatch --requeue --signal=B:USR1@300), `norequeue` (--no-requeue --signal=USR2@120)
    and `plain`, each with its options on sbatch's command line (notes.txt)."""
    jobs = _rest_jobs(version)
    assert {n: j.requeue for n, j in jobs.items()} == {"warned": True, "norequeue": False, "plain": True}
    seen = {n: j.declared_signal for n, j in jobs.items()}
    if version in ("v0.0.44", "v0.0.45"):  # the job's submit_line
        assert seen == {"warned": DeclaredSignal("USR1", True, 300), "norequeue": DeclaredSignal("USR2", False, 120), "plain": None}
    else:
        assert seen == {"warned": None, "norequeue": None, "plain": None}


def test_scontrol_shows_requeue_and_the_submit_line_and_squeue_o_neither():
    text = (CHECKPOINT / "scontrol-jobs.txt").read_text()
    requeue = dict(re.findall(r"JobName=(\w+) .*? Requeue=(\d)", text))
    assert requeue == {"warned": "1", "norequeue": "0", "plain": "1"}
    assert "SubmitLine=sbatch --parsable -J warned -N2 -n2 --requeue --signal=B:USR1@300" in text
    jobs = parse_squeue((CHECKPOINT / "squeue.txt").read_text(), "|~slurmbridge~|")
    assert len(jobs) == 3 and {(j.requeue, j.declared_signal) for j in jobs} == {(None, None)}
    # squeue shows it only in its long format (-O Requeue), which the bridge's poll does not use
    assert (CHECKPOINT / "squeue-O-requeue.txt").read_text().split() == ["1|1|", "2|0|", "3|1|"]


def test_what_a_signal_and_a_requeue_of_a_no_requeue_job_answered():
    notes = (CHECKPOINT / "notes.txt").read_text()
    assert "== scancel --signal=USR1 --batch 1\nexit 0\nmarkers of 1: USR1" in notes
    assert "DELETE /slurm/v0.0.45/job/2?signal=USR1&flags=BATCH_JOB\nerrors [] warnings [] status [] HTTP 200" in notes
    assert "DELETE /slurm/v0.0.42/job/3?signal=USR2&flags=FULL_JOB\nerrors [] warnings [] status [] HTTP 200" in notes
    assert "markers of 2: USR1" in notes and "markers of 3: USR2" in notes
    assert "Requested operation is presently disabled for job 2\nexit 1" in notes
    assert "('Requested operation is presently disabled', 2037, 'Requeue JobID=2 failed')] HTTP 422" in notes


# ---------------------------------------------------------------- the same capture on 24.11 (the lab's, e2e/lab/capture-checkpoint.sh)

CHECKPOINT_2411 = Path(__file__).parent / "fixtures" / "checkpoint" / "24.11-local"


@pytest.mark.parametrize("version", ("v0.0.40", "v0.0.41", "v0.0.42"))
def test_slurmrestd_of_24_11_shows_no_requeue_in_every_version_and_never_the_jobs_own_signal(version):
    raw = json.loads((CHECKPOINT_2411 / f"jobs-{version}.json").read_text())["jobs"]
    assert not [k for job in raw for k in job if "warn" in k or "signal" in k or k == "submit_line"]
    jobs = {j.name: j for j in (parse_rest_job(r)[0] for r in raw)}
    assert {n: (j.requeue, j.declared_signal) for n, j in jobs.items()} == {
        "warned": (True, None), "norequeue": (False, None), "plain": (True, None)}


def test_scontrol_of_24_11_shows_requeue_but_no_submit_line_and_squeue_o_neither():
    text = (CHECKPOINT_2411 / "scontrol-jobs.txt").read_text()
    assert dict(re.findall(r"JobName=(\w+) .*? Requeue=(\d)", text)) == {"warned": "1", "norequeue": "0", "plain": "1"}
    assert "SubmitLine=" not in text  # 26.05 prints it; 24.11 (without accounting) does not
    jobs = parse_squeue((CHECKPOINT_2411 / "squeue.txt").read_text(), "|~slurmbridge~|")
    assert len(jobs) == 3 and {(j.requeue, j.declared_signal) for j in jobs} == {(None, None)}
    assert sorted((CHECKPOINT_2411 / "squeue-O-requeue.txt").read_text().split()) == ["1|1|", "2|0|", "3|1|"]


def test_what_24_11_answered_to_a_signal_and_a_requeue_the_rest_requeue_is_26_05_only():
    notes = (CHECKPOINT_2411 / "notes.txt").read_text()
    assert "with slurm-wlm 24.11.5" in notes
    assert "== scancel --signal=USR1 --batch 1\nexit 0\nmarkers of 1: USR1" in notes
    assert "DELETE /slurm/v0.0.42/job/2?signal=USR1&flags=BATCH_JOB\nerrors [] warnings [] status [] HTTP 200" in notes
    assert "DELETE /slurm/v0.0.42/job/3?signal=USR2&flags=FULL_JOB\nerrors [] warnings [] status [] HTTP 200" in notes
    assert "markers of 2: USR1" in notes and "markers of 3: USR2" in notes
    assert "Requested operation is presently disabled for job 2\nexit 1" in notes
    assert "GET /slurm/v0.0.42/job/2/requeue (--no-requeue)\nnot JSON: 'Unable find requested URL." in notes and "HTTP 404" in notes


@pytest.mark.parametrize("line, command, declared", [
    ("sbatch -N2 --signal=B:USR1@300 job.sh", "job.sh", ("USR1", True, 300)),
    ("sbatch --signal USR2 job.sh", "job.sh", ("USR2", False, 60)),  # Slurm's default time: 60 s
    ("sbatch --signal=10@90 --wrap 'sleep 1'", "", ("10", False, 90)),
    ("sbatch job.sh --signal=KILL@1", "job.sh", None),  # the script's own argument, not sbatch's
    ("sbatch --signal=R:USR1@60 job.sh", "job.sh", None),  # a reservation's end: no warning of a move
    ("sbatch --signal='USR1;reboot' job.sh", "job.sh", None),
    ("sbatch 'unbalanced", "", None),
    ("sbatch -N1 job.sh", "job.sh", None),
])
def test_a_submit_lines_signal_option_is_read_or_refused(line, command, declared):
    assert validate.declared_signal(line, command) == declared
