"""The chart's RBAC is exactly what the code uses (issue 6).

The rules the operator needs are derived from the code, not written down twice:
  * every Kubernetes client method called anywhere in the operator (found by reading its source)
    must be in CLIENT_CALLS below, which names the rule it needs;
  * every kopf handler registered by slurmpool.controller.handlers needs list and watch on its resource
    (and patch for handlers that store progress on the object);
  * kopf itself needs what KOPF_NEEDS says.
That set must equal the rules of the ClusterRoles bound to the operator in the rendered manifests
(deploy/manifests/slurmpool.yaml): a rule the code does not use fails here, and a call the code
makes without its rule fails here (and on the lab, where the e2e suite runs the operator with
exactly these rules). docs/rbac.md must list each rule with its code path.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import yaml

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "operator" / "slurmpool"
MANIFEST = REPO / "deploy" / "manifests" / "slurmpool.yaml"
DOCS = REPO / "docs" / "rbac.md"
# Files of the package that do not run in the operator: the kubectl plugin acts with the
# credentials of the person running it, never the operator's ServiceAccount.
NOT_THE_OPERATOR = {"cli"}


@dataclass(frozen=True)
class Rule:
    group: str
    resource: str
    verb: str
    code: str  # the code path that needs it (also named in docs/rbac.md)
    scope: str = "cluster"  # "cluster": every namespace; "pools": where SlurmNodePools live;
    # "release": the operator's own namespace only (a Role there)


# Each Kubernetes client method the operator may call -> the rule it needs. Only the methods the
# code does call count (an entry alone grants nothing): the chart must grant exactly those.
CLIENT_CALLS = {
    # The Nodes are listed and watched by our own watch (kube.NodeWatch: watch.Watch calls list_node).
    "list_node": (Rule("", "nodes", "list", "kube.NodeWatch"), Rule("", "nodes", "watch", "kube.NodeWatch")),
    # The pods likewise (kube.PodWatch: list_pod_for_all_namespaces, cluster-wide).
    "list_pod_for_all_namespaces": (Rule("", "pods", "list", "kube.PodWatch"), Rule("", "pods", "watch", "kube.PodWatch")),
    # DRA demand: what claims and their templates ask for, and each node's devices (kube.DraIndex).
    "list_resource_claim_template_for_all_namespaces": (Rule("resource.k8s.io", "resourceclaimtemplates", "list", "kube.DraIndex"),
                                                        Rule("resource.k8s.io", "resourceclaimtemplates", "watch", "kube.DraIndex")),
    "list_resource_claim_for_all_namespaces": (Rule("resource.k8s.io", "resourceclaims", "list", "kube.DraIndex"),
                                               Rule("resource.k8s.io", "resourceclaims", "watch", "kube.DraIndex")),
    "list_resource_slice": (Rule("resource.k8s.io", "resourceslices", "list", "kube.DraIndex"),
                            Rule("resource.k8s.io", "resourceslices", "watch", "kube.DraIndex")),
    # Group demand: each PodGroup's gang minCount (kube.PodGroupIndex).
    "list_pod_group_for_all_namespaces": (Rule("scheduling.k8s.io", "podgroups", "list", "kube.PodGroupIndex"),
                                          Rule("scheduling.k8s.io", "podgroups", "watch", "kube.PodGroupIndex")),
    "patch_node": Rule("", "nodes", "patch", "kube.KubeAdapter.patch_node"),
    "read_node": Rule("", "nodes", "get", "kube.KubeAdapter.read_node"),
    "create_namespaced_pod": Rule("", "pods", "create", "kube.KubeAdapter.create_slurmd_pod", "pools"),
    "delete_namespaced_pod": Rule("", "pods", "delete", "kube.KubeAdapter.delete_pod", "pools"),
    "create_namespaced_pod_eviction": Rule("", "pods/eviction", "create", "kube.KubeAdapter.evict"),
    "create_namespaced_event": Rule("", "events", "create", "kube.KubeAdapter.event"),
    "patch_namespaced_event": Rule("", "events", "patch", "kube.KubeAdapter.event"),  # a repeat raises the count (eventseries.py)
    "patch_namespaced_custom_object_status": Rule(
        "slurmpool.io", "slurmnodepools/status", "patch", "kube.KubeAdapter.patch_pool_status"
    ),
    "read_namespaced_secret": Rule("", "secrets", "get", "kube.KubeAdapter.read_secret", "pools"),
    # Leader election: the Lease in the operator's own namespace (a Role there).
    "read_namespaced_lease": Rule("coordination.k8s.io", "leases", "get", "leader.LeaderElector._try", "release"),
    "create_namespaced_lease": Rule("coordination.k8s.io", "leases", "create", "leader.LeaderElector._try", "release"),
    "replace_namespaced_lease": Rule("coordination.k8s.io", "leases", "update", "leader.LeaderElector._try", "release"),
}
# kopf's own needs in the way __main__ runs it (clusterwide, standalone: no peering objects).
KOPF_NEEDS = [
    Rule("apiextensions.k8s.io", "customresourcedefinitions", "list", "kopf resource observer"),
    Rule("apiextensions.k8s.io", "customresourcedefinitions", "watch", "kopf resource observer"),
    Rule("", "events", "create", "kopf event posting"),
]
API_VERB = re.compile(r"^(create|read|patch|replace|delete|list|watch|connect|get)_")
CORE_NAMES = {"nodes", "pods", "events", "secrets", "namespaces", "configmaps", "services"}


def api_method_names() -> set[str]:
    names = set()
    for _, cls in inspect.getmembers(kubernetes.client, inspect.isclass):
        if cls.__module__.startswith("kubernetes.client.api."):
            names |= {n for n in vars(cls) if API_VERB.match(n) and not n.endswith("_with_http_info")}
    return names


def called_api_methods() -> dict[str, list[str]]:
    """Kubernetes client method name -> files of the operator that use it."""
    known = api_method_names()
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] in NOT_THE_OPERATOR:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in known:
                found.setdefault(node.attr, []).append(path.name)
    return found


def kopf_rules() -> set[Rule]:
    import slurmpool.controller.handlers  # noqa: F401 - registers the handlers
    from kopf._core.intents.registries import get_default_registry

    registry = get_default_registry()
    rules: set[Rule] = set()
    kinds = {"_indexing": ("list", "watch"), "_watching": ("list", "watch"), "_spawning": ("list", "watch", "patch"),
             "_changing": ("list", "watch", "patch"), "_webhooks": ()}
    for attr, verbs in kinds.items():
        for handler in getattr(registry, attr).get_all_handlers():
            selector = handler.selector
            resource = selector.plural or selector.any_name
            group = selector.group or ""
            assert group or resource in CORE_NAMES, f"handler {handler.id}: which API group is {resource!r}?"
            for verb in verbs:
                rules.add(Rule(group, resource, verb, f"handlers.{handler.id} (kopf watch)"))
    return rules


def client_rules(calls) -> set[Rule]:
    """The rules of the client methods called (an entry is one Rule or a tuple of them)."""
    out: set[Rule] = set()
    for name in calls:
        entry = CLIENT_CALLS[name]
        out |= set(entry) if isinstance(entry, tuple) else {entry}
    return out


def needed() -> set[tuple[str, str, str, str]]:
    calls = called_api_methods()
    unknown = sorted(set(calls) - set(CLIENT_CALLS))
    assert not unknown, (
        f"the operator calls {unknown} ({calls}): add each to CLIENT_CALLS in tests/test_rbac.py with the rule it "
        "needs, to deploy/helm/slurmpool/templates/rbac.yaml and docs/rbac.md, then `make manifests`"
    )
    rules = client_rules(calls) | kopf_rules() | set(KOPF_NEEDS)
    return {(r.group, r.resource, r.verb, r.scope) for r in rules}


def rendered() -> set[tuple[str, str, str, str]]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    subject = {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("ClusterRole", "Role")}
    out = set()
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if subject not in binding["subjects"]:
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        if role["kind"] == "Role":  # a Role binds in its own namespace: the operator's
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == subject["namespace"]
            scope = "release"
        else:
            scope = "pools" if role["metadata"]["name"].endswith("-pools") else "cluster"
        for rule in role["rules"]:
            assert not rule.get("resourceNames") and not rule.get("nonResourceURLs")
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), rule
                        out.add((group, resource, verb, scope))
    return out


def test_the_code_calls_only_known_kubernetes_methods():
    calls = called_api_methods()
    assert "patch_node" in calls and "read_namespaced_secret" in calls  # the scan does see the calls
    needed()


def test_kopf_runs_standalone_and_clusterwide():
    """Peering (several operators) would need kopf's peering objects: not granted."""
    source = (PACKAGE / "__main__.py").read_text()
    assert "standalone=True" in source and "clusterwide=True" in source


def test_chart_grants_exactly_what_the_code_uses():
    grants, needs = rendered(), needed()
    assert not grants - needs, f"the chart grants rules the code never uses: {sorted(grants - needs)}"
    assert not needs - grants, f"the code needs rules the chart does not grant: {sorted(needs - grants)}"


def test_docs_list_every_rule_with_its_code_path():
    text = DOCS.read_text()
    calls = client_rules(called_api_methods())
    for rule in calls | kopf_rules() | set(KOPF_NEEDS):
        row = f"| `{rule.group or 'core'}` | `{rule.resource}` | `{rule.verb}` |"
        assert row in text, f"docs/rbac.md has no row starting {row!r}"
    for rule in calls:  # the code path of each API call (watches: any handler on the resource will do)
        assert rule.code in text, f"docs/rbac.md does not name {rule.code}"


def test_chart_crd_is_the_generated_crd():
    generated = (REPO / "crds" / "slurmpool.io_slurmnodepools.yaml").read_text()
    assert (REPO / "deploy" / "helm" / "slurmpool" / "files" / "crds" / "slurmpool.io_slurmnodepools.yaml").read_text() == generated, (
        "the chart's CRD differs from crds/: run `make crds`"
    )
    assert generated in (REPO / "deploy" / "manifests" / "crds.yaml").read_text(), "deploy/manifests/crds.yaml: run `make manifests`"
