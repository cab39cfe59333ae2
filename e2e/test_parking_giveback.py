"""Power-save parking (issue 39): parked nodes lent to Slurm (`idle~`) are given back at Slurm's own
request, exactly the nodes it chose. A job pinned to two parked nodes (`sbatch -w`, `--exclusive`,
no `--gres`) starts on exactly those, with no demand configured; once it is done the split takes
them back. Runs in make test's 22.05 lab over SSH and in the 26.05-rest-parking matrix row
(e2e/lab/up.sh sets the power-save block in every row; the other rows run e2e/test_power_real.py)."""

from __future__ import annotations

import pytest
from harness import (
    Operator,
    apply,
    condition,
    ensure_namespace_and_secret,
    events,
    install_crd,
    job_nodes,
    job_state,
    lent_nodes,
    now_rfc3339,
    pool_manifest,
    pool_status,
    reset_lab,
    split_reached,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "lend"


def test_a_job_pinned_to_two_lent_nodes_starts_on_exactly_those(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    base = total - 3
    op = Operator(lab, "operator-parking-giveback.log").start()
    try:
        # Every node first serves Slurm: a node whose slurmd never registered stays UNKNOWN, and
        # Slurm (22.05, measured) never carries out a power-down it queues for it (`drained!`).
        apply(lab, pool_manifest(lab, POOL, total, slurm={"parking": "PowerSave"}))
        wait(lambda: split_reached(lab, POOL, total, total), 180, what=f"{total} Slurm")
        apply(lab, pool_manifest(lab, POOL, base, slurm={"parking": "PowerSave"}))
        wait(lambda: split_reached(lab, POOL, base, total), 180, what=f"{base} Slurm, 3 inference")
        # no floor keeps them: all three parked nodes are lent (idle~), and the status says so
        wait(lambda: len(lent_nodes(lab)) == 3, 120, what="three parked nodes lent (idle~)")
        # the status follows Slurm's view a pass later
        wait(lambda: condition(lab, POOL, "Lending").get("reason") == "Lending", 30, what="the Lending condition")
        chosen = lent_nodes(lab)[:2]
        since = now_rfc3339()
        out = lab.slurm("sbatch", "--parsable", "-p", "gpu", "-N2", "-w", ",".join(chosen), "--exclusive", "--time=2",
                        "-o", "/dev/null", "--wrap", "sleep 15")
        job = out.stdout.strip().split(";")[0]
        wait(lambda: job_state(lab, job) in ("RUNNING", "COMPLETING", "COMPLETED"), 120, what="the pinned job started")
        assert job_nodes(lab, job) == chosen, (job_nodes(lab, job), chosen)
        started = events(lab, "MoveStarted", since)
        assert sorted(m.split(":")[0] for m in started if "(give-back," in m) == chosen, started
        assert not any("(rebalance," in m for m in started), started  # Slurm named them: no other node moved
        assert events(lab, "GiveBackDeclined", since) == []
        # while the job holds them they count on the Slurm side: nothing is sent back for them
        target = pool_status(lab, POOL).get("target", {})
        if job_state(lab, job) == "RUNNING":
            assert target.get("slurmNodes") == base + 2 and "given back" in target.get("reason", ""), target
        # once it is done they are ordinary surplus: the split returns to base, parked again
        wait(lambda: job_state(lab, job) not in ("RUNNING", "COMPLETING", "CONFIGURING"), 120, what="the job ended")
        wait(lambda: split_reached(lab, POOL, base, total), 180, what=f"back to {base} Slurm nodes")
        wait(lambda: len(lent_nodes(lab)) == 3, 120, what="three parked nodes lent again")
        assert job_state(lab, job) == "COMPLETED", job_state(lab, job)
    finally:
        op.stop()
        reset_lab(lab)
