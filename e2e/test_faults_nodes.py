"""Faults on the real lab (issue 7), Kubernetes side and people: a Node deleted mid-move (and
re-registered by the node agent), a slurmd pod that never registers, and people acting during a
move (a hand uncordon, a hand cordon, an admin's drain in Slurm). What the operator must do is
written down in ARCHITECTURE.md ("Faults and people"). Each prints a `FAULT | ...` row."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
from harness import (
    NAMESPACE,
    Operator,
    apply,
    condition,
    daemon,
    ensure_namespace_and_secret,
    events,
    fault_line,
    get_json,
    install_crd,
    job_state,
    lost_jobs,
    node_json,
    node_placements,
    pdb_json,
    pool_manifest,
    pool_status,
    reset_lab,
    sbatch,
    split_reached,
    settle_sides,
    slurm_states,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "nodefaults"


@pytest.fixture(scope="module")
def op(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    operator = Operator(lab, "operator-faults-nodes.log").start()
    apply(lab, pool_manifest(lab, POOL, 8))
    wait(lambda: split_reached(lab, POOL, 8), 120, what="8 Slurm nodes")
    yield operator
    operator.stop()
    reset_lab(lab)


def scale(lab, n: int) -> None:
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={n}")


def patch_pool(lab, spec: dict) -> None:
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", json.dumps({"spec": spec}))


def move_of(lab, node: str) -> dict:
    return next((m for m in pool_status(lab, POOL).get("moves", []) if m["node"] == node), {})


def about(lab, reason: str, node: str) -> list[str]:
    return [m for m in events(lab, reason) if m.startswith(node) or f" {node} " in f" {m} "]


def slurm_reason(lab, node: str) -> str:
    out = lab.slurm("scontrol", "show", "node", node).stdout
    return next((line.split("Reason=", 1)[1].rsplit(" [", 1)[0] for line in out.splitlines() if "Reason=" in line), "")


def test_node_deleted_mid_move_is_reported_and_adopted_when_back(lab, op):
    scale(lab, 8)
    wait(lambda: split_reached(lab, POOL, 8), 90, what="8/0")
    victim = "gpu08"  # its job has the soonest time limit: the move to inference picks it
    jobs = {n: sbatch(lab, n, 600, 2 if n == victim else 30) for n in lab.nodes}
    wait(lambda: all(job_state(lab, j) == "RUNNING" for j in jobs.values()), 30, what="jobs running")
    scale(lab, 7)
    wait(lambda: move_of(lab, victim).get("phase") == "Draining", 30, what=f"{victim} draining, held by its job")
    started = len(events(lab, "MoveStarted"))
    # The agent (the nodes' "kubelet") is stopped so the Node stays away until it re-registers.
    daemon(lab, "stop", "agent")
    try:
        lab.kubectl("delete", "node", victim)
        wait(lambda: about(lab, "NodeDeleted", victim), 30, what="a NodeDeleted Event")
        cond = wait(lambda: (c := condition(lab, POOL, "Degraded")).get("reason") == "NodeMissing" and c, 30, what="NodeMissing")
        assert f"slurmd-{victim}" in cond["message"] and "jobs on it" in cond["message"], cond
        # Nothing else moves for it, and its slurmd (a job runs there) is kept.
        assert len(events(lab, "MoveStarted")) == started
        assert set(p for n, p in node_placements(lab).items() if n != victim) == {"slurm"}
        pod = get_json(lab, "pod", f"slurmd-{victim}", "-n", NAMESPACE)
        assert not pod["metadata"].get("deletionTimestamp")
        lab.slurm("scancel", jobs[victim])  # its job ends: Slurm no longer uses the node
        wait(lambda: [m for m in events(lab, "OrphanSlurmdDeleted") if f"slurmd-{victim}" in m], 60,
             what="the orphan slurmd pod deleted")
        wait(lambda: condition(lab, POOL, "Degraded").get("status") == "False", 30, what="Degraded cleared")
    finally:
        daemon(lab, "start", "agent")  # re-registers the Node, as a kubelet does
    t0 = time.monotonic()
    wait(lambda: node_placements(lab).get(victim) == "inference:llm" and split_reached(lab, POOL, 7), 120,
         what=f"{victim} re-registered and adopted into inference")
    recovered = time.monotonic() - t0
    lost = lost_jobs(lab, [j for n, j in jobs.items() if n != victim])
    left = settle_sides(lab, POOL)
    assert not lost and not left, (lost, left)
    fault_line("a Node deleted mid-move (Draining, job running), re-registered", "NodeDeleted Event; Degraded NodeMissing "
               "while its slurmd serves a job; orphan slurmd pod deleted once idle; adopted again when back",
               recovered, len(lost), 0)
    lab.slurm("scancel", *jobs.values())


def test_slurmd_that_never_registers_rolls_back_to_inference(lab, op):
    scale(lab, 7)
    wait(lambda: split_reached(lab, POOL, 7), 90, what="7/1")
    node = next(n for n, p in node_placements(lab).items() if p != "slurm")
    good = get_json(lab, "snp", POOL, "-n", NAMESPACE)["spec"]["slurm"]
    patch_pool(lab, {"slurm": {"slurmdPod": {"command": ["false"]}, "registerTimeout": "6s"}})  # exits at once
    try:
        scale(lab, 8)
        back = wait(lambda: about(lab, "MoveRolledBack", node), 60, what="MoveRolledBack")
        t0 = time.monotonic()
        assert "did not register within 6s" in back[0], back
        scale(lab, 7)  # the split goes back to what it was; the node is held anyway
        wait(lambda: split_reached(lab, POOL, 7) and node_placements(lab)[node] == "inference:llm", 60, what="back in inference")
        recovered = time.monotonic() - t0
        held = node_json(lab, node)["metadata"]["annotations"]["slurmpool.io/hold-until"]
        assert datetime.fromisoformat(held.replace("Z", "+00:00")) > datetime.now(timezone.utc), held
        assert slurm_reason(lab, node).startswith("slurmpool:"), slurm_reason(lab, node)  # parked, by us
        left = settle_sides(lab, POOL)
        assert not left, left
        fault_line("slurmd pod that never registers (command exits)", "registerTimeout, MoveRolledBack Event, back to its "
                   "inference pool, held for drain.timeout", recovered, 0, 0)
    finally:
        patch_pool(lab, {"slurm": {"slurmdPod": good["slurmdPod"], "registerTimeout": good["registerTimeout"]}})
        lab.kubectl("annotate", "node", node, "slurmpool.io/hold-until-")


def _web_pod(node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"web-{node}", "namespace": NAMESPACE, "labels": {"app": "web"}},
            "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "nginx"}]}}


def test_people_acting_during_moves(lab, op):
    """A person uncordons the node on its way to Slurm (restored, reported), cordons a settled
    inference node (left alone), and an admin drains the moving node in Slurm with their own reason
    (the node is unhealthy: its move stops, it stays in inference cordoned, the drain stays)."""
    scale(lab, 6)
    wait(lambda: split_reached(lab, POOL, 6), 90, what="6/2")
    inference = sorted(n for n, p in node_placements(lab).items() if p != "slurm")
    apply(lab, [_web_pod(n) for n in inference] + [{
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": NAMESPACE},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}])
    wait(lambda: pdb_json(lab, "web").get("status", {}).get("currentHealthy") == 2, 30, what="PDB healthy")
    scale(lab, 7)
    moving = wait(lambda: (m := [x for x in pool_status(lab, POOL).get("moves", []) if x["phase"] == "Evicting" and x["blockedBy"]])
                  and m[0]["node"], 60, what="a move held in Evicting by the PDB")
    other = next(n for n in inference if n != moving)
    t0 = time.monotonic()
    try:
        _people_act(lab, moving, other, t0)
    finally:  # leave no person's cordon or admin drain behind for the next tests
        lab.kubectl("uncordon", other)
        lab.slurm("scontrol", "update", f"nodename={moving}", "state=resume", check=False)
        lab.kubectl("delete", "pod", "-n", NAMESPACE, "-l", "app=web", "--wait=false")
        lab.kubectl("delete", "pdb", "web", "-n", NAMESPACE, "--ignore-not-found")


def _people_act(lab, moving: str, other: str, t0: float) -> None:
    lab.kubectl("cordon", other)
    lab.kubectl("uncordon", moving)
    wait(lambda: about(lab, "CordonRestored", moving), 30, what="CordonRestored")
    wait(lambda: node_json(lab, moving)["spec"].get("unschedulable"), 30, what="the cordon back")
    lab.slurm("scontrol", "update", f"nodename={moving}", "state=drain", "reason=admin: bad fan")
    assert slurm_reason(lab, moving) == "admin: bad fan"
    # The admin's drain makes the node unhealthy (issue 15): its move stops before anything hands
    # it to Slurm. In Evicting that is its inference pool, still cordoned (a quarantine).
    wait(lambda: about(lab, "MoveStopped", moving), 30, what="the move of the admin-drained node stopped")
    wait(lambda: node_placements(lab)[moving] == "inference:llm" and not move_of(lab, moving), 30, what="back in its pool")
    assert node_json(lab, moving)["spec"].get("unschedulable") and slurm_reason(lab, moving) == "admin: bad fan"
    assert node_json(lab, other)["spec"].get("unschedulable"), "the operator undid a person's cordon"
    # The split is made with the healthy node left: the person's cordoned node (the cheapest) goes.
    lab.kubectl("delete", "pdb", "web", "-n", NAMESPACE)
    wait(lambda: node_placements(lab)[other] == "slurm" and pool_status(lab, POOL).get("moving") == 0, 90, what="the healthy node to Slurm")
    status = pool_status(lab, POOL)
    assert status["slurm"]["ready"] == 7 and status["inference"]["unhealthy"] == 1, status
    # Leaving Slurm again, a healthy node goes; the admin's drain stays, never resumed.
    scale(lab, 6)
    wait(lambda: pool_status(lab, POOL)["slurm"]["ready"] == 6 and pool_status(lab, POOL).get("moving") == 0, 90, what="6 in Slurm")
    recovered = time.monotonic() - t0
    assert node_placements(lab)[moving] == "inference:llm" and slurm_reason(lab, moving) == "admin: bad fan"
    left = settle_sides(lab, POOL)
    assert not left, left
    fault_line("people: uncordon of a node moving to Slurm; cordon of an inference node; admin drain in Slurm",
               "cordon restored (CordonRestored); inference cordon left; the admin-drained node's move stopped "
               "(MoveStopped), kept in its pool cordoned, its drain left in place",
               recovered, 0, 0)


def test_a_node_relabelled_out_of_the_selector_mid_move_is_reported_and_ends_on_a_side(lab, op):
    """issue 37: a person relabels a node out of the pool's selector while its move to inference
    waits in Draining for a job. The pool reports it (Warning NodeLeftSelector, Degraded
    NodeLeftSelector), never as deleted, and ends its move on a side: not yet across, it is turned
    back to Slurm, resumed, its job untouched. Relabelled back, it is the pool's again."""
    scale(lab, 8)
    wait(lambda: split_reached(lab, POOL, 8), 90, what="8/0")
    victim = "gpu08"  # its job has the soonest time limit: the move to inference picks it
    jobs = {n: sbatch(lab, n, 600, 2 if n == victim else 30) for n in lab.nodes}
    wait(lambda: all(job_state(lab, j) == "RUNNING" for j in jobs.values()), 30, what="jobs running")
    scale(lab, 7)
    wait(lambda: move_of(lab, victim).get("phase") == "Draining", 30, what=f"{victim} draining, held by its job")
    deleted = len(about(lab, "NodeDeleted", victim))
    lab.kubectl("label", "node", victim, "slurmpool.io/lab=elsewhere", "--overwrite")  # out of the selector
    t0 = time.monotonic()
    try:
        said = wait(lambda: about(lab, "NodeLeftSelector", victim), 30, what="a NodeLeftSelector Event")
        assert "ends in slurm" in said[0], said
        # Degraded while the move is in flight; a move turned back from Draining may end in the
        # pass that found it (resumed, record dropped), before a status with it is read.
        cond = wait(lambda: ((c := condition(lab, POOL, "Degraded")).get("reason") == "NodeLeftSelector" and c)
                    or "slurmpool.io/move" not in (node_json(lab, victim)["metadata"].get("annotations") or {}), 30,
                    what="Degraded NodeLeftSelector, or the move already ended")
        if isinstance(cond, dict):
            assert victim in cond["message"], cond
        # turned back: no move record left, in Slurm, resumed, its slurmd running, its job untouched
        wait(lambda: "slurmpool.io/move" not in (node_json(lab, victim)["metadata"].get("annotations") or {}), 90,
             what=f"{victim}'s move ended")
        recovered = time.monotonic() - t0
        node = node_json(lab, victim)
        assert node["metadata"]["annotations"].get("slurmpool.io/placement") == "slurm", node["metadata"]["annotations"]
        pod = get_json(lab, "pod", f"slurmd-{victim}", "-n", NAMESPACE)
        assert not pod["metadata"].get("deletionTimestamp")
        wait(lambda: "DRAIN" not in slurm_states(lab)[victim], 30, what=f"{victim} resumed in Slurm")
        assert len(about(lab, "NodeDeleted", victim)) == deleted, "reported as deleted from Kubernetes"
        wait(lambda: condition(lab, POOL, "Degraded").get("reason") != "NodeLeftSelector", 30, what="reported until it ended")
        lost = lost_jobs(lab, list(jobs.values()))
        assert not lost, lost
        fault_line("a node relabelled out of the selector mid-move (Draining, job running)",
                   "NodeLeftSelector Event and Degraded; the move turned back to Slurm (not yet across), resumed, "
                   "its job untouched; never reported deleted", recovered, len(lost), 0)
    finally:
        lab.slurm("scancel", *jobs.values(), check=False)  # nothing holds the move the pool makes next
        lab.kubectl("label", "node", victim, "slurmpool.io/lab=true", "--overwrite")  # the pool's again
    wait(lambda: split_reached(lab, POOL, 7), 120, what="7/1 with the node back in the pool")
    left = settle_sides(lab, POOL)
    assert not left, left
