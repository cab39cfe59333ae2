"""The chart's Grafana dashboard on the lab (issue 16): `make demo` (e2e/demo.sh: 8 Slurm nodes ->
5 -> one node to a second inference pool -> 8) runs while the lab's Prometheus scrapes its
operator (demo.sh registers it, as the chart's ServiceMonitor would). Then:

* every panel's every query, evaluated on that Prometheus over the demo's time range with the
  Grafana variables a user would have (pool = the demo's pool), returns series with values;
* the GPU-seconds per side (the "GPU-hours by side" panel) match the time each node was seen
  settled on each side, polled from the Nodes by this test: exactly (to a pass) over an idle stretch
  after the demo with nodes on both sides (the pool scaled to 5 Slurm nodes, 3 inference), and
  within the counter's known edge losses over the demo's moves (below);
* no alert was pending or firing during the demo's moves, nor on the idle lab afterwards
  (SLURMPOOL_IDLE_SECONDS, 30 by default; `make alerts-idle` runs this module with 300).

Prints `PANEL | ...` rows (docs/metrics.md has the table)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness import REPO, reset_lab, wait
from prometheus import lab_dir, prometheus, unregister  # noqa: F401 - prometheus: the fixture

pytestmark = pytest.mark.e2e
DASHBOARD = REPO / "deploy" / "helm" / "slurmpool" / "files" / "grafana" / "slurmpool.json"
DEMO_NS, DEMO_POOL = "slurmpool-demo", "slurmpool-demo/gpu"
SCRAPE_S = 1  # e2e/lab/prometheus-values.yaml: the ServiceMonitor's interval (Grafana's data source setting)
STEP_S = 2  # a query's step: Grafana's $__interval
IDLE_S = int(os.environ.get("SLURMPOOL_IDLE_SECONDS", "30"))
GPUS_PER_NODE = 8


class SidePoller:
    """Every 0.25 s: which side each lab node is settled on (placement, no move record), from the
    Nodes themselves; integrate() gives GPU-seconds per side over a time range.

    One GET from this process (a kept connection), stamped at the middle of the request: the
    apiserver read the Nodes somewhere in it. A kubectl process stamped when it exited was ~1 s
    late on a busy machine, so each settle on a side came ~1 s late and the truth fell short of
    the operator's counter by more than 3 % (11 settles x 8 GPUs x ~0.8 s)."""

    def __init__(self, lab):
        self.lab = lab
        self.samples: list[tuple[float, dict[str, str | None]]] = []
        self.gpus: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from kubernetes import client, config

        core = client.CoreV1Api(config.new_client_from_config(str(self.lab.kubeconfig)))
        while not self._stop.is_set():
            asked = time.time()
            try:
                answer = core.list_node(label_selector="slurmpool.io/lab=true", _preload_content=False, _request_timeout=10)
                items = json.loads(answer.data)["items"]
                answer.release_conn()
            except Exception:  # noqa: BLE001 - a missed poll is a longer interval, not an error
                items = None
            now = (asked + time.time()) / 2
            if items is not None:
                sides, gpus = {}, {}
                for n in items:
                    name, ann = n["metadata"]["name"], n["metadata"].get("annotations") or {}
                    placement = ann.get("slurmpool.io/placement", "")
                    moving = "slurmpool.io/move" in ann
                    sides[name] = None if moving else "slurm" if placement == "slurm" else \
                        "inference" if placement.startswith("inference:") else None
                    gpus[name] = int(n["status"].get("allocatable", {}).get("nvidia.com/gpu", "0"))
                self.samples.append((now, sides))
                self.gpus = gpus
            self._stop.wait(0.25)

    def start(self) -> "SidePoller":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def first_time(self, predicate) -> float:
        return next(t for t, sides in self.samples if predicate(sides))

    def integrate(self, t0: float, t1: float) -> dict[str, float]:
        """GPU-seconds per side in [t0, t1]: between two polls a node whose side did not change
        counts the whole interval, one that changed counts half to each."""
        out = {"slurm": 0.0, "inference": 0.0}
        pts = [(t, s) for t, s in self.samples if t0 <= t <= t1]
        for (ta, a), (tb, b) in zip(pts, pts[1:]):
            for node, side in a.items():
                for s, share in ((side, 0.5), (b.get(node), 0.5)):
                    if s is not None:
                        out[s] += self.gpus[node] * (tb - ta) * share
        return out


def grafana(expr: str, range_s: int) -> str:
    """A panel's query with the variables Grafana would substitute (pool: the demo's pool)."""
    rate_interval = max(STEP_S + SCRAPE_S, 4 * SCRAPE_S)
    for var, value in (("$__rate_interval", f"{rate_interval}s"), ("$__range", f"{range_s}s"),
                       ("$__interval", f"{STEP_S}s"), ("$pool", DEMO_POOL)):
        expr = expr.replace(var, value)
    return expr


@pytest.fixture(scope="module")
def demo(lab, prometheus):
    pidfile = Path(lab.dir) / "run" / "operator.pid"
    assert not pidfile.exists(), f"a demo operator is already running ({pidfile}): make lab-down first"
    poller = SidePoller(lab).start()
    t_start = time.time()
    env = {**lab.env, "LAB_DIR": str(lab.dir)}
    try:
        p = subprocess.run([str(REPO / "e2e" / "demo.sh")], env=env, capture_output=True, text=True, timeout=600)
        t_end = time.time()
        print(p.stdout[-3000:])
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert "Prometheus scrapes it" in p.stdout  # demo.sh registered its operator
        # The idle stretch: nodes on both sides, nothing moving.
        lab.kubectl("scale", "snp", "gpu", "-n", DEMO_NS, "--replicas=5")
        wait(lambda: lab.kubectl("get", "snp", "gpu", "-n", DEMO_NS, "-o",
                                 "jsonpath={.status.slurm.ready}/{.status.inference.ready}/{.status.moving}").stdout == "5/3/0",
             120, what="the demo's pool at 5/3")
        # The counter starts counting a settled node one pass after the pass that settled it and the
        # status that says so (poolmetrics.py): the idle stretch starts two passes and a scrape later.
        time.sleep(3)
        t_idle = time.time()
        time.sleep(IDLE_S)
        t_idle_end = time.time()
    finally:
        poller.stop()
    try:
        yield {"start": t_start, "end": t_end, "idle": t_idle, "idle_end": t_idle_end, "poller": poller}
    finally:
        if pidfile.exists():
            pid = int(pidfile.read_text())
            if Path(f"/proc/{pid}/cmdline").read_bytes().find(b"slurmpool") >= 0:
                os.kill(pid, signal.SIGTERM)
                wait(lambda: not Path(f"/proc/{pid}").exists() or b"State:\tZ" in Path(f"/proc/{pid}/status").read_bytes(),
                     20, what="the demo operator stopped")
            pidfile.unlink()
        unregister("demo", lab_dir())
        lab.kubectl("delete", "namespace", DEMO_NS, "--wait=true", "--timeout=60s", check=False)
        reset_lab(lab)


def test_every_panel_has_data_during_the_demo(prometheus, demo):
    dashboard = json.loads(DASHBOARD.read_text())
    # The demo and the scale to 5/3 that ends it: the demo's moves take a few seconds, and the first of
    # them may end before Prometheus has discovered and scraped the demo's operator.
    t0, t1 = demo["start"], demo["idle"]
    range_s = math.ceil(t1 - t0)
    # the pool variable's query lists the demo's pool
    pools = {s["metric"]["pool"] for s in prometheus.query_range("group by (pool) (slurmpool_nodes)", t0, t1, STEP_S)}
    assert DEMO_POOL in pools, pools
    empty, rows = [], []
    for panel in (p for p in dashboard["panels"] if p["type"] != "row"):
        counts = []
        for target in panel["targets"]:
            result = prometheus.query_range(grafana(target["expr"], range_s), t0, t1, STEP_S)
            with_values = [s for s in result if any(not math.isnan(float(v)) for _, v in s["values"])]
            counts.append(len(with_values))
            if not with_values:
                empty.append(f"{panel['title']!r}: {target['expr']}")
        rows.append(f"PANEL | {panel['title']} | {sum(counts)} | {' + '.join(map(str, counts))}")
    print("\n".join(rows))
    assert not empty, "panels without data during the demo:\n" + "\n".join(empty)


def gpu_seconds_panel(prometheus, t0: float, t1: float) -> dict[str, float]:
    """The "GPU-hours by side" panel over [t0, t1], in GPU-seconds."""
    panel = next(p for p in json.loads(DASHBOARD.read_text())["panels"] if p["title"].startswith("GPU-hours by side"))
    result = prometheus.query(grafana(panel["targets"][0]["expr"], round(t1 - t0)), at=t1)
    assert len(result) == 2, result
    return {s["metric"]["side"]: float(s["value"][1]) * 3600 for s in result}


def test_gpu_seconds_per_side_match_the_time_nodes_spent_there(prometheus, demo):
    poller = demo["poller"]
    # Idle, nodes on both sides (5 Slurm, 3 inference): every poll saw the same sides, so each side
    # served (its nodes' GPUs) x (the range). The counter grows once per pass (1 s) and is scraped
    # once a second, so increase() over the range is exact to within a pass at each end.
    t1 = demo["idle_end"]
    range_s = math.floor(t1 - demo["idle"])
    seen = {tuple(sorted(s.items())) for t, s in poller.samples if t1 - range_s <= t <= t1}
    assert len(seen) == 1, f"sides changed during the idle stretch: {seen}"
    gpus = {side: sum(poller.gpus[n] for n, s in dict(next(iter(seen))).items() if s == side) for side in ("slurm", "inference")}
    truth = {side: g * range_s for side, g in gpus.items()}
    measured = gpu_seconds_panel(prometheus, t1 - range_s, t1)
    print(f"GPU-seconds over the {range_s} s idle stretch at 5/3: panel {measured}, from the Nodes {truth}")
    assert gpus == {"slurm": 5 * GPUS_PER_NODE, "inference": 3 * GPUS_PER_NODE}, gpus
    for side, expected in truth.items():
        tolerance = 2 * 1.0 * gpus[side] + 0.01 * expected
        assert abs(measured.get(side, 0.0) - expected) <= tolerance, (side, measured, truth, tolerance)

    # The demo's moves (from all 8 nodes settled in Slurm to the end of the idle stretch). The counter
    # is documented (poolmetrics.py) to count a node only between two passes that both saw it settled
    # on the same side: each time a node settles it loses up to one pass of its GPUs, never gains;
    # and a side's series is born at its first increment, which increase() cannot see. Passes are
    # 1 s apart when idle but several seconds under the moves on a busy machine, so the pass interval
    # is measured: the longest run of scrapes in which the Slurm side's counter did not move (it
    # grows at every pass while a node serves Slurm). Bounds: never more than the Nodes show (+3 %),
    # never less than that minus, per settle, a pass and a scrape of the node's GPUs, and as much
    # again at most for the unseen first increment (which counts only nodes that had settled).
    t0 = poller.first_time(lambda sides: sides and all(s == "slurm" for s in sides.values()))
    t0 = t1 - math.floor(t1 - t0)
    truth, measured = poller.integrate(t0, t1), gpu_seconds_panel(prometheus, t0, t1)
    settles = {side: 0 for side in truth}
    for (_, a), (_, b) in zip(poller.samples, poller.samples[1:]):
        for node, side in b.items():
            if side is not None and a.get(node) != side:
                settles[side] += 1
    counter = prometheus.query_range(f'slurmpool_gpu_seconds_total{{pool="{DEMO_POOL}", side="slurm"}}', t0, t1, SCRAPE_S)
    values = [float(v) for _, v in counter[0]["values"]]
    pass_s = run = 1
    for a, b in zip(values, values[1:]):
        run = run + 1 if a == b else 1
        pass_s = max(pass_s, run * SCRAPE_S)
    print(f"GPU-seconds over {t1 - t0:.0f} s from the demo's start: panel {measured}, seen on the Nodes {truth}, "
          f"settles {settles}, longest pass {pass_s} s")
    for side, seen in truth.items():
        loss = 2 * settles[side] * GPUS_PER_NODE * (pass_s + SCRAPE_S)
        assert seen - loss <= measured.get(side, 0.0) <= seen * 1.03, (side, measured, truth, loss)


def test_no_alert_during_the_demo_nor_on_the_idle_lab(prometheus, demo):
    # The demo's operator was scraped from shortly after demo.sh started it; before that the
    # previous test module's operator was gone, so OperatorDown may have been active: from the
    # first scrape (plus one evaluation) on, nothing may be pending or firing.
    up = prometheus.query_range('up{pod="slurmpool-demo"} == 1', demo["start"], demo["end"], 1)
    assert up, "the demo's operator was never scraped"
    t_scraped = float(up[0]["values"][0][0]) + 2
    t_end = demo["idle_end"]
    window = math.floor(t_end - t_scraped)
    alerts = prometheus.query(f"count_over_time(ALERTS[{window}s])", at=t_end)
    assert not alerts, f"alerts during the demo or the {IDLE_S} s idle stretch: {alerts}"
    # and the operator was up all along (so absent(up) and the others were really evaluated)
    scraped = prometheus.query(f'count_over_time((up{{pod="slurmpool-demo"}} == 1)[{window}s:1s])', at=t_end)
    assert scraped and float(scraped[0]["value"][1]) >= 0.95 * window, scraped
    print(f"IDLE | no alert pending or firing over {window} s: the demo's moves, a scale to 5/3 and "
          f"{IDLE_S} s idle after them")
