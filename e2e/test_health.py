"""Node health on the lab (issue 15): a broken node is never handed across, never counted as
capacity, never resumed; a listed Node condition drains a Slurm node and its clearing resumes it;
`health.replace` makes up for a broken Slurm node from inference. Every test reads Slurm's state
(scontrol) and Kubernetes' (Nodes, the pool's status, Events) back. One pool for the module."""

from __future__ import annotations

import json
import re
import time
from contextlib import contextmanager
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
    pool_manifest,
    pool_status,
    reset_lab,
    sbatch,
    slurm_states,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "health"
ADMIN = "admin: bad HBM"
NOT_READY = "lab.slurmpool.io/not-ready"  # the lab agent reports such a Node Ready=False (e2e/lab/README.md)


@pytest.fixture(scope="module")
def op(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    operator = Operator(lab, "operator-health.log").start()
    apply(lab, pool_manifest(lab, POOL, 8, topology={"blockLabel": "topology.slurmpool.io/block"},
                             health={"conditions": [{"type": "GpuXid"}]}))
    wait(lambda: settled(lab, 8), 120, what="8 Slurm nodes")
    wait(lambda: all("NOT_RESPONDING" not in s for s in slurm_states(lab).values()), 60, what="every node responding in Slurm")
    yield operator
    operator.stop()
    reset_lab(lab)


# ---------------------------------------------------------------- helpers


def settled(lab, slurm: int, sick_slurm: int = 0, sick_inference: int = 0) -> bool:
    """`slurm` nodes on the Slurm side (`sick_slurm` of them unhealthy: never ready), the rest on the
    inference side (`sick_inference` unhealthy), nothing moving."""
    s = pool_status(lab, POOL)
    return (s.get("slurm", {}).get("ready") == slurm - sick_slurm and s.get("slurm", {}).get("unhealthy", 0) == sick_slurm
            and s.get("inference", {}).get("ready") == 8 - slurm - sick_inference
            and s.get("inference", {}).get("unhealthy", 0) == sick_inference and s.get("moving") == 0)


def scale(lab, n: int) -> None:
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={n}")


def patch_pool(lab, spec: dict) -> None:
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", json.dumps({"spec": spec}))


def slurm_node(lab, node: str) -> dict[str, str]:
    """State and Reason (without its [user@time] stamp) from `scontrol show node`."""
    out = lab.slurm("scontrol", "-o", "show", "node", node).stdout
    state = re.search(r"\bState=(\S+)", out).group(1)
    reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?(?= Comment=| Extra=|$)", out.strip())
    return {"state": state, "reason": reason.group(1) if reason else ""}


def short_drained(sn: dict[str, str]) -> bool:
    """Slurm drained the node for registering short: its reason says so, or (24.11, keeping our old
    text) its state carries INVALID_REG."""
    return "DRAIN" in sn["state"] and ("gres/gpu count reported lower than configured" in sn["reason"] or "INVALID_REG" in sn["state"])


def unhealthy(lab) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in pool_status(lab, POOL).get("unhealthyNodes", []):
        out.setdefault(r["node"], []).append(r)
    return out


def started_for(lab, node: str, since: str, to: str) -> list[str]:
    """MoveStarted Events of `node` toward `to` (slurm or inference) since then."""
    return [m for m in events(lab, "MoveStarted", since) if m.startswith(f"{node}:") and f" -> {to}" in m]


def set_condition(lab, node: str, type_: str, status: str, reason: str = "E2E") -> None:
    """A Node condition as node-problem-detector would set it (strategic merge: by type)."""
    cond = {"type": type_, "status": status, "reason": reason, "message": "e2e/test_health.py", "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    lab.kubectl("patch", "node", node, "--subresource=status", "--type=strategic", "-p", json.dumps({"status": {"conditions": [cond]}}))


def admin(lab, action: str, *nodes: str) -> None:
    if action == "drain":
        lab.slurm("scontrol", "update", f"nodename={','.join(nodes)}", "state=drain", f"reason={ADMIN}")
    else:
        lab.slurm("scontrol", "update", f"nodename={','.join(nodes)}", "state=resume", check=False)


def back_to(lab, n: int) -> None:
    scale(lab, n)
    wait(lambda: settled(lab, n), 90, what=f"{n}/{8 - n}")


# ---------------------------------------------------------------- 4. a listed condition drains, its clearing resumes


def test_a_listed_condition_drains_a_slurm_node_while_its_job_ends_and_clearing_resumes_it(lab, op):
    back_to(lab, 8)
    node, since = "gpu02", now_rfc3339()
    first = sbatch(lab, node, 6, 1)
    wait(lambda: job_state(lab, first) == "RUNNING", 30, what="the job running")
    try:
        set_condition(lab, node, "GpuXid", "True")
        wait(lambda: slurm_node(lab, node)["reason"] == "slurmpool: health: GpuXid", 30, what="drained for GpuXid")
        assert "DRAIN" in slurm_node(lab, node)["state"] and job_state(lab, first) == "RUNNING"  # its job goes on
        second = sbatch(lab, node, 1, 1)
        found = wait(lambda: unhealthy(lab).get(node), 10, what=f"{node} reported unhealthy")
        assert [r["kind"] for r in found] == ["Condition"], found
        assert pool_status(lab, POOL)["slurm"]["unhealthy"] == 1
        wait(lambda: job_state(lab, first) == "COMPLETED", 30, what="the running job to end by itself (not cancelled)")
        assert job_state(lab, second) == "PENDING", "a new job started on a drained node"
        assert node_placements(lab)[node] == "slurm"  # never handed across
        set_condition(lab, node, "GpuXid", "False")
        wait(lambda: "DRAIN" not in slurm_node(lab, node)["state"], 30, what="resumed once the condition cleared")
        wait(lambda: job_state(lab, second) in ("RUNNING", "COMPLETING", "COMPLETED"), 30, what="the waiting job to start")
        assert [m for m in events(lab, "HealthDrain", since) if m.startswith(node)]
        assert [m for m in events(lab, "HealthResume", since) if m.startswith(node)]
        wait(lambda: node not in unhealthy(lab), 10, what="healthy in the status")
    finally:
        set_condition(lab, node, "GpuXid", "False")


# ---------------------------------------------------------------- 2. Slurm drains a node that registers short


@contextmanager
def fewer_gpus(lab, node: str):
    """gres.conf gives `node` 4 of its 8 GPUs while the block runs; its slurmd is restarted (the
    operator recreates the deleted slurmd pod) and registers short, so Slurm drains it itself."""
    conf = Path(lab.dir) / "etc" / "gres.conf"
    original = conf.read_text()
    lines = [x for x in original.splitlines() if x.startswith("Name=gpu")]
    rest = [x for x in original.splitlines() if not x.startswith("Name=gpu")]
    others = ",".join(n for n in lab.nodes if n != node)
    # One line of 8 GPUs, or (LAB_GRES_CORES=1) one of 4 per socket: the node keeps the first 4.
    mine = lines[0].replace("[0-7]", "[0-3]")
    conf.write_text("\n".join(rest + [f"NodeName={others} {x}" for x in lines] + [f"NodeName={node} {mine}"]) + "\n")
    try:
        restart_slurmd(lab, node)
        yield
    finally:
        conf.write_text(original)
        restart_slurmd(lab, node)
        wait(lambda: "INVALID_REG" not in slurm_node(lab, node)["state"], 60, what=f"{node} registered with 8 GPUs again")
        admin(lab, "resume", node)


def restart_slurmd(lab, node: str) -> None:
    uid = node_pod_uid(lab, node)
    lab.kubectl("delete", "pod", f"slurmd-{node}", "-n", NAMESPACE, "--wait=true")
    wait(lambda: node_pod_uid(lab, node) not in (None, uid), 30, what=f"a new slurmd pod on {node}")


def node_pod_uid(lab, node: str) -> str | None:
    out = lab.kubectl("get", "pod", f"slurmd-{node}", "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}", check=False)
    return out.stdout.strip() or None


def test_a_node_slurm_drains_for_missing_gpus_is_unhealthy_never_resumed_never_handed_across(lab, op):
    back_to(lab, 8)
    node, since = "gpu08", now_rfc3339()
    with fewer_gpus(lab, node):
        # 24.11 keeps our old Reason on RESUME, and its own drain keeps that text too: the issue's
        # `IDLE+DRAIN+INVALID_REG Reason=slurmpool: ...`. So Slurm's drain shows as INVALID_REG.
        wait(lambda: short_drained(slurm_node(lab, node)), 30, what="Slurm draining the short node")
        # Its slurmd restart may first show as SlurmDown (within its grace): wait for Slurm's drain.
        found = wait(lambda: [r for r in unhealthy(lab).get(node, []) if r["kind"] == "DrainedByOthers"], 30,
                     what=f"{node} reported drained by others")
        assert any("gres/gpu count reported lower" in r["reason"] or "INVALID_REG" in r["reason"] for r in found), found
        scale(lab, 7)  # its own block (gpu05-08) is broken: a healthy node of it goes, never gpu08
        wait(lambda: settled(lab, 7, sick_slurm=1), 60, what="7/1 with gpu08 unhealthy in Slurm")
        assert node_placements(lab)[node] == "slurm" and not started_for(lab, node, since, "inference")
        moved = [n for n, p in node_placements(lab).items() if p != "slurm"]
        assert len(moved) == 1 and moved[0] in ("gpu05", "gpu06", "gpu07"), moved
        sn = slurm_node(lab, node)
        assert short_drained(sn), sn  # never resumed by us
        assert "DRAIN" in slurm_node(lab, moved[0])["state"]  # parked by us
    back_to(lab, 8)


# ---------------------------------------------------------------- 1. the article's example: admin drains in every block


def test_admin_drains_in_every_block_scale_down_without_handing_any_drained_node_to_inference(lab, op):
    """The reference article's fragmentation example on the lab's 2 blocks of 4: in each block one
    node runs a long job and an admin drained another (`admin: bad HBM`); Slurm shrinks by 2."""
    back_to(lab, 8)
    drained, busy, since = ("gpu01", "gpu05"), ("gpu02", "gpu06"), now_rfc3339()
    jobs = [sbatch(lab, n, 600, 30) for n in busy]
    admin(lab, "drain", *drained)
    try:
        wait(lambda: all(job_state(lab, j) == "RUNNING" for j in jobs), 30, what="the long jobs running")
        wait(lambda: set(unhealthy(lab)) == set(drained), 30, what="both drained nodes reported unhealthy")
        scale(lab, 6)
        wait(lambda: settled(lab, 6, sick_slurm=2), 60, what="6/2 with the 2 drained nodes unhealthy in Slurm")
        where = node_placements(lab)
        moved = sorted(n for n, p in where.items() if p != "slurm")
        assert not set(moved) & set(drained) and not set(moved) & set(busy), moved
        # both from one block: the other block is whole again once its drained node is fixed
        blocks = {node_json(lab, n)["metadata"]["labels"]["topology.slurmpool.io/block"] for n in moved}
        assert len(blocks) == 1, moved
        for n in drained:
            assert where[n] == "slurm" and not started_for(lab, n, since, "inference")
            assert slurm_node(lab, n)["reason"] == ADMIN  # the admin's drain, left alone
        for n in moved:
            assert node_json(lab, n)["metadata"]["labels"].get("slurmpool.io/side") == "inference"
        assert all(job_state(lab, j) == "RUNNING" for j in jobs)
        status = pool_status(lab, POOL)
        assert status["unhealthy"] == 2 and all(ADMIN in r["reason"] for r in status["unhealthyNodes"])
    finally:
        lab.slurm("scancel", *jobs, check=False)
        admin(lab, "resume", *drained)
    back_to(lab, 8)


# ---------------------------------------------------------------- 3. a NotReady inference node stays where it is


def not_ready(lab, node: str, on: bool) -> None:
    lab.kubectl("annotate", "node", node, f"{NOT_READY}=true" if on else f"{NOT_READY}-", "--overwrite")
    set_condition(lab, node, "Ready", "False" if on else "True", "KubeletNotReady" if on else "KubeletReady")


def test_a_not_ready_inference_node_is_not_moved_to_slurm_when_slurm_grows(lab, op):
    back_to(lab, 6)
    sick, healthy = sorted(n for n, p in node_placements(lab).items() if p != "slurm")
    since = now_rfc3339()
    not_ready(lab, sick, True)
    try:
        found = wait(lambda: unhealthy(lab).get(sick), 30, what=f"{sick} reported unhealthy")
        assert found[0]["kind"] == "NotReady" and found[0]["side"] == "inference", found
        scale(lab, 8)
        wait(lambda: settled(lab, 7, sick_inference=1), 60, what="the healthy inference node in Slurm, the NotReady one kept")
        where = node_placements(lab)
        assert where[healthy] == "slurm" and where[sick] == "inference:llm" and not started_for(lab, sick, since, "slurm")
        assert "slurmpool.io/move" not in node_json(lab, sick)["metadata"].get("annotations", {})
        assert "DRAIN" in slurm_node(lab, sick)["state"]  # still parked: Slurm never got it
        assert pool_status(lab, POOL)["slurm"]["desired"] == 8  # the split is short, not met with a broken node
    finally:
        not_ready(lab, sick, False)
    wait(lambda: settled(lab, 8), 60, what="Ready again: moved to Slurm")


# ---------------------------------------------------------------- 5. replace


def test_replace_restores_the_healthy_slurm_count_from_inference(lab, op):
    back_to(lab, 6)
    patch_pool(lab, {"health": {"replace": True}})
    node = min(n for n, p in node_placements(lab).items() if p == "slurm")  # which ones left depends on Slurm's timing
    admin(lab, "drain", node)
    try:
        wait(lambda: settled(lab, 7, sick_slurm=1), 60, what="6 healthy Slurm nodes again: one came from inference")
        where = node_placements(lab)
        assert where[node] == "slurm" and slurm_node(lab, node)["reason"] == ADMIN
        healthy_in_slurm = [n for n, p in where.items() if p == "slurm" and n != node]
        assert len(healthy_in_slurm) == 6
        assert all("DRAIN" not in slurm_node(lab, n)["state"] for n in healthy_in_slurm)  # serving Slurm
        assert pool_status(lab, POOL)["slurm"]["desired"] == 6
    finally:
        admin(lab, "resume", node)
    wait(lambda: settled(lab, 6), 60, what="healthy again: one node back to inference")
    patch_pool(lab, {"health": {"replace": False}})
