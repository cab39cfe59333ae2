"""The Helm chart (deploy/helm/slurmpool) and the plain manifests rendered from it.

Static checks read deploy/manifests/ and the dashboard; the others run Helm, Prometheus' PromQL
parser and celcheck (the apiserver's validation, type checking and evaluation of admission
policies), built from Go modules by e2e/lab/build-helm.sh, build-promql.sh and build-celcheck.sh. Without a
built tool they are skipped, unless SLURMPOOL_REQUIRE_TOOLS=1 (make test sets it), which builds it."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import slurmpool.adapters.metrics  # noqa: F401 - registers the metrics

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "slurmpool"
MANIFESTS = REPO / "deploy" / "manifests"
DASHBOARD = CHART / "files" / "grafana" / "slurmpool.json"


def load(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def go_tool(script_name: str) -> str:
    script = REPO / "e2e" / "lab" / script_name
    if os.environ.get("SLURMPOOL_REQUIRE_TOOLS") == "1":
        return subprocess.run([str(script)], check=True, capture_output=True, text=True).stdout.strip()
    found = subprocess.run([str(script), "--cached"], capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"not built: e2e/lab/{script_name} (make tools; SLURMPOOL_REQUIRE_TOOLS=1 builds it)")
    return found.stdout.strip()


@pytest.fixture(scope="module")
def helm() -> str:
    return go_tool("build-helm.sh")


@pytest.fixture(scope="module")
def promql() -> str:
    return go_tool("build-promql.sh")


@pytest.fixture(scope="module")
def celcheck() -> str:
    return go_tool("build-celcheck.sh")


# The two values with no default (the chart fails without them): a registry of the site's own.
REQUIRED_PREFIXES = ("registry.example.com/hpc/",)
REQUIRED_VALUES = {"image": {"repository": "registry.example.com/hpc/slurmpool"},
                   "poolPolicy": {"imagePrefixes": list(REQUIRED_PREFIXES)}}


# deploy/manifests/ are rendered with a placeholder for them (render-manifests.sh; .invalid never resolves).
MANIFEST_VALUES = {"image": {"repository": "registry.invalid/change-me/slurmpool"},
                   "poolPolicy": {"imagePrefixes": ["registry.invalid/change-me/"]}}


def required_values_file() -> Path:
    path = REPO / ".pytest_cache" / "required-values.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(REQUIRED_VALUES))
    return path


def template(helm: str, *args: str, check: bool = True, required: bool = True) -> subprocess.CompletedProcess:
    """helm template with REQUIRED_VALUES first (a later -f or --set in args overrides them)."""
    given = ["-f", str(required_values_file())] if required else []
    return subprocess.run([helm, "template", "slurmpool", str(CHART), "-n", "slurmpool-system", *given, *args],
                          capture_output=True, text=True, check=check)


def objects(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


# ---------------------------------------------------------------- with Helm


def test_helm_lint_strict(helm):
    out = subprocess.run([helm, "lint", "--strict", str(CHART), "-f", str(required_values_file())], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_chart_needs_an_image_and_slurmd_registries_of_the_sites_own(helm):
    """No default names a registry the project does not control (issue 38): each of the two values
    missing fails the render with a message that names it."""
    for args, value in (([], "image.repository"), (["--set", "image.repository=registry.example.com/hpc/slurmpool"],
                                                   "poolPolicy.imagePrefixes")):
        out = template(helm, *args, check=False, required=False)
        assert out.returncode != 0 and f"{value} is required" in out.stderr, out.stderr
    empty = template(helm, "--set", "poolPolicy.imagePrefixes=null", check=False)
    assert empty.returncode != 0 and "poolPolicy.imagePrefixes is required" in empty.stderr, empty.stderr
    assert objects(template(helm).stdout)  # with both: renders


def test_manifests_are_current(helm):
    out = subprocess.run([str(REPO / "deploy" / "render-manifests.sh"), "--check"], capture_output=True, text=True,
                         env={**os.environ, "HELM": helm})
    assert out.returncode == 0, out.stderr[-3000:]


def test_pool_namespaces_bind_pod_and_secret_rights_only_there(helm):
    docs = objects(template(helm, "--set", "rbac.poolNamespaces={gpu-a,gpu-b}").stdout)
    bindings = [d for d in docs if d.get("roleRef", {}).get("name") == "slurmpool-pools"]
    assert sorted((d["kind"], d["metadata"]["namespace"]) for d in bindings) == [("RoleBinding", "gpu-a"), ("RoleBinding", "gpu-b")]
    # the cluster-wide rules stay cluster-wide
    assert any(d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "slurmpool" for d in docs)


def notes(helm: str, *args: str) -> str:
    """templates/NOTES.txt as `helm install` prints it (a client-side dry run: no cluster)."""
    out = subprocess.run([helm, "install", "slurmpool", str(CHART), "-n", "slurmpool-system", "--dry-run=client",
                          "-f", str(required_values_file()), *args], capture_output=True, text=True, check=True).stdout
    return " ".join(out.split("NOTES:", 1)[1].split())


def test_the_notes_say_where_pools_may_live(helm):
    """Empty rbac.poolNamespaces is the release namespace only (rbac.yaml), not every namespace."""
    assert "SlurmNodePools may live in slurmpool-system only" in notes(helm)
    listed = notes(helm, "--set", "rbac.poolNamespaces={gpu-a,gpu-b}")
    assert "SlurmNodePools may live in gpu-a, gpu-b only" in listed and "every namespace" not in listed
    assert "create and delete slurmd pods in every namespace" in notes(helm, "--set", "rbac.allNamespaces=true")


def test_cadence_role_allows_only_reading_pools_and_their_scale(helm):
    subjects = '{"cadence":{"createRole":true,"subjects":[{"kind":"ServiceAccount","name":"nightly","namespace":"batch"}]}}'
    values = REPO / ".pytest_cache" / "cadence-values.json"
    values.parent.mkdir(exist_ok=True)
    values.write_text(subjects)
    docs = objects(template(helm, "-f", str(values), "--show-only", "templates/cadence-rbac.yaml").stdout)
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert role["metadata"]["name"] == "slurmpool-cadence"
    assert role["rules"] == [
        {"apiGroups": ["slurmpool.io"], "resources": ["slurmnodepools"], "verbs": ["get"]},
        {"apiGroups": ["slurmpool.io"], "resources": ["slurmnodepools/scale"], "verbs": ["get", "patch", "update"]},
    ]
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "nightly", "namespace": "batch"}]
    assert template(helm, "--show-only", "templates/cadence-rbac.yaml", check=False).returncode != 0  # off by default


ONCALL_RULES = [
    {"apiGroups": ["slurmpool.io"], "resources": ["slurmnodepools"], "verbs": ["get", "list", "patch"]},
    {"apiGroups": ["slurmpool.io"], "resources": ["slurmnodepools/scale"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
]


def test_oncall_role_allows_only_the_plugin_and_the_runbook(helm):
    subjects = '{"oncall":{"createRole":true,"subjects":[{"kind":"Group","name":"gpu-oncall","apiGroup":"rbac.authorization.k8s.io"}]}}'
    values = REPO / ".pytest_cache" / "oncall-values.json"
    values.parent.mkdir(exist_ok=True)
    values.write_text(subjects)
    docs = objects(template(helm, "-f", str(values), "--show-only", "templates/oncall-rbac.yaml").stdout)
    assert [d["kind"] for d in docs] == ["ClusterRole", "ClusterRoleBinding"]
    role, binding = docs
    assert role["metadata"]["name"] == "slurmpool-oncall"
    assert role["rules"] == ONCALL_RULES  # why each: docs/rbac.md; tied to cli.py by tests/test_oncall_role.py
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "slurmpool-oncall"}
    assert binding["subjects"] == [{"kind": "Group", "name": "gpu-oncall", "apiGroup": "rbac.authorization.k8s.io"}]
    # no subjects: the role alone (bind it yourself); off by default
    (alone,) = objects(template(helm, "--set", "oncall.createRole=true", "--show-only", "templates/oncall-rbac.yaml").stdout)
    assert alone["kind"] == "ClusterRole" and alone["rules"] == ONCALL_RULES
    assert template(helm, "--show-only", "templates/oncall-rbac.yaml", check=False).returncode != 0
    assert load("oncall-role.yaml") == [alone]  # deploy/manifests/oncall-role.yaml is that role
    bad = template(helm, "--set", "oncall.createRole=yes", check=False)
    assert bad.returncode != 0 and "schema" in bad.stderr.lower(), bad.stderr


def test_image_by_digest(helm):
    digest = "sha256:" + "ab" * 32
    docs = objects(template(helm, "--set", f"image.digest={digest}", "--show-only", "templates/deployment.yaml").stdout)
    assert docs[0]["spec"]["template"]["spec"]["containers"][0]["image"] == f"registry.example.com/hpc/slurmpool@{digest}"


@pytest.mark.parametrize(
    "setting",
    ["operator.interval=-1", "bogus=1", "image.digest=latest", "rbac.poolNamespaces={Bad_NS}",
     "metrics.prometheusRule.drainBlockedFor=soon", "image.pullPolicy=Sometimes", "replicas=0",
     "admission.enabled=yes", "admission.breakGlassGroups=system:masters", "admission.validationActions={Deny,Warn}",
     "admission.validationActions={Block}", "crds.install=maybe"],
)
def test_values_schema_refuses_bad_values(helm, setting):
    out = template(helm, "--set", setting, check=False)
    assert out.returncode != 0 and "schema" in out.stderr.lower(), (setting, out.stderr)


def test_crd_is_a_template_kept_by_helm(helm):
    """The CRD is upgraded with the release (a template, not crds/) and never deleted by Helm:
    the generated CRD, plus the keep policy and the chart's labels."""
    assert not (CHART / "crds").exists(), "a crds/ directory is installed once and never upgraded by Helm"
    (crd,) = [d for d in objects(template(helm).stdout) if d["kind"] == "CustomResourceDefinition"]
    generated = yaml.safe_load((REPO / "crds" / "slurmpool.io_slurmnodepools.yaml").read_text())
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["metadata"]["labels"]["app.kubernetes.io/part-of"] == "slurmpool"
    assert {**crd, "metadata": generated["metadata"]} == generated


def test_crd_left_out_with_crds_install_false(helm):
    assert not [d for d in objects(template(helm, "--set", "crds.install=false").stdout) if d["kind"] == "CustomResourceDefinition"]


def test_standby_replicas_roll_one_at_a_time(helm):
    (deployment,) = objects(template(helm, "--set", "replicas=2", "--show-only", "templates/deployment.yaml").stdout)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def test_standby_replicas_get_a_disruption_budget_of_one(helm):
    by_kind = {d["kind"]: d for d in objects(template(helm, "--set", "replicas=2").stdout)}
    deployment, budget = by_kind["Deployment"], by_kind["PodDisruptionBudget"]
    assert budget["spec"] == {"maxUnavailable": 1,
                              "selector": {"matchLabels": deployment["spec"]["selector"]["matchLabels"]}}
    assert pod_labels(deployment).items() >= budget["spec"]["selector"]["matchLabels"].items()


def test_one_replica_gets_no_disruption_budget(helm):
    assert not [d for d in objects(template(helm).stdout) if d["kind"] == "PodDisruptionBudget"]


def test_json_logs_are_a_chart_value(helm):
    def args(*settings: str) -> list[str]:
        (deployment,) = objects(template(helm, *settings, "--show-only", "templates/deployment.yaml").stdout)
        return deployment["spec"]["template"]["spec"]["containers"][0]["args"]

    assert "--log-format=json" in args("--set", "operator.logFormat=json")
    assert not [a for a in args() if a.startswith("--log-format")]
    assert template(helm, "--set", "operator.logFormat=xml", check=False).returncode != 0


def test_service_monitor_needs_the_service(helm):
    out = template(helm, "--set", "metrics.serviceMonitor.enabled=true,metrics.service.enabled=false", check=False)
    assert out.returncode != 0 and "needs metrics.service.enabled" in out.stderr


# ---------------------------------------------------------------- the rendered manifests


def test_deployment_is_locked_down_and_single():
    deployment = next(d for d in load("slurmpool.yaml") if d["kind"] == "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert "--liveness=http://0.0.0.0:8081/healthz" in container["args"] and "--metrics-port=8080" in container["args"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert pod["serviceAccountName"] == "slurmpool"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"  # leader.default_identity
    assert env["SLURMPOOL_LEASE_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    service = next(d for d in load("slurmpool.yaml") if d["kind"] == "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert service["spec"]["selector"].items() <= pod_labels(deployment).items()


def pod_labels(deployment: dict) -> dict:
    return deployment["spec"]["template"]["metadata"]["labels"]


def known_metric_names() -> set[str]:
    names = set()
    for collector in list(REGISTRY._collector_to_names):  # noqa: SLF001 - the names each collector exposes
        names |= set(REGISTRY._collector_to_names[collector])
    return {n for n in names if n.startswith("slurmpool_")}


METRIC = re.compile(r"\b(slurmpool_[a-z_]+)")


def test_alerts_use_only_metrics_the_operator_exports():
    rule = next(d for d in load("monitoring.yaml") if d["kind"] == "PrometheusRule")
    alerts = rule["spec"]["groups"][0]["rules"]
    assert {a["alert"] for a in alerts} >= {"SlurmPoolDrainBlocked", "SlurmPoolDegraded", "SlurmPoolMovesFailing", "SlurmPoolOperatorDown"}
    known = known_metric_names()
    for alert in alerts:
        for name in METRIC.findall(alert["expr"]):
            assert name in known, f"{alert['alert']}: {name} is not exported (metrics.py)"
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
    monitor = next(d for d in load("monitoring.yaml") if d["kind"] == "ServiceMonitor")
    service = next(d for d in load("slurmpool.yaml") if d["kind"] == "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]


def test_dashboard_panels_use_only_exported_metrics_and_cover_the_brief():
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    known = known_metric_names()
    used = set()
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            for name in METRIC.findall(target["expr"]):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                assert name in known or base in known, f"panel {panel['title']!r}: {name} is not exported"
                used.add(base)
    # nodes and GPUs per side over time, GPU-hours by side, moves, drain durations, blocked moves
    assert {"slurmpool_nodes", "slurmpool_gpus", "slurmpool_gpu_seconds_total", "slurmpool_moves_started_total",
            "slurmpool_drain_duration_seconds", "slurmpool_moves_blocked"} <= used
    configmap = next(d for d in load("slurmpool.yaml") if d["kind"] == "ConfigMap")
    assert json.loads(configmap["data"]["slurmpool.json"]) == dashboard
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"


GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1d", "$__interval": "1m", "$pool": ".*"}


def test_alert_and_dashboard_queries_parse_as_promql(promql):
    rule = next(d for d in load("monitoring.yaml") if d["kind"] == "PrometheusRule")
    exprs = [a["expr"] for a in rule["spec"]["groups"][0]["rules"]]
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            exprs.append(expr)
    out = subprocess.run([promql], input=json.dumps(exprs), capture_output=True, text=True, check=True)
    errors = {e: err for e, err in zip(exprs, json.loads(out.stdout)) if err}
    assert not errors
    # the checker does catch errors
    bad = subprocess.run([promql], input=json.dumps(["sum(rate(x[5m])"]), capture_output=True, text=True, check=True)
    assert json.loads(bad.stdout)[0]


# ---------------------------------------------------------------- admission policies (templates/admission.yaml)

ADMISSION = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
ONCALL_SUBJECTS = {"oncall": {"subjects": [
    {"kind": "Group", "name": "gpu-oncall", "apiGroup": "rbac.authorization.k8s.io"},
    {"kind": "User", "name": "alice@example.com", "apiGroup": "rbac.authorization.k8s.io"},
    {"kind": "ServiceAccount", "name": "pager", "namespace": "ops"}]}}


def admission(helm: str, values: dict | None = None, *args: str) -> list[dict]:
    path = REPO / ".pytest_cache" / "admission-values.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(values or {}))
    docs = objects(template(helm, "-f", str(path), *args).stdout)
    return [d for d in docs if d["kind"] in ADMISSION]


def check_cel(celcheck: str, docs: list[dict]) -> list[dict]:
    """e2e/lab/celcheck: the apiserver's validation of each object (it compiles every CEL
    expression: what a create would be refused with) and the controller-manager's type checking
    against the Node schema."""
    out = subprocess.run([celcheck], input=json.dumps(docs), capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_admission_policies_on_by_default_and_bound(helm):
    docs = admission(helm, MANIFEST_VALUES)
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    # without oncall.subjects there is nobody to hold to the on-call policy
    assert names == {(k, n) for k in ADMISSION for n in ("slurmpool-operator-records", "slurmpool-placement-values", POOL_POLICY)}
    assert [d for d in load("slurmpool.yaml") if d["kind"] in ADMISSION] == docs  # deploy/manifests/slurmpool.yaml has them
    docs = admission(helm, ONCALL_SUBJECTS)
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == ADMISSION[0]}
    bindings = {d["metadata"]["name"]: d for d in docs if d["kind"] == ADMISSION[1]}
    assert set(policies) == set(bindings) == {"slurmpool-operator-records", "slurmpool-placement-values", "slurmpool-oncall-node-changes",
                                              POOL_POLICY, ONCALL_POOL}
    for name, b in bindings.items():
        assert b["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    for p in policies.values():
        assert p["spec"]["failurePolicy"] == "Fail"
        assert p["metadata"]["annotations"]["slurmpool.io/refuses"]
        assert all(v["messageExpression"] for v in p["spec"]["validations"])
    records = policies["slurmpool-operator-records"]["spec"]["matchConditions"]
    assert records[0]["expression"] == 'request.userInfo.username != "system:serviceaccount:slurmpool-system:slurmpool"'
    assert '["system:masters"]' in records[1]["expression"]
    oncall = policies["slurmpool-oncall-node-changes"]["spec"]["matchConditions"][0]["expression"]
    assert '["alice@example.com","system:serviceaccount:ops:pager"]' in oncall and '["gpu-oncall"]' in oncall
    assert "matchConditions" not in policies["slurmpool-placement-values"]["spec"]  # for everyone
    assert "matchConditions" not in policies[POOL_POLICY]["spec"]
    # the release's ServiceAccount, whatever it is called
    named = admission(helm, {"serviceAccount": {"name": "op"}})
    assert '"system:serviceaccount:slurmpool-system:op"' in named[0]["spec"]["matchConditions"][0]["expression"]
    assert admission(helm, {"admission": {"enabled": False}, **ONCALL_SUBJECTS}) == []
    old = template(helm, "--kube-version", "1.29.4", check=False)  # the chart's kubeVersion allows 1.29; VAP v1 is 1.30+
    assert old.returncode != 0 and "admission.enabled needs Kubernetes 1.30 or later" in old.stderr, old.stderr
    assert template(helm, "--kube-version", "1.29.4", "--set", "admission.enabled=false", check=False).returncode == 0
    none = template(helm, "--set", "admission.validationActions=null", check=False)
    assert none.returncode != 0 and "admission.validationActions: list Deny" in none.stderr, none.stderr
    warn = admission(helm, {"admission": {"validationActions": ["Warn", "Audit"]}})
    assert {tuple(d["spec"]["validationActions"]) for d in warn if d["kind"] == ADMISSION[1]} == {("Warn", "Audit")}


def test_admission_policies_compile_and_type_check(helm, celcheck):
    """Every expression compiles as the apiserver compiles it on create (so a broken one fails
    here, not in a user's helm upgrade), and type-checks against the Node schema. Also with a
    break-glass group whose name needs escaping in a CEL string."""
    values = {**ONCALL_SUBJECTS, "admission": {"breakGlassGroups": ["system:masters", 'odd "group" \\ <name>']}}
    docs = admission(helm, values)
    results = check_cel(celcheck, docs)
    assert [(r["kind"], r["name"]) for r in results] == [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert [r for r in results if r["errors"] or r["warnings"]] == []


def test_celcheck_fails_on_broken_cel(helm, celcheck):
    """The check can fail: a syntax error, a call that does not exist, a message expression that
    is no string, a misspelt Node field (a type-checking warning) are each reported."""
    docs = admission(helm, ONCALL_SUBJECTS)
    policy = next(d for d in docs if d["metadata"]["name"] == "slurmpool-oncall-node-changes")

    def broken(path: tuple, text: str) -> dict:
        p = json.loads(json.dumps(policy))
        node = p["spec"]
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = text
        (result,) = check_cel(celcheck, [p])
        return result

    syntax = broken(("validations", 0, "expression"), "!variables.cordonChanged &&")
    assert any("compilation failed" in e and "spec.validations[0].expression" in e for e in syntax["errors"]), syntax
    unknown = broken(("variables", 1, "expression"), "object.metadata.annotations.no_such_function()")
    assert any("spec.variables[1].expression" in e for e in unknown["errors"]), unknown
    message = broken(("validations", 0, "messageExpression"), "size(variables.changedLabels)")
    assert any("spec.validations[0].messageExpression" in e for e in message["errors"]), message
    condition = broken(("matchConditions", 0, "expression"), "request.userInfo.username in [")
    assert any("spec.matchConditions[0].expression" in e for e in condition["errors"]), condition
    field = broken(("validations", 0, "expression"), "object.spec.?unschedulabel.orValue(false) == false")
    assert not field["errors"] and any("undefined field 'unschedulabel'" in w for w in field["warnings"]), field
    mistyped = broken(("validations", 1, "expression"), "object.spec.unschedulable == 'yes'")
    assert any("no matching overload" in w for w in mistyped["warnings"]), mistyped
    binding = next(d for d in docs if d["kind"] == ADMISSION[1])
    (bad,) = check_cel(celcheck, [{**binding, "spec": {**binding["spec"], "validationActions": ["Deny", "Warn"]}}])
    assert bad["errors"], bad


# What each policy lets through and refuses, evaluated by the apiserver's own validator
# (celcheck -eval: the policies compiled as the ValidatingAdmissionPolicy plugin compiles them,
# match conditions included) on Node writes. matchConstraints (Node CREATE/UPDATE, nodes and
# nodes/status) are the apiserver's to apply: e2e/test_oncall_role.py shows them on the lab.
OPERATOR = "system:serviceaccount:slurmpool-system:slurmpool"
ONCALL = ("bob", ["gpu-oncall", "system:authenticated"])
SOMEONE = ("carol", ["platform-team", "system:authenticated"])
POOL_POLICY, ONCALL_POOL = "slurmpool-pool-policy", "slurmpool-oncall-pool-changes"
RECORDS, VALUES, ONCALL_POLICY = "slurmpool-operator-records", "slurmpool-placement-values", "slurmpool-oncall-node-changes"
SETTLED = {"slurmpool.io/placement": "slurm", "slurmpool.io/pool": "ns/gpu", "slurmpool.io/settled-at": "2026-11-30T00:00:00Z",
           "slurmpool.io/slurm": '{"state":"idle"}'}
SLURM_TAINT = {"key": "slurmpool.io/slurm", "value": "true", "effect": "NoSchedule"}


def node(annotations: dict | None = None, labels: dict | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu03", "annotations": {**SETTLED, **(annotations or {})},
                         "labels": {"kubernetes.io/hostname": "gpu03", "slurmpool.io/side": "slurm", **(labels or {})}},
            "spec": {"unschedulable": True, "taints": [SLURM_TAINT], **spec}}


def without(obj: dict, *keys: str) -> dict:
    obj = json.loads(json.dumps(obj))
    for key in keys:
        obj["metadata"]["annotations"].pop(key, None)
        obj["metadata"]["labels"].pop(key, None)
    return obj


LONG_POOL = "a" * 40
CASES = [
    # (what, who, old, new, policies that refuse)
    ("the operator starts a move", (OPERATOR, []), node(), node({"slurmpool.io/move": '{"id":"m1","phase":"Draining"}'}), set()),
    ("the operator settles a node on inference", (OPERATOR, []), node({"slurmpool.io/move": "{}"}),
     without(node({"slurmpool.io/placement": "inference:llm", "slurmpool.io/hold-until": "2026-12-01T00:00:00Z"},
                  {"slurmpool.io/side": "inference"}, unschedulable=False, taints=[]), "slurmpool.io/move"), set()),
    ("the operator removes a fulfilled move-now", (OPERATOR, []), node({"slurmpool.io/move-now": "inference"}), node(), set()),
    ("the operator writes a node that carries an old bad pin", (OPERATOR, []), node({"slurmpool.io/pin": "inferense"}),
     node({"slurmpool.io/pin": "inferense", "slurmpool.io/slurm": '{"state":"mix"}'}), set()),
    ("someone removes an old bad pin", SOMEONE, node({"slurmpool.io/pin": "inferense"}), node(), set()),
    ("someone edits the move record", SOMEONE, node({"slurmpool.io/move": "{}"}), node({"slurmpool.io/move": '{"phase":"Drainig"}'}), {RECORDS}),
    ("someone removes the placement", SOMEONE, node(), without(node(), "slurmpool.io/placement"), {RECORDS}),
    ("someone sets hold-until", SOMEONE, node(), node({"slurmpool.io/hold-until": "2099-01-01T00:00:00Z"}), {RECORDS}),
    ("someone relabels the side", SOMEONE, node(), node(labels={"slurmpool.io/side": "inference"}), {RECORDS}),
    ("someone uncordons a Slurm node (restored by the operator)", SOMEONE, node(), node(unschedulable=False), set()),
    ("someone labels and taints", SOMEONE, node(), node(labels={"team": "a"}, taints=[SLURM_TAINT, {"key": "x", "effect": "NoSchedule"}]), set()),
    ("the kubelet registers a Node", ("system:node:gpu09", ["system:nodes"]), None, without(node(), *SETTLED, "slurmpool.io/side"), set()),
    ("a Node created with a move record", ("system:node:gpu09", ["system:nodes"]), None, node({"slurmpool.io/move": "{}"}), {RECORDS}),
    ("the node lifecycle controller taints", ("system:serviceaccount:kube-system:node-controller", ["system:serviceaccounts"]), node(),
     node(taints=[SLURM_TAINT, {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]), set()),
    ("break-glass edits the move record and uncordons", ("admin", ["system:masters"]), node(),
     node({"slurmpool.io/move": "{}"}, unschedulable=False), set()),
    ("break-glass sets a bad pin", ("admin", ["system:masters"]), node(), node({"slurmpool.io/pin": "inferense:llm"}), {VALUES}),
    ("the on-call pins", ONCALL, node(), node({"slurmpool.io/pin": "inference:llm"}), set()),
    ("the on-call asks move-now and unpins", ONCALL, node({"slurmpool.io/pin": "slurm"}),
     without(node({"slurmpool.io/move-now": "inference"}), "slurmpool.io/pin"), set()),
    ("the on-call uncordons", ONCALL, node(), node(unschedulable=False), {ONCALL_POLICY}),
    ("the on-call cordons", ONCALL, node(unschedulable=False, taints=[]), node(taints=[]), {ONCALL_POLICY}),
    ("the on-call removes the Slurm taint", ONCALL, node(), node(taints=[]), {ONCALL_POLICY}),
    ("the on-call labels", ONCALL, node(), node(labels={"team": "a"}), {ONCALL_POLICY}),
    ("the on-call removes a label", ONCALL, node(), without(node(), "kubernetes.io/hostname"), {ONCALL_POLICY}),
    ("the on-call annotates something else", ONCALL, node(), node({"example.com/note": "hi"}), {ONCALL_POLICY}),
    ("the on-call changes the spec", ONCALL, node(), node(podCIDR="10.0.0.0/24"), {ONCALL_POLICY}),
    ("the on-call edits the move record", ONCALL, node(), node({"slurmpool.io/move": "{}"}), {RECORDS}),
    ("the on-call sets a bad move-now", ONCALL, node(), node({"slurmpool.io/move-now": "inference:LLM"}), {VALUES}),
    ("the on-call forces a pin of an unhealthy node", ONCALL, node(), node({"slurmpool.io/pin": "inference:llm", "slurmpool.io/force": "true"}), set()),
    ("the on-call stops forcing", ONCALL, node({"slurmpool.io/force": "true"}), node(), set()),
    ("the on-call sets a bad force", ONCALL, node(), node({"slurmpool.io/force": "yes"}), {VALUES}),
    ("someone asks for an adoption", SOMEONE, node(), node({"slurmpool.io/adopt": "resume-drain"}), set()),
    ("someone sets a bad adopt", SOMEONE, node(), node({"slurmpool.io/adopt": "yes"}), {VALUES}),
    ("the operator removes a fulfilled adopt", (OPERATOR, []), node({"slurmpool.io/adopt": "true"}), node(), set()),
    ("someone writes a node that carries an old bad force", SOMEONE, node({"slurmpool.io/force": "1"}),
     node({"slurmpool.io/force": "1"}, labels={"team": "a"}), set()),
    ("an on-call user by name", ("alice@example.com", []), node(), node(labels={"team": "a"}), {ONCALL_POLICY}),
    ("an on-call ServiceAccount", ("system:serviceaccount:ops:pager", ["system:serviceaccounts"]), node(), node(labels={"t": "a"}),
     {ONCALL_POLICY}),
    ("the on-call in a break-glass group", ("bob", ["gpu-oncall", "system:masters"]), node(), node(labels={"team": "a"}), set()),
] + [
    (f"pin={value}", SOMEONE, node(), node({"slurmpool.io/pin": value}), refused)
    for value, refused in [("slurm", set()), ("inference", set()), ("inference:a", set()), ("inference:a-1", set()),
                           (f"inference:{LONG_POOL}", set()), ("inferense:llm", {VALUES}), ("inference:", {VALUES}),
                           ("inference:LLM", {VALUES}), ("inference:-a", {VALUES}), ("inference:a_b", {VALUES}),
                           (f"inference:{LONG_POOL}b", {VALUES}), ("Slurm", {VALUES}), ("slurm ", {VALUES}), ("", {VALUES})]
]


def node_policies(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["kind"] == ADMISSION[0] and "nodes" in d["spec"]["matchConstraints"]["resourceRules"][0]["resources"]]


def test_what_each_policy_refuses(helm, celcheck):
    policies = node_policies(admission(helm, ONCALL_SUBJECTS))
    requests = [{"name": what, "operation": "CREATE" if old is None else "UPDATE", "user": who[0], "groups": who[1],
                 "subresource": "", "object": new, "oldObject": old} for what, who, old, new, _ in CASES]
    out = subprocess.run([celcheck, "-eval"], input=json.dumps({"policies": policies, "requests": requests}),
                         capture_output=True, text=True, check=True)
    results = {r["name"]: r["denials"] for r in json.loads(out.stdout)}
    assert len(results) == len(CASES)
    wrong = {what: results[what] for what, *_, refused in CASES if {d["policy"] for d in results[what]} != refused}
    assert wrong == {}
    errors = [d for denials in results.values() for d in denials if d["error"] or not d["message"].startswith("slurmpool: ")]
    assert errors == []  # every refusal is a policy's own message, none an evaluation error
    assert results["the on-call uncordons"][0]["message"].startswith("slurmpool: the on-call may not uncordon node gpu03: ")
    assert results["the on-call cordons"][0]["message"].startswith("slurmpool: the on-call may not cordon node gpu03: ")
    assert results["someone removes the placement"][0]["message"].startswith(
        f"slurmpool: slurmpool.io/placement on node gpu03 is a record of the slurmpool operator: only its ServiceAccount ({OPERATOR})")
    assert results["pin=inference:LLM"][0]["message"].startswith(
        "slurmpool: slurmpool.io/pin=inference:LLM on node gpu03 is not a placement. Allowed: slurm, inference, or inference:POOL")


def test_the_evaluation_can_fail(helm, celcheck):
    """celcheck -eval reports a refusal the policies would not make, so the table above can fail:
    the on-call policy with its cordon rule inverted refuses a pin."""
    policy = next(d for d in admission(helm, ONCALL_SUBJECTS) if d["metadata"]["name"] == ONCALL_POLICY)
    policy["spec"]["validations"][0]["expression"] = "variables.cordonChanged"
    request = {"name": "pin", "operation": "UPDATE", "user": ONCALL[0], "groups": ONCALL[1], "subresource": "",
               "oldObject": node(), "object": node({"slurmpool.io/pin": "slurm"})}
    out = subprocess.run([celcheck, "-eval"], input=json.dumps({"policies": [policy], "requests": [request]}),
                         capture_output=True, text=True, check=True)
    assert [d["policy"] for d in json.loads(out.stdout)[0]["denials"]] == [ONCALL_POLICY]
