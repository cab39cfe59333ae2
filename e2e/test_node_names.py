"""Slurm NodeNames that differ from the Kubernetes Node names (issue 25's acceptance): on a lab
whose Slurm calls node gpu01 `sgpu01` (LAB_SLURM_NAME_PREFIX=s; matrix row 22.05-names), a pool
with `slurm.nodeName: "s{name}"` moves nodes both ways with jobs running on the Slurm side, draining
and resuming under the Slurm names; without the mapping it drains and moves nothing, and its status
says why (`SlurmUnlisted`). No job is cancelled: each job waits for a gate file the test creates
(no timing), and ends by itself."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness import (
    NAMESPACE,
    Operator,
    apply,
    ensure_namespace_and_secret,
    events,
    install_crd,
    job_state,
    node_json,
    node_placements,
    now_rfc3339,
    pool_json,
    pool_manifest,
    pool_status,
    reset_lab,
    slurm_states,
    slurmd_pods,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "names"
JOBS: dict[str, tuple[str, Path]] = {}  # Kubernetes node -> (its gated job, the gate file)


@pytest.fixture(scope="module")
def prefix(lab) -> str:
    value = lab.env.get("LAB_SLURM_NAME_PREFIX", "")
    if not value:
        pytest.skip("needs a lab whose Slurm names differ from the Node names: LAB_SLURM_NAME_PREFIX=s (matrix row 22.05-names)")
    return value


@pytest.fixture(scope="module")
def op(lab, prefix):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    operator = Operator(lab, log_name="operator-names.log").start()
    yield operator
    operator.stop()
    print(operator.log_tail(30))
    for _, gate in JOBS.values():  # every job ends by itself, none is left waiting
        gate.touch()
    JOBS.clear()
    reset_lab(lab)


def manifest(lab, prefix: str, slurm_nodes: int) -> dict:
    return pool_manifest(lab, POOL, slurm_nodes, slurm={
        "nodeName": prefix + "{name}",
        "slurmdPod": {"image": "slurmd:22.05", "command": ["slurmd", "-D", "-N", "$(SLURM_NODENAME)"]},
    })


def gated_job(lab, node: str) -> str:
    """A whole-node job on the node's Slurm name that runs until its gate file exists."""
    gates = Path(lab.dir) / "state" / "names-gates"
    gates.mkdir(parents=True, exist_ok=True)
    gate = gates / node
    gate.unlink(missing_ok=True)
    out = lab.slurm("sbatch", "--parsable", "-w", lab.slurm_name(node), "--gres=gpu:8", "--time=30", "-o", "/dev/null",
                    "--wrap", f"while [ ! -e {gate} ]; do sleep 1; done").stdout
    job = out.strip().split(";")[0]
    JOBS[node] = (job, gate)
    return job


def release(*nodes: str) -> None:
    for node in nodes:
        JOBS[node][1].touch()


def running_jobs_everywhere(lab, nodes) -> bool:
    """Each node's gated job RUNNING (one squeue call)."""
    running = set(lab.slurm("squeue", "-h", "-t", "RUNNING", "-o", "%i").stdout.split())
    return all(JOBS[n][0] in running for n in nodes)


def settled(lab, slurm: int, total: int = 8):
    def check():
        s = pool_status(lab, POOL)
        return (s.get("observedGeneration") == pool_json(lab, POOL)["metadata"]["generation"]
                and s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == total - slurm
                and s.get("moving") == 0 and s.get("unhealthy") == 0) and s
    return check


def slurmd_names(lab) -> dict[str, str]:
    """Kubernetes node -> the SLURM_NODENAME its live slurmd pod runs `slurmd -N` with."""
    out = {}
    for pod in slurmd_pods(lab):
        if not pod["metadata"].get("deletionTimestamp"):
            env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}
            out[pod["spec"]["nodeName"]] = env.get("SLURM_NODENAME")
    return out


def ensure_at_eight(lab, prefix: str) -> None:
    """The pool with the mapping, all 8 nodes serving Slurm under their Slurm names (the first test
    leaves it so; a test run alone (-k) makes it)."""
    apply(lab, manifest(lab, prefix, 8))
    wait(settled(lab, 8), 240, what="8 nodes in Slurm")
    wait(lambda: all(slurm_states(lab).get(lab.slurm_name(n), "").split("+")[0] in ("IDLE", "ALLOCATED", "MIXED")
                     and "DRAIN" not in slurm_states(lab)[lab.slurm_name(n)] for n in lab.nodes), 60,
         what="8 Slurm nodes serving, none drained")


def test_a_pool_with_the_mapping_moves_nodes_both_ways_under_the_slurm_names(lab, op, prefix):
    ensure_at_eight(lab, prefix)
    names = {n: lab.slurm_name(n) for n in lab.nodes}
    assert all(s != n for n, s in names.items())
    # Slurm knows the nodes only by their Slurm names, and each slurmd registered under its own.
    assert lab.slurm("scontrol", "show", "node", lab.nodes[0], check=False).returncode != 0
    assert slurmd_names(lab) == names

    for node in lab.nodes:
        gated_job(lab, node)
    wait(lambda: running_jobs_everywhere(lab, lab.nodes), 120, what="a running job on every node")

    # To inference: two busy nodes are drained under their Slurm names and wait for their jobs.
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=6")

    def draining():
        moves = [m for m in pool_status(lab, POOL).get("moves", []) if m["phase"] == "Draining"]
        states = slurm_states(lab)
        drained = [n for n in lab.nodes if "DRAIN" in states.get(names[n], "")]
        return len(moves) == 2 and sorted(m["node"] for m in moves) == sorted(drained) and moves

    moves = wait(draining, 120, what="two moves in Draining, those nodes drained in Slurm under their Slurm names")
    victims = sorted(m["node"] for m in moves)
    assert all(any(b.startswith("job/") for b in m["blockedBy"]) for m in moves), moves
    assert set(victims) <= set(slurmd_names(lab)), "a slurmd pod was deleted while its jobs ran"
    assert running_jobs_everywhere(lab, lab.nodes)

    release(*victims)
    wait(settled(lab, 6), 240, what="6 in Slurm, 2 in inference")
    assert {n: p for n, p in node_placements(lab).items() if n in victims} == {n: "inference:llm" for n in victims}
    assert all(job_state(lab, JOBS[n][0]) == "COMPLETED" for n in victims)
    assert not set(victims) & set(slurmd_names(lab))
    states = slurm_states(lab)
    assert all("DRAIN" in states[names[n]] for n in victims), states  # parked drained in Slurm
    kept = [n for n in lab.nodes if n not in victims]
    assert running_jobs_everywhere(lab, kept)
    assert not any("DRAIN" in states[names[n]] for n in kept), states

    # Back to Slurm: slurmd started as the Slurm name, registered, resumed under it.
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=8")
    wait(settled(lab, 8), 240, what="8 in Slurm again")
    wait(lambda: all(slurm_states(lab)[names[n]] == "IDLE" for n in victims), 60, what="the two nodes idle in Slurm")
    assert slurmd_names(lab) == names
    assert running_jobs_everywhere(lab, kept)


def test_without_the_mapping_nothing_is_drained_or_moved_and_the_status_says_why(lab, op, prefix):
    ensure_at_eight(lab, prefix)
    names = {n: lab.slurm_name(n) for n in lab.nodes}
    busy = [n for n in lab.nodes if n in JOBS and job_state(lab, JOBS[n][0]) == "RUNNING"]
    for node in [n for n in lab.nodes if n not in busy][:max(0, 6 - len(busy))]:
        gated_job(lab, node)
        busy.append(node)
    idle = [n for n in lab.nodes if n not in busy]
    wait(lambda: running_jobs_everywhere(lab, busy), 120, what="jobs running on 6 nodes")
    pods = {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in slurmd_pods(lab)}

    # The mapping taken off: gpuXX is no Slurm node, so every node the pool holds in Slurm is unlisted.
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"slurm":{"nodeName":null}}}')

    def unlisted():
        s = pool_status(lab, POOL)
        found = {u["node"]: u for u in s.get("unhealthyNodes", []) if u["kind"] == "SlurmUnlisted"}
        return sorted(found) == sorted(lab.nodes) and s
    wait(unlisted, 120, what="every node SlurmUnlisted")
    # Scaled down, with two idle nodes that would be the first choice: nothing moves.
    since = now_rfc3339()
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=6")
    wait(lambda: (s := pool_status(lab, POOL)).get("observedGeneration") == pool_json(lab, POOL)["metadata"]["generation"]
         and s.get("slurm", {}).get("desired") == 6 and s, 60, what="the scale to 6 seen")

    def unchanged() -> str | None:
        """What moved, or None."""
        s = pool_status(lab, POOL)
        states = slurm_states(lab)
        if s.get("moves") or s.get("moving"):
            return f"moves {s.get('moves')}"
        if moving := [n for n in lab.nodes if "slurmpool.io/move" in (node_json(lab, n)["metadata"].get("annotations") or {})]:
            return f"move records on {moving}"
        if drained := [n for n in lab.nodes if "DRAIN" in states.get(names[n], "")]:
            return f"drained in Slurm: {drained}"
        if {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in slurmd_pods(lab)} != pods:
            return "slurmd pods changed"
        if not running_jobs_everywhere(lab, busy):
            return "a job stopped running"
        return None

    for _ in range(12):  # over many passes of the operator (SLURMPOOL_INTERVAL 0.5 s)
        assert (what := unchanged()) is None, what
        time.sleep(1)
    assert events(lab, "MoveStarted", since) == []  # not even a move stopped at once (moves.stop_side)
    s = pool_status(lab, POOL)
    assert s["slurm"]["unhealthy"] == 8 and s["unhealthy"] == 8, s
    for u in s["unhealthyNodes"]:
        assert u["side"] == "slurm" and "Slurm does not list the node under its Slurm NodeName" in u["reason"], u
        assert "spec.slurm.nodeName" in u["reason"], u
    ready = next(c for c in s["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False", ready

    # The mapping back: healthy again, and the scale goes ahead on the idle nodes; the jobs run on.
    apply(lab, manifest(lab, prefix, 6))
    wait(settled(lab, 6), 240, what="6 in Slurm, 2 in inference, with the mapping back")
    assert {n: p for n, p in node_placements(lab).items() if n in idle} == {n: "inference:llm" for n in idle}
    assert running_jobs_everywhere(lab, busy)
    release(*busy)
    wait(lambda: all(job_state(lab, JOBS[n][0]) == "COMPLETED" for n in busy), 120, what="every job completed by itself")
