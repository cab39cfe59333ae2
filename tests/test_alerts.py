"""Every alert of the chart's PrometheusRule, unit-tested by `promtool test rules` (issue 16).

The rules are rendered from the chart with its default values (what `helm install --set
metrics.prometheusRule.enabled=true` ships) into rules.yaml beside a copy of
tests/alerts/slurmpool.test.yaml, and promtool (Prometheus 3.x, built from Go modules by
e2e/lab/build-prometheus.sh) evaluates them. Each alert must have a test where it fires, with its
exact labels and annotations, and one where it must not. Without a built promtool the tests are
skipped, unless SLURMPOOL_REQUIRE_TOOLS=1 (make test), which builds it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from .test_chart import go_tool, objects, template

HERE = Path(__file__).resolve().parent
CHART = HERE.parent / "deploy" / "helm" / "slurmpool"
RUNBOOK = HERE.parent / "docs" / "runbook.md"


def unit_tests() -> str:
    return (HERE / "alerts" / "slurmpool.test.yaml").read_text()


@pytest.fixture(scope="module")
def helm() -> str:
    return go_tool("build-helm.sh")


@pytest.fixture(scope="module")
def promtool() -> str:
    return str(Path(go_tool("build-prometheus.sh")) / "promtool")


@pytest.fixture(scope="module")
def rules(helm) -> dict:
    rendered = objects(template(helm, "--set", "metrics.prometheusRule.enabled=true").stdout)
    return next(d for d in rendered if d["kind"] == "PrometheusRule")["spec"]


def alert_names(rules: dict) -> set[str]:
    return {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}


def run_promtool(promtool: str, rules: dict, tests: str, tmp: Path) -> subprocess.CompletedProcess:
    (tmp / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    (tmp / "slurmpool.test.yaml").write_text(tests)
    return subprocess.run([promtool, "test", "rules", str(tmp / "slurmpool.test.yaml")], capture_output=True, text=True)


def test_promtool_checks_the_rendered_rules(promtool, rules, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    out = subprocess.run([promtool, "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_passes_its_promtool_unit_tests(promtool, rules, tmp_path):
    out = run_promtool(promtool, rules, unit_tests(), tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_every_alert_has_a_firing_and_a_silent_case_with_labels_and_annotations(rules):
    spec = yaml.safe_load(unit_tests())
    fires: dict[str, list[dict]] = {}
    silent: set[str] = set()
    for test in spec["tests"]:
        for case in test.get("alert_rule_test", []):
            if case["exp_alerts"]:
                fires.setdefault(case["alertname"], []).extend(case["exp_alerts"])
            else:
                silent.add(case["alertname"])
    names = alert_names(rules)
    assert len(names) == 7
    assert names == set(fires), f"no firing test for {names - set(fires)}; unknown: {set(fires) - names}"
    assert names <= silent, f"no must-not-fire test for {names - silent}"
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    for name, expected in fires.items():
        for alert in expected:
            assert alert["exp_labels"]["severity"] == by_name[name]["labels"]["severity"]
            assert set(alert["exp_annotations"]) == set(by_name[name]["annotations"]), name


def test_the_unit_tests_can_fail(promtool, rules, tmp_path):
    """A wrong expectation (another severity) makes promtool fail: the tests above are not vacuous."""
    broken = unit_tests().replace("{severity: critical, pool: gpu-a/train}", "{severity: warning, pool: gpu-a/train}", 1)
    assert broken != unit_tests()
    out = run_promtool(promtool, rules, broken, tmp_path)
    assert out.returncode != 0 and "SlurmPoolDegraded" in out.stdout + out.stderr


def test_a_wrong_job_in_operator_down_is_caught(promtool, rules, tmp_path):
    """The failure issue 16 names: absent() over a job no ServiceMonitor produces never resolves
    (and fires on a healthy cluster). The unit tests see it."""
    wrong = yaml.safe_load(yaml.safe_dump(rules))
    for group in wrong["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "SlurmPoolOperatorDown":
                rule["expr"] = rule["expr"].replace('job="slurmpool-metrics"', 'job="slurmpool"')
    out = run_promtool(promtool, wrong, unit_tests(), tmp_path)
    assert out.returncode != 0 and "SlurmPoolOperatorDown" in out.stdout + out.stderr


def test_every_alert_links_to_its_row_of_the_runbook(rules):
    anchors = set(re.findall(r'<a id="([a-z]+)"></a>', RUNBOOK.read_text()))
    base = "docs/runbook.md#"  # the runbook shipped with the release, unless runbookURL names another
    for group in rules["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"]["runbook_url"]
            assert url == base + rule["alert"].lower(), rule["alert"]
            assert url.rsplit("#", 1)[1] in anchors, f"docs/runbook.md has no anchor for {rule['alert']}"


def test_the_runbook_url_can_point_elsewhere(helm):
    rendered = objects(template(helm, "--set", "metrics.prometheusRule.enabled=true",
                                "--set", "metrics.prometheusRule.runbookURL=https://wiki.example/slurmpool").stdout)
    rules = next(d for d in rendered if d["kind"] == "PrometheusRule")["spec"]
    urls = {r["annotations"]["runbook_url"] for g in rules["groups"] for r in g["rules"]}
    assert urls == {f"https://wiki.example/slurmpool#{name.lower()}" for name in alert_names(rules)}
