"""A real Prometheus on the lab (issue 16): it scrapes the operator the way the chart's
ServiceMonitor would have the Prometheus Operator scrape it, and evaluates the chart's
PrometheusRule.

How the scrape matches a user's (e2e/lab/prometheus.sh writes the configuration from this module):

* The chart is rendered with Helm (`e2e/lab/prometheus-values.yaml`: the ServiceMonitor and the
  PrometheusRule enabled, short durations). `scrape_config()` turns the rendered ServiceMonitor
  into the scrape job the Prometheus Operator generates for it: job_name
  `serviceMonitor/<ns>/<name>/0`, its interval, timeout and path, and its relabelling: keep the
  endpoints of Services whose labels match the ServiceMonitor's selector and whose port has the
  endpoint's name, then `namespace`, `service`, `pod`, `container`, `job` (the Service's name, or
  its `jobLabel`) and `endpoint` labels.
* The lab has no kubelet network and the operator runs as a local process, so Kubernetes service
  discovery is replaced by file_sd: `register()` writes a target file with the `__meta_kubernetes_*`
  labels Kubernetes' endpoints discovery would give the chart's Deployment pod behind the
  chart's metrics Service (taken from the same rendered chart). The relabelling above then runs
  on them unchanged: a ServiceMonitor whose selector missed the Service would drop the target,
  and `up{job=...}` (SlurmPoolOperatorDown's `absent()`) is evaluated exactly as in a cluster.
* The rules file is the PrometheusRule's `spec`, as the Prometheus Operator mounts it.

`python e2e/prometheus.py write-config` is what prometheus.sh runs, `register demo PORT` what
demo.sh runs; tests use the `prometheus`
fixture (import it into the test module) and `Prometheus`, a small client of the HTTP API."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
LAB_SCRIPTS = REPO / "e2e" / "lab"
CHART = REPO / "deploy" / "helm" / "slurmpool"
LAB_VALUES = LAB_SCRIPTS / "prometheus-values.yaml"
RELEASE, NAMESPACE = "slurmpool", "slurmpool-system"  # as README's `helm install`


def lab_dir() -> Path:
    return Path(os.environ.get("LAB_DIR") or REPO / ".lab")


def prometheus_dir(d: Path | None = None) -> Path:
    return (d or lab_dir()) / "prometheus"


def port() -> int:
    """127.0.0.1:19090, shifted by LAB_PORT_OFFSET like every lab port."""
    return 19090 + int(os.environ.get("LAB_PORT_OFFSET") or 0)


# ---------------------------------------------------------------- the chart, rendered


def _tool(script: str) -> str:
    return subprocess.run([str(LAB_SCRIPTS / script)], check=True, capture_output=True, text=True).stdout.strip()


def render_chart(values: Path = LAB_VALUES) -> list[dict]:
    helm = _tool("build-helm.sh")
    out = subprocess.run([helm, "template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values)],
                         check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} in the rendered chart"
    return found[0]


def _label_name(key: str) -> str:
    """Kubernetes label key -> the Prometheus label name Kubernetes SD gives it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def scrape_config(docs: list[dict], targets: Path) -> dict:
    """The scrape job the Prometheus Operator generates for the chart's ServiceMonitor (endpoint 0),
    with file_sd instead of kubernetes_sd (register() writes the targets)."""
    monitor = _one(docs, "ServiceMonitor")
    spec, endpoint = monitor["spec"], monitor["spec"]["endpoints"][0]
    ns = monitor["metadata"]["namespace"]
    relabel: list[dict] = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
    for key, value in sorted(spec["selector"].get("matchLabels", {}).items()):
        name = _label_name(key)
        relabel.append({"action": "keep", "regex": f"({re.escape(value)});true",
                        "source_labels": [f"__meta_kubernetes_service_label_{name}",
                                          f"__meta_kubernetes_service_labelpresent_{name}"]})
    assert not spec["selector"].get("matchExpressions"), "matchExpressions: not translated"
    names = spec.get("namespaceSelector", {}).get("matchNames") or [ns]
    relabel.append({"action": "keep", "source_labels": ["__meta_kubernetes_namespace"],
                    "regex": "|".join(re.escape(n) for n in names)})
    relabel.append({"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"],
                    "regex": re.escape(endpoint["port"])})
    for source, target in (("namespace", "namespace"), ("service_name", "service"), ("pod_name", "pod"),
                           ("pod_container_name", "container")):
        relabel.append({"source_labels": [f"__meta_kubernetes_{source}"], "target_label": target})
    job_source = ("__meta_kubernetes_service_label_" + _label_name(spec["jobLabel"])) if spec.get("jobLabel") \
        else "__meta_kubernetes_service_name"
    relabel.append({"source_labels": [job_source], "target_label": "job", "replacement": "${1}"})
    relabel.append({"target_label": "endpoint", "replacement": endpoint["port"]})
    return {
        "job_name": f"serviceMonitor/{ns}/{monitor['metadata']['name']}/0",
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "scrape_interval": endpoint.get("interval", "30s"),
        "scrape_timeout": endpoint.get("scrapeTimeout", "10s"),
        "metrics_path": endpoint.get("path", "/metrics"),
        "scheme": endpoint.get("scheme", "http"),
        "file_sd_configs": [{"files": [str(targets / "*.json")], "refresh_interval": "5s"}],
        "relabel_configs": relabel,
    }


def target_meta(docs: list[dict], pod: str) -> dict[str, str]:
    """The __meta_kubernetes_* labels endpoints discovery gives the chart's operator pod behind its
    metrics Service (the Service, its port name, the Deployment's container)."""
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-metrics"))
    deployment = _one(docs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    target_port = service["spec"]["ports"][0]["targetPort"]
    assert any(p.get("name") == target_port for p in container["ports"]), "the Service's targetPort is not a container port"
    meta = {
        "__meta_kubernetes_namespace": service["metadata"]["namespace"],
        "__meta_kubernetes_service_name": service["metadata"]["name"],
        "__meta_kubernetes_endpoint_port_name": service["spec"]["ports"][0]["name"],
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_container_name": container["name"],
    }
    for key, value in service["metadata"].get("labels", {}).items():
        meta[f"__meta_kubernetes_service_label_{_label_name(key)}"] = value
        meta[f"__meta_kubernetes_service_labelpresent_{_label_name(key)}"] = "true"
    return meta


def rules(docs: list[dict]) -> dict:
    return _one(docs, "PrometheusRule")["spec"]


def job_label(docs: list[dict]) -> str:
    """What SlurmPoolOperatorDown's absent(up{job=...}) names, read from the rendered rule."""
    expr = next(r["expr"] for g in rules(docs)["groups"] for r in g["rules"] if r.get("alert") == "SlurmPoolOperatorDown")
    return re.search(r'job="([^"]+)"', expr).group(1)


def write_config(d: Path | None = None) -> Path:
    """$LAB_DIR/prometheus/{prometheus.yml, rules.yml, chart.yaml, targets/}; returns prometheus.yml."""
    p = prometheus_dir(d)
    (p / "targets").mkdir(parents=True, exist_ok=True)
    docs = render_chart()
    (p / "chart.yaml").write_text(yaml.safe_dump_all(docs))
    (p / "rules.yml").write_text(yaml.safe_dump(rules(docs), sort_keys=False))
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p / "rules.yml")],
        "scrape_configs": [scrape_config(docs, p / "targets")],
    }
    (p / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    return p / "prometheus.yml"


# ---------------------------------------------------------------- targets (the operator processes)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def register(name: str, metrics_port: int, d: Path | None = None) -> None:
    """Make Prometheus scrape an operator serving metrics on 127.0.0.1:metrics_port, as the
    Endpoints of the chart's Service would list its pod (`slurmpool-<name>`)."""
    p = prometheus_dir(d)
    docs = [x for x in yaml.safe_load_all((p / "chart.yaml").read_text()) if x]
    group = [{"targets": [f"127.0.0.1:{metrics_port}"], "labels": target_meta(docs, f"{RELEASE}-{name}")}]
    tmp = p / "targets" / f".{name}.tmp"
    tmp.write_text(json.dumps(group))
    tmp.rename(p / "targets" / f"{name}.json")  # atomic: file_sd never reads half a file


def unregister(name: str, d: Path | None = None) -> None:
    (prometheus_dir(d) / "targets" / f"{name}.json").unlink(missing_ok=True)


# ---------------------------------------------------------------- the HTTP API


class Prometheus:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def _get(self, path: str, **params: Any) -> Any:
        q = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        with urllib.request.urlopen(f"{self.url}{path}?{q}", timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        data = self._get("/api/v1/query", query=expr, time=at)
        assert data["resultType"] == "vector", data["resultType"]
        return data["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self._get("/api/v1/query_range", query=expr, start=start, end=end, step=step)["result"]

    def alerts(self) -> list[dict]:
        """Active alerts (pending and firing) with labels, annotations, state and activeAt."""
        return self._get("/api/v1/alerts")["alerts"]

    def rule_groups(self) -> list[dict]:
        return self._get("/api/v1/rules")["groups"]

    def targets(self) -> list[dict]:
        return self._get("/api/v1/targets", state="active")["activeTargets"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def wait(self, predicate, timeout: float, what: str, interval: float = 0.25) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
            except OSError as e:
                last = e
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}; alerts: {self.alerts()}")


def start(d: Path | None = None, env: dict | None = None) -> Prometheus:
    """e2e/lab/prometheus.sh start (idempotent: a running one reloads the re-rendered rules)."""
    run_env = {**os.environ, **(env or {})}
    if d is not None:
        run_env["LAB_DIR"] = str(d)
    subprocess.run([str(LAB_SCRIPTS / "prometheus.sh"), "start"], check=True, env=run_env)
    url = (prometheus_dir(d) / "url").read_text().strip()
    return Prometheus(url)


try:  # the fixture, for test modules that import it (`from prometheus import prometheus`)
    import pytest

    @pytest.fixture(scope="session")
    def prometheus(lab) -> Prometheus:
        """The lab's Prometheus, started unless running (it stays up; make lab-down stops it)."""
        return start(Path(lab.dir))
except ImportError:  # the CLI below runs without pytest
    pass


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["write-config"]:
        print(write_config())
    elif len(args) == 3 and args[0] == "register":
        register(args[1], int(args[2]))
    elif len(args) == 2 and args[0] == "unregister":
        unregister(args[1])
    else:
        sys.exit("usage: prometheus.py write-config | register NAME METRICS_PORT | unregister NAME")
