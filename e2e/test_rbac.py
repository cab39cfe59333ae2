"""The rendered chart on the lab's apiserver (issue 6): the plain manifests apply (the RBAC for
real, the rest with a server-side dry run), the operator's pod template meets the restricted Pod
Security Standard, the ServiceAccount gets exactly the chart's rules and nothing more, and the
operator running under that account's token does its work without a single Forbidden.

(Every other operator e2e test runs under the same identity: harness.Operator's default.)"""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request

import pytest
import yaml

from harness import Operator, apply, ensure_namespace_and_secret, pool_json, pool_manifest, wait, wait_crd_established
from identity import (
    MANIFESTS,
    OPERATOR_NAMESPACE,
    OPERATOR_SERVICE_ACCOUNT,
    apply_objects,
    apply_operator_rbac,
    manifest_objects,
    service_account_user,
)

pytestmark = pytest.mark.e2e
SA = service_account_user(OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT)
RBAC_NAMESPACE = "slurmpool-e2e-rbac"


@pytest.fixture(scope="module")
def installed(lab):
    lab.kubectl("apply", "--server-side", "-f", str(MANIFESTS / "crds.yaml"))
    wait_crd_established(lab)
    apply_operator_rbac(lab)
    return lab


def test_rendered_manifests_apply_to_the_lab(installed):
    lab = installed
    everything = manifest_objects("slurmpool.yaml")
    kinds = sorted({o["kind"] for o in everything})
    assert kinds == sorted(["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                            "Service", "Deployment", "ConfigMap", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"])
    # RBAC is applied for real (above); the Deployment, Service, dashboard and admission policies
    # (applied for real, with the e2e suite's on-call group, by the lab fixture) with a dry run:
    # the lab has no images, so the operator itself runs as a process under the same identity.
    result = apply_objects(lab, everything, "--dry-run=server")
    assert "Warning" not in result.stderr, result.stderr
    crd = lab.kubectl("apply", "--dry-run=server", "--server-side", "-f", str(MANIFESTS / "crds.yaml"))
    assert crd.returncode == 0
    cadence = lab.kubectl("apply", "--dry-run=server", "-f", str(MANIFESTS / "cadence-role.yaml"))
    assert "slurmpool-cadence" in cadence.stdout


def test_operator_pod_meets_the_restricted_pod_security_standard(installed):
    """PodSecurity only enforces on pods: a pod made from the Deployment's template, dry run, in
    the namespace labelled enforce=restricted."""
    lab = installed
    labels = lab.kubectl_json("get", "namespace", OPERATOR_NAMESPACE)["metadata"]["labels"]
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted"
    deployment = next(o for o in manifest_objects("slurmpool.yaml") if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slurmpool-psa-check", "namespace": OPERATOR_NAMESPACE},
           "spec": deployment["spec"]["template"]["spec"]}
    ok = lab.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod), check=False)
    assert ok.returncode == 0 and "Warning" not in ok.stderr, ok.stderr
    # ...and the namespace really enforces: the same pod running as root is refused.
    pod["spec"] = json.loads(json.dumps(pod["spec"]))
    pod["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = False
    pod["spec"]["securityContext"]["runAsNonRoot"] = False
    pod["spec"]["securityContext"]["runAsUser"] = 0
    refused = lab.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod), check=False)
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr


def granted_rules(lab, namespace: str, user: str = SA) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the apiserver says an account may use in a namespace."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": namespace}}
    out = lab.kubectl("create", f"--as={user}", "--validate=false", "-f", "-", "-o", "json", input=json.dumps(review)).stdout
    rules = json.loads(out)["status"]["resourceRules"]
    granted = set()
    for rule in rules:
        for group in rule.get("apiGroups") or [""]:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    granted.add((group, resource, verb))
    return granted


def chart_rules(kinds: tuple[str, ...] = ("ClusterRole",)) -> set[tuple[str, str, str]]:
    rules = set()
    for role in manifest_objects("slurmpool.yaml", kinds):
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        rules.add((group, resource, verb))
    return rules


def test_the_service_account_has_exactly_the_charts_rules(installed):
    lab = installed
    # What any ServiceAccount may do (self reviews...) is not the chart's: an unbound account's rules.
    baseline = granted_rules(lab, "some-pool-namespace", service_account_user("default", "nobody"))
    assert ("authorization.k8s.io", "selfsubjectrulesreviews", "create") in baseline
    granted = granted_rules(lab, "some-pool-namespace") - baseline
    assert granted == chart_rules()
    # In its own namespace it also has the Role's rules (the Lease for leader election).
    own = granted_rules(lab, OPERATOR_NAMESPACE) - granted_rules(lab, OPERATOR_NAMESPACE, service_account_user("default", "nobody"))
    assert own == chart_rules(("ClusterRole", "Role"))
    assert ("coordination.k8s.io", "leases", "update") in own
    # A few things the operator must never be able to do, asked of the apiserver directly.
    for verb, resource in [("delete", "nodes"), ("update", "nodes"), ("list", "secrets"), ("watch", "secrets"),
                           ("patch", "slurmnodepools.slurmpool.io"), ("delete", "slurmnodepools.slurmpool.io"),
                           ("create", "clusterrolebindings.rbac.authorization.k8s.io"), ("get", "configmaps"),
                           ("create", "pods --subresource=exec"), ("update", "pods"), ("patch", "pods"),
                           ("patch", "nodes --subresource=status"), ("update", "slurmnodepools.slurmpool.io --subresource=scale")]:
        answer = lab.kubectl("auth", "can-i", verb, *resource.split(), f"--as={SA}", "-A", check=False)
        assert answer.stdout.strip() == "no", f"{SA} may {verb} {resource}"


def test_operator_under_its_service_account_reconciles_without_forbidden(installed):
    """A pool that selects no node: the operator lists and watches everything, reads the SSH
    Secret, reaches Slurm, writes the pool's status and posts events, all as its ServiceAccount."""
    lab = installed
    ensure_namespace_and_secret(lab)  # slurmpool-e2e: the Secret the pools reference
    lab.kubectl("create", "namespace", RBAC_NAMESPACE, check=False)
    secret = lab.kubectl_json("get", "secret", "slurm-ssh", "-n", "slurmpool-e2e")
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "slurm-ssh", "namespace": RBAC_NAMESPACE},
              "data": secret["data"]}
    apply(lab, secret)
    pool = pool_manifest(lab, "rbac-check", 0, nodeSelector={"matchLabels": {"slurmpool.io/nothing": "here"}})
    pool["metadata"]["namespace"] = RBAC_NAMESPACE
    # The chart Deployment's own args (interval, liveness endpoint, metrics port), on free ports.
    deployment = next(o for o in manifest_objects("slurmpool.yaml") if o["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    metrics_port, health_port = free_port(), free_port()
    args = [a.replace("8080", str(metrics_port)).replace("8081", str(health_port)) for a in container["args"]]
    assert args[0] == "run" and f"--liveness=http://0.0.0.0:{health_port}/healthz" in args, args
    args = [a.replace("0.0.0.0", "127.0.0.1") for a in args]  # in a pod all interfaces; on this machine loopback only
    operator = Operator(lab, "operator-rbac.log", args=args + ["--metrics-address=127.0.0.1"])
    assert operator.identity == "serviceaccount"
    offset = operator.log_path.stat().st_size if operator.log_path.exists() else 0
    operator.start()
    try:
        apply(lab, pool)
        healthz = wait(lambda: http_get(f"http://127.0.0.1:{health_port}/healthz"), 30, what="kopf's liveness endpoint")
        assert healthz[0] == 200

        def reconciled():
            body = pool_json(lab, "rbac-check", RBAC_NAMESPACE)
            status = body.get("status") or {}
            return status if status.get("observedGeneration") == body["metadata"]["generation"] and status.get("conditions") else None

        status = wait(reconciled, 60, what="the pool's status written by the operator")
        degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
        assert degraded["status"] == "False", degraded  # Slurm reached over SSH with the Secret
        # The metrics the chart's Service, ServiceMonitor, alerts and dashboard rely on.
        key = f"{RBAC_NAMESPACE}/rbac-check"
        metrics = wait(lambda: (m := http_get(f"http://127.0.0.1:{metrics_port}/metrics")) and key in m[1] and m[1], 30,
                       what="the pool's metrics")
        assert f'slurmpool_pool_condition{{pool="{key}",type="Degraded"}} 0.0' in metrics
        assert f'slurmpool_moves_blocked{{pool="{key}"}} 0.0' in metrics
        assert "slurmpool_reconcile_total" in metrics
        with open(operator.log_path, "rb") as f:
            f.seek(offset)
            log = f.read().decode(errors="replace")  # this run's lines only
        for word in ("Forbidden", "forbidden", "403", "Not enough permissions"):
            assert word not in log, log[-6000:]
    finally:
        operator.stop()
        lab.kubectl("delete", "namespace", RBAC_NAMESPACE, "--wait=true", "--timeout=90s", check=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except OSError:
        return None


def test_kubeconfig_carries_only_the_token(installed):
    """The operator's kubeconfig authenticates with the ServiceAccount token alone."""
    from identity import operator_kubeconfig

    lab = installed
    path = operator_kubeconfig(lab)
    config = yaml.safe_load(path.read_text())
    (user,) = config["users"]
    assert set(user["user"]) == {"token"}
    who = subprocess.run([str(lab.bin_dir / "kubectl"), "--kubeconfig", str(path), "auth", "whoami", "-o", "json"],
                         capture_output=True, text=True, timeout=30)
    assert who.returncode == 0, who.stderr
    assert json.loads(who.stdout)["status"]["userInfo"]["username"] == SA
