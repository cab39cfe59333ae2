"""A job that names its nodes (issue 39): with Drain parking, `sbatch -N2 -w <two parked nodes>
--exclusive` brings back exactly those nodes and starts on them, with and without --gres (an
--exclusive job takes whole nodes though it names no GPUs). Before, it pended with
`ReqNodeNotAvail, UnavailableNodes:...` while the planner brought back other nodes by its cost
order. Runs over SSH and REST, on each Slurm version of the matrix."""

from __future__ import annotations

import hostlist
import pytest
from harness import (
    Operator,
    apply,
    ensure_namespace_and_secret,
    events,
    install_crd,
    job_state,
    node_placements,
    pool_manifest,
    pool_status,
    reset_lab,
    split_reached,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "named"
BASE = 5


def job_nodes(lab, job_id: str) -> list[str]:
    """The Slurm names of the nodes the job was given (scontrol's NodeList)."""
    out = lab.slurm("scontrol", "-o", "show", "job", job_id).stdout
    value = next((w.split("=", 1)[1] for w in out.split() if w.startswith("NodeList=")), "")
    return sorted(hostlist.expand_hostlist(value)) if value and value != "(null)" else []


def parked(lab) -> list[str]:
    return sorted(n for n, p in node_placements(lab).items() if p.startswith("inference:"))


@pytest.mark.parametrize("gres", [["--gres=gpu:8"], []], ids=["gres", "no-gres"])
def test_a_job_pinned_to_parked_nodes_brings_back_exactly_those_and_starts_on_them(lab, gres):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    op = Operator(lab, "operator-demand-named.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, BASE, demand={"cooldown": "2s"}))
        wait(lambda: split_reached(lab, POOL, BASE, total), 180, what=f"{BASE} Slurm, {total - BASE} inference")
        away = parked(lab)
        # The two parked nodes last in the planner's own order (by name among equals): a count alone
        # would bring back the first ones.
        named, other = away[-2:], away[:-2]
        slurm_names = [lab.slurm_name(n) for n in named]
        job = lab.slurm("sbatch", "--parsable", "-p", "gpu", "-N2", "-w", ",".join(slurm_names), "--exclusive", *gres,
                        "--time=2", "-o", "/dev/null", "--wrap", "sleep 15").stdout.strip().split(";")[0]
        wait(lambda: job_state(lab, job) in ("RUNNING", "COMPLETING", "COMPLETED"), 180, what="the pinned job started")
        assert job_nodes(lab, job) == sorted(slurm_names)
        placements = node_placements(lab)
        assert all(placements[n] == "slurm" for n in named), placements
        assert all(placements[n].startswith("inference:") for n in other), placements  # nothing else came back
        assert any(f"named by their jobs ({', '.join(named)})" in m for m in events(lab, "DemandChanged")), events(lab, "DemandChanged")
        assert pool_status(lab, POOL)["target"]["slurmNodes"] == BASE + 2
    finally:
        op.stop()
        reset_lab(lab)
