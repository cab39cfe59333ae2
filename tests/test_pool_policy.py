"""What a SlurmNodePool may ask of its nodes, and who may change what of it (issue 26): the chart's
admission policies pool-policy (everyone) and oncall-pool-changes (oncall.subjects), evaluated by
the apiserver's own validator (e2e/lab/celcheck -eval), and the operator's own check of the same
rules (poolpolicy.py), which must refuse exactly what pool-policy refuses. Also: the chart's
default RBAC is namespaced."""

from __future__ import annotations

import json
import subprocess

import pytest

from slurmpool.core.membership import Membership
from slurmpool.core.models import LabelSelector, SlurmNodePoolSpec
from slurmpool.core.poolpolicy import SLURMD_CAPABILITIES, PoolPolicy, violations
from slurmpool.controller.settings import Settings

from .factories import make_spec
from .test_chart import ADMISSION, ONCALL_SUBJECTS, REQUIRED_PREFIXES, admission, celcheck, helm, objects, template  # noqa: F401 - fixtures

POOL_POLICY, ONCALL_POOL = "slurmpool-pool-policy", "slurmpool-oncall-pool-changes"
ONCALL = ("bob", ["gpu-oncall", "system:authenticated"])
PLATFORM = ("carol", ["platform-team", "system:authenticated"])
BREAK_GLASS = ("admin", ["system:masters"])
# The chart's values for these cases: a registry of the site's own, munge's socket by hostPath.
VALUES = {**ONCALL_SUBJECTS, "poolPolicy": {"imagePrefixes": ["registry.example.com/hpc/"], "hostPaths": ["/run/munge"],
                                           "serviceAccounts": ["slurmd"], "capabilities": ["SYS_ADMIN"]}}
POLICY = PoolPolicy.from_json(json.dumps(VALUES["poolPolicy"]))


def pool(**changes) -> dict:
    spec = make_spec(slurm_nodes=2, pools=[("llm", 10, 0, None), ("batch", 0, 0, None)]).model_dump(by_alias=True, exclude_none=True)
    spec["slurm"]["slurmdPod"]["image"] = "registry.example.com/hpc/slurmd:26.05"
    spec["slurm"]["access"] = {"ssh": {"host": "slurmctld", "user": "slurmpool", "secretRef": {"name": "slurm-ssh"}}}
    for path, value in changes.items():
        node = spec
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
        node[int(keys[-1]) if keys[-1].isdigit() else keys[-1]] = value
    return {"apiVersion": "slurmpool.io/v1alpha1", "kind": "SlurmNodePool", "metadata": {"name": "gpu", "namespace": "hpc"}, "spec": spec}


HOST_ROOT = [{"name": "root", "hostPath": {"path": "/"}}]
MUNGE = [{"name": "munge", "hostPath": {"path": "/run/munge", "type": "Directory"}}]
# (what, who, changes to the pool, policies that refuse); the old object is pool().
CASES = [
    ("the on-call scales", ONCALL, {"slurmNodes": 5}, set()),
    ("the on-call pauses", ONCALL, {"paused": True}, set()),
    ("the on-call sets a pool count", ONCALL, {"inference.pools.0.nodes": 1}, set()),
    ("the on-call stops demand", ONCALL, {"demand": {"enabled": False}}, set()),
    ("the on-call changes demand's bounds", ONCALL, {"demand": {"slurm": {"maxNodes": 1}}}, {ONCALL_POOL}),
    ("the on-call changes access", ONCALL, {"slurm.access": {"rest": {"url": "https://evil.example.com", "tokenSecretRef": {"name": "t"}}}}, {ONCALL_POOL}),
    ("the on-call changes the slurmd image", ONCALL, {"slurm.slurmdPod.image": "registry.example.com/hpc/slurmd:27"}, {ONCALL_POOL}),
    ("the on-call changes the nodeSelector", ONCALL, {"nodeSelector": {"matchLabels": {"gpu": "all"}}}, {ONCALL_POOL}),
    ("the on-call changes drain", ONCALL, {"drain": {"timeout": "1s", "onTimeout": "Cancel"}}, {ONCALL_POOL}),
    ("the on-call changes an inference pool's labels", ONCALL, {"inference.pools.1.labels": {"pool": "x"}}, {ONCALL_POOL}),
    ("the on-call adds an inference pool", ONCALL, {"inference.pools": pool()["spec"]["inference"]["pools"] + [{"name": "new"}]}, {ONCALL_POOL}),
    ("the on-call in break-glass changes drain", ("bob", ["gpu-oncall", "system:masters"]), {"drain": {"timeout": "2h"}}, set()),
    ("the platform team changes drain", PLATFORM, {"drain": {"timeout": "2h", "onTimeout": "Requeue"}}, set()),
    ("the platform team mounts munge", PLATFORM, {"slurm.slurmdPod.volumes": MUNGE}, set()),
    ("the platform team mounts the host's root", PLATFORM, {"slurm.slurmdPod.volumes": HOST_ROOT}, {POOL_POLICY}),
    ("the platform team sets another registry", PLATFORM, {"slurm.slurmdPod.image": "docker.io/evil/slurmd:1"}, {POOL_POLICY}),
    ("the platform team names the allowed ServiceAccount", PLATFORM, {"slurm.slurmdPod.serviceAccountName": "slurmd"}, set()),
    ("the platform team names the operator's ServiceAccount", PLATFORM, {"slurm.slurmdPod.serviceAccountName": "slurmpool"}, {POOL_POLICY}),
    ("the platform team adds SYS_ADMIN", PLATFORM, {"slurm.slurmdPod.securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, set()),
    ("the platform team keeps slurmd's capabilities and adds SYS_ADMIN (cgroups)", PLATFORM,
     {"slurm.slurmdPod.securityContext": {"capabilities": {"drop": ["ALL"], "add": [*SLURMD_CAPABILITIES, "SYS_ADMIN"]}}}, set()),
    ("the platform team keeps slurmd's capabilities and adds SYS_PTRACE", PLATFORM,
     {"slurm.slurmdPod.securityContext": {"capabilities": {"drop": ["ALL"], "add": [*SLURMD_CAPABILITIES, "SYS_PTRACE"]}}}, {POOL_POLICY}),
    ("the platform team adds SYS_PTRACE", PLATFORM, {"slurm.slurmdPod.securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}}, {POOL_POLICY}),
    ("the platform team makes slurmd privileged", PLATFORM, {"slurm.slurmdPod.securityContext": {"privileged": True}}, {POOL_POLICY}),
    ("the platform team uses slurmrestd over https", PLATFORM,
     {"slurm.access": {"rest": {"url": "https://slurmrestd:6820", "tokenSecretRef": {"name": "t"}}}}, set()),
    ("the platform team uses slurmrestd over http", PLATFORM,
     {"slurm.access": {"rest": {"url": "http://slurmrestd:6820", "tokenSecretRef": {"name": "t"}}}}, {POOL_POLICY}),
    ("the platform team selects control-plane nodes", PLATFORM,
     {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/control-plane": ""}}}, {POOL_POLICY}),
    ("the platform team selects them by an expression", PLATFORM,
     {"nodeSelector": {"matchExpressions": [{"key": "node-role.kubernetes.io/master", "operator": "Exists"}]}}, {POOL_POLICY}),
    ("the platform team selects RKE1's control-plane nodes", PLATFORM,
     {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/controlplane": "true"}}}, {POOL_POLICY}),
    ("the platform team selects RKE1's etcd nodes by an expression", PLATFORM,
     {"nodeSelector": {"matchExpressions": [{"key": "node-role.kubernetes.io/etcd", "operator": "Exists"}]}}, {POOL_POLICY}),
    ("the platform team keeps them out", PLATFORM,
     {"nodeSelector": {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}]}}, set()),
    ("break-glass mounts the host's root", BREAK_GLASS, {"slurm.slurmdPod.volumes": HOST_ROOT}, {POOL_POLICY}),  # for everyone
]


def pool_policies(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["kind"] == ADMISSION[0] and "slurmnodepools" in d["spec"]["matchConstraints"]["resourceRules"][0]["resources"]]


def evaluate(celcheck: str, policies: list[dict], requests: list[dict]) -> dict[str, list[dict]]:
    out = subprocess.run([celcheck, "-eval"], input=json.dumps({"policies": policies, "requests": requests}),
                         capture_output=True, text=True, check=True)
    return {r["name"]: r["denials"] for r in json.loads(out.stdout)}


def test_who_may_change_what_of_a_pool(helm, celcheck):
    policies = pool_policies(admission(helm, VALUES))
    assert {p["metadata"]["name"] for p in policies} == {POOL_POLICY, ONCALL_POOL}
    requests = [{"name": what, "operation": "UPDATE", "user": who[0], "groups": who[1], "subresource": "", "resource": "slurmnodepools",
                 "object": pool(**changes), "oldObject": pool()} for what, who, changes, _ in CASES]
    results = evaluate(celcheck, policies, requests)
    assert len(results) == len(CASES)
    wrong = {what: results[what] for what, *_, refused in CASES if {d["policy"] for d in results[what]} != refused}
    assert wrong == {}
    errors = [d for denials in results.values() for d in denials if d["error"] or not d["message"].startswith("slurmpool: ")]
    assert errors == []
    assert results["the on-call changes drain"][0]["message"].startswith(
        "slurmpool: the on-call may change only spec.slurmNodes, spec.paused, spec.inference.pools[].nodes and spec.demand.enabled "
        "of SlurmNodePool gpu, not drain.")
    assert "hostPath / in the slurmd pod of SlurmNodePool gpu is not allowed (/run/munge)" in \
        results["the platform team mounts the host's root"][0]["message"]
    # a pool created beyond the policy is refused too
    create = evaluate(celcheck, policies, [{"name": "create", "operation": "CREATE", "user": PLATFORM[0], "groups": PLATFORM[1],
                                            "subresource": "", "resource": "slurmnodepools", "object": pool(**{"slurm.slurmdPod.volumes": HOST_ROOT}),
                                            "oldObject": None}])
    assert [d["policy"] for d in create["create"]] == [POOL_POLICY]


def test_the_operator_refuses_what_the_policy_refuses(helm, celcheck):
    """The operator's check (poolpolicy.violations, from the same values) agrees with the admission
    policy on every case: with admission off or on Warn, such a pool is still refused."""
    policies = [p for p in pool_policies(admission(helm, VALUES)) if p["metadata"]["name"] == POOL_POLICY]
    requests = [{"name": what, "operation": "CREATE", "user": PLATFORM[0], "groups": PLATFORM[1], "subresource": "",
                 "resource": "slurmnodepools", "object": pool(**changes), "oldObject": None} for what, _, changes, _ in CASES]
    results = evaluate(celcheck, policies, requests)
    for what, _, changes, _ in CASES:
        found = violations(SlurmNodePoolSpec.model_validate(pool(**changes)["spec"]), POLICY)
        assert bool(found) == bool(results[what]), (what, found, results[what])


def test_the_on_call_list_covers_every_spec_field(helm):
    """A spec field added later is frozen for the on-call unless it is named here on purpose."""
    on_call_may = {"slurmNodes", "paused", "inference", "demand"}
    fields = {f.alias or name for name, f in SlurmNodePoolSpec.model_fields.items()}
    text = json.dumps(next(p for p in pool_policies(admission(helm, VALUES)) if p["metadata"]["name"] == ONCALL_POOL))
    missing = [f for f in fields - on_call_may if f"object.spec.?{f} != oldObject.spec.?{f}" not in text]
    assert missing == []
    from slurmpool.core.models import InferencePool
    pool_fields = {f.alias or name for name, f in InferencePool.model_fields.items()} - {"name", "nodes"}
    assert [f for f in pool_fields if f"o.?{f} == p.?{f}" not in text] == []
    from slurmpool.core.models import DemandSpec
    demand_fields = {f.alias or name for name, f in DemandSpec.model_fields.items()} - {"enabled"}
    assert [f for f in demand_fields if f"object.spec.?demand.?{f} != oldObject.spec.?demand.?{f}" not in text] == []


def test_the_chart_allows_slurmds_own_capabilities_as_the_operator_does(helm):
    """The admission policy's list of slurmd's own capabilities is poolpolicy.SLURMD_CAPABILITIES."""
    (policy,) = [p for p in pool_policies(admission(helm, VALUES)) if p["metadata"]["name"] == POOL_POLICY]
    (expression,) = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == "badCapabilities"]
    assert json.dumps(list(SLURMD_CAPABILITIES), separators=(",", ":")) in expression


def test_violations_name_the_field_and_what_is_allowed():
    spec = SlurmNodePoolSpec.model_validate(pool(**{"slurm.slurmdPod.volumes": HOST_ROOT,
                                                    "slurm.slurmdPod.image": "docker.io/x/slurmd:1"})["spec"])
    assert violations(spec, POLICY) == [
        "slurm.slurmdPod.image docker.io/x/slurmd:1 is not from an allowed registry (registry.example.com/hpc/)",
        "slurm.slurmdPod.volumes root: hostPath / is not allowed (/run/munge)",
    ]
    assert violations(SlurmNodePoolSpec.model_validate(pool()["spec"]), POLICY) == []
    assert violations(SlurmNodePoolSpec.model_validate(pool()["spec"]), PoolPolicy()) == [  # the default: no registry
        "slurm.slurmdPod.image registry.example.com/hpc/slurmd:26.05 is not from an allowed registry "
        "(none allowed: poolPolicy.imagePrefixes is empty)"]


def test_the_policy_comes_from_the_chart_values():
    got = Settings.from_env({"SLURMPOOL_POOL_POLICY": json.dumps({"imagePrefixes": ["r.example/"], "hostPaths": ["/a"],
                                                                  "allowHttpRest": True})}).pool_policy
    assert got.host_paths == ("/a",) and got.allow_http_rest and got.image_prefixes == ("r.example/",)
    # `slurmpool run` with no prefixes refuses to start (every pool would be refused), naming the fix
    for unset in ({}, {"SLURMPOOL_POOL_POLICY": '{"hostPaths": ["/a"]}'}, {"SLURMPOOL_POOL_POLICY": '{"imagePrefixes": []}'}):
        with pytest.raises(ValueError, match="names no imagePrefixes, so no slurmd image is allowed.*poolPolicy.imagePrefixes"):
            Settings.from_env(unset)
    for bad in ('{"hostpaths": []}', '{"allowHttpRest": "yes"}', '[]', '{"hostPaths": "/a"}', '{"imagePrefixes": [""]}'):
        with pytest.raises(ValueError, match="SLURMPOOL_POOL_POLICY"):
            PoolPolicy.from_json(bad)


def test_the_deployment_passes_the_values_to_the_operator(helm):
    docs = objects(template(helm, "--set", "poolPolicy.hostPaths={/run/munge}").stdout)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert PoolPolicy.from_json(env["SLURMPOOL_POOL_POLICY"]) == PoolPolicy(image_prefixes=REQUIRED_PREFIXES, host_paths=("/run/munge",))


def test_control_plane_nodes_belong_to_no_pool_unless_allowed():
    everything = LabelSelector.model_validate({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]})
    for exclude, expected in ((True, ["gpu01"]), (False, ["cp01", "cp02", "etcd01", "gpu01"])):
        m = Membership(exclude_control_plane=exclude)
        m.set_selectors({"pool": everything})
        m.update("gpu01", {"gpu": "true"})
        m.update("cp01", {"gpu": "true", "node-role.kubernetes.io/control-plane": ""})
        m.update("cp02", {"gpu": "true", "node-role.kubernetes.io/controlplane": "true"})  # RKE1
        m.update("etcd01", {"gpu": "true", "node-role.kubernetes.io/etcd": "true"})  # RKE1
        assert m.members("pool") == expected


def test_default_rbac_is_namespaced(helm):
    """helm template with the defaults: no cluster-wide pod write, no cluster-wide Secret read."""
    def cluster_wide(docs):
        roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
        granted = set()
        for b in (d for d in docs if d["kind"] == "ClusterRoleBinding"):
            for rule in roles[b["roleRef"]["name"]]["rules"]:
                for resource in rule["resources"]:
                    granted |= {(resource, verb) for verb in rule["verbs"]}
        return granted
    docs = objects(template(helm).stdout)
    wide = cluster_wide(docs)
    assert not {("pods", v) for v in ("create", "delete", "update", "patch", "*")} & wide, wide
    assert not {("secrets", v) for v in ("get", "list", "watch", "*")} & wide, wide
    bindings = [(d["kind"], d["metadata"].get("namespace")) for d in docs if d.get("roleRef", {}).get("name") == "slurmpool-pools"]
    assert bindings == [("RoleBinding", "slurmpool-system")]  # the release namespace
    opted = cluster_wide(objects(template(helm, "--set", "rbac.allNamespaces=true").stdout))
    assert ("pods", "create") in opted and ("secrets", "get") in opted  # the explicit value still works


def test_the_slurmd_pod_gets_no_token_and_only_the_security_context_asked():
    """No ServiceAccount token, host network (docs/rbac.md says why), and the container's
    securityContext: the capabilities slurmd uses, all others dropped, unless the pool sets its own
    (within the policy, checked before any pod)."""
    from slurmpool.core.interfaces import PoolRef
    from slurmpool.adapters.kube import slurmd_pod

    plain = slurmd_pod(PoolRef("hpc", "gpu"), SlurmNodePoolSpec.model_validate(pool()["spec"]), "n1")
    assert plain["spec"]["automountServiceAccountToken"] is False and plain["spec"]["hostNetwork"] is True
    assert "serviceAccountName" not in plain["spec"]
    default = plain["spec"]["containers"][0]["securityContext"]
    assert default == {"capabilities": {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                                                                "SETGID", "SETUID", "SETPCAP", "SETFCAP", "SYS_CHROOT"]}}
    assert "privileged" not in default and "SYS_ADMIN" not in default["capabilities"]["add"]
    asked = {"privileged": False, "allowPrivilegeEscalation": False, "capabilities": {"add": ["SYS_ADMIN"], "drop": ["NET_RAW"]}}
    spec = SlurmNodePoolSpec.model_validate(pool(**{"slurm.slurmdPod.securityContext": asked})["spec"])
    assert violations(spec, POLICY) == []
    assert slurmd_pod(PoolRef("hpc", "gpu"), spec, "n1")["spec"]["containers"][0]["securityContext"] == asked
