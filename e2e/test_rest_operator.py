"""The operator through slurmrestd (spec.slurm.access.rest) on a lab that runs it (LAB_SLURM=26.05
or 24.11): moves both ways, slurmrestd stopped mid-move (fail closed, no step taken, recovery once it
is back), and an expired token (the pool says why; a renewed token in the Secret is picked up).
The rest of the move suite runs through REST too in the Slurm matrix (e2e/matrix.sh, LAB_ACCESS=rest)."""

from __future__ import annotations

import time

import pytest

from harness import (
    NAMESPACE,
    Operator,
    access_spec,
    apply,
    daemon,
    ensure_namespace_and_secret,
    install_crd,
    jwt_secret,
    job_state,
    node_placements,
    pool_manifest,
    pool_status,
    reset_lab,
    sbatch,
    settle_sides,
    slurm_states,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "rest"


@pytest.fixture(scope="module")
def op(lab):
    if not lab.env.get("LAB_SLURMRESTD_URL"):
        pytest.skip("this lab runs no slurmrestd: LAB_SLURM=26.05 (or 24.11) starts one")
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    operator = Operator(lab, "operator-rest.log").start()
    pool = pool_manifest(lab, POOL, 8)
    pool["spec"]["slurm"]["access"] = access_spec(lab, "rest")
    apply(lab, pool)
    wait(lambda: settled(lab, 8), 120, what="8 Slurm nodes through REST")
    yield operator
    operator.stop()
    reset_lab(lab)


def settled(lab, slurm: int) -> bool:
    s = pool_status(lab, POOL)
    return s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == 8 - slurm and s.get("moving") == 0


def condition(lab, type_: str) -> dict:
    return next((c for c in pool_status(lab, POOL).get("conditions", []) if c["type"] == type_), {})


def scale(lab, n: int) -> None:
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={n}")


def test_the_pool_uses_rest_and_moves_both_ways(lab, op):
    pool = lab.kubectl_json("get", "snp", POOL, "-n", NAMESPACE)
    assert set(pool["spec"]["slurm"]["access"]) == {"rest"}
    scale(lab, 6)
    wait(lambda: settled(lab, 6), 60, what="6/2 through REST")
    parked = sorted(n for n, p in node_placements(lab).items() if p.startswith("inference:"))
    states = slurm_states(lab)
    assert len(parked) == 2 and all("DRAIN" in states[n] for n in parked), states
    scale(lab, 8)
    wait(lambda: settled(lab, 8), 60, what="8/0 through REST")
    states = slurm_states(lab)
    assert all("DRAIN" not in states[n] for n in parked), states  # resumed through REST
    assert not settle_sides(lab, POOL)


def test_slurmrestd_stopped_mid_move_fails_closed_then_recovers(lab, op):
    wait(lambda: settled(lab, 8), 60, what="8/0")
    nodes = sorted(node_placements(lab))
    node = nodes[0]
    job = sbatch(lab, node, 600, 10)  # every node busy; this job ends first: the node chosen, held in Draining
    others = [sbatch(lab, n, 600, 60) for n in nodes[1:]]
    wait(lambda: all(job_state(lab, j) == "RUNNING" for j in [job, *others]), 30, what="jobs running")
    scale(lab, 7)
    wait(lambda: any(m["node"] == node and m["phase"] == "Draining" for m in pool_status(lab, POOL).get("moves", [])), 30,
         what=f"{node} draining")
    daemon(lab, "stop", "slurmrestd")
    try:
        cond = wait(lambda: (c := condition(lab, "Degraded")).get("status") == "True" and c, 60, what="Degraded")
        assert cond["reason"] == "SlurmUnavailable", cond
        lab.slurm("scancel", job)  # the drain would be done now, but the operator cannot see it
        wait(lambda: job_state(lab, job) in ("CANCELLED", "GONE"), 30, what="job ended")
        time.sleep(3)  # several passes: none may take a step it cannot see through
        moves = pool_status(lab, POOL).get("moves", [])
        assert [(m["node"], m["phase"]) for m in moves] == [(node, "Draining")], moves
        assert node_placements(lab)[node] == "slurm"
    finally:
        daemon(lab, "start", "slurmrestd")
    wait(lambda: settled(lab, 7), 60, what="the move finished once slurmrestd was back")
    wait(lambda: condition(lab, "Degraded").get("status") == "False", 30, what="Degraded cleared")
    assert node_placements(lab)[node] == "inference:llm"
    assert all(job_state(lab, j) == "RUNNING" for j in others), "a job on another node was touched"
    lab.slurm("scancel", *others)
    scale(lab, 8)
    wait(lambda: settled(lab, 8), 60, what="8/0 again")


def test_an_expired_token_is_reported_and_a_renewed_one_is_picked_up(lab, op):
    wait(lambda: settled(lab, 8), 60, what="8/0")
    short = lab.slurm("scontrol", "token", "username=root", "lifespan=1").stdout.strip().removeprefix("SLURM_JWT=")
    time.sleep(2)  # expired
    apply(lab, [jwt_secret(short)])  # read within 30 s (the token in use stays valid until then)
    cond = wait(lambda: (c := condition(lab, "Degraded")).get("status") == "True" and c, 90, what="Degraded for the token")
    assert cond["reason"] == "SlurmUnavailable" and "token" in cond["message"].lower(), cond
    scale(lab, 7)
    time.sleep(3)  # several passes: none may start a move it cannot see through
    assert set(node_placements(lab).values()) == {"slurm"}
    assert not pool_status(lab, POOL).get("moves")
    apply(lab, [jwt_secret(lab.env["LAB_SLURM_JWT"])])
    wait(lambda: settled(lab, 7), 90, what="moves again with the renewed token")
    wait(lambda: condition(lab, "Degraded").get("status") == "False", 30, what="Degraded cleared")
    scale(lab, 8)
    wait(lambda: settled(lab, 8), 60, what="8/0 again")
