"""External cadence (issue 8, item 4): a ServiceAccount bound only to the chart's cadence
ClusterRole (deploy/manifests/cadence-role.yaml) can change a pool's split through the scale
subresource, exactly as deploy/samples/cadence-cronjob.yaml does, and is refused everything
else. Every request below is made with that account's token against the lab's apiserver.

No operator runs here: the scale subresource is the apiserver's; the split's effect on nodes
is covered by test_operator.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from harness import apply, pool_json, pool_manifest, wait_crd_established
from identity import MANIFESTS, REPO, apply_objects, manifest_objects, service_account_user, token_kubeconfig

pytestmark = pytest.mark.e2e
NS = "slurmpool-e2e-cadence"
OTHER = "slurmpool-e2e-cadence-other"
SAMPLE = REPO / "deploy" / "samples" / "cadence-cronjob.yaml"
SAMPLE_NS = "slurmpool-demo"


def sample_objects(namespace: str) -> list[dict]:
    """The sample, moved to another namespace."""
    text = SAMPLE.read_text().replace(SAMPLE_NS, namespace)
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.fixture(scope="module")
def cadence(lab):
    lab.kubectl("apply", "--server-side", "-f", str(MANIFESTS / "crds.yaml"))
    wait_crd_established(lab)
    (role,) = manifest_objects("cadence-role.yaml")
    apply_objects(lab, [role])
    for ns in (NS, OTHER):
        lab.kubectl("create", "namespace", ns, check=False)
        pool = pool_manifest(lab, "gpu", 8, nodeSelector={"matchLabels": {"slurmpool.io/nothing": "here"}})
        pool["metadata"]["namespace"] = ns
        apply(lab, pool)
    objects = sample_objects(NS)
    apply_objects(lab, [o for o in objects if o["kind"] in ("ServiceAccount", "RoleBinding")])
    kubeconfig = token_kubeconfig(lab, NS, "split-cadence", Path(lab.dir) / "cadence-sa.kubeconfig")
    yield lab, kubeconfig, objects
    lab.kubectl("delete", "namespace", NS, OTHER, "--wait=true", "--timeout=90s", check=False, timeout=120)  # side by side


def as_cadence(lab, kubeconfig: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """kubectl with the cadence account's token (and nothing else)."""
    return subprocess.run([str(lab.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, input=input, timeout=30)


def slurm_nodes(lab, ns: str = NS) -> int:
    return pool_json(lab, "gpu", ns)["spec"]["slurmNodes"]


def test_the_role_is_the_charts_and_minimal(cadence):
    lab, kubeconfig, _ = cadence
    role = lab.kubectl_json("get", "clusterrole", "slurmpool-cadence")
    assert role["rules"] == [
        {"apiGroups": ["slurmpool.io"], "resources": ["slurmnodepools"], "verbs": ["get"]},
        {"apiGroups": ["slurmpool.io"], "resources": ["slurmnodepools/scale"], "verbs": ["get", "patch", "update"]},
    ]
    who = json.loads(as_cadence(lab, kubeconfig, "auth", "whoami", "-o", "json").stdout)
    assert who["status"]["userInfo"]["username"] == service_account_user(NS, "split-cadence")


def test_the_sample_cronjobs_are_valid_and_their_command_scales_the_split(cadence):
    lab, kubeconfig, objects = cadence
    cronjobs = [o for o in objects if o["kind"] == "CronJob"]
    assert len(cronjobs) == 2
    dry = apply_objects(lab, cronjobs, "--dry-run=server")
    assert "Warning" not in dry.stderr, dry.stderr
    for cronjob, expected in zip(cronjobs, (5, 8)):
        pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "split-cadence"
        (container,) = pod["containers"]
        assert container["command"][0] == "kubectl"
        # What the CronJob's pod runs, run here with the same identity.
        result = as_cadence(lab, kubeconfig, *container["command"][1:])
        assert result.returncode == 0, result.stderr
        assert slurm_nodes(lab) == expected


def test_the_scale_subresource_get_patch_and_update(cadence):
    lab, kubeconfig, _ = cadence
    path = f"/apis/slurmpool.io/v1alpha1/namespaces/{NS}/slurmnodepools/gpu/scale"
    got = as_cadence(lab, kubeconfig, "get", "--raw", path)
    assert got.returncode == 0, got.stderr
    scale = json.loads(got.stdout)
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == slurm_nodes(lab)
    patched = as_cadence(lab, kubeconfig, "patch", "snp", "gpu", "-n", NS, "--subresource=scale", "--type=merge",
                         "-p", '{"spec":{"replicas":6}}')
    assert patched.returncode == 0, patched.stderr
    assert slurm_nodes(lab) == 6
    scale = json.loads(as_cadence(lab, kubeconfig, "get", "--raw", path).stdout)
    scale["spec"]["replicas"] = 7
    updated = as_cadence(lab, kubeconfig, "replace", "--raw", path, "-f", "-", input=json.dumps(scale))
    assert updated.returncode == 0, updated.stderr
    assert slurm_nodes(lab) == 7
    # The CRD's own rules still hold for a scale change (slurmNodes >= 0).
    bad = as_cadence(lab, kubeconfig, "scale", "snp/gpu", "-n", NS, "--replicas=-1")
    assert bad.returncode != 0


@pytest.mark.parametrize(
    "args",
    [
        ("get", "snp", "-n", NS),  # list
        ("get", "snp", "gpu", "-n", NS, "--watch", "--request-timeout=2s"),
        ("patch", "snp", "gpu", "-n", NS, "--type=merge", "-p", '{"spec":{"paused":true}}'),
        ("patch", "snp", "gpu", "-n", NS, "--subresource=status", "--type=merge", "-p", '{"status":{"moving":1}}'),
        ("delete", "snp", "gpu", "-n", NS),
        ("annotate", "snp", "gpu", "-n", NS, "x=y"),
        ("scale", "snp/gpu", "-n", OTHER, "--replicas=3"),  # the binding is for one namespace
        ("get", "snp", "gpu", "-n", OTHER),
        ("get", "secrets", "-n", NS),
        ("get", "pods", "-n", NS),
        ("get", "nodes"),
        ("cordon", "gpu01"),
        ("create", "namespace", "cadence-was-here"),
        ("get", "crd", "slurmnodepools.slurmpool.io"),
    ],
    ids=lambda a: " ".join(a[:3]),
)
def test_everything_else_is_refused(cadence, args):
    lab, kubeconfig, _ = cadence
    before = pool_json(lab, "gpu", NS)
    result = as_cadence(lab, kubeconfig, *args)
    assert result.returncode != 0
    assert "forbidden" in result.stderr.lower(), result.stderr
    after = pool_json(lab, "gpu", NS)
    assert after["spec"] == before["spec"] and after["metadata"].get("annotations") == before["metadata"].get("annotations")


def test_rules_review_shows_only_the_cadence_rules(cadence):
    """What the apiserver itself says the account may do, with the account's own token."""
    lab, kubeconfig, _ = cadence

    def rules(ns: str) -> set[tuple[str, str, str]]:
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": ns}}
        out = as_cadence(lab, kubeconfig, "create", "--validate=false", "-f", "-", "-o", "json", input=json.dumps(review))
        assert out.returncode == 0, out.stderr
        return {(g, r, v) for rule in json.loads(out.stdout)["status"]["resourceRules"]
                for g in rule.get("apiGroups") or [""] for r in rule.get("resources") or [] for v in rule.get("verbs") or []}

    baseline = rules(OTHER)  # no binding there: what any ServiceAccount may do
    assert not any(g == "slurmpool.io" for g, _, _ in baseline)
    assert rules(NS) - baseline == {("slurmpool.io", "slurmnodepools", "get"), ("slurmpool.io", "slurmnodepools/scale", "get"),
                                    ("slurmpool.io", "slurmnodepools/scale", "patch"), ("slurmpool.io", "slurmnodepools/scale", "update")}
