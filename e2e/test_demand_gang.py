"""A gang job seen by demand (issue 24): a job that needs the nodes parked for inference brings
them back, within demand's bounds, and starts; a job no split of the pool could start is
reported and not counted. Runs over SSH and REST, on each Slurm version of the matrix."""

from __future__ import annotations

import pytest
from harness import (
    NAMESPACE,
    Operator,
    apply,
    ensure_namespace_and_secret,
    events,
    install_crd,
    job_state,
    pool_manifest,
    pool_status,
    reset_lab,
    split_reached,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "gang"


def gang_job(lab, nodes: int, check: bool = True) -> str:
    """The job's id ("" when Slurm refused it and check is False)."""
    out = lab.slurm("sbatch", "--parsable", "-p", "gpu", f"-N{nodes}", "--exclusive", "--gres=gpu:8", "--time=2",
                    "-o", "/dev/null", "--wrap", "sleep 20", check=check)
    return out.stdout.strip().split(";")[0] if out.returncode == 0 else ""


def partition_nodes(lab) -> int:
    """The gpu partition's size: the lab's 8 nodes, and any real kubelet nodes beside them."""
    out = lab.slurm("scontrol", "-o", "show", "partition", "gpu").stdout
    return int(next(w.split("=", 1)[1] for w in out.split() if w.startswith("TotalNodes=")))


def demand(lab) -> dict:
    return pool_status(lab, POOL).get("target", {}).get("demand") or {}


def test_a_gang_job_brings_the_parked_nodes_back_within_the_bounds_and_starts(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    base, bound = total - 3, total - 1
    op = Operator(lab, "operator-demand-gang.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, base, demand={"cooldown": "2s", "slurm": {"maxNodes": bound}}))
        wait(lambda: split_reached(lab, POOL, base, total), 180, what=f"{base} Slurm, 3 inference")
        # A job asking for more nodes than the pool has: 22.05 and 26.05 keep it pending
        # (PartitionNodeLimit), and demand reports it without counting it; 24.11 refuses it at submit
        # ("Requested node configuration is not available") or fails it: then nothing waits.
        # More than the partition holds (on the main lane its two real nodes are in it too: a job of
        # 10 passed that limit, and Slurm refused it at submit for want of GPUs instead).
        too_big = gang_job(lab, max(total, partition_nodes(lab)) + 2, check=False)
        def reported() -> bool:
            return any(f"job {too_big}:" in j for j in demand(lab).get("unstartableJobs", []))

        if too_big:
            wait(lambda: reported() or job_state(lab, too_big) != "PENDING", 60,
                 what="the job asking for more nodes than the pool has is reported (or failed by Slurm)")
        if too_big and job_state(lab, too_big) == "PENDING":
            wait(reported, 30, what="the pending job is still reported")
            wait(lambda: any(f"job {too_big}:" in m for m in events(lab, "UnstartableJobs")), 30, what="an UnstartableJobs Event")
            lab.slurm("scancel", too_big)
        else:
            assert lab.env.get("LAB_SLURM") == "24.11", "only 24.11 refuses or fails the job itself"
        assert demand(lab).get("slurmWants", 0) == 0 and split_reached(lab, POOL, base, total), demand(lab)
        # Every node at once: Slurm waits on the parked (drained) nodes; demand grows Slurm up to its bound only.
        job = gang_job(lab, total)
        wait(lambda: split_reached(lab, POOL, bound, total), 180, what=f"demand grew Slurm to its bound {bound}")
        wait(lambda: demand(lab).get("pendingJobs") == 1 and demand(lab).get("slurmWants") == 1, 60,
             what="demand still sees the gang job lack one node")
        assert job_state(lab, job) == "PENDING"
        assert split_reached(lab, POOL, bound, total), pool_status(lab, POOL)
        # The bound raised: the last node comes back and the job starts.
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"demand":{"slurm":{"maxNodes":null}}}}')
        wait(lambda: job_state(lab, job) in ("RUNNING", "COMPLETING", "COMPLETED"), 240, what="the gang job started")
        # The job starts the moment the last move resumes its node; the status says so a pass later.
        wait(lambda: pool_status(lab, POOL)["slurm"]["ready"] == total, 30, what=f"the status shows {total} ready in Slurm")
        assert any("more than Slurm has usable" in m for m in events(lab, "DemandChanged")), events(lab, "DemandChanged")
    finally:
        op.stop()
        reset_lab(lab)
