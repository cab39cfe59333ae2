"""deploy/samples/inference-llm.yaml against the pool it serves from (deploy/samples/lab-pool.yaml's
inference pool `llm`), checked with the operator's own code: the labels and taints it puts on a node of
that pool (moves.inference_shape) admit the Deployment's pods, those of the other pool and of the Slurm
side (moves.slurm_shape) refuse them (fit.misfit, the scheduler's node filters as the operator models
them), and the PodDisruptionBudget the evictions honour selects exactly those pods."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slurmpool.core.fit import misfit, needs_of, tolerates
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.moves import PatchNode, inference_shape, slurm_shape
from slurmpool.core.view import LABEL_SIDE, SLURM_TAINT_KEY, NodeView

SAMPLES = Path(__file__).resolve().parents[1] / "deploy" / "samples"
POOL_NAME = "llm"


@pytest.fixture(scope="module")
def sample() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all((SAMPLES / "inference-llm.yaml").read_text()) if d]
    assert sorted(d["kind"] for d in docs) == ["Deployment", "PodDisruptionBudget"]
    return {d["kind"]: d for d in docs}


@pytest.fixture(scope="module")
def spec() -> SlurmNodePoolSpec:
    (pool,) = [d for d in yaml.safe_load_all((SAMPLES / "lab-pool.yaml").read_text()) if d and d["kind"] == "SlurmNodePool"]
    return SlurmNodePoolSpec.model_validate(pool["spec"])


def pod_spec(sample) -> dict:
    return sample["Deployment"]["spec"]["template"]["spec"]


def pool_node(spec: SlurmNodePoolSpec) -> NodeView:
    """A node the pool selects, as the cloud gives it: the selector's labels and the GPU taint."""
    labels = {**spec.node_selector.match_labels, "kubernetes.io/hostname": "gpu01"}
    return NodeView("gpu01", labels=labels, taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},))


def patched(node: NodeView, patch: PatchNode) -> tuple[dict[str, str], tuple[dict[str, str], ...]]:
    labels = {k: v for k, v in {**node.labels, **patch.labels}.items() if v is not None}
    return labels, patch.taints


def in_pool(spec: SlurmNodePoolSpec, name: str) -> NodeView:
    node = pool_node(spec)
    pool = next(p for p in spec.inference.pools if p.name == name)
    labels, taints = patched(node, inference_shape(spec, node, pool))
    return NodeView(node.name, labels=labels, taints=taints)


def test_the_pods_fit_a_node_of_their_pool(sample, spec):
    node = in_pool(spec, POOL_NAME)
    assert node.labels[LABEL_SIDE] == "inference"
    assert node.taints, "the pool taints its nodes: the sample must tolerate that"
    assert misfit(needs_of(pod_spec(sample)), node.labels, node.taints) is None


def test_the_pods_fit_no_node_of_another_pool(sample, spec):
    others = [p.name for p in spec.inference.pools if p.name != POOL_NAME]
    assert others, "lab-pool.yaml has a second inference pool"
    for name in others:
        node = in_pool(spec, name)
        assert misfit(needs_of(pod_spec(sample)), node.labels, node.taints), name


def test_the_pods_fit_no_node_on_the_slurm_side_nor_one_joining_it(sample, spec):
    needs = needs_of(pod_spec(sample))
    node = in_pool(spec, POOL_NAME)
    joining = patched(node, slurm_shape(spec, node, keep_pool_labels=True, claims_cordon=True))  # Cordoning
    settled = patched(node, slurm_shape(spec, node))
    for labels, taints in (joining, settled):
        assert any(t["key"] == SLURM_TAINT_KEY for t in taints)
        assert misfit(needs, labels, taints)
    assert not tolerates(needs.tolerations, {"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"})


def test_no_toleration_matches_every_taint(sample):
    for t in pod_spec(sample)["tolerations"]:
        assert t.get("key"), f"a toleration without a key tolerates every taint, the operator's too: {t}"


def test_a_whole_node_server_asks_for_the_gpus_the_pool_gives_slurm(sample, spec):
    count = int(spec.slurm.gres.split(":")[-1])
    for c in pod_spec(sample)["containers"]:
        assert c["resources"]["limits"]["nvidia.com/gpu"] == str(count)


def test_each_container_has_a_readiness_probe_on_a_port_it_serves(sample):
    for c in pod_spec(sample)["containers"]:
        probe = c["readinessProbe"]["httpGet"]
        ports = {p["containerPort"] for p in c["ports"]} | {p.get("name") for p in c["ports"]}
        assert probe["port"] in ports, c["name"]


def test_the_pdb_selects_the_deployment_s_pods_and_lets_one_go(sample):
    deployment, pdb = sample["Deployment"], sample["PodDisruptionBudget"]
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    for selector in (pdb["spec"]["selector"], deployment["spec"]["selector"]):
        assert selector["matchLabels"].items() <= template_labels.items()
        assert not selector.get("matchExpressions")
    assert pdb["metadata"].get("namespace") == deployment["metadata"].get("namespace")
    # maxUnavailable 0 (or minAvailable = replicas) would refuse every eviction: no node could go to Slurm
    assert pdb["spec"].get("maxUnavailable", 0) >= 1 and "minAvailable" not in pdb["spec"]


def test_the_spread_keeps_one_server_per_node(sample):
    (spread,) = pod_spec(sample)["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert spread["labelSelector"]["matchLabels"].items() <= sample["Deployment"]["spec"]["template"]["metadata"]["labels"].items()
