"""The optional on-call ClusterRole (templates/oncall-rbac.yaml, rendered into
deploy/manifests/oncall-role.yaml) is exactly what `kubectl slurmpool` calls plus what the
on-call runbook (docs/runbook.md) runs with kubectl, derived from the code rather than written down twice:

  * every Kubernetes client method that cli.py names (read from its source) must be in PLUGIN_CALLS,
    which says the rule it needs; an entry the code no longer calls fails too;
  * each plugin command is run against a recording fake of the client, so the rules are tied to
    the command that needs them (status and plan read, move patches a node, pause/resume a pool);
  * RUNBOOK lists the kubectl commands of the on-call runbook (docs/runbook.md) and the requests each makes
    (as `kubectl -v=6` shows them on the lab; e2e/test_oncall_role.py runs them with the role);
  * the rendered role must grant the union of both, and nothing more; docs/rbac.md must list each.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from slurmpool.cli import complete as cli_complete
from slurmpool.cli import main as cli

from .factories import make_spec
from .test_rbac import api_method_names as _api_method_names

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / "operator" / "slurmpool" / "cli"
ROLE = REPO / "deploy" / "manifests" / "oncall-role.yaml"
DOCS = REPO / "docs" / "rbac.md"
RUNBOOK_DOC = REPO / "docs" / "runbook.md"

api_method_names = functools.cache(_api_method_names)

POOLS = ("slurmpool.io", "slurmnodepools")
SCALE = ("slurmpool.io", "slurmnodepools/scale")
NODES = ("", "nodes")
PODS = ("", "pods")
EVENTS = ("", "events")

# Each Kubernetes client method cli.py calls -> the rule it needs.
PLUGIN_CALLS = {
    "get_namespaced_custom_object": (*POOLS, "get"),  # Api.pool: status, plan
    "list_node": (*NODES, "list"),  # Api.nodes: status, plan (a pool's nodes by its nodeSelector); completion
    "list_pod_for_all_namespaces": (*PODS, "list"),  # Api.pods_on: status, plan (the pods on the pool's nodes)
    "list_namespaced_custom_object": (*POOLS, "list"),  # Api.pool_names: completion of a pool's name
    "patch_node": (*NODES, "patch"),  # Api.patch_node: move (the slurmpool.io/move-now annotation)
    "patch_namespaced_custom_object": (*POOLS, "patch"),  # Api.patch_pool: pause, resume (spec.paused)
}
# The plugin's commands and the rules each needs.
COMMANDS = {
    ("status", "gpu", "-n", "ns", "-o", "json"): {(*POOLS, "get"), (*NODES, "list"), (*PODS, "list")},
    ("status", "gpu", "-n", "ns"): {(*POOLS, "get"), (*NODES, "list"), (*PODS, "list")},
    ("plan", "gpu", "-n", "ns", "--slurm-nodes", "1", "-o", "json"): {(*POOLS, "get"), (*NODES, "list"), (*PODS, "list")},
    ("history", "gpu", "-n", "ns"): {(*POOLS, "get")},
    ("move", "n1", "--to", "inference"): {(*NODES, "patch")},
    ("move", "n1", "--to", "inference", "--dry-run=server"): {(*NODES, "patch")},  # the same rule: a dry run is authorised as the write
    ("pause", "gpu", "-n", "ns"): {(*POOLS, "patch")},
    ("pause", "--dry-run=server", "gpu", "-n", "ns", "--context", "ctx"): {(*POOLS, "patch")},
    ("resume", "gpu", "-n", "ns", "-o", "json"): {(*POOLS, "patch")},
}
# Shell completion (kubectl_complete-slurmpool ARGS... PARTIAL) and the rules each needs.
COMPLETIONS = {
    ("status", ""): {(*POOLS, "list")},
    ("move", ""): {(*NODES, "list")},
    ("st",): set(),
}
# The runbook's kubectl commands and the requests kubectl makes for each (kubectl -v=6).
RUNBOOK = {
    "kubectl get snp -n NS (find the pools)": {(*POOLS, "list")},
    "kubectl get snp/gpu -n NS -o jsonpath='{.status.moves}'": {(*POOLS, "get")},
    "kubectl describe snp/gpu -n NS (conditions and Events)": {(*POOLS, "get"), (*EVENTS, "list")},
    "kubectl events -n NS": {(*EVENTS, "list")},
    "kubectl scale snp/gpu -n NS --replicas=6": {(*POOLS, "get"), (*SCALE, "patch")},
    "kubectl patch snp/gpu -n NS --type=merge -p ...": {(*POOLS, "get"), (*POOLS, "patch")},
    "kubectl annotate node gpu03 slurmpool.io/pin=slurm": {(*NODES, "get"), (*NODES, "patch")},
}


def called_api_methods() -> set[str]:
    known = api_method_names()
    return {n.attr for path in CLI.glob("*.py") for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute) and n.attr in known}


def granted() -> set[tuple[str, str, str]]:
    docs = [d for d in yaml.safe_load_all(ROLE.read_text()) if d]
    (role,) = docs
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == "slurmpool-oncall"
    out = set()
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames, no nonResourceURLs
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), rule
                    out.add((group, resource, verb))
    return out


class Recorder:
    """Stands in for CoreV1Api, CustomObjectsApi and ApiClient: records each API method called."""

    def __init__(self, calls: list[str], pool: dict):
        self._calls, self._pool = calls, pool

    @staticmethod
    def sanitize_for_serialization(obj):
        return obj

    def __getattr__(self, name):
        assert name in api_method_names(), f"cli.py used {name!r}, not a Kubernetes API method"

        def call(*args, **kwargs):
            self._calls.append(name)
            answer = answer_to(name)
            # _preload_content=False: the raw answer, which the plugin parses itself
            return SimpleNamespace(data=json.dumps(answer).encode()) if kwargs.get("_preload_content") is False else answer

        def answer_to(name):
            if name == "get_namespaced_custom_object":
                return self._pool
            if name.startswith("list_"):
                nodes = [{"metadata": {"name": "n1", "labels": {"gpu": "true"}, "annotations": {}}, "spec": {}, "status": {}}]
                return {"items": nodes if name == "list_node" else [], "metadata": {}}
            return {"metadata": {"name": "n1", "annotations": {}}}

        return call


def run_command(monkeypatch, argv: tuple[str, ...], main=cli.main) -> set[str]:
    calls: list[str] = []
    pool = {"metadata": {"name": "gpu", "namespace": "ns"},
            "spec": make_spec(slurm_nodes=1, max_moves=8).model_dump(by_alias=True, exclude_none=True), "status": {}}

    def fake_init(self, kubeconfig, context):
        self.api = self.core = self.custom = Recorder(calls, pool)

    monkeypatch.setattr(cli.Api, "__init__", fake_init)
    monkeypatch.setattr(cli.Api, "default_namespace", staticmethod(lambda kubeconfig, context: "ns"))
    assert main(list(argv)) == 0
    return set(calls)


def test_the_plugin_calls_only_known_kubernetes_methods():
    calls = called_api_methods()
    unknown = calls - set(PLUGIN_CALLS)
    assert not unknown, f"cli.py calls {sorted(unknown)}: add each to PLUGIN_CALLS with its rule, to " \
                        "templates/oncall-rbac.yaml and docs/rbac.md, then `make manifests`"
    assert set(PLUGIN_CALLS) <= calls, f"PLUGIN_CALLS names methods cli.py no longer calls: {sorted(set(PLUGIN_CALLS) - calls)}"


def test_each_command_needs_what_it_is_said_to(monkeypatch, capsys):
    seen: set[str] = set()
    for argv, rules in COMMANDS.items():
        calls = run_command(monkeypatch, argv)
        seen |= calls
        assert {PLUGIN_CALLS[c] for c in calls} == rules, argv
    for argv, rules in COMPLETIONS.items():
        calls = run_command(monkeypatch, argv, main=cli_complete.complete_main)
        seen |= calls
        assert {PLUGIN_CALLS[c] for c in calls} == rules, argv
        assert capsys.readouterr().out.splitlines()[-1] == cli_complete.NO_FILES
    assert seen == set(PLUGIN_CALLS)  # every call in the code is reached by some command
    assert {a[0] for a in COMMANDS} == set(cli_commands(capsys))  # every command is covered


def cli_commands(capsys) -> list[str]:
    """The subcommands main()'s parser knows, as argparse lists them for an unknown one."""
    with pytest.raises(SystemExit):
        cli.main(["no-such-command"])
    choices = re.search(r"choose from (.*)\)", capsys.readouterr().err).group(1)
    return [c.strip(" '") for c in choices.split(",")]


def test_the_role_grants_exactly_the_plugin_and_the_runbook():
    needs = {PLUGIN_CALLS[c] for c in called_api_methods()} | set().union(*RUNBOOK.values())
    grants = granted()
    assert not grants - needs, f"the on-call role grants rules nothing uses: {sorted(grants - needs)}"
    assert not needs - grants, f"the plugin or the runbook needs rules the role lacks: {sorted(needs - grants)}"


@pytest.mark.parametrize("rule", sorted(set(PLUGIN_CALLS.values()) | set().union(*RUNBOOK.values())))
def test_docs_list_each_rule(rule):
    group, resource, verb = rule
    row = f"| `{group or 'core'}` | `{resource}` | `{verb}` |"
    text = DOCS.read_text()
    section = text[text.index("## The optional on-call role"):]
    assert row in section, f"docs/rbac.md's on-call section has no row starting {row!r}"


def test_runbook_points_to_the_role():
    text = RUNBOOK_DOC.read_text()
    assert "oncall.createRole" in text and "(rbac.md#the-optional-on-call-role)" in text
