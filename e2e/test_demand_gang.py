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


def gang_job(lab, nodes: int) -> str:
    out = lab.slurm("sbatch", "--parsable", "-p", "gpu", f"-N{nodes}", "--exclusive", "--gres=gpu:8", "--time=2",
                    "-o", "/dev/null", "--wrap", "sleep 20").stdout
    return out.strip().split(";")[0]


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
        # Slurm keeps a job asking for more nodes than the partition has (PartitionNodeLimit):
        # no split of the pool starts it; demand reports it and does not count it.
        too_big = gang_job(lab, total + 2)
        wait(lambda: any(f"job {too_big}:" in j for j in demand(lab).get("unstartableJobs", [])), 60,
             what="the job asking for more nodes than the pool has is reported")
        wait(lambda: any(f"job {too_big}:" in m for m in events(lab, "UnstartableJobs")), 30, what="an UnstartableJobs Event")
        assert demand(lab).get("slurmWants", 0) == 0 and split_reached(lab, POOL, base, total), demand(lab)
        lab.slurm("scancel", too_big)
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
        assert pool_status(lab, POOL)["slurm"]["ready"] == total, pool_status(lab, POOL)
        assert any("more than Slurm has usable" in m for m in events(lab, "DemandChanged")), events(lab, "DemandChanged")
    finally:
        op.stop()
        reset_lab(lab)
