"""Identities on the lab: the operator's ServiceAccount with the chart's RBAC, and kubeconfigs
holding a ServiceAccount token, so that the e2e suite acts with exactly the rights a real
install grants (a missing rule fails a test) instead of the lab's admin certificate.

The RBAC comes from deploy/manifests/slurmpool.yaml (rendered from the Helm chart by
deploy/render-manifests.sh; a unit test keeps it current), applied for real to the lab.
"""

from __future__ import annotations

import os
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
    lab.kubectl("wait", "--for=jsonpath={.metadata.name}=" + OPERATOR_SERVICE_ACCOUNT,
                "serviceaccount/" + OPERATOR_SERVICE_ACCOUNT, "-n", OPERATOR_NAMESPACE, "--timeout=30s")


def operator_kubeconfig(lab) -> Path:
    """Install the operator's RBAC on the lab and return a kubeconfig with its token."""
    apply_operator_rbac(lab)
    return token_kubeconfig(lab, OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT, Path(lab.dir) / "operator-sa.kubeconfig")


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"
