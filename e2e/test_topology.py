"""Topology-aware choice on real objects (issue 5): the lab's nodes carry block labels
(gpu01-04 in block-1, gpu05-08 in block-2), and its slurm.conf has the same blocks as tree
switches. With one node of block-2 drained by an admin, taking two nodes from Slurm must take
them from block-2 and leave block-1 whole, whichever the source of the blocks; the drained node
itself is unhealthy and stays in Slurm (issue 15)."""

from __future__ import annotations

import pytest
from harness import (
    NAMESPACE, Operator, apply, ensure_namespace_and_secret, install_crd, node_placements, pool_json, pool_manifest, slurm_states,
                     pool_status, reset_lab, wait)

pytestmark = pytest.mark.e2e
POOL = "blocks"


def settled(lab, slurm, unhealthy=0):
    """`slurm` nodes in Slurm (of them `unhealthy` unhealthy: never ready capacity), the rest ready in inference."""
    s = pool_status(lab, POOL)
    return (s.get("slurm", {}).get("ready") == slurm - unhealthy and s.get("slurm", {}).get("unhealthy", 0) == unhealthy
            and s.get("inference", {}).get("ready") == 8 - slurm and s.get("moving") == 0)


# Blocks from the Node labels, or from Slurm's own topology.conf (the lab's level-1 switches
# block-1 and block-2 hold the same nodes as the labels say).
SOURCES = {"labels": {"blockLabel": "topology.slurmpool.io/block"}, "slurm": {"fromSlurm": True, "slurmLevel": 1}}


@pytest.fixture(scope="module")
def operator(lab):
    """One operator and one pool for both sources: the second source's test re-applies the pool with
    its topology and all 8 nodes in Slurm (the nodes the first test moved come back) instead of
    resetting the lab and adopting all 8 again."""
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    op = Operator(lab, "operator-topology.log").start()
    yield op
    op.stop()
    reset_lab(lab)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_moves_keep_whole_blocks_in_slurm(lab, operator, source):
    try:
        apply(lab, pool_manifest(lab, POOL, 8, topology=SOURCES[source]))
        wait(lambda: settled(lab, 8), 120, what="8 Slurm nodes")
        # A slurmd that just registered can show NOT_RESPONDING for one ping round (a ping sent before
        # it came up), and a node Slurm cannot reach is as broken as a drained one: start from a
        # cluster Slurm sees whole, as the admin in this story does.
        wait(lambda: all("NOT_RESPONDING" not in s for s in slurm_states(lab).values()), 60, interval=0.5,
             what="every node responding in Slurm")
        topology = pool_json(lab, POOL)["spec"]["topology"]  # apply replaced the other source's fields
        assert {k: topology.get(k) for k in SOURCES[source]} == SOURCES[source], topology
        assert topology.get("fromSlurm", False) == (source == "slurm") and ("blockLabel" in topology) == (source == "labels"), topology
        # An admin drains gpu07 (a bad GPU): block-2 is broken for Slurm. Without topology the
        # planner would take the first idle nodes by name, gpu01 and gpu02, breaking block-1 too.
        # gpu07 itself is unhealthy: never handed to inference (issue 15).
        lab.slurm("scontrol", "update", "nodename=gpu07", "state=drain", "reason=bad GPU, ticket 42")
        wait(lambda: pool_status(lab, POOL).get("slurm", {}).get("unhealthy") == 1, 30, what="gpu07 reported unhealthy")
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=6")
        wait(lambda: settled(lab, 6, unhealthy=1), 60, what="6/2 with gpu07 unhealthy in Slurm")
        moved = sorted(n for n, p in node_placements(lab).items() if p != "slurm")
        assert len(moved) == 2 and all(n in ("gpu05", "gpu06", "gpu08") for n in moved), moved
        # block-1 stays whole and usable: a 4-node job fits in it at once
        job = lab.slurm("sbatch", "--parsable", "-N", "4", "-w", "gpu[01-04]", "--gres=gpu:8", "-o", "/dev/null",
                        "--wrap", "sleep 1").stdout.strip()
        wait(lambda: lab.slurm("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() in ("RUNNING", "COMPLETING", ""), 30,
             what="the 4-node job to start in block-1")
        # the admin's drain is never undone by the operator
        assert "Reason=bad GPU, ticket 42" in lab.slurm("scontrol", "show", "node", "gpu07").stdout
    finally:
        lab.slurm("scontrol", "update", "nodename=gpu07", "state=resume", check=False)
