"""The user docs against the code they describe (issue 38): a field, value, metric or flag that a
page names must exist, and the reference tables must name everything there is.

- docs/pools.md's field table against the CRD's spec schema: every row is a field, and every field
  has a row (or is named in its parent's row);
- values keys named anywhere in the docs against the chart's values.schema.json;
- metric names in the docs against the operator's registry (adapters/metrics.py), and docs/metrics.md's
  table (name, type, labels) against each metric;
- `kubectl slurmpool` subcommands and flags in the docs against the plugin's own `--help`;
- install.md's RBAC table against the rules the chart grants.

Each check is a function of the text, so the tests at the bottom show it failing on a wrong line."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import slurmpool.adapters.metrics  # noqa: F401 - registers the metrics
from slurmpool.cli.main import main as plugin_main

from .test_docs_links import DOCS, prose_lines

REPO = Path(__file__).resolve().parents[1]
POOLS = REPO / "docs" / "pools.md"
METRICS = REPO / "docs" / "metrics.md"
CHART = REPO / "deploy" / "helm" / "slurmpool"
CRD = REPO / "crds" / "slurmpool.io_slurmnodepools.yaml"
NOTES = CHART / "templates" / "NOTES.txt"
CODE = re.compile(r"`([^`]+)`")


def table(text: str, header: str) -> list[list[str]]:
    """The rows (cells) of the markdown table whose header row starts with `header`."""
    rows: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith(header):
            inside = True
        elif inside and line.startswith("|"):
            if not line.startswith("|---"):
                rows.append(cells(line))
        elif inside:
            break
    assert rows, f"no table with header {header!r}"
    return rows


def cells(line: str) -> list[str]:
    """A table row's cells; a | inside `code` does not split."""
    out, cell, code = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            out.append(cell.strip())
            cell = ""
        else:
            cell += ch
    return [*out, cell.strip()]


# ---------------------------------------------------------------- docs/pools.md against the CRD

# Fields of Kubernetes' own types: named in the table, their insides are Kubernetes' to document.
KUBERNETES_TYPES = {"nodeSelector", "inference.pools.taints", *(f"slurm.slurmdPod.{f}" for f in
                    ("env", "resources", "tolerations", "securityContext", "volumes", "volumeMounts"))}
# How deep every field must be named: spec.slurm.slurmdPod.image is three.
DEPTH = 3


def spec_fields(schema: dict, prefix: str = "") -> Iterator[str]:
    """Every field path of the spec schema, arrays' items as their array (inference.pools.name)."""
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        yield path
        if path not in KUBERNETES_TYPES:
            yield from spec_fields(sub.get("items", sub) if sub.get("type") == "array" else sub, f"{path}.")


def crd_spec_fields() -> set[str]:
    crd = yaml.safe_load(CRD.read_text())
    return set(spec_fields(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]))


def pool_field_problems(text: str, fields: set[str]) -> list[str]:
    rows = {}  # field named in a row's first cell -> that row's meaning
    for first, meaning, *_ in table(text, "| field | meaning |"):
        for name in CODE.findall(first):
            rows[name.replace("[]", "")] = meaning
    problems = [f"row `{name}` is no spec field" for name in rows if name not in fields]
    for path in sorted(f for f in fields if f.count(".") < DEPTH):
        if path in rows or any(row.startswith(f"{path}.") for row in rows):  # its row, or rows of its fields
            continue
        parent = next((path.rsplit(".", n)[0] for n in range(1, path.count(".") + 1) if path.rsplit(".", n)[0] in rows), None)
        if parent is None or not named_in(path.rsplit(".", 1)[-1], rows[parent]):
            problems.append(f"spec.{path} has no row" + (f" and is not named in `{parent}`'s" if parent else ""))
    return problems


def named_in(leaf: str, meaning: str) -> bool:
    """A field named in its parent's row: `leaf`, or `leaf: ...` (`inference: {pool: n}`)."""
    return any(re.match(rf"{re.escape(leaf)}(?![\w.\[])", span) for span in CODE.findall(meaning))


def test_every_spec_field_has_a_row_in_pools_md_and_every_row_is_a_field():
    problems = pool_field_problems(POOLS.read_text(), crd_spec_fields())
    assert not problems, "docs/pools.md's field table and the CRD (models.py) disagree:\n" + "\n".join(problems)


# ---------------------------------------------------------------- values keys against values.schema.json

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
FILE = re.compile(r"\.(md|py|yaml|json|sh|txt|tpl|png)$")
SET = re.compile(r"--set(?:-string)?[ =]'?([^\s']+)")


def resolves(path: str, schema: dict = SCHEMA) -> bool:
    """Whether a values path (image.repository, oncall.subjects[0].kind, poolPolicy.*) is in the schema."""
    node = schema
    for seg in re.split(r"\.|(?=\[)", path):
        if seg == "*":
            return "properties" in node
        if re.fullmatch(r"\[\d+\]", seg):
            if "items" not in node:
                return False
            node = node["items"]
        elif seg in node.get("properties", {}):
            node = node["properties"][seg]
        else:  # a map of the user's (labels, resources, nodeSelector) takes any key
            return "properties" not in node and node.get("additionalProperties") is not False and node.get("type") == "object"
    return True


def set_keys(arg: str) -> list[str]:
    """The keys of one --set argument: a.b=1,c[0].d=x,e={f,g}."""
    keys, depth, part = [], 0, ""
    for ch in arg + ",":
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            if "=" in part:
                keys.append(part.split("=", 1)[0])
            part = ""
        else:
            part += ch
    return keys


# Values of other charts a page compares with (upgrading.md: cert-manager's approver-policy).
OTHER_CHARTS = {"crds.enabled", "crds.keep"}
PATH = r"[a-zA-Z]+(?:\.[a-zA-Z*]+|\[\d+\])+"


def values_named(text: str, plain: bool = False) -> list[str]:
    """Values keys a page names: each `code` span (each word, with plain: NOTES.txt has no markdown)
    that is a dotted path under a top-level values key (file names aside), and each key of a --set."""
    top = set(SCHEMA["properties"])
    if plain:
        candidates = re.findall(rf"(?<![\w.]){PATH}", text)
    else:  # in prose only: a ``` fence would pair backticks wrongly
        candidates = [span.split("=", 1)[0] for span in CODE.findall("\n".join(prose_lines(text)))]
    named = [key for key in candidates if re.fullmatch(PATH, key) and key.split(".")[0].split("[")[0] in top
             and not FILE.search(key) and key not in OTHER_CHARTS]
    for arg in SET.findall(text):
        named.extend(set_keys(arg))
    return named


def values_table_names(text: str) -> list[str]:
    """Every name in the first column of install.md's table of values ("Values worth knowing")."""
    return [name for row in table(text, "| value | default | what |") for name in CODE.findall(row[0])]


@pytest.mark.parametrize("path", [*DOCS, NOTES], ids=lambda p: str(p.relative_to(REPO)))
def test_values_keys_the_docs_name_are_in_the_chart_schema(path):
    unknown = sorted({k for k in values_named(path.read_text(), plain=path == NOTES) if not resolves(k)})
    assert not unknown, f"{path.relative_to(REPO)} names values the chart does not have (values.schema.json): {unknown}"


def test_install_md_lists_only_values_of_the_chart():
    unknown = [k for k in values_table_names((REPO / "docs" / "install.md").read_text()) if not resolves(k)]
    assert not unknown, f"docs/install.md's table of values names keys the chart does not have: {unknown}"


# ---------------------------------------------------------------- install.md's RBAC table against the chart


def operator_rules() -> set[tuple[str, str]]:
    """(resource, verb) of every rule the chart grants the operator (deploy/manifests/slurmpool.yaml)."""
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "manifests" / "slurmpool.yaml").read_text()) if d]
    return {(resource, verb) for d in docs if d["kind"] in ("ClusterRole", "Role")
            for rule in d["rules"] for resource in rule["resources"] for verb in rule["verbs"]}


def rbac_table_rules(text: str) -> set[tuple[str, str]]:
    return {(resource, verb.strip()) for resource, verbs, *_ in table(text, "| resource | verbs | why |")
            for verb in verbs.split(",")}


def test_install_md_rbac_table_is_the_charts():
    documented = rbac_table_rules((REPO / "docs" / "install.md").read_text())
    assert documented == operator_rules(), (f"docs/install.md lists {sorted(documented - operator_rules())} the chart does not grant "
                                            f"and lacks {sorted(operator_rules() - documented)}")


# ---------------------------------------------------------------- metric names against the registry

METRIC = re.compile(r"\bslurmpool_[a-z_]+\b")


def registered() -> dict[str, tuple[str, set[str]]]:
    """Each metric the operator registers, as a scrape shows it (counters with _total): (type, labels)."""
    out = {}
    for collector in list(REGISTRY._collector_to_names):  # noqa: SLF001 - the registry's collectors
        name, kind = getattr(collector, "_name", ""), getattr(collector, "_type", "")
        if name.startswith("slurmpool_"):
            out[name + ("_total" if kind == "counter" else "")] = (kind, set(collector._labelnames))  # noqa: SLF001
    return out


def exposed_names() -> set[str]:
    names: set[str] = set()
    for exposed in REGISTRY._collector_to_names.values():  # noqa: SLF001
        names |= set(exposed)
    return names


def metric_table_problems(text: str, metrics: dict[str, tuple[str, set[str]]]) -> list[str]:
    problems, rows = [], {}
    for name_cell, kind, labels, *_ in table(text, "| metric | type | labels | what |"):
        (name,) = CODE.findall(name_cell)
        rows[name] = (kind, set(CODE.findall(labels)))
    for name, (kind, labels) in rows.items():
        if name not in metrics:
            problems.append(f"row {name}: not registered (adapters/metrics.py)")
        elif (kind, labels) != metrics[name]:
            problems.append(f"row {name}: the docs say {kind} {sorted(labels)}, the code {metrics[name][0]} {sorted(metrics[name][1])}")
    problems += [f"{name}: registered, no row" for name in sorted(set(metrics) - set(rows))]
    return problems


def test_metrics_md_has_a_row_per_metric_with_its_type_and_labels():
    problems = metric_table_problems(METRICS.read_text(), registered())
    assert not problems, "docs/metrics.md's table and the registry disagree:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_metric_names_in_the_docs_are_exported(path):
    unknown = sorted(set(METRIC.findall(path.read_text())) - exposed_names())
    assert not unknown, f"{path.relative_to(REPO)} names metrics the operator does not export: {unknown}"


# ---------------------------------------------------------------- kubectl slurmpool against its --help

INVOCATION = re.compile(r"kubectl[ -]slurmpool((?: +[^\s`|;#&)]+)*)")
FLAG = re.compile(r"^(--?[a-zA-Z][\w-]*)")


def plugin_help(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        plugin_main([*argv, "--help"])
    return out.getvalue()


def plugin_flags() -> tuple[set[str], dict[str, set[str]]]:
    """The plugin's own flags, and each subcommand's, as --help lists them."""
    top = plugin_help()
    subcommands = re.search(r"\{([a-z,-]+)\}", top).group(1).split(",")
    flags = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")
    return set(flags.findall(top)), {sub: set(flags.findall(plugin_help(sub))) for sub in subcommands}


def plugin_problems(text: str, common: set[str], subcommands: dict[str, set[str]]) -> list[str]:
    """Each `kubectl slurmpool SUB --flag ...` of a page (a line, up to a backtick, pipe or comment)
    with a subcommand or a flag the plugin does not have."""
    problems = []
    for line in text.splitlines():
        for match in INVOCATION.finditer(line):
            words = match.group(1).split()
            sub = next((w for w in words if re.fullmatch(r"[a-z][a-z-]*", w)), None)
            if sub is None or (words and words[0].startswith("-") and sub not in subcommands):
                continue
            if sub not in subcommands:
                problems.append(f"`kubectl slurmpool {sub}`: no such subcommand ({', '.join(subcommands)})")
                continue
            for word in words:
                flag = FLAG.match(word)
                if flag and flag.group(1).split("=")[0] not in common | subcommands[sub]:
                    problems.append(f"`kubectl slurmpool {sub} ... {flag.group(1)}`: no such flag")
    return problems


@pytest.fixture(scope="module")
def flags() -> tuple[set[str], dict[str, set[str]]]:
    return plugin_flags()


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_plugin_commands_in_the_docs_exist(path, flags):
    problems = plugin_problems(path.read_text(), *flags)
    assert not problems, f"{path.relative_to(REPO)}:\n" + "\n".join(problems)


# ---------------------------------------------------------------- each check fails on a wrong line


def changed(text: str, old: str, new: str) -> str:
    assert old in text, f"the line these tests break is gone: {old!r}"
    return text.replace(old, new)


def test_a_wrong_or_missing_pool_field_row_is_found():
    text, fields = POOLS.read_text(), crd_spec_fields()
    renamed = pool_field_problems(changed(text, "| `paused` |", "| `pause` |"), fields)
    assert "row `pause` is no spec field" in renamed and "spec.paused has no row" in renamed
    handover = next(line for line in text.splitlines() if line.startswith("| `handover.enabled`"))
    assert "spec.handover.leadTime has no row" in pool_field_problems(changed(text, handover + "\n", ""), fields)
    assert "spec.slurm.slurmdPod.priorityClassName has no row and is not named in `slurm.slurmdPod`'s" in (
        pool_field_problems(changed(text, "`priorityClassName`, ", ""), fields))


def test_a_missing_rbac_verb_is_found():
    text = changed((REPO / "docs" / "install.md").read_text(), "| nodes | get, list, watch, patch |", "| nodes | list, watch, patch |")
    assert operator_rules() - rbac_table_rules(text) == {("nodes", "get")}


def test_a_wrong_values_key_is_found():
    assert not resolves("extraEnv") and resolves("operator.extraEnv") and resolves("poolPolicy.*")
    assert values_table_names("| value | default | what |\n|---|---|---|\n| `extraEnv`, `extraVolumes` | `[]` | x |\n") == [
        "extraEnv", "extraVolumes"]
    wrong = "x --set image.repo=r --set 'rbac.poolNamespace={a,b}',oncall.subjects[0].kind=Group; `metrics.serviceMonitr.enabled=true`"
    assert [k for k in values_named(wrong) if not resolves(k)] == ["metrics.serviceMonitr.enabled", "image.repo", "rbac.poolNamespace"]
    assert values_named("the operator may read .Values.rbac.poolNamespace (rbac.poolNamespace)", plain=True) == ["rbac.poolNamespace"]


def test_a_wrong_metric_row_is_found():
    text, metrics = METRICS.read_text(), registered()
    row = next(line for line in text.splitlines() if line.startswith("| `slurmpool_workqueue_depth` | gauge | |"))
    assert "row slurmpool_workqueue_depth: the docs say gauge ['pool'], the code gauge []" in (
        metric_table_problems(changed(text, row, row.replace("| gauge | |", "| gauge | `pool` |")), metrics))
    assert "slurmpool_workqueue_depth: registered, no row" in metric_table_problems(changed(text, row + "\n", ""), metrics)
    assert METRIC.findall("`slurmpool_moves_total`, but not ssh -i slurmpool_ed25519") == ["slurmpool_moves_total"]


def test_a_wrong_plugin_flag_is_found(flags):
    text = "`kubectl slurmpool plan gpu -n NS --slurm-node 4` and\n$ kubectl slurmpool histroy gpu\n`kubectl slurmpool` alone"
    problems = plugin_problems(text, *flags)
    assert problems[0] == "`kubectl slurmpool plan ... --slurm-node`: no such flag"
    assert problems[1].startswith("`kubectl slurmpool histroy`: no such subcommand (status, plan, history, move,") and len(problems) == 2
