"""The optional on-call ClusterRole (deploy/manifests/oncall-role.yaml, rendered from the chart's
templates/oncall-rbac.yaml) on the real lab: a ServiceAccount bound to it and to nothing else runs
`kubectl slurmpool status/plan/move/pause/resume` (the plugin found on PATH, through the lab's
kubectl) and the runbook's commands (docs/runbook.md) against a running operator and pool, and all of it
works; each rule of the role is needed (the role without it makes a named command fail with the
apiserver's Forbidden for exactly that verb and resource); and what the on-call must not do is
refused. Every request is made with a kubeconfig holding only the account's token.

The account is bound through a group (the ServiceAccounts of its namespace, identity.ONCALL_GROUP),
the group the lab fixture's chart admission policies name as the on-call (oncall.subjects): it may
change only slurmpool.io/pin and move-now on a Node; labels, taints, the cordon, other annotations,
the spec and the operator's records are refused with each policy's message; a bad pin or move-now
is refused for everyone; a break-glass group may do all of it (docs/rbac.md#admission-policies).

tests/test_oncall_role.py derives the same rules from cli.py and the runbook without a lab."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

from harness import (
    NAMESPACE,
    Operator,
    apply,
    ensure_namespace_and_secret,
    events,
    get_json,
    install_crd,
    node_json,
    node_placements,
    now_rfc3339,
    pod_json,
    pods_json,
    pool_json,
    pool_manifest,
    pool_status,
    reset_lab,
    slurmd_pods,
    wait,
)
from identity import (
    BREAK_GLASS_GROUP,
    ONCALL_GROUP,
    ONCALL_NAMESPACE,
    admission_objects,
    apply_objects,
    manifest_objects,
    service_account_user,
    token_kubeconfig,
)

pytestmark = pytest.mark.e2e
POOL = "gpu"
SA_NAMESPACE = "slurmpool-e2e-oncall-sa"
ONCALL = "oncall"  # in ONCALL_NAMESPACE, whose ServiceAccounts are the on-call group (identity.ONCALL_GROUP): the role is bound to that group
SOMEONE = "slurmpool-e2e-someone"  # a user (impersonated) bound to the same role, not on call: only the other policies hold for them
MINUS = "oncall-minus"  # bound to slurmpool-oncall less one rule (test_each_rule_is_needed)
NOBODY = "nobody"  # bound to nothing: what any ServiceAccount may do
BINDINGS = ("slurmpool-oncall-e2e", "slurmpool-oncall-minus-e2e", "slurmpool-oncall-someone-e2e")
VENV_BIN = Path(sys.executable).parent  # where `pip install` put kubectl-slurmpool


def flat(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule.get("apiGroups") or [""] for r in rule.get("resources") or []
            for v in rule.get("verbs") or []}


ROLE = manifest_objects("oncall-role.yaml")[0]
GRANTED = flat(ROLE["rules"])


class As:
    """kubectl and the kubectl plugin with one ServiceAccount's token, and nothing else."""

    def __init__(self, lab, name: str, namespace: str = SA_NAMESPACE):
        self.lab = lab
        self.user = service_account_user(namespace, name)
        self.kubeconfig = token_kubeconfig(lab, namespace, name, Path(lab.dir) / f"{name}-sa.kubeconfig")
        self.env = {**lab.env, "KUBECONFIG": str(self.kubeconfig), "PATH": f"{VENV_BIN}:{lab.env['PATH']}", "COLUMNS": "100"}

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.lab.bin_dir / "kubectl"), *args], env=self.env, input=input,
                              capture_output=True, text=True, timeout=60)

    def plugin(self, *args: str) -> subprocess.CompletedProcess:
        """`kubectl slurmpool ...`, as the on-call runs it."""
        return self.kubectl("slurmpool", *args)

    def ok(self, *args: str, plugin: bool = False, input: str | None = None) -> str:
        p = self.plugin(*args) if plugin else self.kubectl(*args, input=input)
        assert p.returncode == 0, f"{'kubectl slurmpool' if plugin else 'kubectl'} {' '.join(args)} as {self.user}:\n{p.stderr}"
        return p.stdout

    def rules(self, namespace: str) -> set[tuple[str, str, str]]:
        """What the apiserver says this account may do there (SelfSubjectRulesReview)."""
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": namespace}}
        out = self.ok("create", "--validate=false", "-f", "-", "-o", "json", input=json.dumps(review))
        return flat(json.loads(out)["status"]["resourceRules"])


def binding(name: str, role: str, account: str | None = None, group: str | None = None, user: str | None = None) -> dict:
    subject = ({"kind": "ServiceAccount", "name": account, "namespace": SA_NAMESPACE} if account else
               {"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"} if group else
               {"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"})
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [subject]}


def settled(lab, slurm: int):
    def check():
        s = pool_status(lab, POOL)
        ok = (s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == len(lab.nodes) - slurm
              and s.get("moving") == 0)
        return s if ok else None

    return check


def placements(lab) -> dict[str, str]:
    return {n: p for n, p in node_placements(lab).items() if n in lab.nodes}


def pool(lab) -> dict:
    return pool_json(lab, POOL)


@pytest.fixture(scope="module")
def oncall(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    apply_objects(lab, [ROLE])
    for namespace in (SA_NAMESPACE, ONCALL_NAMESPACE):
        lab.kubectl("create", "namespace", namespace, check=False)
    apply_objects(lab, [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n, "namespace": SA_NAMESPACE}}
                        for n in (MINUS, NOBODY)])
    apply_objects(lab, [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ONCALL, "namespace": ONCALL_NAMESPACE}}])
    apply_objects(lab, [binding(BINDINGS[0], ROLE["metadata"]["name"], group=ONCALL_GROUP),
                        binding(BINDINGS[2], ROLE["metadata"]["name"], user=SOMEONE)])
    operator = Operator(lab, "operator-oncall-role.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, 5))
        wait(settled(lab, 5), 120, what="5/3")
        yield As(lab, ONCALL, ONCALL_NAMESPACE)
    finally:
        operator.stop()
        print(operator.log_tail(30))
        lab.kubectl("delete", "clusterrolebinding", *BINDINGS, "--ignore-not-found", check=False)
        lab.kubectl("delete", "clusterrole", "slurmpool-oncall-minus", "--ignore-not-found", check=False)
        lab.kubectl("delete", "namespace", SA_NAMESPACE, ONCALL_NAMESPACE, "--wait=false", check=False)
        reset_lab(lab)  # meanwhile the namespace controller deletes both namespaces; then wait for them
        lab.kubectl("wait", "--for=delete", f"namespace/{SA_NAMESPACE}", f"namespace/{ONCALL_NAMESPACE}", "--timeout=60s",
                    check=False, timeout=90)


def test_the_account_has_exactly_the_role(lab, oncall):
    assert lab.kubectl_json("get", "clusterrole", "slurmpool-oncall")["rules"] == ROLE["rules"]
    who = json.loads(oncall.ok("auth", "whoami", "-o", "json"))
    assert who["status"]["userInfo"]["username"] == oncall.user
    assert ONCALL_GROUP in who["status"]["userInfo"]["groups"]  # bound to the role, and matched by the on-call policy, as a group
    baseline = As(lab, NOBODY).rules(NAMESPACE)
    assert not any(g == "slurmpool.io" or r in ("nodes", "pods", "events") for g, r, _ in baseline)
    assert oncall.rules(NAMESPACE) - baseline == GRANTED
    assert oncall.rules(SA_NAMESPACE) - baseline == GRANTED  # cluster-wide: every namespace alike


def test_status_and_plan(lab, oncall):
    before = placements(lab)
    view = json.loads(oncall.ok("status", POOL, "-n", NAMESPACE, "-o", "json", plugin=True))
    assert [n["node"] for n in view["nodes"]] == lab.nodes
    assert sum(n["side"] == "slurm" for n in view["nodes"]) == 5 and view["spec"]["slurmNodes"] == 5
    assert all(n["slurmState"] for n in view["nodes"])  # the operator's slurmpool.io/slurm annotation, read through nodes
    text = oncall.ok("status", POOL, "-n", NAMESPACE, plugin=True)
    assert f"SlurmNodePool {NAMESPACE}/{POOL}" in text and all(n in text for n in lab.nodes), text
    plan = json.loads(oncall.ok("plan", POOL, "-n", NAMESPACE, "--slurm-nodes", "3", "-o", "json", plugin=True))
    assert len(plan["moves"]) == 2 and all(m["from"] == "slurm" and m["to"] == "inference:llm" for m in plan["moves"])
    assert "Plan for" in oncall.ok("plan", POOL, "-n", NAMESPACE, plugin=True)
    assert placements(lab) == before  # a dry run


def test_status_shows_pods_of_any_namespace(lab, oncall):
    """status lists pods across namespaces (list_pod_for_all_namespaces): a serving pod in a
    namespace the pool knows nothing of shows up on its node."""
    node = sorted(n for n, p in placements(lab).items() if p == "inference:llm")[0]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "serve-1", "namespace": SA_NAMESPACE},
           "spec": {"nodeName": node, "tolerations": [{"key": "slurmpool.io/inference", "operator": "Exists"}],
                    "containers": [{"name": "llm", "image": "llm:1"}]}}
    apply(lab, pod)
    try:
        wait(lambda: pod_json(lab, "serve-1", SA_NAMESPACE).get("status", {}).get("phase") == "Running", 30,
             what="serve-1 running")
        view = json.loads(oncall.ok("status", POOL, "-n", NAMESPACE, "-o", "json", plugin=True))
        rows = {n["node"]: n["pods"] for n in view["nodes"]}
        assert f"{SA_NAMESPACE}/serve-1" in rows[node], rows
    finally:
        lab.kubectl("delete", "pod", "serve-1", "-n", SA_NAMESPACE, "--wait=true", "--timeout=30s", check=False)


def test_move_now_and_its_events(lab, oncall):
    node = sorted(n for n, p in placements(lab).items() if p == "slurm")[0]
    out = oncall.ok("move", node, "--to", "inference", plugin=True)
    assert "move-now=inference" in out and f"pool {NAMESPACE}/{POOL} will move it" in out, out
    wait(lambda: placements(lab)[node] == "inference:llm", 90, what=f"{node} moved now")
    wait(settled(lab, 5), 90, what="the split kept at 5/3 (a swap)")
    wait(lambda: "slurmpool.io/move-now" not in (node_json(lab, node)["metadata"].get("annotations") or {}), 30,
         what="move-now cleared")
    # Reading the operator's Events, as the runbook does.
    wait(lambda: "MoveNowDone" in oncall.ok("events", "-n", NAMESPACE), 30, what="MoveNowDone in kubectl events")
    described = oncall.ok("describe", "snp", POOL, "-n", NAMESPACE)
    assert "MoveNowDone" in described and "Conditions" in described, described
    status = oncall.ok("get", f"snp/{POOL}", "-n", NAMESPACE, "-o", "jsonpath={.status.moves}")
    assert status in ("", "[]"), status  # nothing in flight
    assert POOL in oncall.ok("get", "snp", "-n", NAMESPACE)


def test_pause_and_resume(lab, oncall):
    assert json.loads(oncall.ok("pause", POOL, "-n", NAMESPACE, "-o", "json", plugin=True))["paused"] is True
    assert pool(lab)["spec"]["paused"] is True
    assert "resumed" in oncall.ok("resume", POOL, "-n", NAMESPACE, plugin=True)
    assert pool(lab)["spec"]["paused"] is False
    # the runbook's way
    oncall.ok("patch", f"snp/{POOL}", "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"paused":true}}')
    assert pool(lab)["spec"]["paused"] is True
    oncall.ok("patch", f"snp/{POOL}", "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"paused":false}}')
    assert pool(lab)["spec"]["paused"] is False


def test_scale_and_pin_from_the_runbook(lab, oncall):
    oncall.ok("scale", f"snp/{POOL}", "-n", NAMESPACE, "--replicas=4")
    assert pool(lab)["spec"]["slurmNodes"] == 4
    wait(settled(lab, 4), 90, what="4/4")
    pinned = sorted(n for n, p in placements(lab).items() if p != "slurm")[0]
    oncall.ok("annotate", "node", pinned, "slurmpool.io/pin=slurm", "--overwrite")
    wait(lambda: placements(lab)[pinned] == "slurm", 90, what=f"pinned {pinned} brought to Slurm")
    wait(settled(lab, 4), 90, what="4/4 with the pin")
    oncall.ok("annotate", "node", pinned, "slurmpool.io/pin-")
    assert "slurmpool.io/pin" not in (get_json(lab, "node", pinned)["metadata"].get("annotations") or {})
    oncall.ok("scale", f"snp/{POOL}", "-n", NAMESPACE, "--replicas=5")
    wait(settled(lab, 5), 90, what="5/3")


# ---------------------------------------------------------------- the chart's admission policies (docs/rbac.md)
# The lab fixture applied them (identity.apply_admission_policies) with this suite's on-call group
# (identity.ONCALL_GROUP, to which BINDINGS[0] binds the role) and break-glass groups.
RECORDS, VALUES, ONCALL_POLICY = "slurmpool-operator-records", "slurmpool-placement-values", "slurmpool-oncall-node-changes"
POOL_POLICY, ONCALL_POOL = "slurmpool-pool-policy", "slurmpool-oncall-pool-changes"
ALLOWED = "Allowed: slurm, inference, or inference:POOL"


def denied(result: subprocess.CompletedProcess, policy: str, *phrases: str) -> str:
    """The request was refused by that policy (kubectl: 'ValidatingAdmissionPolicy 'NAME' with binding
    'NAME' denied request: MESSAGE'), with these phrases in the message. Returns stderr."""
    verb = next((a for a in result.args if a in ("cordon", "uncordon")), None)
    if verb:  # kubectl (un)cordon exits 0 when the apiserver refuses: it prints the error
        assert f"error: unable to {verb} node" in result.stderr, f"not refused: {result.args}\n{result.stderr}"
    else:
        assert result.returncode != 0, f"not refused: {result.args}\n{result.stdout}"
    assert f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: slurmpool: " in result.stderr, result.stderr
    for phrase in phrases:
        assert phrase in result.stderr, (phrase, result.stderr)
    return result.stderr


def node_state(lab, node: str) -> tuple:
    """Labels, annotations and spec, less what the operator rewrites as Slurm's state changes."""
    n = get_json(lab, "node", node)
    annotations = {k: v for k, v in (n["metadata"].get("annotations") or {}).items() if k not in ("slurmpool.io/slurm", "slurmpool.io/settled-at")}
    return n["metadata"].get("labels"), annotations, n["spec"]


def impersonating(lab, user: str, *groups: str):
    """kubectl as the lab admin impersonating a user with exactly these groups (plus system:authenticated)."""
    flags = [f"--as={user}", *(f"--as-group={g}" for g in (*groups, "system:authenticated"))]
    return lambda *args: lab.kubectl(*flags, *args, check=False)


def test_the_policies_are_the_charts_and_type_check(lab, oncall):
    """The policies in force are the chart's (rendered with this suite's values), and the
    controller-manager's type checking of each against the Node schema found nothing."""
    for obj in admission_objects():
        kind = obj["kind"].lower()
        live = get_json(lab, kind, obj["metadata"]["name"])
        for key in ("failurePolicy", "matchConditions", "variables", "validations", "policyName", "validationActions"):
            assert live["spec"].get(key) == obj["spec"].get(key), (obj["metadata"]["name"], key)
        if obj["kind"] == "ValidatingAdmissionPolicy":
            status = wait(lambda kind=kind, obj=obj, live=live: (st := get_json(lab, kind, obj["metadata"]["name"]).get("status") or {})
                          .get("observedGeneration") == live["metadata"]["generation"] and st, 30, what="type checking")
            assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status
    assert {p["metadata"]["name"] for p in admission_objects()} == {RECORDS, VALUES, ONCALL_POLICY, POOL_POLICY, ONCALL_POOL}


def side_nodes(lab) -> tuple[str, str]:
    p = placements(lab)
    return sorted(n for n in p if p[n] == "slurm")[-1], sorted(n for n in p if p[n].startswith("inference:"))[-1]


# (kubectl arguments as the on-call, the policy that refuses, phrases of its message). {slurm} and
# {inference} are settled nodes of each side. Those that would disturb the pool if wrongly let
# through are server-side dry runs: admission runs for them all the same.
ONCALL_REFUSED = [
    (("label", "node", "{slurm}", "oncall-e2e/probe=yes"), ONCALL_POLICY,
     ["the on-call may not change the labels of node {slurm} (oncall-e2e/probe)"]),
    (("label", "node", "{inference}", "slurmpool.io/inference-pool-", "--dry-run=server"), ONCALL_POLICY,
     ["labels of node {inference} (slurmpool.io/inference-pool)"]),
    (("taint", "node", "{inference}", "slurmpool.io/inference-", "--dry-run=server"), ONCALL_POLICY,
     ["the on-call may not change the taints of node {inference}", "kubectl slurmpool move {inference}"]),
    (("taint", "node", "{slurm}", "oncall-e2e/probe=yes:NoSchedule"), ONCALL_POLICY, ["taints of node {slurm}"]),
    (("uncordon", "{slurm}", "--dry-run=server"), ONCALL_POLICY,
     ["the on-call may not uncordon node {slurm}", "To move the node: kubectl slurmpool move {slurm} --to slurm|inference|inference:POOL"]),
    (("cordon", "{inference}", "--dry-run=server"), ONCALL_POLICY, ["the on-call may not cordon node {inference}"]),
    (("annotate", "node", "{slurm}", "oncall-e2e/note=hi"), ONCALL_POLICY,
     ["may change only the annotations slurmpool.io/pin, slurmpool.io/move-now and slurmpool.io/force of node {slurm}, not oncall-e2e/note"]),
    (("annotate", "node", "{slurm}", 'slurmpool.io/move={"id":"by-hand","phase":"Drainig"}', "--dry-run=server"), RECORDS,
     ["slurmpool.io/move on node {slurm} is a record of the slurmpool operator: only its ServiceAccount "
      "(system:serviceaccount:slurmpool-system:slurmpool) may set, change or remove it. To move the node: kubectl slurmpool move {slurm}"]),
    (("annotate", "node", "{inference}", "slurmpool.io/placement-", "--dry-run=server"), RECORDS,
     ["slurmpool.io/placement on node {inference} is a record of the slurmpool operator"]),
    (("label", "node", "{inference}", "slurmpool.io/side=slurm", "--overwrite", "--dry-run=server"), RECORDS,
     ["slurmpool.io/side on node {inference} is a record of the slurmpool operator"]),
    (("patch", "node", "{slurm}", "--type=merge", "-p", '{"spec":{"podCIDR":"10.99.0.0/24"}}', "--dry-run=server"), ONCALL_POLICY,
     ["the on-call may not change the spec of node {slurm}"]),
]


@pytest.mark.parametrize("args,policy,phrases", ONCALL_REFUSED, ids=lambda a: " ".join(a[:3]) if isinstance(a, tuple) else None)
def test_oncall_may_change_only_pin_and_move_now(lab, oncall, args, policy, phrases):
    slurm, inference = side_nodes(lab)
    fill = lambda a: a.replace("{slurm}", slurm).replace("{inference}", inference)  # noqa: E731
    before = {n: node_state(lab, n) for n in (slurm, inference)}
    result = oncall.kubectl(*map(fill, args))
    denied(result, policy, *map(fill, phrases))
    assert {n: node_state(lab, n) for n in (slurm, inference)} == before


def test_operator_records_for_anyone_else(lab, oncall):
    """Someone bound to the same role but not on call: the on-call policy does not hold for them (a
    label goes through, and a hand uncordon of a Slurm node is restored by the operator, as
    before), the operator-records policy does."""
    someone = impersonating(lab, SOMEONE)
    slurm, inference = side_nodes(lab)
    denied(someone("annotate", "node", slurm, "slurmpool.io/hold-until=2099-01-01T00:00:00Z"), RECORDS,
           f"slurmpool.io/hold-until on node {slurm} is a record of the slurmpool operator: only its ServiceAccount "
           "(system:serviceaccount:slurmpool-system:slurmpool) may set, change or remove it.")
    denied(someone("annotate", "node", slurm, 'slurmpool.io/move={"id":"x"}', "slurmpool.io/placement=inference:llm", "--overwrite",
                   "--dry-run=server"),
           RECORDS, f"slurmpool.io/move, slurmpool.io/placement on node {slurm} are records of the slurmpool operator")
    denied(someone("label", "node", inference, "slurmpool.io/side=slurm", "--overwrite", "--dry-run=server"), RECORDS,
           f"slurmpool.io/side on node {inference} is a record of the slurmpool operator")
    assert someone("label", "node", inference, "someone-e2e/probe=yes").returncode == 0
    assert someone("label", "node", inference, "someone-e2e/probe-").returncode == 0
    # The cordon decision (docs/rbac.md): not refused at admission, restored and reported.
    since = now_rfc3339()
    uncordon = someone("uncordon", slurm)
    assert uncordon.returncode == 0 and "error" not in uncordon.stderr, uncordon.stderr
    wait(lambda: get_json(lab, "node", slurm)["spec"].get("unschedulable"), 30, what=f"the cordon of {slurm} restored")
    wait(lambda: any(slurm in m for m in events(lab, "CordonRestored", since)), 30, what="CordonRestored")


def test_a_bad_pin_or_move_now_is_refused_for_everyone(lab, oncall):
    slurm, _ = side_nodes(lab)
    as_break_glass = impersonating(lab, oncall.user, ONCALL_GROUP, BREAK_GLASS_GROUP)
    for who, run in [("on-call", oncall.kubectl), ("someone", impersonating(lab, SOMEONE)),
                     ("break-glass", as_break_glass), ("lab admin (system:masters)", lambda *a: lab.kubectl(*a, check=False))]:
        stderr = denied(run("annotate", "node", slurm, "slurmpool.io/pin=inferense:llm"), VALUES,
                        f"slurmpool.io/pin=inferense:llm on node {slurm} is not a placement. {ALLOWED}")
        assert "inference:POOL where POOL names one of the SlurmNodePool's inference pools" in stderr, who
        denied(run("annotate", "node", slurm, "slurmpool.io/move-now=inference:LLM"), VALUES, "slurmpool.io/move-now=inference:LLM")
    # kubectl slurmpool move passes the apiserver's message on
    out = oncall.plugin("move", slurm, "--to", "inference:Llm")
    assert out.returncode == 1 and out.stderr.startswith(f'error: nodes "{slurm}" is forbidden: ValidatingAdmissionPolicy '
                                                         "'slurmpool-placement-values'"), out.stderr
    assert f"slurmpool.io/move-now=inference:Llm on node {slurm} is not a placement. {ALLOWED}" in out.stderr
    annotations = get_json(lab, "node", slurm)["metadata"]["annotations"]
    assert "slurmpool.io/pin" not in annotations and "slurmpool.io/move-now" not in annotations


def test_break_glass_can_do_all_of_it(lab, oncall):
    """The on-call's own identity plus a break-glass group: labels, taints, the cordon and the
    operator's records all go through (the ones that would disturb the pool as server-side dry
    runs, which pass admission like real requests)."""
    run = impersonating(lab, oncall.user, ONCALL_GROUP, BREAK_GLASS_GROUP)
    slurm, inference = side_nodes(lab)
    for args in [("label", "node", inference, "oncall-e2e/probe=yes"), ("label", "node", inference, "oncall-e2e/probe-"),
                 ("label", "node", inference, "slurmpool.io/side=slurm", "--overwrite", "--dry-run=server"),
                 ("taint", "node", inference, "slurmpool.io/inference-", "--dry-run=server"),
                 ("uncordon", slurm, "--dry-run=server"), ("cordon", inference, "--dry-run=server"),
                 ("annotate", "node", slurm, 'slurmpool.io/move={"id":"by-hand"}', "--dry-run=server"),
                 ("annotate", "node", inference, "slurmpool.io/placement-", "--dry-run=server")]:
        result = run(*args)
        assert result.returncode == 0 and "error" not in result.stderr, (args, result.stderr)
    assert "oncall-e2e/probe" not in get_json(lab, "node", inference)["metadata"]["labels"]
    wait(settled(lab, 5), 60, what="5/3 untouched")


REFUSED = [
    ("get", "secret", "slurm-ssh", "-n", NAMESPACE),
    ("get", "secrets", "-A"),
    ("get", "pod", "{slurmd_pod}", "-n", NAMESPACE),  # list only: no get, so no logs or exec either
    ("delete", "pod", "{slurmd_pod}", "-n", NAMESPACE),
    ("create", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/{{slurmd_pod}}/eviction", "-f", "-"),
    ("run", "oncall-was-here", "-n", NAMESPACE, "--image=busybox", "--restart=Never"),
    ("create", "-f", "-"),  # a new SlurmNodePool
    ("delete", "snp", POOL, "-n", NAMESPACE),
    ("replace", "-f", "-"),  # PUT of the pool: only merge patches
    ("patch", "snp", POOL, "-n", NAMESPACE, "--subresource=status", "--type=merge", "-p", '{"status":{"moving":3}}'),
    ("scale", f"snp/{POOL}", "-n", NAMESPACE, "--current-replicas=5", "--replicas=2"),  # get/update of scale
    ("get", "snp", "-n", NAMESPACE, "--watch", "--request-timeout=2s"),
    ("delete", "node", "{node}"),
    ("get", "lease", "slurmpool", "-n", "slurmpool-system"),
    ("create", "namespace", "oncall-was-here"),
    ("get", "configmaps", "-n", NAMESPACE),
    ("patch", "crd", "slurmnodepools.slurmpool.io", "--type=merge", "-p", '{"metadata":{"labels":{"x":"y"}}}'),
    ("get", "nodes", "--as=system:admin"),  # no impersonation
]


def refused_input(lab, args: tuple[str, ...], pod: str) -> str | None:
    if args[:2] == ("create", "--raw"):
        return json.dumps({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": NAMESPACE}})
    if args == ("create", "-f", "-"):
        other = pool_manifest(lab, "oncall-was-here", 1)
        return json.dumps(other)
    if args == ("replace", "-f", "-"):
        body = pool(lab)
        body["spec"]["slurmNodes"] = 2
        return json.dumps(body)
    return None


@pytest.mark.parametrize("args", REFUSED, ids=lambda a: " ".join(a[:3]))
def test_everything_else_is_refused(lab, oncall, args):
    pods = slurmd_pods(lab)
    pod = pods[0]["metadata"]["name"]
    resolved = tuple(a.replace("{slurmd_pod}", pod).replace("{node}", lab.nodes[-1]) for a in args)
    before = pool(lab)
    result = oncall.kubectl(*resolved, input=refused_input(lab, args, pod))
    assert result.returncode != 0, result.stdout
    assert "forbidden" in result.stderr.lower(), result.stderr
    after = pool(lab)
    assert after["spec"] == before["spec"] and after.get("status", {}).get("moving") == before.get("status", {}).get("moving")
    assert pod in {p["metadata"]["name"] for p in pods_json(lab)}
    with pytest.raises(ApiException) as missing:
        pool_json(lab, "oncall-was-here")
    assert missing.value.status == 404


# Each rule of the role -> a command of the plugin or the runbook that fails without it. The
# commands are harmless if they wrongly succeed (resume an unpaused pool, move a node to its side,
# scale to the current count, remove an absent pin).
NEEDED_BY = {
    ("slurmpool.io", "slurmnodepools", "get"): ("plugin", "status", POOL, "-n", NAMESPACE),
    ("slurmpool.io", "slurmnodepools", "list"): ("kubectl", "get", "snp", "-n", NAMESPACE),
    ("slurmpool.io", "slurmnodepools", "patch"): ("plugin", "resume", POOL, "-n", NAMESPACE),
    ("slurmpool.io", "slurmnodepools/scale", "patch"): ("kubectl", "scale", f"snp/{POOL}", "-n", NAMESPACE, "--replicas=5"),
    ("", "nodes", "get"): ("kubectl", "annotate", "node", "{node}", "slurmpool.io/pin-"),
    ("", "nodes", "list"): ("plugin", "plan", POOL, "-n", NAMESPACE),
    ("", "nodes", "patch"): ("plugin", "move", "{node}", "--to", "{side}"),
    ("", "pods", "list"): ("plugin", "status", POOL, "-n", NAMESPACE, "-o", "json"),
    ("", "events", "list"): ("kubectl", "events", "-n", NAMESPACE),
}


def test_needed_by_covers_the_role():
    assert set(NEEDED_BY) == GRANTED


@pytest.fixture(scope="module")
def minus(lab, oncall):
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "slurmpool-oncall-minus"},
            "rules": ROLE["rules"]}
    apply_objects(lab, [role, binding(BINDINGS[1], "slurmpool-oncall-minus", MINUS)])
    return As(lab, MINUS), As(lab, NOBODY).rules(NAMESPACE)


@pytest.mark.parametrize("rule", sorted(NEEDED_BY), ids=lambda r: f"{r[1]} {r[2]}")
def test_each_rule_is_needed(lab, minus, rule):
    account, baseline = minus
    group, resource, verb = rule
    rules = [{"apiGroups": [g], "resources": [r], "verbs": [v]} for g, r, v in sorted(GRANTED - {rule})]
    apply_objects(lab, [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                         "metadata": {"name": "slurmpool-oncall-minus"}, "rules": rules}])
    wait(lambda: account.rules(NAMESPACE) - baseline == GRANTED - {rule}, 30, what=f"the role without {rule} in force")
    node = lab.nodes[0]
    kind, *args = NEEDED_BY[rule]
    args = [a.replace("{node}", node).replace("{side}", placements(lab)[node]) for a in args]
    result = account.plugin(*args) if kind == "plugin" else account.kubectl(*args)
    assert result.returncode != 0, f"{kind} {' '.join(args)} worked without {rule}:\n{result.stdout}"
    assert f'cannot {verb} resource "{resource}" in API group "{group}"' in result.stderr, result.stderr


# ---------------------------------------------------------------- who may change what of a pool (issue 26, docs/rbac.md)
ONLY_THE_SPLIT = "the on-call may change only spec.slurmNodes, spec.paused, spec.inference.pools[].nodes and spec.demand.enabled of SlurmNodePool gpu, not "


def json_patch(*ops: tuple[str, str, object]) -> tuple[str, ...]:
    return ("patch", f"snp/{POOL}", "-n", NAMESPACE, "--type=json", "-p",
            json.dumps([{"op": op, "path": path, "value": value} for op, path, value in ops]), "--dry-run=server")


def merge_patch(spec: dict) -> tuple[str, ...]:
    return ("patch", f"snp/{POOL}", "-n", NAMESPACE, "--type=merge", "-p", json.dumps({"spec": spec}), "--dry-run=server")


# Changes the on-call may not make (server-side dry runs: admission runs all the same), each with the
# field its refusal names.
POOL_CHANGES = [
    ("access", json_patch(("replace", "/spec/slurm/access", {"rest": {"url": "https://slurmrestd.example.com:6820",
                                                                       "tokenSecretRef": {"name": "slurm-jwt"}}})), "slurm"),
    ("slurmdPod", json_patch(("replace", "/spec/slurm/slurmdPod/image", "slurmd:other")), "slurm"),
    ("nodeSelector", merge_patch({"nodeSelector": {"matchLabels": {"slurmpool.io/lab": "true", "team": "x"}}}), "nodeSelector"),
    ("drain", merge_patch({"drain": {"timeout": "1s", "onTimeout": "Cancel"}}), "drain"),
]


def test_oncall_may_change_the_split_of_a_pool(lab, oncall):
    """Scale (the subresource), pause and the pool counts go through as the on-call; the pool's
    spec is otherwise untouched (pause and resume: test_pause_and_resume; scale: the runbook)."""
    before = pool(lab)["spec"]
    oncall.ok(*json_patch(("add", "/spec/inference/pools/0/nodes", len(lab.nodes) - before["slurmNodes"])))
    oncall.ok(*merge_patch({"paused": True}))
    oncall.ok(*merge_patch({"slurmNodes": before["slurmNodes"]}))
    assert pool(lab)["spec"] == before


@pytest.mark.parametrize("what,args,field", POOL_CHANGES, ids=[c[0] for c in POOL_CHANGES])
def test_oncall_may_not_change_the_rest_of_a_pool(lab, oncall, what, args, field):
    before = pool(lab)["spec"]
    denied(oncall.kubectl(*args), ONCALL_POOL, ONLY_THE_SPLIT + field + ".")
    # the platform team (the lab admin) may, within the pool policy
    platform = lab.kubectl(*args, check=False)
    assert platform.returncode == 0, platform.stderr
    assert pool(lab)["spec"] == before


# Beyond the pool policy (identity.lab_pool_policy): refused for everyone, the platform team included.
BEYOND = [
    ("hostPath /", json_patch(("add", "/spec/slurm/slurmdPod/volumes", [{"name": "root", "hostPath": {"path": "/"}}])),
     "hostPath / in the slurmd pod of SlurmNodePool gpu is not allowed"),
    ("another registry", json_patch(("replace", "/spec/slurm/slurmdPod/image", "docker.io/evil/slurmd:1")),
     "slurm.slurmdPod.image docker.io/evil/slurmd:1 of SlurmNodePool gpu is not from an allowed registry"),
    ("a ServiceAccount", json_patch(("add", "/spec/slurm/slurmdPod/serviceAccountName", "slurmpool")),
     "slurm.slurmdPod.serviceAccountName slurmpool of SlurmNodePool gpu is not allowed"),
    ("privileged", json_patch(("add", "/spec/slurm/slurmdPod/securityContext", {"privileged": True})),
     "a privileged slurmd container (SlurmNodePool gpu) is not allowed"),
    ("control-plane nodes", merge_patch({"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/control-plane": ""}}}),
     "the nodeSelector of SlurmNodePool gpu picks control-plane nodes"),
]


@pytest.mark.parametrize("what,args,phrase", BEYOND, ids=[c[0] for c in BEYOND])
def test_beyond_the_pool_policy_is_refused_for_everyone(lab, oncall, what, args, phrase):
    denied(lab.kubectl(*args, check=False), POOL_POLICY, phrase)


def test_with_the_policies_off_the_operator_refuses_the_pool(lab, oncall):
    """The pool-policy binding on Warn: a pool with a hostPath / volume is admitted (with a warning),
    and the operator refuses it itself: Degraded PolicyViolation naming the volume, no slurmd pod."""
    name = "beyond-policy"
    bad = pool_manifest(lab, name, 1, nodeSelector={"matchLabels": {"slurmpool-e2e/none": "true"}})
    bad["spec"]["slurm"]["slurmdPod"]["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    binding = get_json(lab, "validatingadmissionpolicybinding", POOL_POLICY)
    lab.kubectl("patch", "validatingadmissionpolicybinding", POOL_POLICY, "--type=merge", "-p",
                json.dumps({"spec": {"validationActions": ["Warn"]}}))
    try:
        def admitted():
            p = lab.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(bad), check=False)
            return p.returncode == 0 and POOL_POLICY in p.stderr  # admitted, with the policy's warning
        wait(admitted, 60, what="the pool policy on Warn")
        apply(lab, bad)
        def refused():
            degraded = next((c for c in pool_status(lab, name).get("conditions") or [] if c["type"] == "Degraded"), None)
            return degraded if degraded and degraded["reason"] == "PolicyViolation" else None
        degraded = wait(refused, 60, what="Degraded PolicyViolation")
        assert degraded["status"] == "True"
        assert "slurm.slurmdPod.volumes root: hostPath / is not allowed" in degraded["message"], degraded
        assert not [p for p in slurmd_pods(lab) if p["metadata"]["labels"].get("slurmpool.io/pool") == name]
    finally:
        lab.kubectl("delete", "snp", name, "-n", NAMESPACE, "--ignore-not-found", check=False)
        lab.kubectl("patch", "validatingadmissionpolicybinding", POOL_POLICY, "--type=merge", "-p",
                    json.dumps({"spec": {"validationActions": binding["spec"]["validationActions"]}}))
        wait(lambda: "denied" in lab.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(bad), check=False).stderr,
             60, what="the pool policy on Deny again")
