"""Two inference pools of different priority in one SlurmNodePool (issue 8): growing the
Slurm side takes nodes from the lower-priority pool first; per-pool counts are right in
status and in `kubectl slurmpool status`."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from harness import (
    NAMESPACE,
    Operator,
    apply,
    ensure_namespace_and_secret,
    events_json,
    get_json,
    install_crd,
    node_placements,
    pods_json,
    pool_manifest,
    pool_status,
    reset_lab,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "two-pools"
POOLS = [
    {"name": "llm", "priority": 10, "maxNodes": 2, "labels": {"slurmpool.io/inference-pool": "llm"},
     "taints": [{"key": "slurmpool.io/inference", "value": "llm", "effect": "NoSchedule"}]},
    {"name": "batch", "priority": 0, "labels": {"slurmpool.io/inference-pool": "batch"},
     "taints": [{"key": "slurmpool.io/inference", "value": "batch", "effect": "NoSchedule"}]},
]


def per_pool(lab) -> dict[str, int]:
    return {p["name"]: p["ready"] for p in pool_status(lab, POOL).get("inference", {}).get("pools", [])}


def split(lab, slurm: int, llm: int, batch: int):
    def check():
        s = pool_status(lab, POOL)
        return s.get("slurm", {}).get("ready") == slurm and s.get("moving") == 0 and per_pool(lab) == {"llm": llm, "batch": batch}

    return check


def test_growing_slurm_takes_from_the_lower_priority_pool_first(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    op = Operator(lab, "operator-pools.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, 4, inference={"pools": POOLS}))
        wait(split(lab, 4, 2, 2), 120, what="4 Slurm, llm 2, batch 2")
        llm_nodes = sorted(n for n, p in node_placements(lab).items() if p == "inference:llm")
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=5")
        wait(split(lab, 5, 2, 1), 60, what="5 Slurm: batch gave its node, llm kept both")
        assert sorted(n for n, p in node_placements(lab).items() if p == "inference:llm") == llm_nodes
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=6")
        wait(split(lab, 6, 2, 0), 60, what="6 Slurm: batch is empty before llm gives")
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=7")
        wait(split(lab, 7, 1, 0), 60, what="7 Slurm: now llm gives")
        plugin = Path(sys.executable).parent / "kubectl-slurmpool"
        out = lab.run(str(plugin), "status", POOL, "-n", NAMESPACE, "-o", "json").stdout
        sides = [row["side"] for row in json.loads(out)["nodes"]]
        assert sides.count("inference:llm") == 1 and sides.count("slurm") == 7, out
    finally:
        op.stop()
        reset_lab(lab)


# ---------------------------------------------------------------- moves between pools, pools by name


def deployment(name: str, replicas: int, node_selector: dict, gpus: int = 0, tolerate: str | None = None) -> dict:
    container = {"name": "server", "image": "vllm:latest"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    toleration = {"key": "slurmpool.io/inference", "operator": "Exists"}
    if tolerate:
        toleration = {"key": "slurmpool.io/inference", "operator": "Equal", "value": tolerate, "effect": "NoSchedule"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": node_selector,
                    "tolerations": [toleration],
                    # One per node, so every node of the pool holds one.
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": name}}}]}},
                    "containers": [container],
                },
            },
        },
    }


def pods_by_node(lab, app: str) -> dict[str, str]:
    """node -> pod uid of the app's running pods that are not being deleted."""
    items = pods_json(lab, NAMESPACE, f"app={app}")
    return {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in items
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")}


def drains(lab) -> dict[str, str]:
    """node -> reason of every node drained in Slurm (what the operator sets and clears)."""
    out = {}
    for line in lab.slurm("scontrol", "-o", "show", "node").stdout.splitlines():
        name, state = re.search(r"NodeName=(\S+)", line), re.search(r"State=(\S+)", line)
        reason = re.search(r"Reason=(.*?) \[", line)
        if name and state and "DRAIN" in state.group(1).split("+"):
            out[name.group(1)] = reason.group(1) if reason else ""
    return out


def events(lab, reason: str) -> list[str]:
    return [e["message"] for e in events_json(lab, NAMESPACE, f"reason={reason}") if e.get("message")]


def patch_pool(lab, patch: dict) -> None:
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", json.dumps(patch))


def test_a_move_between_pools_evicts_only_what_no_longer_fits_and_leaves_slurm_alone(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    llm = {k: v for k, v in POOLS[0].items() if k != "maxNodes"}
    pools = [llm, {**POOLS[1], "nodes": 1}]
    op = Operator(lab, "operator-pools-between.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, 4, inference={"pools": pools}))
        wait(split(lab, 4, 3, 1), 120, what="4 Slurm, llm 3, batch 1 (batch's explicit count)")
        apply(lab, deployment("llm-serve", 3, {"slurmpool.io/inference-pool": "llm"}, tolerate="llm"))
        apply(lab, deployment("anywhere", 4, {"slurmpool.io/side": "inference"}))
        wait(lambda: len(pods_by_node(lab, "llm-serve")) == 3 and len(pods_by_node(lab, "anywhere")) == 4, 60,
             what="an llm pod on every llm node, a tolerant pod on every inference node")
        llm_before, anywhere_before = pods_by_node(lab, "llm-serve"), pods_by_node(lab, "anywhere")
        drains_before = drains(lab)

        patch_pool(lab, {"spec": {"inference": {"pools": [llm, {**POOLS[1], "nodes": 2}]}}})  # a merge patch replaces lists
        wait(split(lab, 4, 2, 2), 60, what="one llm node moved to batch")
        moved = [n for n, p in node_placements(lab).items() if p == "inference:batch" and n in llm_before]
        assert len(moved) == 1, node_placements(lab)
        node = moved[0]
        labels = get_json(lab, "node", node)["metadata"]["labels"]
        assert labels["slurmpool.io/inference-pool"] == "batch" and labels["slurmpool.io/side"] == "inference"
        taints = {(t["key"], t.get("value")) for t in get_json(lab, "node", node)["spec"].get("taints") or []}
        assert ("slurmpool.io/inference", "batch") in taints and ("slurmpool.io/inference", "llm") not in taints
        # The llm pod left through the Eviction API; the pod that fits both pools stayed.
        assert node not in pods_by_node(lab, "llm-serve")
        assert pods_by_node(lab, "anywhere").get(node) == anywhere_before[node]
        assert {n: u for n, u in pods_by_node(lab, "llm-serve").items() if n != node} == \
            {n: u for n, u in llm_before.items() if n != node}
        # No Slurm step: the same drains with the same reasons (the moved node stays parked).
        assert drains(lab) == drains_before and node in drains_before
        started = [e for e in events(lab, "MoveStarted") if e.startswith(f"{node}: inference:llm -> inference:batch")]
        assert len(started) == 1, events(lab, "MoveStarted")
        # A phase step is the Node's Event (the pool's list keeps each move's start and end).
        move_id = started[0].rsplit("move ", 1)[1].rstrip(")")
        phases = [e["message"] for e in events_json(lab, "default", f"reason=MovePhase,involvedObject.name={node}")]
        assert f"{node}: Relabeling -> EvictingMisfits (move {move_id} to inference:batch)" in phases, phases
        assert not [e for e in events(lab, "MovePhase")], "a phase step on the pool's list"

        wide = lab.kubectl("get", "snp", POOL, "-n", NAMESPACE, "-o", "wide").stdout
        assert "POOLS" in wide and "llm 2/2, batch 2/2" in wide, wide
        plugin = Path(sys.executable).parent / "kubectl-slurmpool"
        text = lab.run(str(plugin), "status", POOL, "-n", NAMESPACE).stdout
        assert "Inference pools (ready/desired): llm 2/2, batch 2/2 (count 2)" in text, text

        # A schedule window names pools: batch 3 while it is open, then the spec's count again.
        window = {"name": "batch-hour", "cron": "* * * * *", "duration": "1h", "slurmNodes": 4, "inference": {"batch": 3}}
        patch_pool(lab, {"spec": {"schedule": [window]}})
        wait(split(lab, 4, 1, 3), 60, what="the window's batch count")
        target = pool_status(lab, POOL)["target"]
        assert target["source"] == "Schedule" and target["inference"] == {"batch": 3}, target
        patch_pool(lab, {"spec": {"schedule": None}})
        wait(split(lab, 4, 2, 2), 60, what="back to the spec's batch count")
    finally:
        op.stop()
        reset_lab(lab)


def test_demand_grows_the_pool_whose_pods_wait(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    pools = [{k: v for k, v in POOLS[0].items() if k != "maxNodes"}, POOLS[1]]
    # Slurm may not shrink below 4: the node for batch's waiting pod must come from llm.
    demand = {"cooldown": "2s", "slurm": {"minNodes": 4}}
    op = Operator(lab, "operator-pools-demand.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, 4, inference={"pools": pools}, demand=demand))
        wait(split(lab, 4, 4, 0), 120, what="4 Slurm, llm 4 (by priority), batch 0")
        apply(lab, deployment("batch-job", 2, {"slurmpool.io/inference-pool": "batch"}, gpus=8, tolerate="batch"))
        wait(split(lab, 4, 2, 2), 90, what="demand gave batch two nodes from llm")
        wait(lambda: len(pods_by_node(lab, "batch-job")) == 2, 60, what="batch's pods scheduled")
        status = pool_status(lab, POOL)
        assert status["target"]["inference"] == {"batch": 2} and status["slurm"]["ready"] == 4, status["target"]
        assert any("pool batch - -> " in e for e in events(lab, "DemandChanged")), events(lab, "DemandChanged")
    finally:
        op.stop()
        reset_lab(lab)


def test_bad_pool_counts_are_refused(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    window = {"name": "w", "cron": "0 8 * * *", "duration": "1h", "slurmNodes": 2, "inference": {"nope": 1}}
    bad_window = pool_manifest(lab, "bad-window", 4, schedule=[window])
    out = lab.kubectl("apply", "-f", "-", input=json.dumps(bad_window), check=False)
    assert out.returncode != 0 and "a schedule window's inference counts must name pools of spec.inference.pools" in out.stderr, out.stderr
    bad_count = pool_manifest(lab, "bad-count", 4, inference={"pools": [{**POOLS[0], "nodes": 3}]})  # llm maxNodes 2
    out = lab.kubectl("apply", "-f", "-", input=json.dumps(bad_count), check=False)
    assert out.returncode != 0 and "an inference pool's nodes must lie within its minNodes and maxNodes" in out.stderr, out.stderr
