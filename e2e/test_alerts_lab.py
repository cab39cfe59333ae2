"""The chart's alerts on the lab (issue 16): a real Prometheus (e2e/prometheus.py) scrapes a real
operator as the chart's ServiceMonitor implies and evaluates the chart's PrometheusRule, rendered
with e2e/lab/prometheus-values.yaml (1 s scrapes and evaluations, `for:` of 5-10 s, 30 s windows).
Each alert fires from the operator's own metrics in a real situation and resolves afterwards, seen
through Prometheus' HTTP API:

  SlurmPoolDrainBlocked   a PodDisruptionBudget refuses the eviction of a node joining Slurm
  SlurmPoolMovesFailing   a slurmd that never registers: registerTimeout, the move rolls back
  SlurmPoolDegraded       Slurm unreachable (the lab's slurmctld stopped)
  SlurmPoolOperatorDown   the operator stopped
  SlurmPoolNodesUnhealthy an admin drains one of a pool's Slurm nodes in Slurm (a drain not slurmpool's)

and a Degraded pool deleted: every series of it leaves /metrics within a pass, and its alert resolves.

Two pools on disjoint nodes (block-1, block-2) let the first two run at once. No other alert may
fire or even be pending while this runs. Each situation prints an `ALERT | ...` row
(docs/metrics.md has the table)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from harness import (
    NAMESPACE,
    Operator,
    apply,
    daemon,
    ensure_namespace_and_secret,
    events,
    get_json,
    install_crd,
    node_placements,
    now_rfc3339,
    pool_manifest,
    reset_lab,
    split_reached,
    wait,
)
from load import scrape
from prometheus import free_port, job_label, prometheus, register, unregister  # noqa: F401 - prometheus: the fixture

pytestmark = pytest.mark.e2e
A, B = "alerts-a", "alerts-b"  # pools over block-1 (gpu01-04) and block-2 (gpu05-08)
GONE = "alerts-gone"  # a pool of no node whose Slurm is unreachable: Degraded, then deleted
BLOCK_2 = ("gpu05", "gpu06", "gpu07", "gpu08")
TARGET = "e2e-alerts"
ROWS: list[str] = []


class AlertWatch:
    """Polls /api/v1/alerts every 0.2 s in a thread; keeps, per alert (name + labels), the times it
    was seen pending and firing, so a test asks when an alert fired and when it resolved."""

    def __init__(self, prom):
        self.prom = prom
        self.seen: dict[tuple, list[tuple[float, str]]] = {}  # key -> [(time, state)]
        self.polls: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def key(alert: dict) -> tuple:
        return tuple(sorted(alert["labels"].items()))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                alerts = self.prom.alerts()
                now = time.time()
                for a in alerts:
                    self.seen.setdefault(self.key(a), []).append((now, a["state"]))
                self.polls.append(now)
            except OSError:
                pass
            self._stop.wait(0.2)

    def __enter__(self) -> "AlertWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def matching(self, name: str, **labels: str) -> list[tuple]:
        return [k for k in self.seen if dict(k)["alertname"] == name and all(dict(k).get(label) == v for label, v in labels.items())]

    def fired_at(self, name: str, after: float, **labels: str) -> float | None:
        times = [t for k in self.matching(name, **labels) for t, s in self.seen[k] if s == "firing" and t >= after]
        return min(times) if times else None

    def resolved_at(self, name: str, after: float, **labels: str) -> float | None:
        """The first poll after `after` where no matching alert is active (pending or firing)."""
        active = {t for k in self.matching(name, **labels) for t, _ in self.seen[k]}
        return next((t for t in self.polls if t >= after and t not in active), None)

    def wait_fired(self, name: str, after: float, timeout: float, **labels: str) -> float:
        return wait(lambda: self.fired_at(name, after, **labels), timeout, what=f"{name} {labels} firing")

    def wait_resolved(self, name: str, after: float, timeout: float, **labels: str) -> float:
        return wait(lambda: self.resolved_at(name, after, **labels), timeout, what=f"{name} {labels} resolved")


def row(alert: str, situation: str, for_: str, fire_s: float, resolve_s: float, fix: str) -> None:
    line = f"ALERT | {alert} | {situation} | {fire_s:.1f} s (for: {for_}) | {resolve_s:.1f} s after {fix}"
    print(line)
    ROWS.append(line)


def rule_for(prom, alert: str) -> str:
    rule = next(r for g in prom.rule_groups() for r in g["rules"] if r["name"] == alert)
    return f"{int(rule['duration'])}s" if rule.get("duration") else "none"


def pool(lab, name: str, block: str, slurm: int, **overrides) -> dict:
    return pool_manifest(lab, name, slurm, nodeSelector={"matchLabels": {"topology.slurmpool.io/block": block}}, **overrides)


def patch_pool(lab, name: str, spec: dict) -> None:
    lab.kubectl("patch", "snp", name, "-n", NAMESPACE, "--type=merge", "-p", json.dumps({"spec": spec}))


@pytest.fixture(scope="module")
def operator(lab, prometheus):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    port = free_port()
    args = ["run", "--metrics-port", str(port), "--metrics-address", "127.0.0.1"]
    ops = [Operator(lab, "operator-alerts.log", args=args).start()]
    register(TARGET, port, Path(lab.dir))
    apply(lab, [pool(lab, A, "block-1", 2), pool(lab, B, "block-2", 2)])
    wait(lambda: split_reached(lab, A, 2, total=4) and split_reached(lab, B, 2, total=4), 120, what="2/2 in both pools")
    # Scraped, and nothing left active from before this operator ran (OperatorDown between modules).
    prometheus.wait(lambda: prometheus.query(f'up{{pod="slurmpool-{TARGET}"}} == 1'), 30, "the operator scraped")
    prometheus.wait(lambda: not prometheus.alerts(), 30, "no active alert on the settled pools")
    yield ops, args
    for op in ops:
        op.stop()
    unregister(TARGET, Path(lab.dir))
    reset_lab(lab)
    print("\n".join(ROWS))


def test_the_operator_is_scraped_with_the_labels_the_servicemonitor_implies(lab, prometheus, operator):
    """up{...} as a Prometheus Operator scrape of the chart's ServiceMonitor labels it, and the job
    SlurmPoolOperatorDown's absent() names is that job."""
    docs = [d for d in yaml.safe_load_all((Path(lab.dir) / "prometheus" / "chart.yaml").read_text()) if d]
    (up,) = prometheus.query(f'up{{pod="slurmpool-{TARGET}"}}')
    labels = dict(up["metric"])
    assert labels.pop("instance").startswith("127.0.0.1:")
    assert labels == {"__name__": "up", "job": "slurmpool-metrics", "namespace": "slurmpool-system",
                      "service": "slurmpool-metrics", "endpoint": "metrics", "pod": f"slurmpool-{TARGET}",
                      "container": "operator"}, labels
    assert job_label(docs) == labels["job"]
    (target,) = [t for t in prometheus.targets() if t["labels"].get("pod") == f"slurmpool-{TARGET}"]
    assert target["scrapePool"] == "serviceMonitor/slurmpool-system/slurmpool/0" and target["health"] == "up", target
    assert target["scrapeInterval"] == "1s"


def test_alerts_fire_in_real_situations_and_resolve(lab, prometheus, operator):
    ops, args = operator
    for_ = {a: rule_for(prometheus, a) for a in ("SlurmPoolDrainBlocked", "SlurmPoolMovesFailing", "SlurmPoolDegraded",
                                                 "SlurmPoolOperatorDown", "SlurmPoolNodesUnhealthy")}
    with AlertWatch(prometheus) as watch:
        t_begin = time.time()
        # Two pods of pool A's inference nodes under a PDB that allows no disruption.
        apply(lab, [{
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "llm-a", "namespace": NAMESPACE},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "llm-a"}}, "template": {
                "metadata": {"labels": {"app": "llm-a"}},
                "spec": {"nodeSelector": {"slurmpool.io/inference-pool": "llm", "topology.slurmpool.io/block": "block-1"},
                         "tolerations": [{"key": "slurmpool.io/inference", "operator": "Exists"}],
                         "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                        "whenUnsatisfiable": "DoNotSchedule",
                                                        "labelSelector": {"matchLabels": {"app": "llm-a"}}}],
                         "containers": [{"name": "server", "image": "vllm:latest"}]}}}},
            {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "llm-a", "namespace": NAMESPACE},
             "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "llm-a"}}}}])
        lab.kubectl("rollout", "status", "deployment/llm-a", "-n", NAMESPACE, "--timeout=60s")
        wait(lambda: get_json(lab, "pdb", "llm-a", "-n", NAMESPACE).get("status", {}).get("expectedPods") == 2, 30,
             what="PDB observed")
        good = get_json(lab, "snp", B, "-n", NAMESPACE)["spec"]["slurm"]

        # 1 and 2 at once: A's move to Slurm is refused by the PDB; B's slurmd never registers.
        since = now_rfc3339()
        t_blocked = time.time()
        patch_pool(lab, A, {"slurmNodes": 3})
        patch_pool(lab, B, {"slurm": {"slurmdPod": {"command": ["false"]}, "registerTimeout": "6s"}})
        t_failing = time.time()
        patch_pool(lab, B, {"slurmNodes": 3})
        wait(lambda: events(lab, "MoveRolledBack", since), 60, what="B's move rolled back")
        patch_pool(lab, B, {"slurmNodes": 2, "slurm": {"slurmdPod": good["slurmdPod"], "registerTimeout": good["registerTimeout"]}})
        t_failing_fixed = time.time()
        fired_failing = watch.wait_fired("SlurmPoolMovesFailing", t_failing, 30, pool=f"{NAMESPACE}/{B}", direction="to_slurm",
                                         reason="rollback")
        fired_blocked = watch.wait_fired("SlurmPoolDrainBlocked", t_blocked, 60, pool=f"{NAMESPACE}/{A}")
        alert = next(a for a in prometheus.alerts() if a["labels"]["alertname"] == "SlurmPoolDrainBlocked")
        assert f"kubectl get snp -n {NAMESPACE} {A} -o jsonpath" in alert["annotations"]["description"], alert
        t_unblocked = time.time()
        lab.kubectl("delete", "pdb", "llm-a", "-n", NAMESPACE)
        resolved_blocked = watch.wait_resolved("SlurmPoolDrainBlocked", t_unblocked, 60, pool=f"{NAMESPACE}/{A}")
        row("SlurmPoolDrainBlocked", "a PDB refuses the eviction of a node joining Slurm", for_["SlurmPoolDrainBlocked"],
            fired_blocked - t_blocked, resolved_blocked - t_unblocked, "the PDB is deleted")
        wait(lambda: split_reached(lab, A, 3, total=4) and split_reached(lab, B, 2, total=4), 90, what="A 3/1, B 2/2")
        lab.kubectl("delete", "deployment", "llm-a", "-n", NAMESPACE)

        # 3: Slurm unreachable while the failed move's window runs out: slurmctld stopped. (Stopping
        # sshd is not enough: the operator's established SSH connection outlives the listener.)
        t_down = time.time()
        daemon(lab, "stop", "slurmctld")
        try:
            fired_a = watch.wait_fired("SlurmPoolDegraded", t_down, 60, pool=f"{NAMESPACE}/{A}")
            fired_b = watch.wait_fired("SlurmPoolDegraded", t_down, 60, pool=f"{NAMESPACE}/{B}")
        finally:
            t_up = time.time()
            daemon(lab, "start", "slurmctld")
        resolved_a = watch.wait_resolved("SlurmPoolDegraded", t_up, 60, pool=f"{NAMESPACE}/{A}")
        resolved_b = watch.wait_resolved("SlurmPoolDegraded", t_up, 60, pool=f"{NAMESPACE}/{B}")
        row("SlurmPoolDegraded", "Slurm unreachable (slurmctld stopped), both pools", for_["SlurmPoolDegraded"],
            max(fired_a, fired_b) - t_down, max(resolved_a, resolved_b) - t_up, "slurmctld is back")
        resolved_failing = watch.wait_resolved("SlurmPoolMovesFailing", fired_failing, 90)
        row("SlurmPoolMovesFailing", "a slurmd that never registers: registerTimeout 6s, the move rolls back",
            f"{for_['SlurmPoolMovesFailing']}, window 30s", fired_failing - t_failing, resolved_failing - t_failing_fixed,
            "the pool is fixed (the 30 s window runs out)")

        # 4: the operator stopped, then started again on the same port.
        t_stop = time.time()
        ops[0].stop()
        fired_down = watch.wait_fired("SlurmPoolOperatorDown", t_stop, 60)
        t_start = time.time()
        ops.append(Operator(lab, "operator-alerts.log", args=args).start())
        resolved_down = watch.wait_resolved("SlurmPoolOperatorDown", t_start, 60)
        row("SlurmPoolOperatorDown", "the operator stopped (SIGTERM)", for_["SlurmPoolOperatorDown"], fired_down - t_stop,
            resolved_down - t_start, "it is started again")
        wait(lambda: split_reached(lab, A, 3, total=4) and split_reached(lab, B, 2, total=4), 60, what="settled again")

        # 5: an admin drains one of B's Slurm nodes in Slurm: not slurmpool's drain, so it is unhealthy
        # (DrainedByOthers has no grace) and held until the admin resumes it.
        sick = next(n for n, p in sorted(node_placements(lab).items()) if p == "slurm" and n in BLOCK_2)
        t_sick = time.time()
        lab.slurm("scontrol", "update", f"nodename={sick}", "state=drain", "reason=e2e: admin maintenance")
        try:
            fired_sick = watch.wait_fired("SlurmPoolNodesUnhealthy", t_sick, 60, pool=f"{NAMESPACE}/{B}",
                                          side="slurm", kind="DrainedByOthers")
        finally:
            t_healed = time.time()
            lab.slurm("scontrol", "update", f"nodename={sick}", "state=resume")
        resolved_sick = watch.wait_resolved("SlurmPoolNodesUnhealthy", t_healed, 60, pool=f"{NAMESPACE}/{B}")
        row("SlurmPoolNodesUnhealthy", f"an admin drains {sick} (pool B's, Slurm side) in Slurm",
            for_["SlurmPoolNodesUnhealthy"], fired_sick - t_sick, resolved_sick - t_healed, "the admin resumes it")
        t_end = time.time()
        time.sleep(1)

    # Nothing else was pending or firing at any poll: only the alerts of the situations, for their pools.
    expected = {("SlurmPoolDrainBlocked", f"{NAMESPACE}/{A}"), ("SlurmPoolMovesFailing", f"{NAMESPACE}/{B}"),
                ("SlurmPoolDegraded", f"{NAMESPACE}/{A}"), ("SlurmPoolDegraded", f"{NAMESPACE}/{B}"),
                ("SlurmPoolOperatorDown", None), ("SlurmPoolNodesUnhealthy", f"{NAMESPACE}/{B}")}
    seen = {(dict(k)["alertname"], dict(k).get("pool")) for k in watch.seen}
    assert seen == expected, f"unexpected: {seen - expected}; missing: {expected - seen}"
    assert watch.polls and watch.polls[0] - t_begin < 2 and t_end - watch.polls[-1] < 2
    moves_failed = watch.matching("SlurmPoolMovesFailing")
    assert {dict(k)["direction"] for k in moves_failed} == {"to_slurm"}, moves_failed
    # All resolved now, and the ALERTS series agrees with the API.
    assert not prometheus.alerts()
    assert not prometheus.query("ALERTS")


def test_a_deleted_degraded_pool_leaves_metrics_within_a_pass_and_its_alert_resolves(lab, prometheus, operator):
    """Issue 38: a deleted pool kept every series, so a pool deleted while Degraded kept
    SlurmPoolDegraded firing until the operator restarted."""
    _, args = operator
    port = int(args[args.index("--metrics-port") + 1])
    key = f"{NAMESPACE}/{GONE}"
    manifest = pool(lab, GONE, "block-none", 0)  # selects no node: nothing of A's or B's is touched
    closed = free_port()  # nothing listens there: Slurm unreachable, at once
    manifest["spec"]["slurm"]["access"] = {"ssh": {"host": "127.0.0.1", "port": closed, "user": lab.ssh_user,
                                                    "secretRef": {"name": "slurm-ssh"}}}

    def series() -> dict:
        return {k: v for k, v in scrape(port).items() if dict(k[1]).get("pool") == key}

    t_degraded = time.time()
    apply(lab, manifest)
    wait(lambda: series().get(("slurmpool_pool_condition", (("pool", key), ("type", "Degraded")))) == 1, 60,
         what=f"{GONE} Degraded in /metrics")
    fired = wait(lambda: any(a["labels"].get("pool") == key and a["state"] == "firing" for a in prometheus.alerts()
                             if a["labels"]["alertname"] == "SlurmPoolDegraded") and time.time(), 60, what="SlurmPoolDegraded firing")
    before = {name for name, _ in series()}
    # gauges and the per-move counters (at 0 from its first pass), each with the pool
    assert {"slurmpool_pool_condition", "slurmpool_unhealthy_nodes", "slurmpool_moves_failed_total",
            "slurmpool_action_errors_total", "slurmpool_drain_duration_seconds_count"} <= before, before
    t_deleted = time.monotonic()
    t_deleted_wall = time.time()
    lab.kubectl("delete", "snp", GONE, "-n", NAMESPACE, "--wait=false")
    wait(lambda: not series(), 10, interval=0.05, what=f"every series of {GONE} gone from /metrics")
    gone_s = time.monotonic() - t_deleted
    print(f"series of the deleted pool gone from /metrics {gone_s:.2f} s after the delete")
    resolved = wait(lambda: not any(a["labels"].get("pool") == key for a in prometheus.alerts()) and time.time(), 30,
                    what="SlurmPoolDegraded resolved")
    row("SlurmPoolDegraded", "a Degraded pool (Slurm unreachable) is deleted", rule_for(prometheus, "SlurmPoolDegraded"),
        fired - t_degraded, resolved - t_deleted_wall, "the pool is deleted")
