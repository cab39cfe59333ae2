"""Inference demand as Kubernetes states it now (issue 40), on the lab's real kube-scheduler: pods
that claim GPUs through DRA (a ResourceClaimTemplate of DeviceClass gpu.nvidia.com, served by the
ResourceSlices the lab's agent publishes as NVIDIA's driver does), pods asking for another GPU
resource name (amd.com/gpu), and a group of pods that must start together: by the gang label, and
as a Kubernetes PodGroup (scheduling.k8s.io/v1beta1, gang minCount) that the lab's scheduler starts
whole (GenericWorkload on: e2e/lab/up.sh)."""

from __future__ import annotations

import contextlib
import time

import pytest
from harness import (
    NAMESPACE,
    Operator,
    apply,
    ensure_namespace_and_secret,
    events,
    get_json,
    install_crd,
    node_placements,
    nodes_json,
    pods_json,
    pool_manifest,
    pool_status,
    reset_lab,
    split_reached,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "dra"
DEMAND = {"cooldown": "2s"}


def demand(lab) -> dict:
    return pool_status(lab, POOL).get("target", {}).get("demand") or {}


def serving_pod(name: str, app: str, replicas: int, **spec) -> dict:
    """A Deployment pinned to inference pool llm."""
    template = {"nodeSelector": {"slurmpool.io/inference-pool": "llm"},
                "tolerations": [{"key": "slurmpool.io/inference", "operator": "Exists"}],
                "containers": [{"name": "server", "image": "vllm:latest", **spec.pop("container", {})}], **spec}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
                     "template": {"metadata": {"labels": {"app": app}}, "spec": template}}}


def running(lab, app: str) -> list[dict]:
    return [p for p in pods_json(lab, selector=f"app={app}") if p.get("status", {}).get("phase") == "Running"]


def at_llm(lab) -> list[str]:
    return sorted(n for n, p in node_placements(lab).items() if p == "inference:llm")


def slices(lab) -> dict[str, int]:
    items = get_json(lab, "resourceslices").get("items") or []
    return {s["spec"].get("nodeName", ""): len(s["spec"].get("devices") or []) for s in items if s["spec"].get("driver") == "gpu.nvidia.com"}


@contextlib.contextmanager
def demand_pool(lab, log_name: str, **overrides):
    """The operator and pool POOL with demand on (DEMAND, and `overrides` of the spec), every node in
    Slurm to start from; afterwards the operator stopped and the lab cleaned (claims, PodGroups)."""
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    op = Operator(lab, log_name).start()
    try:
        apply(lab, pool_manifest(lab, POOL, total, **{"demand": DEMAND, **overrides}))
        wait(lambda: split_reached(lab, POOL, total, total), 120, what="every node in Slurm")
        yield op
    finally:
        op.stop()
        cleanup(lab)


def cleanup(lab) -> None:
    lab.kubectl("delete", "resourceclaimtemplates,resourceclaims,podgroups", "--all", "-n", NAMESPACE, "--wait=false", check=False)
    reset_lab(lab)


def test_pods_claiming_8_gpus_through_dra_bring_their_nodes_and_run(lab):
    total = len(lab.nodes)
    with demand_pool(lab, "operator-demand-dra.log"):
        wait(lambda: not slices(lab), 30, what="no node serves inference: the driver's slices withdrawn")
        apply(lab, [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                     "metadata": {"name": "gpu8", "namespace": NAMESPACE},
                     "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                         "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 8}}]}}}},
                    serving_pod("dra-serve", "dra-serve", 2, resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "gpu8"}],
                                container={"resources": {"claims": [{"name": "gpus"}]}})])
        t0 = time.monotonic()
        wait(lambda: len(running(lab, "dra-serve")) == 2, 240, what="both DRA pods Running")
        took = time.monotonic() - t0
        # Exactly the two nodes the claims need moved, though each node's slices came after its move.
        assert len(at_llm(lab)) == 2 and split_reached(lab, POOL, total - 2, total), (at_llm(lab), pool_status(lab, POOL))
        assert {n: slices(lab).get(n) for n in at_llm(lab)} == {n: 8 for n in at_llm(lab)}, slices(lab)
        claims = get_json(lab, "resourceclaims", "-n", NAMESPACE).get("items") or []
        allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
        assert len(allocated) == 2 and all(len(c["status"]["allocation"]["devices"]["results"]) == 8 for c in allocated), claims
        assert {p["spec"]["nodeName"] for p in running(lab, "dra-serve")} == set(at_llm(lab))
        # both pods' claims counted: at once, or one by one as the scheduler found each unschedulable
        said = events(lab, "DemandChanged")
        assert any("claim 16 GPU(s)" in e for e in said) or sum("claim 8 GPU(s)" in e for e in said) == 2, said
        time.sleep(5)  # no second wave while (or after) the slices lagged
        assert len(at_llm(lab)) == 2, at_llm(lab)
        print(f"BENCH | dra pod pending -> Running | {took:.1f} s (cooldown 2 s + one move + the driver's "
              f"slice publication, LAB_DRA_PUBLISH_DELAY)")


def test_pods_asking_for_amd_gpus_bring_their_node_when_that_name_counts(lab):
    with demand_pool(lab, "operator-demand-amd.log", demand={**DEMAND, "inference": {"resources": ["amd.com/gpu"]}}):
        apply(lab, serving_pod("amd-serve", "amd-serve", 1, container={"resources": {"limits": {"amd.com/gpu": "8"}}}))
        wait(lambda: len(running(lab, "amd-serve")) == 1, 180, what="the amd.com/gpu pod Running")
        assert len(at_llm(lab)) == 1, at_llm(lab)
        assert any("want 8 GPU(s)" in e for e in events(lab, "DemandChanged")), events(lab, "DemandChanged")


def test_a_group_of_three_brings_three_nodes_of_one_block_and_a_larger_one_is_reported(lab):
    total = len(lab.nodes)
    with demand_pool(lab, "operator-demand-group.log", topology={"blockLabel": "topology.slurmpool.io/block"}):
        # Larger than the pool: reported, nothing moves.
        huge = serving_pod("huge", "huge", 1, container={"resources": {"limits": {"nvidia.com/gpu": "8"}}})
        huge["spec"]["template"]["metadata"].update(labels={"app": "huge", "slurmpool.io/gang": "huge"},
                                                    annotations={"slurmpool.io/gang-size": str(total + 4)})
        apply(lab, huge)
        wait(lambda: any("gang:huge needs" in j for j in demand(lab).get("unstartableJobs", [])), 60,
             what="the group larger than the pool is reported")
        assert split_reached(lab, POOL, total, total) and not at_llm(lab), pool_status(lab, POOL)
        lab.kubectl("delete", "deployment", "huge", "-n", NAMESPACE)
        # Three pods that start together: three nodes at once, of one block.
        trio = serving_pod("trio", "trio", 3, container={"resources": {"limits": {"nvidia.com/gpu": "8"}}})
        trio["spec"]["template"]["metadata"].update(labels={"app": "trio", "slurmpool.io/gang": "trio"},
                                                    annotations={"slurmpool.io/gang-size": "3"})
        apply(lab, trio)
        wait(lambda: len(running(lab, "trio")) == 3, 240, what="the group's three pods Running")
        # One demand change for the whole group: never 1 or 2 nodes first.
        changes = [e for e in events(lab, "DemandChanged") if "Slurm node(s)" in e]
        assert len(changes) == 1 and f"{total} -> {total - 3} Slurm node(s)" in changes[0], changes
        assert len(at_llm(lab)) == 3, at_llm(lab)
        blocks = {n["metadata"]["name"]: n["metadata"]["labels"].get("topology.slurmpool.io/block") for n in nodes_json(lab)}
        assert len({blocks[n] for n in at_llm(lab)}) == 1, {n: blocks[n] for n in at_llm(lab)}


def test_a_podgroup_gang_brings_its_min_count_of_nodes_at_once_and_the_scheduler_starts_it_whole(lab):
    """Kubernetes gang scheduling (1.37, gate GenericWorkload): a PodGroup with gang minCount 3 and
    three pods of 8 GPUs naming it. The real scheduler holds them until three nodes fit ("minCount
    (3) cannot be satisfied"); demand moves three nodes in one change and the gang starts."""
    total = len(lab.nodes)
    with demand_pool(lab, "operator-demand-podgroup.log") as op:
        apply(lab, {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "gang", "namespace": NAMESPACE},
                    "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}})
        gang = serving_pod("gang", "gang", 3, schedulingGroup={"podGroupName": "gang"},
                           container={"resources": {"limits": {"nvidia.com/gpu": "8"}}})
        apply(lab, gang)
        wait(lambda: len(running(lab, "gang")) == 3, 240, what="the gang's three pods Running")
        changes = [e for e in events(lab, "DemandChanged") if "Slurm node(s)" in e]
        assert len(changes) == 1 and f"{total} -> {total - 3} Slurm node(s)" in changes[0], changes
        assert len(at_llm(lab)) == 3, at_llm(lab)
        assert len({p["spec"]["nodeName"] for p in running(lab, "gang")}) == 3, "one node each"
        log = op.log_tail(2000)
        assert "does not serve PodGroups" not in log and "watch of PodGroups failed" not in log, log
