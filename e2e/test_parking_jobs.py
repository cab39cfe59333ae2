"""Power-save parking under the jobs real sites run (issue 39): Slurm alone chooses which parked
nodes a job needs, and the operator gives back exactly those.

- a job that needs one leaf switch's nodes (`--switches=1`) while every other node is busy starts
  on the two lent nodes of one rack;
- a full-pool gang job (`-N<all> --exclusive`) with three nodes parked starts on every node (its
  submit-to-RUNNING time is a FIGURE: `make bench` keeps the target);
- a give-back that must be declined (a PDB refuses the eviction past evictionTimeout) ends with the
  job requeued, not lost, and the node back in inference with its server;
- a SIGKILL of the operator during a give-back loses nothing: the node ends in Slurm running the job.

Runs in make test's 22.05 lab over SSH and in the 26.05 matrix rows (SSH and REST)."""

from __future__ import annotations

import random
import time

import pytest
from harness import (
    NAMESPACE,
    Operator,
    apply,
    events,
    ensure_namespace_and_secret,
    install_crd,
    job_nodes,
    job_state,
    lent_nodes,
    node_json,
    node_placements,
    now_rfc3339,
    pdb_json,
    pods_json,
    pool_manifest,
    reset_lab,
    slurm_states,
    split_reached,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "park"
PARKED = 3


def rack(node: str) -> int:
    """The lab's topology.conf: racks of two nodes (gpu01 and gpu02 in rack-1, ...)."""
    return (int(node[-2:]) + 1) // 2


def submit(lab, *args: str, seconds: int = 20) -> str:
    out = lab.slurm("sbatch", "--parsable", "-p", "gpu", "--time=5", "-o", "/dev/null", *args, "--wrap", f"sleep {seconds}")
    return out.stdout.strip().split(";")[0]


def cancel(lab, jobs: list[str]) -> None:
    if jobs:
        lab.slurm("scancel", *jobs, check=False)


@pytest.fixture
def parked(lab):
    """A PowerSave pool of every lab node, three of them parked and lent (`idle~`); the operator."""
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    op = Operator(lab, "operator-parking-jobs.log").start()
    try:
        # Every node first serves Slurm (a node whose slurmd never registered is never powered down).
        apply(lab, pool_manifest(lab, POOL, total, slurm={"parking": "PowerSave"}, drain={"evictionTimeout": "15s"}))
        wait(lambda: split_reached(lab, POOL, total, total), 180, what=f"{total} Slurm")
        apply(lab, pool_manifest(lab, POOL, total - PARKED, slurm={"parking": "PowerSave"}, drain={"evictionTimeout": "15s"}))
        wait(lambda: split_reached(lab, POOL, total - PARKED, total), 180, what=f"{total - PARKED} Slurm, {PARKED} parked")
        wait(lambda: len(lent_nodes(lab)) == PARKED, 120, what=f"{PARKED} parked nodes lent (idle~)")
        yield op, total
    finally:
        op.stop()
        reset_lab(lab)


def test_a_job_on_one_switch_brings_back_that_racks_lent_nodes(lab, parked):
    op, total = parked
    idle = lent_nodes(lab)
    racks = {r: [n for n in idle if rack(n) == r] for r in {rack(n) for n in idle}}
    pair = next((nodes for nodes in racks.values() if len(nodes) == 2), None)
    # The planner parks whole racks first (topology-aware victims): three parked nodes fill one rack.
    assert pair, f"no rack has both its nodes parked: {idle}"
    busy = [submit(lab, "-N1", "--exclusive", "-w", n, seconds=300) for n in sorted(set(lab.nodes) - set(idle))]
    try:
        wait(lambda: all(job_state(lab, j) == "RUNNING" for j in busy), 60, what="every Slurm node busy")
        since = now_rfc3339()
        job = submit(lab, "-N2", "--exclusive", "--switches=1")
        wait(lambda: job_state(lab, job) in ("RUNNING", "COMPLETING", "COMPLETED"), 180, what="the one-switch job started")
        assert job_nodes(lab, job) == pair, (job_nodes(lab, job), pair)
        started = events(lab, "MoveStarted", since)
        assert sorted(m.split(":")[0] for m in started if "(give-back," in m) == pair, started
        assert events(lab, "GiveBackDeclined", since) == []
    finally:
        cancel(lab, busy)


def test_a_full_pool_gang_job_with_three_nodes_parked_starts(lab, parked):
    op, total = parked
    since = now_rfc3339()
    t0 = time.monotonic()
    job = submit(lab, f"-N{total}", "--exclusive")
    wait(lambda: job_state(lab, job) in ("RUNNING", "COMPLETING", "COMPLETED"), 240, what="the gang job started")
    took = time.monotonic() - t0
    print(f"\nFIGURE | gang job -N{total} with {PARKED} parked (PowerSave): submit to RUNNING | {took:.1f} s | "
          "target: one move + Slurm's start after a resume (make bench)")
    assert job_nodes(lab, job) == sorted(lab.nodes)
    started = events(lab, "MoveStarted", since)
    assert len([m for m in started if "(give-back," in m]) == PARKED, started
    wait(lambda: job_state(lab, job) == "COMPLETED", 120, what="the gang job completed")


def _web(node: str) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"web-{node}", "namespace": NAMESPACE, "labels": {"app": "web"}},
             "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "c", "image": "nginx"}]}},
            {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": NAMESPACE},
             "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}]


def test_a_declined_give_back_requeues_the_job_and_the_node_stays_in_inference(lab, parked):
    op, total = parked
    node = lent_nodes(lab)[0]
    apply(lab, _web(node))
    wait(lambda: pdb_json(lab, "web").get("status", {}).get("currentHealthy") == 1, 60, what="the PDB healthy")
    since = now_rfc3339()
    job = submit(lab, "-N1", "--exclusive", "-w", node)
    try:
        declined = wait(lambda: events(lab, "GiveBackDeclined", since), 120, what="the give-back declined (evictions refused 15 s)")
        assert declined[0].startswith(node), declined
        wait(lambda: node_placements(lab).get(node, "").startswith("inference:") and not _moving(lab, node), 120,
             what=f"{node} back in inference")
        # back where it was: parked, held this time (`drain~`), not left powering up for ResumeTimeout
        wait(lambda: {"POWERED_DOWN", "DRAIN"} <= set(slurm_states(lab).get(lab.slurm_name(node), "").split("+")), 120,
             what=f"{node} parked again, held (drain~)")
        # the job is requeued, never lost: pending again (or on its way), never failed or cancelled
        state = job_state(lab, job)
        assert state in ("PENDING", "CONFIGURING", "REQUEUED", "RUNNING"), state
        assert node in [p["spec"]["nodeName"] for p in _pods(lab, "app=web")], "the server was evicted"
    finally:
        cancel(lab, [job])
        lab.kubectl("delete", "pdb", "web", "-n", NAMESPACE, "--ignore-not-found", check=False)


def test_a_sigkill_during_a_give_back_loses_nothing(lab, parked):
    op, total = parked
    node = lent_nodes(lab)[0]
    since = now_rfc3339()
    job = submit(lab, "-N1", "--exclusive", "-w", node, seconds=30)
    try:
        wait(lambda: any(m.startswith(node) for m in events(lab, "MoveStarted", since)), 60, what="the give-back started")
        time.sleep(random.uniform(0.0, 4.0))  # a random moment of the give-back (it lasts a few seconds)
        op.kill()
        again = Operator(lab, "operator-parking-jobs.log").start()
        try:
            wait(lambda: job_state(lab, job) in ("RUNNING", "COMPLETING", "COMPLETED"), 180, what="the job started after the SIGKILL")
            assert job_nodes(lab, job) == [node]
            assert events(lab, "GiveBackDeclined", since) == []
            wait(lambda: job_state(lab, job) == "COMPLETED", 120, what="the job completed")
            wait(lambda: split_reached(lab, POOL, total - PARKED, total), 180, what="back to the split, nothing between sides")
        finally:
            again.stop()
    finally:
        cancel(lab, [job])


def _moving(lab, node: str) -> bool:
    return "slurmpool.io/move" in (node_json(lab, node)["metadata"].get("annotations") or {})


def _pods(lab, selector: str) -> list[dict]:
    return pods_json(lab, NAMESPACE, selector)
