"""Every SlurmNodePool in deploy/samples/ is a valid spec (the model behind the CRD)."""

from pathlib import Path

import pytest
import yaml

from slurmpool.core.models import SlurmNodePoolSpec

SAMPLES = Path(__file__).resolve().parents[1] / "deploy" / "samples"
POOLS = [(f.name, i, d) for f in sorted(SAMPLES.glob("*.yaml")) for i, d in enumerate(yaml.safe_load_all(f.read_text()))
         if d and d.get("kind") == "SlurmNodePool"]


@pytest.mark.parametrize("name,index,doc", POOLS, ids=[f"{n}#{i}" for n, i, _ in POOLS])
def test_sample_pool_is_valid(name, index, doc):
    spec = SlurmNodePoolSpec.model_validate(doc["spec"])
    if name == "production-pool.yaml":  # the shipped slurmd image, its auth Secret and GPUs
        pod = spec.slurm.slurmd_pod
        assert pod.command == ["/usr/local/bin/slurmd-entrypoint"]
        assert any(v.get("secret", {}).get("secretName") == "slurm-auth" for v in pod.volumes)
        assert any(m.get("mountPath") == "/etc/slurm-auth" for m in pod.volume_mounts)
        assert pod.resources.limits.get("nvidia.com/gpu") == "8"


def test_both_samples_are_there():
    assert {n for n, _, _ in POOLS} >= {"lab-pool.yaml", "production-pool.yaml"}
