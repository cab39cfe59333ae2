"""The preemption drill (issue 36): an inference surge takes nodes from multi-node training jobs
with `drain.onTimeout: Checkpoint`. Each job on a node that leaves gets USR1 once, writes its
checkpoint marker before it is killed, is requeued and restarts from it; the surge's pods run
within drain.timeout + grace + one move. And a SIGKILL of the operator during the grace: no second
signal, the grace not shortened. Over SSH and REST (26.05: its requeue), on each Slurm version of
the matrix; the marker directory is the lab's, where the lab's slurmd runs the jobs."""

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime, timedelta, timezone
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
    lab_access,
    node_json,
    now_rfc3339,
    pods_json,
    pool_manifest,
    pool_status,
    reset_lab,
    split_reached,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "drill"
TIMEOUT_S, GRACE_S = 5, 20
# The jobs' own warning (--signal=B:USR1@15). Under slurmrestd v0.0.44+ the operator sees it in the
# submit line and gives a job the longer of it and the pool's grace (core/expiry.py): shorter than
# every grace here, so the pool's grace is what the tests time.
OWN_WARNING_S = 15
CHECKPOINT = {"timeout": f"{TIMEOUT_S}s", "onTimeout": "Checkpoint", "checkpoint": {"signal": "USR1", "to": "Batch", "grace": f"{GRACE_S}s"}}

# A training job as docs/training-jobs.md has it: the batch shell traps USR1 and writes its
# checkpoint marker (the time and its restart count); a restart finds it and says it resumed.
# It keeps running after the marker, so what ends it is the operator's requeue at the grace's end.
SCRIPT = """#!/bin/bash
D={dir}
R=${{SLURM_RESTART_COUNT:-0}}
if [ -e "$D/$SLURM_JOB_ID.ckpt" ]; then echo "resumed $R" >> "$D/$SLURM_JOB_ID.start"; else echo "fresh $R" >> "$D/$SLURM_JOB_ID.start"; fi
on_usr1() {{ echo "$(date +%s.%N) $R $(hostname)" >> "$D/$SLURM_JOB_ID.ckpt"; }}
trap on_usr1 USR1
while true; do sleep 1 & wait $!; done
"""


def marker_dir(lab) -> Path:
    d = Path(lab.dir) / "checkpoints"
    d.mkdir(exist_ok=True)
    d.chmod(0o1777)  # the jobs may run as another user than the test
    for f in d.iterdir():
        f.unlink()
    return d


def training_job(lab, d: Path, nodes: int, *extra: str) -> str:
    script = d / "train.sh"
    script.write_text(SCRIPT.format(dir=d))
    out = lab.slurm("sbatch", "--parsable", "-p", "gpu", f"-N{nodes}", "--exclusive", "--gres=gpu:8", "--time=30",
                    "--requeue", "--open-mode=append", f"--signal=B:USR1@{OWN_WARNING_S}", "-o", "/dev/null", *extra, str(script))
    return out.stdout.strip().split(";")[0]


def lines(d: Path, job: str, kind: str) -> list[str]:
    f = d / f"{job}.{kind}"
    return f.read_text().splitlines() if f.exists() else []


def job_nodes(lab, job: str) -> set[str]:
    out = lab.slurm("squeue", "-h", "-j", job, "-o", "%N", check=False).stdout.strip()
    return set(lab.slurm("scontrol", "show", "hostnames", out).stdout.split()) if out else set()


def restarts(lab, job: str) -> int:
    out = lab.slurm("scontrol", "-o", "show", "job", job, check=False).stdout
    m = re.search(r"\bRestarts=(\d+)", out)
    return int(m.group(1)) if m else -1


def surge(replicas: int) -> dict:
    """Inference pods of 8 GPUs each for pool llm: unschedulable while the nodes serve Slurm."""
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "surge", "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "surge"}},
                     "template": {"metadata": {"labels": {"app": "surge"}}, "spec": {
                         "nodeSelector": {"slurmpool.io/inference-pool": "llm"},
                         "tolerations": [{"key": "slurmpool.io/inference", "operator": "Exists"}],
                         "containers": [{"name": "server", "image": "vllm:latest", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}


def _moves_to_inference(lab) -> list[dict]:
    return [m for m in pool_status(lab, POOL).get("recentMoves") or [] if m.get("to") == "inference:llm" and m.get("outcome") == "Completed"]


def _history_ids(lab, how: str) -> set[str]:
    """The job ids status.recentMoves names as `how` (signalled, requeued...) in the moves to inference."""
    return {i for m in _moves_to_inference(lab) for g in m.get("jobs") or [] if g.get("how") == how for i in g.get("ids") or []}


def running_pods(lab, app: str) -> int:
    return sum(1 for p in pods_json(lab, NAMESPACE, f"app={app}")
               if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"))


def test_the_preemption_drill(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    d = marker_dir(lab)
    demand = {"cooldown": "2s", "whenBothWant": "PreferInference", "inference": {"maxNodes": 2}}
    op = Operator(lab, "operator-preemption-drill.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, total, drain=CHECKPOINT, demand=demand))
        wait(lambda: split_reached(lab, POOL, total, total), 180, what=f"{total} Slurm")
        jobs = [training_job(lab, d, 2) for _ in range(total // 2)]
        wait(lambda: all(job_state(lab, j) == "RUNNING" and lines(d, j, "start") == ["fresh 0"] for j in jobs), 60,
             what="every training job running, each on 2 nodes")
        where = {j: job_nodes(lab, j) for j in jobs}
        since = now_rfc3339()
        t0 = time.monotonic()
        apply(lab, surge(2))
        # both pods counted: at once, or one by one as the scheduler finds each unschedulable (cooldown 2 s)
        wait(lambda: any(f"-> {total - 2} Slurm node(s)" in e for e in events(lab, "DemandChanged", since)), 60,
             what="demand takes 2 nodes for the surge")
        # No flip back: the requeued jobs will pend, and Slurm alone wanting nodes would take them back.
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"demand":{"cooldown":"1h"}}}')
        bound = TIMEOUT_S + GRACE_S + 30  # + one move (a few seconds) and the lab's pod start, generously
        wait(lambda: running_pods(lab, "surge") == 2, bound + 30, what="the surge's pods running")
        took = time.monotonic() - t0

        def in_inference() -> set[str]:
            return {lab.slurm_name(n) for n in lab.nodes
                    if (node_json(lab, n)["metadata"].get("annotations") or {}).get("slurmpool.io/placement") == "inference:llm"}
        # a pod may run on a node relabelled in one pass before the next writes its placement
        wait(lambda: len(in_inference()) == 2, 30, what="two nodes settled in inference:llm")
        moved = in_inference()
        hit = [j for j in jobs if where[j] & moved]
        assert hit, (where, moved)
        signalled = " ".join(events(lab, "JobsSignalled", since))
        for j in jobs:
            if j in hit:
                # the marker was written once, while the job still ran (it is written from its own shell)
                assert len(lines(d, j, "ckpt")) == 1 and re.search(rf"\b{j}\b", signalled), (j, lines(d, j, "ckpt"), signalled)
                wait(lambda j=j: restarts(lab, j) == 1, 30, what=f"job {j} requeued")
            else:
                assert not lines(d, j, "ckpt") and job_state(lab, j) == "RUNNING" and restarts(lab, j) == 0, j
        # The history names them (issue 38): each hit job signalled and requeued by the move of one of its nodes.
        wait(lambda: len(_moves_to_inference(lab)) >= 2, 30, what="the two moves in status.recentMoves")
        history = {how: ids for how in ("signalled", "requeued") for ids in [_history_ids(lab, how)]}
        assert all(j in history["signalled"] and j in history["requeued"] for j in hit), (hit, history)
        print(f"DRILL | surge to pods running {took:.1f} s (bound {TIMEOUT_S}+{GRACE_S}+one move) | "
              f"jobs hit {len(hit)} of {len(jobs)}, each checkpointed before the requeue")
        # The surge ends: the nodes come back and every requeued job restarts from its checkpoint.
        lab.kubectl("delete", "deployment", "surge", "-n", NAMESPACE, "--wait=false")
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"demand":{"enabled":false}}}')
        wait(lambda: split_reached(lab, POOL, total, total), 180, what=f"{total} Slurm again")
        wait(lambda: all(job_state(lab, j) == "RUNNING" for j in jobs), 180, what="every job running again")
        # RUNNING comes before the batch shell runs (its prolog, pyxis's on 26.05): its line comes a moment later
        for j in hit:
            wait(lambda j=j: len(lines(d, j, "start")) >= 2, 30, what=f"job {j}'s restart line")
            assert lines(d, j, "start") == ["fresh 0", "resumed 1"], (j, lines(d, j, "start"))
    finally:
        op.stop()
        reset_lab(lab)


def test_a_sigkill_during_the_grace_neither_signals_again_nor_shortens_it(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    d = marker_dir(lab)
    grace = 30
    drain = {**CHECKPOINT, "checkpoint": {**CHECKPOINT["checkpoint"], "grace": f"{grace}s"}}
    op = Operator(lab, "operator-preemption-sigkill.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, total, drain=drain))
        wait(lambda: split_reached(lab, POOL, total, total), 180, what=f"{total} Slurm")
        node = lab.nodes[0]
        job = training_job(lab, d, 1, "-w", lab.slurm_name(node))
        wait(lambda: job_state(lab, job) == "RUNNING" and lines(d, job, "start") == ["fresh 0"], 60, what="the job running")
        since = now_rfc3339()
        lab.kubectl("annotate", "node", node, "slurmpool.io/move-now=inference", "--overwrite")
        wait(lambda: lines(d, job, "ckpt"), TIMEOUT_S + 30, what="the job's checkpoint marker")
        # written on the Node before the signal was sent
        record = json.loads(node_json(lab, node)["metadata"]["annotations"]["slurmpool.io/checkpoint"])
        signalled_at = datetime.fromisoformat(record["jobs"][job].replace("Z", "+00:00")).timestamp()
        op.kill()
        time.sleep(2)
        op = Operator(lab, "operator-preemption-sigkill.log").start()
        wait(lambda: job_state(lab, job) != "RUNNING", grace + 60, what="the requeue after the grace")
        ran_on = time.time() - signalled_at
        assert len(lines(d, job, "ckpt")) == 1, lines(d, job, "ckpt")  # one signal, not two
        assert len(events(lab, "JobsSignalled", since)) == 1, events(lab, "JobsSignalled", since)
        assert ran_on >= grace - 1, f"requeued {ran_on:.1f} s after the signal; the grace is {grace} s"
        assert set(record["jobs"]) == {job} and record["signal"] == "USR1", record
        wait(lambda: restarts(lab, job) == 1, 30, what="the job requeued")
        print(f"FAULT | operator SIGKILLed during the grace | one signal, requeued {ran_on:.1f} s after it (grace {grace} s)")
    finally:
        op.stop()
        reset_lab(lab)


def job_to_the_edge(lab, d: Path, node: str) -> str:
    """A training job (SCRIPT) on `node` whose 30-minute limit passes an edge minutes ahead; no
    --signal of its own, so the pool's signal and grace apply."""
    script = d / "train.sh"
    script.write_text(SCRIPT.format(dir=d))
    out = lab.slurm("sbatch", "--parsable", "-p", "gpu", "-N1", "--exclusive", "--gres=gpu:8", "--time=30", "--requeue",
                    "--open-mode=append", "-w", lab.slurm_name(node), "-o", "/dev/null", str(script))
    return out.stdout.strip().split(";")[0]


@pytest.mark.skipif(lab_access() == "rest" and os.environ.get("LAB_SLURM", "22.05") != "26.05",
                    reason="slurmrestd requeues only on 26.05 (v0.0.45)")
def test_a_planned_handover_warns_the_jobs_past_its_edge_grace_before_it_and_requeues_them_at_it(lab):
    """Issue 36: jobs whose limit passes a window's edge on the leaving nodes get USR1 `grace` before
    the edge (status.handover.checkpoints says when), and are requeued at the edge, not
    `drain.timeout` after it; jobs on the nodes that stay are not touched. About 6 minutes."""
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total, leaving, grace = len(lab.nodes), 2, 60
    d = marker_dir(lab)
    drain = {"timeout": "10m", "onTimeout": "Checkpoint", "checkpoint": {"signal": "USR1", "to": "Batch", "grace": f"{grace}s"}}
    op = Operator(lab, "operator-handover-checkpoint.log").start()
    jobs: dict[str, str] = {}
    try:
        apply(lab, pool_manifest(lab, POOL, total, drain=drain))
        wait(lambda: split_reached(lab, POOL, total, total), 180, what=f"{total} Slurm")
        jobs = {node: job_to_the_edge(lab, d, node) for node in lab.nodes}
        wait(lambda: all(job_state(lab, j) == "RUNNING" and lines(d, j, "start") == ["fresh 0"] for j in jobs.values()), 60,
             what="a training job running on every node")
        edge = (datetime.now(timezone.utc) + timedelta(minutes=4)).replace(second=0, microsecond=0)
        window = {"name": "serve", "cron": f"{edge.minute} {edge.hour} * * *", "duration": "10m", "slurmNodes": total - leaving}
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p",
                    json.dumps({"spec": {"schedule": [window], "handover": {"leadTime": "15m"}}}))

        def planned() -> dict | None:
            h = pool_status(lab, POOL).get("handover") or {}
            return h if h.get("checkpoints") else None

        h = wait(planned, 90, what="status.handover.checkpoints")
        assert datetime.now(timezone.utc) < edge - timedelta(seconds=grace), "planned after the warning was due"
        warned = {jobs[n] for n in h["nodes"]}
        assert len(h["nodes"]) == leaving and {c["job"] for c in h["checkpoints"]} == warned, h
        at = (edge - timedelta(seconds=grace)).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert {(c["at"], c["signal"]) for c in h["checkpoints"]} == {(at, "USR1")}, h
        until_edge = (edge - datetime.now(timezone.utc)).total_seconds()
        wait(lambda: all(lines(d, j, "ckpt") for j in warned), until_edge + 30, what="the warned jobs' markers")
        for j in warned:  # written once, grace before the edge, while the node still served Slurm
            (marker,) = lines(d, j, "ckpt")
            assert edge.timestamp() - grace - 5 <= float(marker.split()[0]) < edge.timestamp(), (j, marker, edge)
        # At the edge: requeued at once (the drain does not wait its 10 minutes), the nodes serve inference.
        wait(lambda: all(restarts(lab, j) == 1 for j in warned), until_edge + 120, what="the warned jobs requeued at the edge")
        late = time.time() - edge.timestamp()
        wait(lambda: split_reached(lab, POOL, total - leaving, total), 180, what=f"{leaving} nodes in inference")
        for j in set(jobs.values()) - warned:
            assert not lines(d, j, "ckpt") and restarts(lab, j) == 0 and job_state(lab, j) == "RUNNING", j
        print(f"HANDOVER | {len(warned)} job(s) warned {grace} s before the edge, requeued {late:.1f} s after it (drain.timeout 10m)")
    finally:
        op.stop()
        for j in jobs.values():
            lab.slurm("scancel", j, check=False)
        lab.slurm("scontrol", "delete", f"ReservationName=slurmpool-{NAMESPACE}-{POOL}", check=False)
        reset_lab(lab)
