"""Identities on the lab: the operator's ServiceAccount with the chart's RBAC, and kubeconfigs
holding a ServiceAccount token, so that the e2e suite acts with exactly the rights a real
install grants (a missing rule fails a test) instead of the lab's admin certificate.

The RBAC comes from deploy/manifests/slurmpool.yaml (rendered from the Helm chart by
deploy/render-manifests.sh; a unit test keeps it current), applied for real to the lab.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "deploy" / "manifests"
OPERATOR_NAMESPACE = "slurmpool-system"
OPERATOR_SERVICE_ACCOUNT = "slurmpool"
RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def manifest_objects(name: str, kinds: tuple[str, ...] | None = None) -> list[dict]:
    """The objects of deploy/manifests/<name>, optionally only those of some kinds."""
    docs = [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]
    return [d for d in docs if kinds is None or d.get("kind") in kinds]


def apply_objects(lab, objects: list[dict], *flags: str):
    return lab.kubectl("apply", *flags, "-f", "-", input="\n---\n".join(yaml.safe_dump(o) for o in objects))


def token_kubeconfig(lab, namespace: str, service_account: str, path: Path, duration: str = "12h") -> Path:
    """A kubeconfig for the lab's apiserver that authenticates with a fresh token of the
    ServiceAccount (kubectl create token) and nothing else."""
    token = lab.kubectl("create", "token", service_account, "-n", namespace, f"--duration={duration}").stdout.strip()
    admin = yaml.safe_load(Path(lab.kubeconfig).read_text())
    cluster = admin["clusters"][0]["cluster"]
    user = f"system:serviceaccount:{namespace}:{service_account}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lab", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": user, "namespace": namespace}}],
        "current-context": "lab",
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(config))
    os.chmod(tmp, 0o600)
    tmp.replace(path)  # atomic: an operator started earlier may re-read it to log in again
    return path


def apply_operator_rbac(lab) -> None:
    """The chart's Namespace, ServiceAccount, ClusterRoles and bindings, for real."""
    apply_objects(lab, manifest_objects("slurmpool.yaml", RBAC_KINDS))
    # The chart binds pod writes and Secret reads in the release namespace only; the suite's pools
    # live in many namespaces, so it binds them everywhere, as rbac.allNamespaces=true does.
    apply_objects(lab, [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                         "metadata": {"name": "slurmpool-pools-e2e-all-namespaces"},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "slurmpool-pools"},
                         "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_SERVICE_ACCOUNT,
                                       "namespace": OPERATOR_NAMESPACE}]}])
    lab.kubectl("wait", "--for=jsonpath={.metadata.name}=" + OPERATOR_SERVICE_ACCOUNT,
                "serviceaccount/" + OPERATOR_SERVICE_ACCOUNT, "-n", OPERATOR_NAMESPACE, "--timeout=30s")


def operator_kubeconfig(lab) -> Path:
    """Install the operator's RBAC on the lab and return a kubeconfig with its token."""
    apply_operator_rbac(lab)
    return token_kubeconfig(lab, OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT, Path(lab.dir) / "operator-sa.kubeconfig")


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


# ---------------------------------------------------------------- the chart's admission policies

CHART = REPO / "deploy" / "helm" / "slurmpool"
# The on-call of the e2e suite: the ServiceAccounts of this namespace, as a group (every token of a
# ServiceAccount carries the group system:serviceaccounts:<namespace>), as oncall.subjects would
# name a people's group such as gpu-oncall. test_oncall_role.py binds the on-call role to it.
ONCALL_NAMESPACE = "slurmpool-e2e-oncall"
ONCALL_GROUP = f"system:serviceaccounts:{ONCALL_NAMESPACE}"
# A break-glass group besides system:masters (the lab admin's group), to test the exemption itself.
BREAK_GLASS_GROUP = "slurmpool-e2e-break-glass"
ADMISSION_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def lab_pool_policy() -> dict:
    """The chart's poolPolicy for the lab's pools: its slurmd images (slurmd:22.05 run by the node
    agent, slurmpool.local/slurmd on real nodes); by hostPath the lab's slurm.conf, fake GPUs,
    (LAB_PYXIS=1) the squashfs image of e2e/test_pyxis.py and the PMIx client of e2e/test_pmix.py; its
    slurmrestd over http on loopback; and (LAB_CGROUPS=1) CAP_SYS_ADMIN for the slurmd container. The
    same for the operator (SLURMPOOL_POOL_POLICY) and the admission policy."""
    given = os.environ.get("LAB_DIR") or str(REPO / ".lab")
    dirs = dict.fromkeys([given, str(Path(given).resolve())])  # as the lab's env spells it, and resolved
    policy = {"imagePrefixes": ["slurmd:", "slurmpool.local/"],
              "hostPaths": [f"{d}/{sub}" for d in dirs for sub in ("etc", "fakedev", "pyxis", "pmix")], "allowHttpRest": True}
    if lab_has_cgroups(Path(given)):
        policy["capabilities"] = ["SYS_ADMIN"]  # what a slurmd pod on Slurm's cgroups needs (docs/slurmd-pod.md)
    return policy


def lab_has_cgroups(lab_dir: Path) -> bool:
    """LAB_CGROUPS=1 in the lab's env file (the lab runs Slurm's cgroups)."""
    try:
        return "export LAB_CGROUPS=1" in (lab_dir / "env").read_text().splitlines()
    except OSError:
        return False


def admission_values() -> dict:
    return {"oncall": {"subjects": [{"kind": "Group", "name": ONCALL_GROUP, "apiGroup": "rbac.authorization.k8s.io"}]},
            "admission": {"breakGlassGroups": ["system:masters", BREAK_GLASS_GROUP]},
            "poolPolicy": lab_pool_policy()}


def admission_objects() -> list[dict]:
    """The chart's ValidatingAdmissionPolicies and bindings, rendered by Helm (e2e/lab/build-helm.sh)
    with the e2e suite's on-call group and break-glass groups; the release is the one whose
    ServiceAccount the operator runs as (slurmpool in slurmpool-system)."""
    helm = subprocess.run([str(REPO / "e2e" / "lab" / "build-helm.sh")], check=True, capture_output=True, text=True).stdout.strip()
    with tempfile.NamedTemporaryFile("w", suffix=".json") as values:
        json.dump({"image": {"repository": "slurmpool.local/slurmpool"}, **admission_values()}, values)  # required by the chart
        values.flush()
        out = subprocess.run([helm, "template", "slurmpool", str(CHART), "-n", OPERATOR_NAMESPACE, "-f", values.name,
                              "--show-only", "templates/admission.yaml"], check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d and d.get("kind") in ADMISSION_KINDS]


def apply_admission_policies(lab) -> list[dict]:
    """Apply the chart's admission policies to the lab (every e2e test runs with them: the lab
    fixture calls this) and wait until the apiserver enforces them: a bad pin value, tried with a
    server-side dry run, is refused. Returns the objects applied."""
    objects = admission_objects()
    assert {o["kind"] for o in objects} == set(ADMISSION_KINDS), objects
    apply_objects(lab, objects)
    node = lab.nodes[0]

    def enforced():
        probe = lab.kubectl("annotate", "node", node, "slurmpool.io/pin=enforced?", "--overwrite", "--dry-run=server", check=False)
        return probe.returncode != 0 and "slurmpool-placement-values" in probe.stderr

    lab.wait_for(enforced, timeout=30, message="the chart's admission policies in force")
    return objects

TOLERATE_REAL = {"key": "slurmpool.io/real-node", "operator": "Exists", "effect": "NoSchedule"}


def port_offset(lab) -> int:
    """LAB_PORT_OFFSET of this lab: its apiserver listens on 16443 + offset."""
    return int(lab.env["LAB_APISERVER"].rsplit(":", 1)[1]) - 16443


def chart_values(lab, image: str, *, pool_policy: bool = True) -> dict:
    """The chart's values on the lab's real nodes (e2e/test_real_nodes.py, test_upgrade.py): the
    local image, the node's network and the apiserver's address (the lab runs no kube-proxy), the
    suite's admission policies. `pool_policy=False`: a chart from before poolPolicy (its schema
    refuses the key)."""
    off = port_offset(lab)
    repo, tag = image.rsplit(":", 1)
    values = {
        "image": {"repository": repo, "tag": tag, "pullPolicy": "Never"},
        "hostNetwork": True,
        "operator": {
            "metricsPort": 18080 + off, "healthPort": 18081 + off, "interval": 0.5,
            "extraEnv": [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                         {"name": "KUBERNETES_SERVICE_PORT", "value": str(16443 + off)},
                         {"name": "SLURMPOOL_LEASE_DURATION", "value": "6"}, {"name": "SLURMPOOL_LEASE_RENEW", "value": "1"}],
        },
        "nodeSelector": {"slurmpool.io/real": "true"},
        "tolerations": [TOLERATE_REAL],
        **admission_values(),
    }
    if not pool_policy:
        del values["poolPolicy"]
    return values
