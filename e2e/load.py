"""Many SlurmNodePools at once on the lab (issue 7, load): pools over disjoint groups of nodes
settle, then every pool's split changes at once and every move completes.

Used by e2e/test_load.py (correctness, no timed assertions) and `make bench` (figures). Times are
taken from one watch over every pool's status (arrival time at the watcher), per pool, from the
moment that pool's spec was patched.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from kubernetes import client, config, watch
from prometheus_client.parser import text_string_to_metric_families

from harness import Operator, apply, ensure_namespace_and_secret, install_crd, pool_manifest

GROUP, VERSION, PLURAL = "slurmpool.io", "v1alpha1", "slurmnodepools"
REASON_PREFIX = "slurmpool:"


@dataclass(frozen=True)
class Pool:
    namespace: str
    name: str
    nodes: tuple[str, ...]
    selector: dict

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def sim_pools(lab, count: int = 20, namespaces: int = 4) -> list[Pool]:
    """One pool per `slurmpool.io/sim-group` label of the lab's simulated nodes, spread over namespaces."""
    groups: dict[str, list[str]] = {}
    for node in lab.kubectl_json("get", "nodes", "-l", "slurmpool.io/sim=true")["items"]:
        groups.setdefault(node["metadata"]["labels"]["slurmpool.io/sim-group"], []).append(node["metadata"]["name"])
    if len(groups) < count:
        raise RuntimeError(f"the lab has {len(groups)} simulated node groups, {count} wanted (LAB_SIM_NODES)")
    return [
        Pool(f"slurmpool-load-{i % namespaces + 1}", f"load-{g}", tuple(sorted(groups[g])),
             {"matchLabels": {"slurmpool.io/sim-group": g}})
        for i, g in enumerate(sorted(groups)[:count])
    ]


def gpu_pools(lab, per_pool: int = 2, namespaces: int = 2) -> list[Pool]:
    """Pools of `per_pool` of the lab's real nodes each (selected by hostname)."""
    chunks = [lab.nodes[i:i + per_pool] for i in range(0, len(lab.nodes) - per_pool + 1, per_pool)]
    return [
        Pool(f"slurmpool-load-{i % namespaces + 1}", f"gpu-{i + 1}", tuple(nodes),
             {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}]})
        for i, nodes in enumerate(chunks)
    ]


# ---------------------------------------------------------------- watching every pool


@dataclass
class Seen:
    at: float
    generation: int
    observed: int
    slurm: int
    inference: int
    moving: int


class PoolWatch:
    """Every status of every SlurmNodePool as it arrives, timestamped (one watch, all namespaces)."""

    def __init__(self, api: client.ApiClient):
        self.custom = client.CustomObjectsApi(api)
        self.history: dict[tuple[str, str], list[Seen]] = {}
        self.cond = threading.Condition()
        self.stopped = False
        threading.Thread(target=self._run, daemon=True, name="pool-watch").start()

    def _run(self) -> None:
        while not self.stopped:
            try:
                for event in watch.Watch().stream(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL,
                                                  timeout_seconds=60):
                    self._record(event["object"])
            except Exception:  # noqa: BLE001 - a broken watch is re-listed
                time.sleep(0.5)

    def _record(self, obj: dict) -> None:
        meta, status = obj["metadata"], obj.get("status") or {}
        seen = Seen(time.monotonic(), meta.get("generation") or 0, status.get("observedGeneration") or 0,
                    (status.get("slurm") or {}).get("ready", 0), (status.get("inference") or {}).get("ready", 0),
                    status.get("moving", 0))
        with self.cond:
            self.history.setdefault((meta["namespace"], meta["name"]), []).append(seen)
            self.cond.notify_all()

    def first(self, key, since: float, predicate) -> float | None:
        with self.cond:
            return next((s.at for s in self.history.get(key, []) if s.at >= since and predicate(s)), None)

    def wait_all(self, starts: dict, predicate_for, timeout: float, what: str) -> dict:
        """Per pool: seconds from starts[key] to the first status meeting predicate_for(key)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = {k: self._first_locked(k, t, predicate_for(k)) for k, t in starts.items()}
                if all(v is not None for v in found.values()):
                    return {k: found[k] - starts[k] for k in starts}
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = {f"{k[0]}/{k[1]}": (self.history.get(k) or [None])[-1] for k, v in found.items() if v is None}
                    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; not yet: {missing}")
                self.cond.wait(min(left, 1.0))

    def _first_locked(self, key, since, predicate):
        return next((s.at for s in self.history.get(key, []) if s.at >= since and predicate(s)), None)


def settled(pool: Pool, slurm: int, generation: int):
    return lambda s: (s.observed >= generation and s.slurm == slurm and s.inference == len(pool.nodes) - slurm
                      and s.moving == 0)


# ---------------------------------------------------------------- metrics


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict:
    """{(name, labels tuple): value} of the operator's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def histogram_quantile(before: dict, after: dict, name: str, q: float, **match) -> float:
    """Prometheus-style quantile of a histogram's observations between two scrapes (of the
    series whose labels include `match`)."""
    buckets = sorted(
        (float(dict(labels)["le"]), value - before.get((n, labels), 0.0))
        for (n, labels), value in after.items()
        if n == f"{name}_bucket" and all(dict(labels).get(k) == v for k, v in match.items())
    )
    total = buckets[-1][1] if buckets else 0
    if not total:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for upper, cumulative in buckets:
        if cumulative >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / max(cumulative - below, 1e-9)
        lower, below = upper, cumulative
    return lower


def counter(metrics: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in metrics.items() if n == name and all(dict(ls).get(k) == x for k, x in labels.items()))


def apiserver_requests(lab) -> dict:
    """{(verb, resource): (count, seconds)} from the apiserver's own /metrics (every client's)."""
    text = lab.kubectl("get", "--raw", "/metrics").stdout
    out: dict = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request_duration_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith(("_count", "_sum")) and sample.labels.get("resource"):
                labels = sample.labels
                key = (labels["verb"], "/".join(x for x in (labels["resource"], labels.get("subresource")) if x))
                count, seconds = out.get(key, (0.0, 0.0))
                out[key] = (count + sample.value, seconds) if sample.name.endswith("_count") else (count, seconds + sample.value)
    return out


def busiest_requests(before: dict, after: dict, most: int = 8) -> dict:
    """The requests the apiserver served between two scrapes, most first: "VERB resource" ->
    "count, summed seconds" (WATCH requests are long by nature and left out)."""
    delta = {k: (c - before.get(k, (0, 0))[0], s - before.get(k, (0, 0))[1]) for k, (c, s) in after.items()
             if k[0] not in ("WATCH", "CONNECT")}
    top = sorted(((k, v) for k, v in delta.items() if v[0] > 0), key=lambda kv: -kv[1][0])[:most]
    return {f"{verb} {resource}": f"{count:.0f}, {seconds:.1f} s" for (verb, resource), (count, seconds) in top}


def cpu_by_command() -> dict:
    """{(pid, command): CPU seconds} of every live process, children that exited and were waited
    for included (/proc/*/stat: utime, stime, cutime, cstime)."""
    out = {}
    for stat in os.listdir("/proc"):
        if not stat.isdigit():
            continue
        try:
            text = open(f"/proc/{stat}/stat").read()
        except OSError:
            continue
        comm, fields = text[text.index("(") + 1:text.rindex(")")], text.rsplit(")", 1)[1].split()
        out[(int(stat), comm)] = sum(int(x) for x in fields[11:15]) / 100.0
    return out


def busiest_commands(before: dict, after: dict, most: int = 10) -> dict:
    """CPU seconds per command between two cpu_by_command() scans, most first."""
    per: dict = {}
    for key, seconds in after.items():
        per[key[1]] = per.get(key[1], 0.0) + seconds - before.get(key, 0.0)
    return {c: round(s, 1) for c, s in sorted(per.items(), key=lambda kv: -kv[1])[:most] if s >= 0.1}


def machine_busy_s() -> float:
    """CPU seconds every core of the machine spent busy so far (/proc/stat: all but idle and iowait)."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 1/100 s


# ---------------------------------------------------------------- the run


@dataclass
class Run:
    pools: list[Pool]
    figures: dict = field(default_factory=dict)
    moves_started: dict = field(default_factory=dict)


def run(lab, pools: list[Pool], first: int, then, max_moves: int = 25, log_name: str = "operator-load.log",
        settle_timeout: float = 300) -> Run:
    """Create the pools at `first` Slurm nodes each, wait until all settle, then set pool i to
    `then(i)` Slurm nodes, all at once, and wait until all settle again. Returns the figures."""
    install_crd(lab)
    for ns in sorted({p.namespace for p in pools}):
        ensure_namespace_and_secret(lab, ns)
    api = config.new_client_from_config(str(lab.kubeconfig))
    custom = client.CustomObjectsApi(api)
    watcher = PoolWatch(api)
    port = free_port()
    op = Operator(lab, log_name, args=["run", "--metrics-port", str(port), "--metrics-address", "127.0.0.1"]).start()
    result = Run(pools)
    fig = result.figures
    try:
        fig["nodes"], fig["pools"] = sum(len(p.nodes) for p in pools), len(pools)
        t0 = time.monotonic()
        apply(lab, [manifest(lab, p, first, max_moves) for p in pools])
        starts = dict.fromkeys((p.key for p in pools), t0)
        took = watcher.wait_all(starts, lambda k: settled(_by_key(pools, k), first, 1), settle_timeout, "every pool to settle")
        fig["adopt_settle_max_s"] = max(took.values())
        before, cpu0, served0 = scrape(port), cpu_seconds(op.proc.pid), apiserver_requests(lab)
        busy0, wall0, procs0 = machine_busy_s(), time.monotonic(), cpu_by_command()
        fig["loadavg_1m_at_change"] = os.getloadavg()[0]  # a shared machine: figures mean little without it

        # Every pool's split at once: patch them back to back, each timed from its own patch.
        starts, targets, generations = {}, {}, {}
        for i, p in enumerate(pools):
            targets[p.key] = then(i)
            starts[p.key] = time.monotonic()
            body = custom.patch_namespaced_custom_object(GROUP, VERSION, p.namespace, PLURAL, p.name,
                                                         {"spec": {"slurmNodes": targets[p.key]}})
            generations[p.key] = body["metadata"]["generation"]
        fig["patch_all_s"] = time.monotonic() - min(starts.values())
        observed = watcher.wait_all(starts, lambda k: (lambda s, g=generations[k]: s.observed >= g), 120,
                                    "status.observedGeneration")
        moving = watcher.wait_all(
            {k: t for k, t in starts.items() if targets[k] != first},
            lambda k: (lambda s, g=generations[k]: s.observed >= g and s.moving > 0), 120, "the first move")
        done = watcher.wait_all(starts, lambda k: settled(_by_key(pools, k), targets[k], generations[k]),
                                settle_timeout, "every pool to settle after the change")
        after, cpu1, served1 = scrape(port), cpu_seconds(op.proc.pid), apiserver_requests(lab)
        fig["apiserver_requests"] = busiest_requests(served0, served1)
        # How busy the whole machine was from the change to the settle (1.0: every core, all the time).
        fig["machine_busy"] = round((machine_busy_s() - busy0) / ((time.monotonic() - wall0) * os.cpu_count()), 2)
        fig["cpu_s_by_command"] = busiest_commands(procs0, cpu_by_command())
        fig["loadavg_1m_at_settled"] = os.getloadavg()[0]
        fig.update(_spread("observed_generation", observed))
        fig.update(_spread("first_move", moving))
        slowest = max(moving, key=moving.get)
        fig["first_move_slowest"] = f"{slowest[0]}/{slowest[1]}: to {'Slurm' if targets[slowest] > first else 'inference'}"
        fig.update(_spread("settle", done))
        fig["scale_all_settled_s"] = max(t + starts[k] for k, t in done.items()) - min(starts.values())
        for q in (0.5, 0.99):
            fig[f"pool_reconcile_p{int(q * 100)}_s"] = histogram_quantile(
                before, after, "slurmpool_reconcile_duration_seconds", q)
        # Where a pass's time went, and how late the event loop ran (controller/reports.py).
        for stage in ("snapshot", "decide", "apply", "status"):
            fig[f"stage_{stage}_p99_s"] = histogram_quantile(
                before, after, "slurmpool_reconcile_stage_duration_seconds", 0.99, stage=stage)
        fig["status_write_p99_s"] = histogram_quantile(before, after, "slurmpool_status_write_duration_seconds", 0.99)
        fig["status_writes"] = counter(after, "slurmpool_status_writes_total") - counter(before, "slurmpool_status_writes_total")
        fig["status_write_errors"] = counter(after, "slurmpool_status_writes_total", result="error")
        calls = {dict(labels)["call"] for (n, labels) in after if n == "slurmpool_kube_request_duration_seconds_count"}
        fig["kube_call_p50_p99_s"] = {
            c: f"{histogram_quantile(before, after, 'slurmpool_kube_request_duration_seconds', 0.5, call=c):.3f} "
               f"{histogram_quantile(before, after, 'slurmpool_kube_request_duration_seconds', 0.99, call=c):.3f}"
            for c in sorted(calls)}
        fig["kube_thread_wait_p99_s"] = {lane: histogram_quantile(before, after, "slurmpool_kube_thread_wait_seconds", 0.99, lane=lane)
                                         for lane in ("now", "later")}
        for q in (0.5, 0.99):
            fig[f"loop_lag_p{int(q * 100)}_s"] = histogram_quantile(before, after, "slurmpool_event_loop_lag_seconds", q)
            fig[f"slurm_show_node_p{int(q * 100)}_s"] = histogram_quantile(
                before, after, "slurmpool_slurm_command_duration_seconds", q, command="nodes")
        fig["slurm_polls"] = counter(after, "slurmpool_slurm_command_duration_seconds_count", command="nodes") - \
            counter(before, "slurmpool_slurm_command_duration_seconds_count", command="nodes")
        fig["passes"] = counter(after, "slurmpool_reconcile_duration_seconds_count") - counter(before, "slurmpool_reconcile_duration_seconds_count")
        fig["operator_cpu_s"] = cpu1 - cpu0
        fig["operator_rss_mib"] = _rss_mib(op.proc.pid)
        fig["reconcile_errors"] = counter(after, "slurmpool_reconcile_total", result="error")
        fig["action_errors"] = counter(after, "slurmpool_action_errors_total")
        fig["events_dropped"] = counter(after, "slurmpool_events_dropped_total")  # since start: adoption's 500 moves too
        for why in ("queue_full", "refused", "gave_up"):  # a failure says which (the log says why)
            fig[f"events_dropped_{why}"] = counter(after, "slurmpool_events_dropped_total", why=why)
        for direction in ("to_slurm", "to_inference"):
            result.moves_started[direction] = (counter(before, "slurmpool_moves_started_total", direction=direction),
                                               counter(after, "slurmpool_moves_started_total", direction=direction))
        fig["moves_in_scale"] = sum(b - a for a, b in result.moves_started.values())
        return result
    except BaseException:
        print(op.log_tail(40))
        raise
    finally:
        watcher.stopped = True
        op.stop()


def manifest(lab, pool: Pool, slurm_nodes: int, max_moves: int) -> dict:
    body = pool_manifest(lab, pool.name, slurm_nodes, namespace=pool.namespace, maxConcurrentMoves=max_moves,
                         slurm={"registerTimeout": "120s"})
    body["spec"]["nodeSelector"] = pool.selector  # replaces the lab-wide default (a merge would AND them)
    return body


def _by_key(pools: list[Pool], key) -> Pool:
    return next(p for p in pools if p.key == key)


def _spread(name: str, per_pool: dict) -> dict:
    values = sorted(per_pool.values())
    return {f"{name}_p50_s": values[len(values) // 2], f"{name}_max_s": values[-1]}


def _rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------- where everything ended up


def misplaced(lab, pools: list[Pool], targets: dict) -> list[str]:
    """Everything that disagrees with `targets[pool.key]` Slurm nodes per pool: placements, moves
    still recorded, Slurm's view (Slurm nodes usable, the others parked drained) and slurmd pods."""
    core = client.CoreV1Api(config.new_client_from_config(str(lab.kubeconfig)))
    nodes = {n.metadata.name: n.metadata.annotations or {} for n in core.list_node().items}
    slurm_state = {}
    for line in lab.slurm("scontrol", "-o", "show", "node").stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        slurm_state[fields.get("NodeName")] = fields.get("State", "")
    problems = []
    for p in pools:
        want = targets[p.key]
        slurmd = {pod.spec.node_name for pod in core.list_namespaced_pod(
            p.namespace, label_selector=f"slurmpool.io/component=slurmd,slurmpool.io/pool={p.name}").items}
        placed = {n: nodes[n].get("slurmpool.io/placement") for n in p.nodes}
        on_slurm = sorted(n for n, where in placed.items() if where == "slurm")
        if len(on_slurm) != want or any(w not in ("slurm", "inference:llm") for w in placed.values()):
            problems.append(f"{p.namespace}/{p.name}: {len(on_slurm)} on Slurm, wanted {want}: {placed}")
        problems += [f"{n}: move still recorded" for n in p.nodes if nodes[n].get("slurmpool.io/move")]
        problems += [f"{n}: in Slurm but {slurm_state.get(n)}" for n in on_slurm
                     if "DRAIN" in slurm_state.get(n, "") or "NOT_RESPONDING" in slurm_state.get(n, "") or n not in slurmd]
        problems += [f"{n}: serves inference but Slurm says {slurm_state.get(n)}" for n in p.nodes
                     if placed[n] != "slurm" and "DRAIN" not in slurm_state.get(n, "")]
        problems += [f"{n}: serves inference with a slurmd pod" for n in slurmd - set(on_slurm)]
    return problems


# ---------------------------------------------------------------- leave the lab as found


def cleanup(lab, pools: list[Pool]) -> None:
    """Pools, namespaces and slurmd pods gone; every node of the pools without anything slurmpool put
    on it; our drains in Slurm resumed. Bulk API calls: 500 nodes by kubectl would take minutes."""
    for ns in sorted({p.namespace for p in pools}):
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=180s", check=False, timeout=240)
    core = client.CoreV1Api(config.new_client_from_config(str(lab.kubeconfig)))
    names = {n for p in pools for n in p.nodes}

    def reset(node):
        meta = node.metadata
        patch = {
            "metadata": {
                "annotations": {k: None for k in meta.annotations or {} if k.startswith("slurmpool.io/")},
                "labels": {k: None for k in ("slurmpool.io/side", "slurmpool.io/inference-pool") if k in (meta.labels or {})},
            },
            "spec": {"unschedulable": False,
                     "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.spec.taints or []
                                if not t.key.startswith("slurmpool.io/")] or None},
        }
        core.patch_node(meta.name, patch)

    nodes = [n for n in core.list_node().items if n.metadata.name in names]
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(reset, nodes))
    out = lab.slurm("scontrol", "-o", "show", "node").stdout
    ours = [f.split("=", 1)[1] for line in out.splitlines() for f in line.split()[:1]
            if f.startswith("NodeName=") and f.split("=", 1)[1] in names and f"Reason={REASON_PREFIX}" in line]
    if ours:
        lab.slurm("scontrol", "update", f"nodename={','.join(ours)}", "state=resume", check=False)
