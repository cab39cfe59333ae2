"""The operator on the real lab (issue 3's acceptance): a real apiserver, real slurmctld and
slurmd processes started by the lab's node agent, the real sshd. Tests run in order on one
pool named `gpu` over the lab's 8 nodes."""

from __future__ import annotations

import time

import pytest
import yaml
from kubernetes.client.rest import ApiException

from harness import (
    module_operator,
    REPO,
    lab_access,
    NAMESPACE,
    Operator,
    apply,
    events_json,
    get_json,
    node_placements,
    pdb_json,
    pool_json,
    pool_manifest,
    pool_status,
    slurm_states,
    settle_sides,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "gpu"
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def op(lab):
    yield from module_operator(lab)
    print("timings:", TIMINGS)


def placements(lab):
    return node_placements(lab)


def settled(lab, slurm: int, inference: int):
    def check():
        s = pool_status(lab, POOL)
        ready = s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == inference and s.get("moving") == 0
        return s if ready else None

    return check


def ensure_pool(lab, slurm: int | None = None) -> None:
    """The module's pool, settled: created at 8 Slurm nodes (as the first test makes it) when no
    test before made it, then scaled to `slurm` if given. Tests that follow on from an earlier
    one start with this, so each also runs alone (-k); in order it only checks the split."""
    try:
        current = pool_json(lab, POOL)["spec"]["slurmNodes"]
    except ApiException as err:
        if err.status != 404:
            raise
        apply(lab, pool_manifest(lab, POOL, 8))
        wait(settled(lab, 8, 0), 120, what="status 8/0")
        current = 8
    if slurm is not None:
        if current != slurm:  # no no-op scale: it would change who managedFields says set the count
            lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={slurm}")
        wait(settled(lab, slurm, 8 - slurm), 90, what=f"status {slurm}/{8 - slurm}")
    else:
        wait(lambda: (s := pool_status(lab, POOL)).get("moving") == 0
             and s.get("slurm", {}).get("ready", 0) + s.get("inference", {}).get("ready", 0) == 8, 90, what="a settled split")


def idle_in_slurm(lab, count: int):
    def check():
        states = slurm_states(lab)
        idle = [n for n, st in states.items() if st == "IDLE"]
        return idle if len(idle) == count else None

    return check


def inference_sample() -> tuple[dict, dict]:
    """deploy/samples/inference-llm.yaml's Deployment and PodDisruptionBudget, in the test's namespace."""
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "samples" / "inference-llm.yaml").read_text()) if d]
    for d in docs:
        d["metadata"]["namespace"] = NAMESPACE
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (pdb,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    return deployment, pdb


# The sample's whole-node servers, one per inference node of pool llm (3 after the scale to 5).
LLM_DEPLOYMENT, LLM_PDB = inference_sample()
LLM_DEPLOYMENT["spec"]["replicas"] = 3
assert LLM_DEPLOYMENT["spec"]["selector"]["matchLabels"] == LLM_PDB["spec"]["selector"]["matchLabels"] == {"app": "llm"}


def test_all_eight_nodes_join_slurm(lab, op):
    t0 = time.monotonic()
    apply(lab, pool_manifest(lab, POOL, 8))
    wait(idle_in_slurm(lab, 8), 120, what="8 idle Slurm nodes")
    wait(settled(lab, 8, 0), 30, what="status 8/0")
    TIMINGS["join 8 nodes"] = time.monotonic() - t0
    assert set(placements(lab).values()) == {"slurm"}
    pods = get_json(lab, "pods", "-n", NAMESPACE, "-l", "slurmpool.io/component=slurmd")["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(lab.nodes)


def test_scale_to_five_moves_three_to_inference_and_pods_land(lab, op):
    ensure_pool(lab, 8)
    t0 = time.monotonic()
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"slurmNodes":5}}')
    wait(settled(lab, 5, 3), 60, what="status 5/3")
    TIMINGS["move 3 idle nodes to inference"] = time.monotonic() - t0
    inference_nodes = sorted(n for n, p in placements(lab).items() if p == "inference:llm")
    assert len(inference_nodes) == 3
    states = slurm_states(lab)
    for node in inference_nodes:
        assert "DRAIN" in states[node], states[node]  # parked drained in Slurm
        body = get_json(lab, "node", node)
        assert not body["spec"].get("unschedulable")
        assert body["metadata"]["labels"]["slurmpool.io/inference-pool"] == "llm"
    slurmd_nodes = {p["spec"]["nodeName"] for p in get_json(lab, "pods", "-n", NAMESPACE, "-l", "slurmpool.io/component=slurmd")["items"]}
    assert slurmd_nodes.isdisjoint(inference_nodes)
    apply(lab, LLM_DEPLOYMENT)
    lab.kubectl("rollout", "status", "deployment/llm", "-n", NAMESPACE, "--timeout=60s")
    pods = get_json(lab, "pods", "-n", NAMESPACE, "-l", "app=llm")["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == inference_nodes


def test_pdb_blocks_the_move_back_to_slurm_until_relaxed(lab, op):
    ensure_pool(lab, 5)
    apply(lab, LLM_DEPLOYMENT)  # unchanged if the test before left it: 3 servers on the 3 inference nodes
    lab.kubectl("rollout", "status", "deployment/llm", "-n", NAMESPACE, "--timeout=60s")
    pdb = {**LLM_PDB, "spec": {**LLM_PDB["spec"], "maxUnavailable": 0}}  # the sample's, tightened: no eviction at all
    apply(lab, pdb)
    wait(lambda: pdb_json(lab, "llm").get("status", {}).get("expectedPods") == 3, 30, what="PDB observed")
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=6")

    def blocked():
        s = pool_status(lab, POOL)
        cond = next((c for c in s.get("conditions", []) if c["type"] == "DrainBlocked"), {})
        return cond if cond.get("status") == "True" and "pod/" + NAMESPACE + "/llm-" in cond.get("message", "") else None

    cond = wait(blocked, 30, what="DrainBlocked naming the pod")
    assert cond["reason"] == "EvictionRefused"
    time.sleep(2)
    assert len(get_json(lab, "pods", "-n", NAMESPACE, "-l", "app=llm")["items"]) == 3, "a pod was forced out"
    apply(lab, LLM_PDB)  # the sample's own: maxUnavailable 1
    wait(settled(lab, 6, 2), 60, what="status 6/2 after relaxing the PDB")
    wait(idle_in_slurm(lab, 6), 30, what="6 idle Slurm nodes")
    lab.kubectl("delete", "pdb", "llm", "-n", NAMESPACE)
    lab.kubectl("delete", "deployment", "llm", "-n", NAMESPACE)


def test_kubectl_scale_and_printer_columns(lab, op):
    ensure_pool(lab)
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=5")
    wait(settled(lab, 5, 3), 60, what="status 5/3")
    table = lab.kubectl("get", "snp", "-n", NAMESPACE).stdout
    header = table.splitlines()[0].split()
    assert header == ["NAME", "SLURM", "INFERENCE", "TARGET", "SOURCE", "MOVING", "UNHEALTHY", "AGE"]
    assert table.splitlines()[1].split()[:7] == [POOL, "5", "3", "5", "Manual", "0", "0"]
    wide = lab.kubectl("get", "snp", "-n", NAMESPACE, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[8:12] == ["BLOCKED", "PAUSED", "READY", "SPEC"]
    assert wide[1].split()[8:12] == ["0", "false", "True", "5"]
    scale = get_json(lab, "snp", POOL, "-n", NAMESPACE, "--subresource=scale")
    assert scale["spec"]["replicas"] == 5 and scale["status"]["replicas"] == 5


def _sbatch(lab, node: str, seconds: int, limit_minutes: int) -> str:
    out = lab.slurm("sbatch", "--parsable", "-w", node, "--gres=gpu:8", f"--time={limit_minutes}", "-o", "/dev/null",
                    "--wrap", f"sleep {seconds}").stdout
    return out.strip().split(";")[0]


def _job_state(lab, job_id: str) -> str:
    out = lab.slurm("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()
    return out


def _slurm_nodes(lab) -> list[str]:
    return sorted(n for n, p in placements(lab).items() if p == "slurm")


def test_a_running_job_holds_the_node_until_it_ends(lab, op):
    ensure_pool(lab)
    nodes = _slurm_nodes(lab)
    jobs = {n: _sbatch(lab, n, 600, 30 + i) for i, n in enumerate(nodes)}
    soon = nodes[-1]
    lab.slurm("scancel", jobs[soon])
    jobs[soon] = _sbatch(lab, soon, 12, 2)  # ends first (2 min limit): chosen first
    wait(lambda: all(_job_state(lab, j) == "RUNNING" for j in jobs.values()), 30, what="jobs running")
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={len(nodes) - 1}")

    def draining():
        moves = pool_status(lab, POOL).get("moves", [])
        return moves[0] if moves and moves[0]["phase"] == "Draining" and moves[0]["blockedBy"] else None

    move = wait(draining, 20, what="a move blocked by a job")
    assert move["node"] == soon and move["blockedBy"] == [f"job/{jobs[soon]}"]
    assert "DRAIN" in slurm_states(lab)[soon]
    assert _job_state(lab, jobs[soon]) == "RUNNING"  # never killed
    wait(settled(lab, len(nodes) - 1, 8 - len(nodes) + 1), 60, what="move done after the job ended")
    assert placements(lab)[soon] == "inference:llm"
    for n, j in jobs.items():
        if n != soon:
            assert _job_state(lab, j) == "RUNNING"
    lab.slurm("scancel", *[j for n, j in jobs.items() if n != soon])


def test_drain_timeout_requeue_keeps_the_job(lab, op):
    if lab_access() == "rest" and lab.env.get("LAB_SLURM") != "26.05":
        pytest.skip("slurmrestd before 26.05 (API v0.0.45) has no requeue: docs/pools.md, slurm.access.rest")
    ensure_pool(lab)
    nodes = _slurm_nodes(lab)
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"drain":{"timeout":"3s","onTimeout":"Requeue"}}}')
    try:
        _requeue(lab, op, nodes)
    finally:  # the module's default drain policy for the tests after this one
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"drain":{"timeout":"10m","onTimeout":"Wait"}}}')


def _victim_and_others(lab, nodes: list[str]) -> tuple[str, list[str]]:
    """A running job on each node; the one on nodes[0] is the planner's victim under Requeue or
    Cancel on every count: it ends first (30 min limit against 60) and, started 2 s after the others
    (Slurm's times are whole seconds), it has done the least work a requeue or cancel would lose
    (issue 36's victim order). All running before the scale: a node whose job is still starting
    looks idle, and an idle node is the planner's first choice."""
    others = [_sbatch(lab, n, 600, 60) for n in nodes[1:]]
    wait(lambda: all(_job_state(lab, j) == "RUNNING" for j in others), 30, what="jobs running")
    time.sleep(2)
    job = _sbatch(lab, nodes[0], 600, 30)
    wait(lambda: _job_state(lab, job) == "RUNNING", 30, what="the victim's job running")
    return job, others


def _requeue(lab, op, nodes: list[str]) -> None:
    wait(lambda: not lab.slurm("squeue", "-h").stdout.strip(), 30, what="no jobs left")
    job, others = _victim_and_others(lab, nodes)
    try:
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={len(nodes) - 1}")
        try:
            wait(settled(lab, len(nodes) - 1, 8 - len(nodes) + 1), 60, what="node moved after requeue")
        except AssertionError:
            print(pool_status(lab, POOL), lab.slurm("squeue").stdout, op.log_tail(40))
            raise
        assert placements(lab)[nodes[0]] == "inference:llm"
        state = _job_state(lab, job)
        assert state in ("PENDING", "RUNNING", "CONFIGURING"), f"job {job} lost: {state!r}"
        events = lab.kubectl("get", "events", "-n", NAMESPACE, "--field-selector", "reason=JobsRequeued", "-o", "name").stdout
        assert events.strip()
    finally:  # a failure here must not leave jobs for the tests after it
        lab.slurm("scancel", job, *others, check=False)


def test_drain_timeout_cancel_ends_only_the_jobs_on_that_node(lab, op):
    ensure_pool(lab)
    nodes = _slurm_nodes(lab)
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"drain":{"timeout":"3s","onTimeout":"Cancel"}}}')
    try:
        wait(lambda: not lab.slurm("squeue", "-h").stdout.strip(), 30, what="no jobs left")
        job, others = _victim_and_others(lab, nodes)
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={len(nodes) - 1}")
        wait(settled(lab, len(nodes) - 1, 8 - len(nodes) + 1), 60, what="node moved after the cancel")
        assert placements(lab)[nodes[0]] == "inference:llm"
        assert _job_state(lab, job) in ("", "CANCELLED", "COMPLETING"), f"job {job} still {_job_state(lab, job)!r}"
        assert all(_job_state(lab, j) == "RUNNING" for j in others), "a job on another node was touched"
        assert any(job in (e.get("message") or "") for e in events_json(lab, NAMESPACE, "reason=JobsCancelled"))
        lab.slurm("scancel", *others)
    finally:
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"drain":{"timeout":"10m","onTimeout":"Wait"}}}')


def test_drain_timeout_rollback_gives_the_node_back_to_slurm(lab, op):
    ensure_pool(lab)
    nodes = _slurm_nodes(lab)
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"drain":{"timeout":"3s","onTimeout":"Rollback"}}}')
    wait(lambda: not lab.slurm("squeue", "-h").stdout.strip(), 30, what="no jobs left")
    jobs = [_sbatch(lab, n, 600, 30) for n in nodes]
    wait(lambda: all(_job_state(lab, j) == "RUNNING" for j in jobs), 30, what="jobs running")
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={len(nodes) - 1}")

    def rolled_back():
        out = " ".join(e.get("message") or "" for e in events_json(lab, NAMESPACE, "reason=MoveRolledBack")).strip()
        return out.split(":")[0] if out else None

    node = wait(rolled_back, 30, what="a MoveRolledBack event")
    # Back to the split it had: the operator stops trying other (busy) nodes.
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={len(nodes)}")
    wait(settled(lab, len(nodes), 8 - len(nodes)), 60, what="every move turned back")
    assert placements(lab)[node] == "slurm"
    assert all(_job_state(lab, j) == "RUNNING" for j in jobs), "a job was touched by a rollback"
    states = slurm_states(lab)
    assert all("DRAIN" not in states[n] for n in nodes), states
    lab.slurm("scancel", *jobs)
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"drain":{"timeout":"10m","onTimeout":"Wait"}}}')


@pytest.mark.parametrize(
    "direction,phase",
    [("to_inference", p) for p in ("Draining", "StoppingSlurmd", "Relabeling")]
    + [("to_slurm", p) for p in ("Cordoning", "Evicting", "StartingSlurmd", "Registering", "Resuming")],
)
def test_sigkill_at_each_phase_resumes_the_move(lab, op, direction, phase):
    """The operator kills itself (SIGKILL) right after recording `phase` on the node and
    before acting on it; a fresh operator must finish the move."""
    ensure_pool(lab)
    wait(lambda: pool_status(lab, POOL).get("moving") == 0, 60, what="no move in flight")
    wait(lambda: not lab.slurm("squeue", "-h").stdout.strip(), 30, what="no jobs left")
    current = pool_status(lab, POOL)["slurm"]["ready"]
    if (direction == "to_slurm" and current == 8) or (direction == "to_inference" and current == 0):
        current = 4  # make room for the move under test, with the healthy operator
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={current}")
        wait(settled(lab, current, 8 - current), 90, what="room for the move")
    target = current - 1 if direction == "to_inference" else current + 1
    if phase == "Evicting":  # give the eviction something to wait for, on every candidate
        for node in [n for n, p in placements(lab).items() if p != "slurm"]:
            apply(lab, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"filler-{node}", "namespace": NAMESPACE},
                        "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                                 "terminationGracePeriodSeconds": 2,
                                 "containers": [{"name": "c", "image": "busybox"}]}})
    op.stop()
    crashing = Operator(lab, "operator-crash.log", {"SLURMPOOL_CRASH_AFTER_PHASE": phase}).start()
    try:
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={target}")
        crashing.proc.wait(60)
    finally:
        crashing.stop()
    assert crashing.proc.returncode == -9, crashing.log_tail()
    moving = pool_status(lab, POOL)
    op.start()
    t0 = time.monotonic()
    wait(settled(lab, target, 8 - target), 90, what=f"move resumed after a crash in {phase}")
    recovered = time.monotonic() - t0
    left = settle_sides(lab, POOL)
    print(f"FAULT | operator SIGKILLed after recording {phase} ({direction}) | a fresh operator resumes the move from "
          f"the Node record | {recovered:.1f} s | none running | {len(left)}")
    assert not left, left
    assert set(placements(lab).values()) <= {"slurm", "inference:llm"}, "a node is stranded"
    states = slurm_states(lab)
    for node, placement in placements(lab).items():
        if placement == "slurm":
            assert states[node] == "IDLE" or states[node].startswith("IDLE"), (node, states[node])
        else:
            assert "DRAIN" in states[node], (node, states[node])
    assert moving is not None
