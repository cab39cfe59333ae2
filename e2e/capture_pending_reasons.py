"""Capture pending jobs' reasons from this lab's Slurm for tests/fixtures/pending_reasons (issue 24).

Not part of the suite (the name does not match test_*.py); run it by name on each Slurm version:
    LAB_SLURM=26.05 .venv/bin/pytest -q e2e/capture_pending_reasons.py
It runs the operator until every lab node serves Slurm, stops it, then runs
e2e/lab/capture-pending-reasons.sh locally, over SSH and (with slurmrestd) with the REST job list,
into tests/fixtures/pending_reasons/<version>-{local,ssh}/.
"""

from __future__ import annotations

import os

from harness import REPO, Operator, apply, ensure_namespace_and_secret, install_crd, pool_manifest, reset_lab, split_reached, wait

POOL = "capture"


def test_capture(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    version = lab.env.get("LAB_SLURM", "22.05")
    script = str(REPO / "e2e" / "lab" / "capture-pending-reasons.sh")
    out = REPO / "tests" / "fixtures" / "pending_reasons"
    op = Operator(lab, "operator-capture.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, total))
        wait(lambda: split_reached(lab, POOL, total, total), 240, what="every node in Slurm")
    finally:
        op.stop()
    try:
        lab.run(script, str(out / f"{version}-local"), timeout=300)
        lab.run("env", f"RUN={lab.env['LAB_SSH']}", "LAB_SLURMRESTD_URL=", script, str(out / f"{version}-ssh"), timeout=300)
    finally:
        reset_lab(lab)
    assert (out / f"{version}-local" / "squeue.txt").read_text().count("PENDING") >= 7, os.listdir(out)
