"""Two inference pools of different priority in one SlurmNodePool (issue 8): growing the
Slurm side takes nodes from the lower-priority pool first; per-pool counts are right in
status and in `kubectl slurmpool status`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from harness import (
    NAMESPACE,
    Operator,
    apply,
    ensure_namespace_and_secret,
    install_crd,
    node_placements,
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
