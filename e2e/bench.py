"""`make bench`: the operator's speed and memory figures beside their targets.

Writes bench-results.json: {"name": {"value", "unit", "target", "ok"}} (the idle moves also carry the
1-minute load average when they ended: 2 shared cores make them noisy). Figures:
  planner time for 1k/10k/50k nodes; Slurm commands and Kubernetes API requests per
  reconcile cycle at 50 and 500 nodes; operator RSS with 5,000 Nodes in the lab's
  apiserver; `kubectl slurmpool status` (and `plan`) wall time and peak RSS on a pool of 5,000 Nodes
  with 50,000 pods in the lab's apiserver; wall time to move one idle node each way and eight at once on the lab;
  whole free Slurm blocks after the planner's moves vs exhaustive search; under load (500
  simulated nodes, 20 pools, every split changed at once): loop pass p50/p99, spec change to
  observedGeneration and to settled (e2e/load.py; the lab is restarted with LAB_SIM_NODES=500
  for it, and back to what it was after; the median of BENCH_LOAD_RUNS runs, 3 by default, each
  printed).
With --matrix (or BENCH_MATRIX=1), the idle moves again on each Slurm version, access path and
node model (MATRIX_ROWS; names end in the row, e.g. move_1_idle_node_to_slurm_24.11-rest); the lab
is restarted per row and stopped at the end. --matrix-only [ROW...] (`make bench-matrix`) runs just
those and merges them into bench-results.json.
Issue 24 on the lab: a gang job with demand on, submit to nodes resumed and to RUNNING (`gang`); the
planned handover across a window edge on a busy partition: edge to inference, jobs lost, idle
node-seconds beside the job mix's bound (`handover`, about 4 minutes: the edge is a whole minute).
Issue 37, on fakes (no lab): the operator's peak RSS and longest event-loop stall while polling
100,000 real-size jobs over REST from tests/restfake.py (`restjobs`); one round of `decide` for
200 pools of 50 nodes on one Slurm with 100,000 pending jobs, each pool on a partition of its own
and all on one (`demand`).
BENCH_ONLY=planner,memory (or --only): run only these parts, of planner, calls, fragmentation,
health, moves, gang, parking, drill, dra, handover, oncall, memory, plugin, load, restjobs, demand.
Issue 39 on the lab (`parking`): a gang job that needs three lent parked nodes in PowerSave, submit to
RUNNING; and POWERING_UP to the slurmd registered. Issue 36 (`drill`): the preemption drill's surge to
pods running, and the work each preempted job lost past its checkpoint.
Issue 40 on the lab: a pending pod claiming 8 GPUs through DRA to Running, beside the cooldown, one
move and the lab driver's slice publication (`dra`). Issue 38 (`oncall`): SIGTERM to the leader of
two replicas until the other acts, and a deleted Degraded pool's series gone from /metrics.
Usage: python e2e/bench.py [--no-lab] [--no-load] [--only PARTS] [--matrix | --matrix-only [ROW...]]
(the lab parts need `make lab-up` or start it)
Every figure is printed with the machine's 1-minute load average when it was taken.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "e2e"))
sys.path.insert(0, str(REPO))

from slurmbridge import SlurmJob  # noqa: E402
from slurmbridge.backend import ScontrolBackend  # noqa: E402
from slurmpool.core.planner import plan  # noqa: E402
from slurmpool.adapters.access import observe_slurm  # noqa: E402
from slurmpool.controller.apply import ApplyContext, apply  # noqa: E402
from slurmpool.core.decide import decide  # noqa: E402
from slurmpool.core.demand import Seen, signals  # noqa: E402
from slurmpool.core.published import slurm_annotation  # noqa: E402
from slurmpool.core.interfaces import PoolRef  # noqa: E402
from slurmpool.core.snapshot import PoolSnapshot  # noqa: E402
from slurmpool.core.view import ANN_PLACEMENT, ANN_SLURM, SLURM, SLURM_TAINT_KEY, NodeView, PodView, SlurmView  # noqa: E402
from tests.blocks import whole_slurm_blocks  # noqa: E402
from tests.factories import NOW, make_spec, slurm_node  # noqa: E402

RESULTS: dict[str, dict] = {}


def record(name: str, value: float, unit: str, target: str, ok: bool) -> None:
    load = os.getloadavg()[0]  # a shared machine: a figure means little without it
    RESULTS[name] = {"value": round(value, 3), "unit": unit, "target": target, "ok": bool(ok), "loadavg": round(load, 2)}
    print(f"{'ok  ' if ok else 'MISS'} {name:<48} {value:>10.3f} {unit:<6} target {target}  (load {load:.1f})")


# ---------------------------------------------------------------- planner time


def synthetic(n: int, busy_every: int = 3):
    nodes, states = [], {}
    for i in range(n):
        name = f"gpu{i:06d}"
        nodes.append(NodeView(name=name, labels={"topology.slurmpool.io/block": f"b{i // 18}"}, annotations={ANN_PLACEMENT: SLURM}))
        states[name] = slurm_node(name, "MIXED" if i % busy_every == 0 else "IDLE")
    return nodes, SlurmView(True, nodes=states)


def bench_planner() -> None:
    times = {}
    for n in (1_000, 10_000, 50_000):
        nodes, view = synthetic(n)
        spec = make_spec(slurm_nodes=n // 2, max_moves=64)
        spec.topology.block_label = "topology.slurmpool.io/block"
        best = math.inf
        for _ in range(5):
            fresh = [replace(n) for n in nodes]  # as each pass sees them: new views, cold caches
            fresh_view = replace(view, _blocks={})  # Slurm's too (it caches per-node sets)
            t0 = time.perf_counter()
            plan(spec, fresh, fresh_view, NOW)
            best = min(best, time.perf_counter() - t0)
        times[n] = best
        record(f"planner_{n // 1000}k_nodes", best * 1000, "ms", "< 20 ms at 10k" if n == 10_000 else "n log n", n != 10_000 or best < 0.02)
    # growth: time ratio 50k/10k against (50k log 50k)/(10k log 10k) = 5.88
    ratio = times[50_000] / times[10_000]
    bound = (50_000 * math.log(50_000)) / (10_000 * math.log(10_000)) * 1.5  # 1.5: timing noise
    record("planner_growth_50k_over_10k", ratio, "x", f"<= {bound:.1f} (n log n x1.5)", ratio <= bound)


# ---------------------------------------------------------------- issue 37: a real-size queue


def bench_rest_jobs(count: int = 100_000) -> None:
    """One operator poll (tests/restpoll.py, its own process) of a slurmrestd fake answering
    `count` jobs of real size (~6 KB each, streamed as it is made): peak RSS and the longest
    stall of the event loop."""
    from aiohttp import web

    from tests.restfake import FakeSlurmrestd, real_size_jobs

    async def run() -> dict:
        runner = web.AppRunner(FakeSlurmrestd(versions=("v0.0.45",), job_bytes=real_size_jobs(count)).app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO / "bridge"), str(REPO)])}
        try:
            proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "tests.restpoll", url, "0", "p0", "p1",
                                                        stdout=asyncio.subprocess.PIPE, env=env, cwd=REPO)
            out, _ = await proc.communicate()
        finally:
            await runner.cleanup()
        return json.loads(out)

    polled = asyncio.run(run())
    ok = bool(polled["available"])
    print(f"     REST poll of {count} jobs: kept {polled['jobs']} in {polled['poll_s']} s")
    record("rest_poll_100k_jobs_peak_rss", polled["peak_rss_mib"], "MiB", "< 300 MiB", ok and polled["peak_rss_mib"] < 300)
    record("rest_poll_100k_jobs_longest_stall", polled["longest_stall_s"], "s", "< 0.5 s", ok and polled["longest_stall_s"] < 0.5)


def bench_demand_round(pools: int = 200, nodes: int = 50, pending: int = 100_000) -> None:
    """One round on one Slurm poll holding `pending` pending jobs, for `pools` pools (own
    partition, demand on, `nodes` busy nodes each, settled in Slurm as a running operator leaves
    them: nothing to repair), the best of 3: demand (the poll's index and each pool's signals, what
    the queue costs), and each pool's whole `decide` beside the same round with no job (what the
    pools cost whatever the queue)."""
    body = make_spec(slurm_nodes=nodes).model_dump(by_alias=True, exclude_none=True)
    specs, views, states = [], [], {}
    for p in range(pools):
        body["slurm"]["partition"], body["demand"] = f"p{p}", {}
        specs.append(type(make_spec()).model_validate(body))
        names = [f"n{p}-{k}" for k in range(nodes)]
        states.update({name: slurm_node(name, "ALLOCATED") for name in names})
        views.append([_settled_in_slurm(name, f"pool{p}", states) for name in names])
    jobs = tuple(SlurmJob(job_id=str(j), name="t", user="u", state="PENDING", partition=f"p{j % pools}", nodes=(), gpus_per_node=8,
                          num_nodes=1, start_time=None, end_time=None, reason="Resources") for j in range(pending))

    def best(queue: tuple, each) -> float:
        fastest = math.inf
        for _ in range(3):
            view = SlurmView(True, nodes=states, jobs=queue)  # a new poll: its index is made again
            t0 = time.perf_counter()
            for p in range(pools):
                each(p, view)
            fastest = min(fastest, time.perf_counter() - t0)
        return fastest

    demand = best(jobs, lambda p, view: signals(Seen(specs[p], views[p], view, [], now=NOW)))
    record("demand_round_200_pools_100k_pending", demand, "s", "< 1 s (the pass interval)", demand < 1.0)
    # Every pool on one partition (pools per rack of one `gpu` partition): each reads all 100,000.
    body["slurm"]["partition"] = "gpu"
    shared_spec = type(make_spec()).model_validate(body)
    shared_jobs = tuple(replace(j, partition="gpu") for j in jobs)
    shared = best(shared_jobs, lambda p, view: signals(Seen(shared_spec, views[p], view, [], now=NOW)))
    record("demand_round_200_pools_100k_pending_one_partition", shared, "s", "< 1 s (the pass interval)", shared < 1.0)
    def decided(p: int, view: SlurmView):
        return decide(PoolSnapshot(pool=PoolRef("ns", f"pool{p}"), spec=specs[p], nodes=tuple(views[p]), slurm=view, now=NOW))

    first = decided(0, SlurmView(True, nodes=states, jobs=()))
    if first.patches or first.publish or any(s.actions for s in first.steps.values()):
        raise RuntimeError(f"the bench's nodes are not settled: a pass repairs them ({first.patches or first.publish})")
    whole = [best(queue, decided) for queue in (jobs, ())]
    record("decide_round_200_pools_100k_pending", whole[0], "s", "< 1 s (the pass interval)", whole[0] < 1.0)
    record("decide_round_200_pools_no_job", whole[1], "s", "what the queue adds: the line above less this", True)


def _settled_in_slurm(name: str, pool: str, states: dict) -> NodeView:
    """A node as a pass leaves it settled in Slurm: side label, taint, cordon, its slurmd pod
    ready, Slurm's state published (a pass on it has nothing to repair or write)."""
    return NodeView(name, labels={"gpu": "true", "slurmpool.io/side": "slurm"},
                    annotations={ANN_PLACEMENT: SLURM, ANN_SLURM: slurm_annotation(name, SlurmView(True, nodes=states))},
                    taints=({"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"},), unschedulable=True,
                    pods=(PodView("ns", f"slurmd-{name}", f"uid-{name}", ready=True, slurmd=True, node=name, pool=pool),))


# ---------------------------------------------------------------- calls per cycle


class CountingRunner:
    """Answers scontrol/squeue like a Slurm with n idle nodes; counts commands."""

    def __init__(self, n: int):
        self.n = n
        self.lines = "\n".join(
            f"NodeName=gpu{i:04d} Arch=x86_64 CPUTot=16 AvailableFeatures=(null) Gres=gpu:h100:8 GresUsed=gpu:h100:0(IDX:N/A) "
            f"NodeAddr=127.0.0.1 State=IDLE Partitions=gpu"
            for i in range(n)
        )

    async def run(self, argv, timeout):
        if "squeue" in argv:
            return ""
        if "show" in argv:
            return self.lines + "\n"
        return ""

    async def close(self):
        return None


class CountingKube:
    def __init__(self):
        self.requests = 0

    async def patch_node(self, name, patch):
        self.requests += 1

    async def patch_node_later(self, name, patch):
        self.requests += 1

    async def create_slurmd_pod(self, pool, spec, node, slurm_name=None, boot=False):
        self.requests += 1

    async def delete_pod(self, namespace, name, uid):
        self.requests += 1

    async def evict(self, namespace, name):
        self.requests += 1

    async def event(self, obj, type_, reason, message):
        self.requests += 1


async def _cycle(n: int, moves: int) -> tuple[int, int]:
    backend = ScontrolBackend(CountingRunner(n), retries=0)
    view = await observe_slurm(backend)
    nodes = [  # settled, with Slurm's state already published on them
        NodeView(name=f"gpu{i:04d}", annotations={ANN_PLACEMENT: SLURM, ANN_SLURM: slurm_annotation(f"gpu{i:04d}", view)}, unschedulable=True,
                 taints=({"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"},),  # settled: cordoned and tainted
                 pods=(PodView("ns", f"slurmd-gpu{i:04d}", f"u{i}", slurmd=True),))
        for i in range(n)
    ]
    spec = make_spec(slurm_nodes=n - moves, max_moves=max(1, moves))
    kube = CountingKube()
    pool = PoolRef("ns", "p")
    decision = decide(PoolSnapshot(pool=pool, spec=spec, nodes=tuple(nodes), slurm=view, now=NOW))
    await apply(ApplyContext(pool, spec, nodes, kube, backend), decision)
    # + 1: the status write, at most once per cycle (only when the status changed)
    return backend.commands_run, kube.requests + 1


def bench_calls() -> None:
    for label, moves in (("steady", 0), ("8_moves_starting", 8)):
        small, large = asyncio.run(_cycle(50, moves)), asyncio.run(_cycle(500, moves))
        record(f"slurm_commands_per_cycle_{label}_50_vs_500", small[0], "cmds", f"== {large[0]} (500 nodes)", small[0] == large[0])
        # Kubernetes writes scale with the moves, not the nodes: reads come from watches.
        record(f"kube_requests_per_cycle_{label}_50_vs_500", small[1], "reqs", f"== {large[1]} (500 nodes)", small[1] == large[1])


# ---------------------------------------------------------------- fragmentation


def bench_fragmentation(cases: int = 200) -> None:
    rng = random.Random(7)
    equal = 0
    for _ in range(cases):
        n_blocks, size = rng.randint(2, 4), rng.randint(2, 4)
        nodes, states = [], {}
        for b in range(n_blocks):
            for i in range(size):
                name = f"b{b}n{i}"
                nodes.append(NodeView(name=name, labels={"blk": f"b{b}"}, annotations={ANN_PLACEMENT: SLURM}))
                kind = rng.choice(["IDLE", "IDLE", "MIXED", "DRAIN"])
                states[name] = slurm_node(name, "IDLE", {"DRAIN"}, "admin") if kind == "DRAIN" else slurm_node(name, kind)
        view = SlurmView(True, nodes=states)
        k = rng.randint(1, len(nodes) - 1)
        spec = make_spec(slurm_nodes=len(nodes) - k, max_moves=100)
        spec.topology.block_label = "blk"
        moved = {s.node for s in plan(spec, nodes, view, NOW).starts}
        got = whole_slurm_blocks(spec.topology, nodes, view, lambda n, moved=moved: "inference:default" if n.name in moved else n.placement)
        best = max(
            whole_slurm_blocks(spec.topology, nodes, view, lambda n, c=set(c): "inference:default" if n.name in c else n.placement)
            for c in itertools.combinations([n.name for n in nodes], k)
        )
        equal += got == best
    record("fragmentation_cases_equal_to_optimum", equal, "cases", f"== {cases}", equal == cases)


def _article(rng: random.Random | None = None, n_blocks=4, size=18):
    """The reference article's fragmentation example (4 NVLink blocks of 18) with unhealthy nodes
    in every block: one long job and one admin drain per block (or, with `rng`, small random
    clusters with one unhealthy node per block: an admin drain, Slurm's own drain or NotReady)."""
    nodes, states, jobs = [], {}, []
    for b in range(n_blocks):
        sick = rng.randrange(size) if rng else 0
        for i in range(size):
            name = f"b{b}n{i:02d}"
            how = rng.choice(["admin", "slurm", "notready"]) if rng and i == sick else ("admin" if i == sick else None)
            nodes.append(NodeView(name=name, labels={"blk": f"b{b}"}, annotations={ANN_PLACEMENT: SLURM}, ready=how != "notready"))
            if how == "admin":
                states[name] = slurm_node(name, "IDLE", {"DRAIN"}, "admin: bad HBM")
            elif how == "slurm":
                states[name] = slurm_node(name, "IDLE", {"DRAIN"}, "gres/gpu count reported lower than configured (4 < 8)")
            else:
                busy = (rng.random() < 0.3) if rng else i == 1
                states[name] = slurm_node(name, "MIXED" if busy else "IDLE")
                if busy:
                    jobs.append(SlurmJob(job_id=f"{name}-j", name="long", user="u", state="RUNNING", partition="gpu", nodes=(name,),
                                         gpus_per_node=8, num_nodes=1, start_time=NOW, end_time=None, reason="None"))
    return nodes, SlurmView(True, nodes=states, jobs=tuple(jobs))


def _whole_once_repaired(spec, nodes, moved: set[str]) -> int:
    """Blocks whose every healthy node still serves Slurm: whole again once the broken node is fixed."""
    blocks: dict[str, bool] = {}
    for n in nodes:
        b = n.labels["blk"]
        blocks[b] = blocks.get(b, True) and n.name not in moved
    return sum(blocks.values())


def bench_health_fragmentation(cases: int = 100) -> None:
    from slurmpool.core.health import assess_all

    spec = make_spec(slurm_nodes=64, max_moves=100)
    spec.topology.block_label = "blk"
    nodes, view = _article()
    health = assess_all(spec.health, nodes, view, NOW)
    moved = {s.node for s in plan(spec, nodes, view, NOW, health=health).starts}
    record("health_article_unhealthy_handed_to_inference", len(moved & set(health)), "nodes", "== 0", not moved & set(health))
    usable = whole_slurm_blocks(spec.topology, nodes, view, lambda n: "inference:default" if n.name in moved else n.placement, set(health))
    record("health_article_whole_blocks_now", usable, "blocks", "== 0 (a drain in every block)", usable == 0)
    repaired = _whole_once_repaired(spec, nodes, moved)
    record("health_article_whole_blocks_once_repaired", repaired, "blocks", "== 3 (of 4)", repaired == 3)
    served = sum(1 for n in nodes if n.name not in moved and n.name not in health)
    record("health_article_healthy_slurm_nodes", served, "nodes", "== 60 (64 minus 4 drained)", served == 60)
    rng = random.Random(15)
    equal = 0
    for _ in range(cases):
        n_blocks, size = rng.randint(2, 4), rng.randint(3, 4)
        nodes, view = _article(rng, n_blocks, size)
        spec = make_spec(slurm_nodes=0, max_moves=100)
        spec.topology.block_label = "blk"
        health = assess_all(spec.health, nodes, view, NOW)
        healthy = [n.name for n in nodes if n.name not in health]
        k = rng.randint(1, len(healthy) - 1)
        spec = spec.model_copy(update={"slurm_nodes": len(nodes) - k})
        moved = {s.node for s in plan(spec, nodes, view, NOW, health=health).starts}
        assert not moved & set(health), "an unhealthy node was chosen"
        got = _whole_once_repaired(spec, nodes, moved)
        best = max(_whole_once_repaired(spec, nodes, set(c)) for c in itertools.combinations(healthy, k))
        equal += got == best
    record("health_fragmentation_cases_equal_to_optimum", equal, "cases", f"== {cases}", equal == cases)


# ---------------------------------------------------------------- on the lab


def lab_env() -> dict:
    lab_dir = Path(os.environ.get("LAB_DIR", REPO / ".lab"))
    if subprocess.run([str(REPO / "e2e/lab/health.sh")], env={**os.environ, "LAB_DIR": str(lab_dir)}, capture_output=True).returncode:
        subprocess.run([str(REPO / "e2e/lab/up.sh")], env={**os.environ, "LAB_DIR": str(lab_dir)}, check=True)
    from conftest import Lab
    from harness import stop_demo

    lab = Lab.from_env_file(lab_dir / "env")
    stop_demo(lab)  # `make demo` then `make bench`: the demo's pool would hold the lab's nodes
    return lab


def bench_lab() -> None:
    bench_idle_moves(lab_env())


def bench_idle_moves(lab, row: str = "") -> None:
    """Wall time to move one idle node each way, then eight at once, on the lab as it runs (its
    Slurm version and node model; LAB_ACCESS for the access path). `row` suffixes the names."""
    from harness import NAMESPACE, Operator, apply, ensure_namespace_and_secret, install_crd, pool_manifest, pool_status, reset_lab

    tag = f"_{row}" if row else ""
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    op = Operator(lab, f"operator-bench{tag}.log").start()
    try:
        def split(slurm, timeout=120):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                s = pool_status(lab, "bench")
                if s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == 8 - slurm and s.get("moving") == 0:
                    return
                time.sleep(0.05)
            raise RuntimeError(f"split {slurm} not reached")

        apply(lab, pool_manifest(lab, "bench", 8))
        split(8)
        for name, to in (("move_1_idle_node_to_inference", 7), ("move_1_idle_node_to_slurm", 8)):
            t0 = time.monotonic()
            lab.kubectl("scale", "snp", "bench", "-n", NAMESPACE, f"--replicas={to}")
            split(to)
            took = time.monotonic() - t0
            record(name + tag, took, "s", "< 1.5 s", took < 1.5)
            RESULTS[name + tag]["load_average"] = round(os.getloadavg()[0], 2)  # the machine is shared
        one = max(RESULTS["move_1_idle_node_to_inference" + tag]["value"], RESULTS["move_1_idle_node_to_slurm" + tag]["value"])
        for name, to in (("move_8_idle_nodes_to_inference", 0), ("move_8_idle_nodes_to_slurm", 8)):
            t0 = time.monotonic()
            lab.kubectl("scale", "snp", "bench", "-n", NAMESPACE, f"--replicas={to}")
            split(to)
            took = time.monotonic() - t0
            record(name + tag, took, "s", f"< 1.3 x one node ({1.3 * one:.2f} s)", took < 1.3 * one)
            RESULTS[name + tag]["load_average"] = round(os.getloadavg()[0], 2)
    finally:
        op.stop()
        reset_lab(lab)


def bench_gang() -> None:
    """A gang job with demand on (issue 24): 5 Slurm nodes, 3 parked for inference, then
    `sbatch -N8 --exclusive`. Two figures, timed from the submit:
    - `gang_job_submit_to_nodes_resumed`: until Slurm shows every node of the partition usable (the
      operator's part: demand sees the job, three parked nodes move to Slurm and are resumed),
      beside the cooldown plus one move's time (one idle node's move to Slurm, timed first on the
      same lab);
    - `gang_job_submit_to_running`: until the job runs, beside the cooldown, one move and Slurm's
      own start of a job after a resume, timed on the same lab without the operator (three nodes
      drained by hand, the job submitted, the nodes resumed a second later: resume to RUNNING, the
      slowest of three). Why Slurm's part is in the bound: the operator's resume queues Slurm's main
      scheduler (proc_req.c `_slurm_rpc_update_node` -> `queue_job_scheduler`), but slurmctld's
      background loop, which wakes about once a second, runs it only `batch_sched_delay` seconds
      (SchedulerParameters, default 3) after its last pass, which ran at the submit
      (controller.c, `_slurmctld_background`); backfill (`bf_interval`, 5 s on the lab) may come
      first. Measured on the lab (load 7-16): resume to RUNNING took 2.0 to 4.7 s with the
      operator, whose own part (submit to resumed) was 0.9 to 2.2 s; nothing the operator does
      after the resume hastens Slurm's next pass."""
    from harness import (NAMESPACE, Operator, apply, ensure_namespace_and_secret, install_crd, pool_manifest,
                         reset_lab, split_reached, wait)

    lab = lab_env()
    total, cooldown = len(lab.nodes), 2.0
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    op = Operator(lab, "operator-bench-gang.log").start()
    try:
        apply(lab, pool_manifest(lab, "gang", total))
        wait(lambda: split_reached(lab, "gang", total, total), 180, interval=0.05, what=f"{total} Slurm")
        op.stop()  # Slurm alone: its start of a gang job after a resume
        alone = [_slurm_start_after_resume(lab, total) for _ in range(3)]
        slurm_start = max(alone)
        op = Operator(lab, "operator-bench-gang-2.log").start()
        lab.kubectl("scale", "snp", "gang", "-n", NAMESPACE, f"--replicas={total - 3}")
        wait(lambda: split_reached(lab, "gang", total - 3, total), 180, interval=0.05, what="5 Slurm")
        t0 = time.monotonic()
        lab.kubectl("scale", "snp", "gang", "-n", NAMESPACE, f"--replicas={total - 2}")
        wait(lambda: split_reached(lab, "gang", total - 2, total), 120, interval=0.05, what="one node back in Slurm")
        one_move = time.monotonic() - t0
        lab.kubectl("scale", "snp", "gang", "-n", NAMESPACE, f"--replicas={total - 3}")
        wait(lambda: split_reached(lab, "gang", total - 3, total), 120, interval=0.05, what="5 Slurm again")
        apply(lab, pool_manifest(lab, "gang", total - 3, demand={"cooldown": f"{cooldown:.0f}s"}))
        time.sleep(cooldown + 1)  # the cooldown after the last manual change has run out: only its own counts below
        t0 = time.monotonic()
        job = _gang_job(lab, total)
        resumed, took = _until_running(lab, job, t0)
        operator_bound = cooldown + one_move
        print(f"     one move {one_move:.2f} s; Slurm alone, resume to RUNNING: {', '.join(f'{a:.2f}' for a in alone)} s; "
              f"with the operator: resumed {resumed:.2f} s, RUNNING {took:.2f} s after the submit")
        record("gang_job_submit_to_nodes_resumed", resumed, "s", f"< cooldown + one move ({operator_bound:.2f} s)",
               resumed < operator_bound)
        bound = operator_bound + slurm_start
        record("gang_job_submit_to_running", took, "s", f"< cooldown + one move + Slurm's start after a resume ({bound:.2f} s)",
               took < bound)
    finally:
        op.stop()
        reset_lab(lab)


def bench_parking() -> None:
    """Power-save parking (issue 39): 3 nodes parked and lent (`idle~`), then `sbatch -N8
    --exclusive`: Slurm itself picks the parked nodes and asks for them (POWERING_UP); the operator
    gives them back. Figures, timed from the submit:
    - `parked_gang_job_asked_to_registered`: from Slurm's ask (the first POWERING_UP: Slurm chose
      the nodes) until every node of the job is powered and responding (the operator's part: each
      give-back, slurmd `-b` registered), beside one move to Slurm of a lent node (timed first on
      the same lab); `parked_gang_job_submit_to_registered` adds Slurm's scheduling before its ask;
    - `parked_gang_job_submit_to_running`: until the job runs, beside one move plus Slurm's own start
      of a job on nodes that came up: the slower of its start after a resume (timed without the
      operator, as `gang`) and, in this run, Slurm's two shares in which the operator does nothing:
      from the submit to its ask (its scheduler), and from the last node registered to RUNNING. Slurm 22.05 finishes a job's configuring (its nodes powered
      up) only in job_time_limit(), every PERIODIC_TIMEOUT (30 s, controller.c); 26.05's batch
      launch also checks it when its nodes are ready (agent.c): a Slurm fact, not the operator's;
    - `powering_up_to_registered`: the slowest node's time from Slurm's POWERING_UP (first seen,
      polled every 0.05 s) to its slurmd registered, beside the 3 s the operator waits before
      `slurmd -b` (moves.BOOT_AFTER_POWER_UP) plus 2 s for slurmd's start and registration."""
    from harness import (NAMESPACE, Operator, apply, ensure_namespace_and_secret, install_crd, job_state, pool_manifest, reset_lab,
                         slurm_states, split_reached, wait)

    lab = lab_env()
    total, parked = len(lab.nodes), 3

    def lent() -> int:
        return sum("POWERED_DOWN" in s.split("+") and "DRAIN" not in s.split("+") for s in slurm_states(lab).values())

    def scale(slurm: int, lending: int) -> None:
        lab.kubectl("scale", "snp", "park", "-n", NAMESPACE, f"--replicas={slurm}")
        wait(lambda: split_reached(lab, "park", slurm, total) and lent() == lending, 180, interval=0.05, what=f"{slurm} Slurm, {lending} lent")

    install_crd(lab)
    ensure_namespace_and_secret(lab)
    op = Operator(lab, "operator-bench-parking.log").start()
    try:
        apply(lab, pool_manifest(lab, "park", total, slurm={"parking": "PowerSave"}))
        wait(lambda: split_reached(lab, "park", total, total), 180, interval=0.05, what=f"{total} Slurm")
        op.stop()
        alone = max(_slurm_start_after_resume(lab, total) for _ in range(3))
        op = Operator(lab, "operator-bench-parking-2.log").start()
        scale(total - parked, parked)
        t0 = time.monotonic()
        scale(total - parked + 1, parked - 1)  # a lent node (idle~), not one still powering down
        one_move = time.monotonic() - t0
        scale(total - parked, parked)
        t0 = time.monotonic()
        job = _gang_job(lab, total)
        powering: dict[str, float] = {}
        registered: dict[str, float] = {}
        while time.monotonic() < t0 + 300 and job_state(lab, job) not in ("RUNNING", "COMPLETING", "COMPLETED"):
            now = time.monotonic()
            for name, state in slurm_states(lab).items():
                flags = set(state.split("+"))
                if "POWERING_UP" in flags:
                    powering.setdefault(name, now)
                elif name in powering and not flags & {"POWERED_DOWN", "NOT_RESPONDING"}:
                    registered.setdefault(name, now)
            time.sleep(0.05)
        running = time.monotonic()
        took, ready = running - t0, max(registered.values(), default=running) - t0
        asked = min(powering.values(), default=t0) - t0
        slurm_start = max(alone, asked + took - ready)
        up = max((registered[n] - powering[n] for n in registered), default=float("nan"))
        print(f"     one lent node's move {one_move:.2f} s; Slurm alone, resume to RUNNING {alone:.2f} s; POWERING_UP seen on "
              f"{len(powering)}, registered {len(registered)}; all registered {ready:.2f} s, RUNNING {took:.2f} s after the submit")
        record("parked_gang_job_submit_to_registered", ready, "s",
               f"Slurm's ask ({asked:.2f} s after the submit: its scheduler's, not the operator's) + the line below", True)
        record("parked_gang_job_asked_to_registered", ready - asked, "s", f"< one move ({one_move:.2f} s)",
               len(registered) == parked and ready - asked < one_move)
        bound = one_move + slurm_start
        record("parked_gang_job_submit_to_running", took, "s", f"< one move + Slurm's own shares: its ask, its start once the nodes came up ({bound:.2f} s)",
               took < bound)
        record("powering_up_to_registered", up, "s", "< 5 s (3 s before slurmd -b, then its start)", len(registered) == parked and up < 5.0)
    finally:
        op.stop()
        reset_lab(lab)


# A training job that works in steps of a second (its progress file) and, on USR1, saves the step
# it reached and stops working until it is requeued (docs/training-jobs.md); a restart resumes from
# the saved step. Work lost = the steps it did past its last save before it was killed.
TRAIN = """#!/bin/bash
D={dir}; R=${{SLURM_RESTART_COUNT:-0}}; S=0; [ -e "$D/$SLURM_JOB_ID.ckpt" ] && S=$(tail -1 "$D/$SLURM_JOB_ID.ckpt")
saved=0
on_usr1() {{ echo "$S" >> "$D/$SLURM_JOB_ID.ckpt"; saved=1; }}
trap on_usr1 USR1
while true; do
  sleep 1 & wait $!
  [ $saved = 1 ] || {{ S=$((S + 1)); echo "$S" >> "$D/$SLURM_JOB_ID.$R.steps"; }}
done
"""


def bench_drill() -> None:
    """The preemption drill (issue 36) with `drain.onTimeout: Checkpoint`: four 2-node training
    jobs, then an inference surge of 2 pods of 8 GPUs (demand on) takes 2 nodes. Figures:
    - `drill_surge_to_pods_running`: beside demand's cooldown (it acts on a want only that long
      after its last change) + drain.timeout + grace + one move (an idle node's, timed first);
    - `drill_work_lost_per_preempted_job`: the steps (seconds of work) each preempted job did past
      its last checkpoint before the requeue killed it, the largest; target 0 (it checkpoints
      within the grace)."""
    from harness import (NAMESPACE, Operator, apply, ensure_namespace_and_secret, install_crd, job_state, pods_json, pool_manifest,
                         reset_lab, split_reached, wait)
    from test_preemption import surge

    lab = lab_env()
    total, timeout_s, grace_s, cooldown = len(lab.nodes), 5, 20, 2
    d = Path(lab.dir) / "checkpoints"
    d.mkdir(exist_ok=True)
    d.chmod(0o1777)
    for f in d.iterdir():
        f.unlink()
    (d / "train.sh").write_text(TRAIN.format(dir=d))
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    drain = {"timeout": f"{timeout_s}s", "onTimeout": "Checkpoint", "checkpoint": {"signal": "USR1", "grace": f"{grace_s}s"}}
    demand = {"cooldown": f"{cooldown}s", "whenBothWant": "PreferInference", "inference": {"maxNodes": 2}}
    op = Operator(lab, "operator-bench-drill.log").start()
    try:
        apply(lab, pool_manifest(lab, "drill", total, drain=drain))
        wait(lambda: split_reached(lab, "drill", total, total), 180, what=f"{total} Slurm")
        t0 = time.monotonic()  # one idle node's move, for the bound
        lab.kubectl("scale", "snp", "drill", "-n", NAMESPACE, f"--replicas={total - 1}")
        wait(lambda: split_reached(lab, "drill", total - 1, total), 120, interval=0.05, what="one node moved")
        one_move = time.monotonic() - t0
        lab.kubectl("scale", "snp", "drill", "-n", NAMESPACE, f"--replicas={total}")
        wait(lambda: split_reached(lab, "drill", total, total), 120, what=f"{total} Slurm again")
        jobs = [lab.slurm("sbatch", "--parsable", "-p", "gpu", "-N2", "--exclusive", "--time=30", "--requeue", "-o", "/dev/null",
                          str(d / "train.sh")).stdout.strip().split(";")[0] for _ in range(total // 2)]
        wait(lambda: all(job_state(lab, j) == "RUNNING" for j in jobs), 60, what="the training jobs running")
        time.sleep(3)  # some work done
        apply(lab, pool_manifest(lab, "drill", total, drain=drain, demand=demand))
        t0 = time.monotonic()
        apply(lab, surge(2))

        def running() -> int:
            return sum(1 for p in pods_json(lab, NAMESPACE, "app=surge") if p.get("status", {}).get("phase") == "Running")
        wait(lambda: running() == 2, 180, interval=0.1, what="the surge's pods running")
        took = time.monotonic() - t0
        hit = [j for j in jobs if (d / f"{j}.ckpt").exists()]
        lost = []
        for j in hit:
            steps = [int(x) for x in (d / f"{j}.0.steps").read_text().split()]  # its first run's, before the requeue
            saved = int((d / f"{j}.ckpt").read_text().split()[0])
            lost.append(max(steps) - saved)  # steps past the save, before the kill
        bound = cooldown + timeout_s + grace_s + one_move
        print(f"     one move {one_move:.2f} s; surge to pods running {took:.2f} s; jobs checkpointed {len(hit)} of {len(jobs)}; "
              f"steps lost {lost}")
        record("drill_surge_to_pods_running", took, "s", f"< cooldown + drain.timeout + grace + one move ({bound:.2f} s)", took < bound)
        record("drill_work_lost_per_preempted_job", max(lost, default=float("nan")), "s", "0 (each job checkpoints within the grace)",
               bool(lost) and max(lost) == 0)
    finally:
        op.stop()
        reset_lab(lab)


def bench_dra() -> None:
    """A pending DRA pod to Running (issue 40): a pod claiming 8 GPUs (ResourceClaimTemplate of
    DeviceClass gpu.nvidia.com) pinned to inference pool llm, every node in Slurm, demand on.
    Timed from the pod's creation to Running, beside the cooldown, one move to inference (timed
    first on the same lab) and the lab driver's slice publication (LAB_DRA_PUBLISH_DELAY, agent.py)."""
    from harness import (NAMESPACE, Operator, apply, ensure_namespace_and_secret, install_crd, pods_json, pool_manifest,
                         reset_lab, split_reached, wait)

    lab = lab_env()
    total, cooldown, publish = len(lab.nodes), 2.0, float(os.environ.get("LAB_DRA_PUBLISH_DELAY", "2"))
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    op = Operator(lab, "operator-bench-dra.log").start()
    try:
        apply(lab, pool_manifest(lab, "dra", total))
        wait(lambda: split_reached(lab, "dra", total, total), 180, interval=0.05, what=f"{total} Slurm")
        t0 = time.monotonic()
        lab.kubectl("scale", "snp", "dra", "-n", NAMESPACE, f"--replicas={total - 1}")
        wait(lambda: split_reached(lab, "dra", total - 1, total), 120, interval=0.05, what="one node to inference")
        one_move = time.monotonic() - t0
        lab.kubectl("scale", "snp", "dra", "-n", NAMESPACE, f"--replicas={total}")
        wait(lambda: split_reached(lab, "dra", total, total), 120, interval=0.05, what=f"{total} Slurm again")
        apply(lab, pool_manifest(lab, "dra", total, demand={"cooldown": f"{cooldown:.0f}s"}))
        time.sleep(cooldown + 1)  # the cooldown after the last manual change has run out
        apply(lab, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "bench-gpu8", "namespace": NAMESPACE},
                    "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                        "deviceClassName": "gpu.nvidia.com", "count": 8}}]}}}})
        t0 = time.monotonic()
        apply(lab, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bench-dra", "namespace": NAMESPACE},
                    "spec": {"nodeSelector": {"slurmpool.io/inference-pool": "llm"},
                             "tolerations": [{"key": "slurmpool.io/inference", "operator": "Exists"}],
                             "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "bench-gpu8"}],
                             "containers": [{"name": "server", "image": "vllm:latest", "resources": {"claims": [{"name": "gpus"}]}}]}})
        wait(lambda: any(p["metadata"]["name"] == "bench-dra" and p.get("status", {}).get("phase") == "Running"
                         for p in pods_json(lab)), 180, interval=0.1, what="the DRA pod Running")
        took = time.monotonic() - t0
        bound = cooldown + one_move + publish
        print(f"     one move {one_move:.2f} s; the DRA pod Running {took:.2f} s after it was created")
        record("dra_pod_pending_to_running", took, "s",
               f"< cooldown + one move + the driver's slice publication ({bound:.2f} s)", took < bound)
    finally:
        op.stop()
        lab.kubectl("delete", "resourceclaimtemplates,resourceclaims", "--all", "-n", NAMESPACE, "--wait=false", check=False)
        reset_lab(lab)


def bench_oncall() -> None:
    """Issue 38's two timed figures, on the lab (the e2e tests check the behaviour, not the time):
    - `sigterm_leader_to_other_acting`: two replicas; SIGTERM to the Lease holder, until the other
      leads (`slurmpool_leader` 1) and has made a reconcile pass; target 2 s (the Lease is 15 s: a
      handover faster than that is the release's);
    - `deleted_pool_series_gone`: a Degraded pool (Slurm unreachable) deleted, until none of its
      series is left on /metrics; target one pass (0.5 s here: the deletion's watch event removes them)."""
    from harness import NAMESPACE, apply, ensure_namespace_and_secret, install_crd, pool_manifest, reset_lab, split_reached, wait
    from load import counter, free_port, scrape
    from test_faults import delete_lease, two_replicas

    lab = lab_env()
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    ops, ports, lease_ns = two_replicas(lab, "operator-bench-oncall")
    try:
        total = len(lab.nodes)
        apply(lab, pool_manifest(lab, "oncall", total))
        wait(lambda: split_reached(lab, "oncall", total, total), 120, what=f"{total} Slurm with two replicas")

        def leading(port: int) -> bool:
            try:
                return counter(scrape(port), "slurmpool_leader") == 1
            except OSError:
                return False
        holder = wait(lambda: next((n for n, p in ports.items() if leading(p)), None), 60, what="a leader")
        follower = next(name for name in ops if name != holder)
        wait(lambda: "indexes ready" in ops[follower].log_tail(400), 60, what="the follower's watches ready")
        passes = counter(scrape(ports[follower]), "slurmpool_reconcile_total")
        t0 = time.monotonic()
        ops[holder].proc.send_signal(signal.SIGTERM)

        def acting() -> bool:
            now = scrape(ports[follower])
            return counter(now, "slurmpool_leader") == 1 and counter(now, "slurmpool_reconcile_total") > passes
        wait(acting, 30, interval=0.02, what="the follower leading and reconciling")
        took = time.monotonic() - t0
        record("sigterm_leader_to_other_acting", took, "s", "< 2 s (the Lease is 15 s)", took < 2.0)
        ops[holder].proc.wait(30)

        port, key = ports[follower], f"{NAMESPACE}/gone"
        manifest = pool_manifest(lab, "gone", 0, nodeSelector={"matchLabels": {"slurmpool.io/bench-none": "true"}})
        manifest["spec"]["slurm"]["access"] = {"ssh": {"host": "127.0.0.1", "port": free_port(), "user": lab.ssh_user,
                                                        "secretRef": {"name": "slurm-ssh"}}}

        def series() -> dict:
            return {k: v for k, v in scrape(port).items() if dict(k[1]).get("pool") == key}
        apply(lab, manifest)
        wait(lambda: series().get(("slurmpool_pool_condition", (("pool", key), ("type", "Degraded")))) == 1, 60,
             what="the pool Degraded in /metrics")
        t0 = time.monotonic()
        lab.kubectl("delete", "snp", "gone", "-n", NAMESPACE, "--wait=false")
        wait(lambda: not series(), 30, interval=0.02, what="every series of the deleted pool gone")
        took = time.monotonic() - t0
        record("deleted_pool_series_gone", took, "s", "< one pass (0.5 s)", took < 0.5)
    finally:
        for op in ops.values():
            op.stop()
        delete_lease(lab, lease_ns)
        reset_lab(lab)


def _gang_job(lab, total: int) -> str:
    return lab.slurm("sbatch", "--parsable", "-p", "gpu", f"-N{total}", "--exclusive", "--gres=gpu:8", "--time=2",
                     "-o", "/dev/null", "--wrap", "sleep 3").stdout.strip().split(";")[0]


def _until_running(lab, job: str, t0: float) -> tuple[float, float]:
    """Seconds from t0 until every node of the partition is usable, and until the job runs."""
    from harness import job_state

    resumed = None
    while time.monotonic() < t0 + 300:
        if resumed is None and _all_usable(lab):
            resumed = time.monotonic() - t0
        if job_state(lab, job) in ("RUNNING", "COMPLETING", "COMPLETED"):
            took = time.monotonic() - t0
            return (took if resumed is None else resumed), took  # resumed and started between two looks
        time.sleep(0.05)
    raise RuntimeError(f"the gang job {job} did not start in 300 s")


def _slurm_start_after_resume(lab, total: int) -> float:
    """Slurm alone (no operator running): 3 nodes drained by hand, the gang job submitted, the
    nodes resumed a second later (about when the operator resumes them): resume to RUNNING."""
    from harness import job_state, wait

    names = ",".join(lab.slurm_name(n) for n in lab.nodes[:3])
    lab.slurm("scontrol", "update", f"NodeName={names}", "State=DRAIN", "Reason=bench: Slurm alone")
    job = _gang_job(lab, total)
    time.sleep(1)
    t0 = time.monotonic()
    lab.slurm("scontrol", "update", f"NodeName={names}", "State=RESUME")
    _, took = _until_running(lab, job, t0)
    wait(lambda: job_state(lab, job) in ("COMPLETED", "GONE"), 60, interval=0.2, what=f"job {job} done")
    return took


def _all_usable(lab) -> bool:
    """Every node of the partition is one Slurm can start jobs on (idle, allocated, mixed)."""
    out = lab.slurm("sinfo", "-h", "-N", "-p", "gpu", "-o", "%T").stdout.split()
    return bool(out) and all(s.rstrip("*~#$@+!%^-") in ("idle", "allocated", "mixed", "completing") for s in out)


def bench_handover() -> None:
    """The planned handover (issue 24) on a busy partition across a window edge: all 8 nodes in
    Slurm, `drain: {timeout: 20s, onTimeout: Requeue}`, `handover.leadTime: 10m`; one job a node
    with staggered ends (sleeps of 20-90 s under limits of 2-4 min); then a window that takes 3
    nodes to inference at a whole minute 2-3 min ahead; once the reservation exists, short jobs
    (`--time=1`, 20 s) are kept pending until a minute before the edge, so Slurm can fill the
    reserved nodes with jobs that end by the edge. Every job record is read once a second while
    it lives (scontrol forgets finished jobs after MinJobAge). Figures:
    - `handover_edge_to_inference`: the edge (the window's start) until the pool's status shows
      the split reached (3 nodes Ready in inference, no move), target < 3 s;
    - `handover_jobs_lost`: jobs requeued or cancelled (Restarts > 0, or an end state other than
      COMPLETED), and the operator's JobsRequeued/JobsCancelled Events, target 0;
    - `handover_idle_node_seconds`: on the reserved nodes, seconds between the reservation's
      creation (first seen by a 0.25 s poll) and the edge with no job running. The lower bound
      the job mix allows: a node idles at least from the last end a job could have had there
      until the edge. A job running on it at the reservation's creation ends when it ends; a job
      of limit L and run time R that could start there (the bench's own, still there after the
      creation, L from its submit ending by the edge) ends at the latest at edge - L + R. Bound = sum over reserved nodes of edge - max(creation, those
      ends). Slack: each job start on a reserved node may wait for Slurm's next scheduling pass
      (at most bf_interval, 5 s on the lab), so the target is bound + bf_interval x the jobs
      started on them."""
    import threading

    from harness import (NAMESPACE, Operator, apply, ensure_namespace_and_secret, events, install_crd, now_rfc3339,
                         pool_manifest, pool_status, reset_lab, split_reached, wait)

    lab = lab_env()
    total, leaving, pool = len(lab.nodes), 3, "bench-handover"
    reservation = f"slurmpool-{NAMESPACE}-{pool}"
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    since = now_rfc3339()
    op = Operator(lab, "operator-bench-handover.log").start()
    records: dict[str, dict[str, str]] = {}
    ours: set[str] = set()  # the bench's own jobs (scontrol still lists a previous run's for MinJobAge)
    stop = threading.Event()

    def watch_jobs() -> None:  # every job's last record, kept past MinJobAge
        while not stop.is_set():
            for line in lab.slurm("scontrol", "-o", "show", "job", check=False).stdout.splitlines():
                fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
                if "JobId" in fields:
                    records[fields["JobId"]] = fields
            stop.wait(1)

    def submit(seconds: int, minutes: int, name: str) -> str:
        job = lab.slurm("sbatch", "--parsable", "-p", "gpu", "-N1", "--exclusive", "--gres=gpu:8", f"--time={minutes}", "-J", name,
                        "-o", "/dev/null", "--wrap", f"sleep {seconds}").stdout.strip().split(";")[0]
        ours.add(job)
        return job

    watcher = threading.Thread(target=watch_jobs, daemon=True)
    try:
        apply(lab, pool_manifest(lab, pool, total, drain={"timeout": "20s", "onTimeout": "Requeue"}))
        wait(lambda: split_reached(lab, pool, total, total), 240, what=f"all {total} nodes in Slurm")
        watcher.start()
        for i in range(total):
            submit(20 + 10 * i, 2 + i % 3, "busy")
        edge = (datetime.now(timezone.utc) + timedelta(minutes=3)).replace(second=0, microsecond=0)
        if edge - datetime.now(timezone.utc) < timedelta(seconds=150):
            edge += timedelta(minutes=1)
        window = {"name": "serve", "cron": f"{edge.minute} {edge.hour} * * *", "duration": "10m", "slurmNodes": total - leaving}
        lab.kubectl("patch", "snp", pool, "-n", NAMESPACE, "--type=merge", "-p",
                    json.dumps({"spec": {"schedule": [window], "handover": {"leadTime": "10m"}}}))
        res = wait(lambda: _reservation(lab, reservation), 90, interval=0.25, what=f"reservation {reservation}")
        created = datetime.now(timezone.utc)
        reserved = lab.slurm("scontrol", "show", "hostnames", res["Nodes"]).stdout.split()
        # Short jobs stay pending until a minute before the edge (the latest a 1-minute job can start and end by it).
        while datetime.now(timezone.utc) < edge - timedelta(seconds=60):
            pending = lab.slurm("squeue", "-h", "-t", "PD", "-n", "filler", "-o", "%i").stdout.split()
            if len(pending) < 2:
                submit(20, 1, "filler")
            time.sleep(1)
        # Fillers still pending start on the nodes that stay (their limit no longer fits the reserved ones).
        wait(lambda: datetime.now(timezone.utc) >= edge, 120, interval=0.01, what="the edge")
        wait(lambda: split_reached(lab, pool, total - leaving, total), 300, interval=0.05, what=f"{leaving} nodes in inference")
        took = (datetime.now(timezone.utc) - edge).total_seconds()
        record("handover_edge_to_inference", took, "s", "< 3 s", took < 3)
        wait(lambda: not lab.slurm("squeue", "-h", "-o", "%i").stdout.strip(), 300, what="every job ended")
        time.sleep(2)  # one more look of the watcher at the last jobs' records
        stop.set()
        watcher.join(10)
        jobs = {j: r for j, r in records.items() if j in ours}
        missing = ours - set(jobs)
        if missing:
            raise RuntimeError(f"no record of jobs {sorted(missing)}")
        lost = [j for j, r in jobs.items() if int(r.get("Restarts", "0")) > 0 or r.get("JobState") != "COMPLETED"]
        lost_events = len(events(lab, "JobsRequeued", since)) + len(events(lab, "JobsCancelled", since))
        record("handover_jobs_lost", len(lost) + lost_events, "jobs", f"== 0 (of {len(jobs)} jobs)", not lost and not lost_events)
        if lost:
            print("     lost: " + ", ".join(f"{j} {jobs[j].get('JobState')} restarts={jobs[j].get('Restarts')}" for j in lost))
        idle, bound, starts = _idle_and_bound(jobs.values(), reserved, created, edge)
        slack = 5 * starts
        record("handover_idle_node_seconds", idle, "node-s", f"<= bound {bound:.0f} + {slack} (bf_interval x {starts} starts)",
               idle <= bound + slack)
        print(f"     reservation on {', '.join(reserved)} created {(edge - created).total_seconds():.0f} s before the edge; "
              f"status.handover was {pool_status(lab, pool).get('handover') or 'cleared'}")
    finally:
        stop.set()
        op.stop()
        lab.slurm("scancel", "-p", "gpu", check=False)
        lab.slurm("scontrol", "delete", f"ReservationName={reservation}", check=False)
        reset_lab(lab)


def _reservation(lab, name: str) -> dict[str, str] | None:
    out = lab.slurm("scontrol", "-o", "show", "reservation", name, check=False).stdout
    line = next((ln for ln in out.splitlines() if ln.startswith(f"ReservationName={name} ")), None)
    return None if line is None else dict(w.split("=", 1) for w in line.split() if "=" in w)


def _slurm_time(text: str):
    """scontrol's local time (the lab runs on this machine) as an aware UTC time; None if unknown."""
    try:
        return datetime.fromisoformat(text).astimezone(timezone.utc)
    except ValueError:
        return None


def _limit_seconds(text: str) -> float | None:
    """A TimeLimit as scontrol prints it ([D-]HH:MM:SS or MM:SS); None for UNLIMITED."""
    if not text or text in ("UNLIMITED", "Partition_Limit"):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return (int(days) if days else 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def _idle_and_bound(jobs, reserved: list[str], created, edge) -> tuple[float, float, int]:
    """Idle node-seconds on the reserved nodes between `created` and `edge`, the lower bound the
    jobs allow (bench_handover's docstring), and the number of jobs started on them in between."""
    idle = bound = 0.0
    starts = 0
    runs = []
    for r in jobs:
        start, end = _slurm_time(r.get("StartTime", "")), _slurm_time(r.get("EndTime", ""))
        if start is None or end is None or start >= end:
            continue
        nodes = _hostnames(r.get("NodeList", ""))
        runs.append((nodes, start, end, _limit_seconds(r.get("TimeLimit", "")), _slurm_time(r.get("SubmitTime", ""))))
    for node in reserved:
        busy = sorted((max(s, created), min(e, edge)) for n, s, e, _, _ in runs if node in n and s < edge and e > created)
        covered, reach = 0.0, created
        for s, e in busy:
            if e > reach:
                covered += (e - max(s, reach)).total_seconds()
                reach = e
        idle += (edge - created).total_seconds() - covered
        starts += sum(1 for n, s, _, _, _ in runs if node in n and created <= s < edge)
        latest = created
        for n, s, e, limit, submitted in runs:
            if node in n and s <= created < e:  # running there when the reservation came
                latest = max(latest, e)
            elif limit is not None and submitted is not None and e > created and submitted + timedelta(seconds=limit) <= edge:
                latest = max(latest, edge - timedelta(seconds=limit) + (e - s))  # its latest start there, plus its run time
        bound += max(0.0, (edge - min(latest, edge)).total_seconds())
    return idle, bound, starts


def _hostnames(hostlist: str) -> set[str]:
    """gpu[01-03,05],gpu07 -> names (the lab's node names: a prefix and two digits)."""
    import re

    names = set()
    for prefix, body, single in re.findall(r"([A-Za-z_-]+)\[([^\]]+)\]|([A-Za-z_-]+\d+)", hostlist):
        if single:
            names.add(single)
            continue
        for part in body.split(","):
            lo, _, hi = part.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                names.add(f"{prefix}{i:0{len(lo)}d}")
    return names


# The Slurm matrix of the idle moves (issue 13): row name -> the lab's settings and LAB_ACCESS.
# Rows that share a lab (24.11 over SSH and REST) run one after the other on one lab-up.
MATRIX_ROWS = {
    "22.05-ssh": {"LAB_SLURM": "22.05", "LAB_ACCESS": "ssh"},
    "24.11-ssh": {"LAB_SLURM": "24.11", "LAB_ACCESS": "ssh"},
    "24.11-rest": {"LAB_SLURM": "24.11", "LAB_ACCESS": "rest"},
    "24.11-dynamic-ssh": {"LAB_SLURM": "24.11", "LAB_SLURM_NODES": "dynamic", "LAB_ACCESS": "ssh"},
    "26.05-ssh": {"LAB_SLURM": "26.05", "LAB_ACCESS": "ssh"},
    "26.05-rest": {"LAB_SLURM": "26.05", "LAB_ACCESS": "rest"},
    "26.05-dynamic-ssh": {"LAB_SLURM": "26.05", "LAB_SLURM_NODES": "dynamic", "LAB_ACCESS": "ssh"},
    "26.05-dynamic-rest": {"LAB_SLURM": "26.05", "LAB_SLURM_NODES": "dynamic", "LAB_ACCESS": "rest"},
}
LAB_SETTINGS = ("LAB_SLURM", "LAB_SLURM_NODES", "LAB_SLURMDBD", "LAB_ACCESS")


def bench_matrix(rows: list[str]) -> None:
    """The idle moves on each row: the lab is restarted with the row's settings (up.sh restarts a
    lab whose settings differ, as e2e/matrix.sh's pytest sessions do) and stopped at the end."""
    from conftest import Lab

    lab_dir = Path(os.environ.get("LAB_DIR", REPO / ".lab"))
    saved = {k: os.environ.get(k) for k in LAB_SETTINGS}
    try:
        for row in rows:
            settings = MATRIX_ROWS[row]
            for k in LAB_SETTINGS:
                os.environ.pop(k, None)
            os.environ.update(settings)
            t0 = time.monotonic()
            try:
                subprocess.run([str(REPO / "e2e/lab/up.sh")], env={**os.environ, "LAB_DIR": str(lab_dir)}, check=True,
                               stdout=subprocess.DEVNULL)
                print(f"     {row}: lab up in {time.monotonic() - t0:.0f} s (load average {os.getloadavg()[0]:.2f})")
                bench_idle_moves(Lab.from_env_file(lab_dir / "env"), row)
            except Exception as err:  # one row that cannot run does not hide the others
                record(f"move_idle_nodes_{row}_failed", 1, "row", "runs", False)
                print(f"     {row}: {type(err).__name__}: {err}")
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
        subprocess.run([str(REPO / "e2e/lab/down.sh")], env={**os.environ, "LAB_DIR": str(lab_dir)}, stdout=subprocess.DEVNULL)


def bench_load(nodes: int = 500, pools: int = 20) -> None:
    """20 pools of 25 simulated nodes settle at 5 Slurm nodes each; then half go to 0 and half to
    10 at once (100 moves, 50 each way, real slurmd for the 100 Slurm nodes)."""
    import load
    from conftest import Lab

    lab_dir = Path(os.environ.get("LAB_DIR", REPO / ".lab"))
    before = Lab.from_env_file(lab_dir / "env") if (lab_dir / "env").exists() else None
    env = {**os.environ, "LAB_DIR": str(lab_dir), "LAB_SIM_NODES": str(nodes)}
    subprocess.run([str(REPO / "e2e/lab/up.sh")], env=env, check=True)  # restarts it if the counts differ
    lab = Lab.from_env_file(lab_dir / "env")
    chosen = load.sim_pools(lab, count=pools, namespaces=4)
    # On 2 shared cores one run's tail moves by a third from run to run (what else the lab does
    # meanwhile): every figure is the median of BENCH_LOAD_RUNS runs, each run printed.
    runs = []
    try:
        for i in range(int(os.environ.get("BENCH_LOAD_RUNS", "3"))):
            try:
                runs.append(load.run(lab, chosen, 5, lambda i: 0 if i % 2 == 0 else 10,
                                     log_name=f"operator-bench-load-{i + 1}.log").figures)
            finally:
                load.cleanup(lab, chosen)
            f = runs[-1]
            print(f"     run {i + 1}: pass p99 {f['pool_reconcile_p99_s']:.3f} s, first move max {f['first_move_max_s']:.3f} s, "
                  f"settled {f['scale_all_settled_s']:.1f} s, machine busy {f['machine_busy']:.2f}")
    finally:
        if before is not None and len(before.sim_nodes) != nodes:  # leave the lab as found
            subprocess.run([str(REPO / "e2e/lab/up.sh")], env={**env, "LAB_SIM_NODES": str(len(before.sim_nodes))}, check=True)
    fig = {k: statistics.median(r[k] for r in runs) for k, v in runs[0].items() if isinstance(v, (int, float))}
    for k in ("reconcile_errors", "action_errors", "events_dropped"):  # any run's count, not a median
        fig[k] = max(r[k] for r in runs)
    tag = f"load_{nodes}_nodes_{pools}_pools"
    print("     where a pass's time went (p99): " + ", ".join(f"{k[6:-6]} {v:.3f} s" for k, v in fig.items() if k.startswith("stage_"))
          + f"; event loop lag p50 {fig['loop_lag_p50_s']:.3f} s, p99 {fig['loop_lag_p99_s']:.3f} s")
    record(f"{tag}_pool_reconcile_p50", fig["pool_reconcile_p50_s"], "s", "< 1 s (one pool's pass)", fig["pool_reconcile_p50_s"] < 1)
    record(f"{tag}_pool_reconcile_p99", fig["pool_reconcile_p99_s"], "s", "< 1 s", fig["pool_reconcile_p99_s"] < 1)
    record(f"{tag}_spec_to_observed_max", fig["observed_generation_max_s"], "s", "< 2 s", fig["observed_generation_max_s"] < 2)
    record(f"{tag}_spec_to_first_move_max", fig["first_move_max_s"], "s", "< 2 s", fig["first_move_max_s"] < 2)
    record(f"{tag}_100_moves_settled", fig["scale_all_settled_s"], "s", "< 120 s", fig["scale_all_settled_s"] < 120)
    record(f"{tag}_adoption_settled", fig["adopt_settle_max_s"], "s", "< 300 s", fig["adopt_settle_max_s"] < 300)
    record(f"{tag}_operator_rss", fig["operator_rss_mib"], "MiB", "< 300 MiB", fig["operator_rss_mib"] < 300)
    record(f"{tag}_errors", fig["reconcile_errors"] + fig["action_errors"], "errors", "== 0",
           fig["reconcile_errors"] + fig["action_errors"] == 0)
    record(f"{tag}_events_dropped", fig["events_dropped"], "Events", "== 0", fig["events_dropped"] == 0)


def bench_memory(lab=None, count: int = 5000) -> None:
    """RSS of an operator watching 5,000 extra Nodes (and a pool selecting them, paused)."""
    lab = lab or lab_env()
    from harness import NAMESPACE, Operator, apply, ensure_namespace_and_secret, install_crd, pool_manifest

    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(lab.kubeconfig)))
    names = [f"bench-{i:05d}" for i in range(count)]

    def create(chunk):
        for name in chunk:
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"slurmpool.io/bench": "true"}},
                    "status": {"capacity": {"nvidia.com/gpu": "8"}}}
            try:
                api.create_node(body)
            except client.exceptions.ApiException as err:
                if err.status != 409:
                    raise

    from concurrent.futures import ThreadPoolExecutor

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, [names[i::8] for i in range(8)]))
    print(f"     created {count} nodes in {time.monotonic() - t0:.1f} s")
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    pool_body = pool_manifest(lab, "bench-mem", 0, nodeSelector={"matchLabels": {"slurmpool.io/bench": "true"}}, paused=True)
    apply(lab, pool_body)
    log_from = op_log.stat().st_size if (op_log := Path(lab.dir) / "log" / "operator-bench-mem.log").exists() else 0
    op = Operator(lab, "operator-bench-mem.log").start()
    try:
        # Indexes filled (kopf's and the Node watch's: the log says so), then a few reconcile
        # passes over 5,000 nodes. Before, 20 s after the start read a process still indexing.
        t0 = time.monotonic()
        while "indexes ready" not in op_log.read_text(errors="replace")[log_from:] and time.monotonic() - t0 < 300:
            time.sleep(0.5)
        print(f"     indexes ready after {time.monotonic() - t0:.1f} s")
        time.sleep(10)
        rss = _rss_mib(op.proc.pid)
        record("operator_rss_5000_nodes", rss, "MiB", "< 130 MiB", rss < 130)
    finally:
        op.stop()
        lab.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=60s", check=False)
        lab.kubectl("delete", "nodes", "-l", "slurmpool.io/bench=true", "--wait=false", timeout=300, check=False)


def _create_all(create, bodies: list[dict], threads: int = 16) -> float:
    """Create every body (409: already there), `threads` at once; returns the seconds it took."""
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client

    def run(chunk: list[dict]) -> None:
        for body in chunk:
            try:
                create(body, _preload_content=False)
            except client.exceptions.ApiException as err:
                if err.status != 409:
                    raise

    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(run, [bodies[i::threads] for i in range(threads)]))
    return time.monotonic() - t0


def _lab_pid(lab, name: str) -> int | None:
    """The PID of the lab's daemon `name` (run/NAME.pid, as up.sh wrote it), None if not running."""
    try:
        pid = int((Path(lab.dir) / "run" / f"{name}.pid").read_text().split()[0])
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError, IndexError):
        return None


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (every thread), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _settle(lab, names=("kube-apiserver", "etcd", "kube-scheduler"), quiet: float = 0.15, window: float = 3.0,
            timeout: float = 180.0) -> tuple[float, float]:
    """Wait until the lab's control plane has taken in what was just written: until `names`
    together use under `quiet` of a core over a whole `window`. Returns (seconds waited, the last
    window's share of a core); gives up after `timeout` (the figure then says so by its load)."""
    pids = [pid for name in names if (pid := _lab_pid(lab, name))]
    t0 = time.monotonic()
    share = math.inf
    while time.monotonic() - t0 < timeout:
        before, w0 = sum(_cpu_seconds(p) for p in pids), time.monotonic()
        time.sleep(window)
        share = (sum(_cpu_seconds(p) for p in pids) - before) / (time.monotonic() - w0)
        if share < quiet:
            break
    return time.monotonic() - t0, share


class _Paused:
    """SIGSTOP one of the lab's daemons (by its PID file) for a while, SIGCONT on the way out."""

    def __init__(self, lab, name: str):
        self.name, self.pid = name, _lab_pid(lab, name)

    def __enter__(self):
        if self.pid:
            os.kill(self.pid, signal.SIGSTOP)
        return self

    def __exit__(self, *exc):
        if self.pid:
            os.kill(self.pid, signal.SIGCONT)


def bench_plugin(lab=None, node_count: int = 5000, pods_per_node: int = 10, runs: int = 3) -> None:
    """`kubectl slurmpool status` (the lab's kubectl, the plugin on PATH) on a pool of 5,000 Nodes
    carrying 50,000 pods, all in the lab's apiserver: wall time and peak RSS of the process
    (kubectl execs the plugin in place), the median and the largest of `runs` runs; then `plan` once.

    Measured on a settled control plane, as the on-call meets one: a real cluster's apiserver is
    not digesting 55,000 objects made a minute ago. So (1) the pods' owner is a ReplicaSet that
    exists (replicas 0, a selector none of them matches: its controller leaves them alone); before,
    it did not, and the garbage collector deleted the 50,000 pods at the controller-manager's
    20 requests/s throughout the run (and for 40 minutes after). (2) The lab's
    kube-controller-manager is paused (SIGSTOP) from before the first Node is made until the last
    pod is gone: 5,000 Nodes without a kubelet would have its node lifecycle controller mark each
    Unknown and taint it twice (15,000 writes at 20/s, from 50 s after they appear, through the
    measurement), and walk all 5,000 every second (node-monitor-period=1s); a real cluster's Nodes
    are Ready and heartbeat by their Leases. The plugin reads the pool, its Nodes and their pods
    from the apiserver and nothing any controller writes for it. (3) Then it waits until the
    apiserver, etcd, the scheduler and the agent are quiet (under 0.15 of a core over 3 s), and
    says how long that took. Nothing else is changed: same objects, same targets."""
    lab = lab or lab_env()
    from harness import apply, install_crd, pool_manifest

    from kubernetes import client, config

    api_client = config.new_client_from_config(str(lab.kubeconfig))
    api, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    # A namespace of this run's own: an earlier run's may still be terminating.
    label, namespace = "slurmpool.io/bench-plugin", f"bench-plugin-{os.getpid()}"
    names = [f"bp-{i:05d}" for i in range(node_count)]
    published = json.dumps({"state": "MIXED", "jobs": [{"id": "4242", "name": "train", "user": "alice", "state": "RUNNING"}]})
    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": n, "labels": {label: "true"},
                           "annotations": {ANN_PLACEMENT: SLURM if i % 2 else "inference:llm", ANN_SLURM: published}},
              "status": {"capacity": {"nvidia.com/gpu": "8"}}} for i, n in enumerate(names)]
    # The namespace, its default ServiceAccount (the controller-manager makes it: before the pause)
    # and the pods' owner first.
    lab.kubectl("create", "namespace", namespace, check=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            api.read_namespaced_service_account("default", namespace, _preload_content=False)
            break
        except client.exceptions.ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    owner = apps.create_namespaced_replica_set(namespace, {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "llm"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"slurmpool.io/bench-owner": "none"}},
                 "template": {"metadata": {"labels": {"slurmpool.io/bench-owner": "none"}},
                              "spec": {"containers": [{"name": "server", "image": "vllm:latest"}]}}}})
    paused = _Paused(lab, "kube-controller-manager")
    settle_names = ("kube-apiserver", "etcd", "kube-scheduler", "agent")
    with paused:
        waited, share = _settle(lab, settle_names)
        print(f"     kube-controller-manager paused (pid {paused.pid}); control plane quiet after {waited:.1f} s ({share:.2f} of a core)")
        try:
            print(f"     created {node_count} nodes in {_create_all(api.create_node, nodes):.1f} s")
            # Bound to Nodes with no kubelet: they stay Pending. Tolerating everything keeps them
            # off any taint's eviction.
            pods = [{"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"llm-{n}-{k}", "namespace": namespace, "labels": {"app": "llm"},
                                  "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm", "uid": owner.metadata.uid}]},
                     "spec": {"nodeName": n, "tolerations": [{"operator": "Exists"}],
                              "containers": [{"name": "server", "image": "vllm:latest", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
                    for n in names for k in range(pods_per_node)]
            seconds = _create_all(lambda body, **kw: api.create_namespaced_pod(namespace, body, **kw), pods)
            print(f"     created {len(pods)} pods in {seconds:.1f} s")
            install_crd(lab)
            pool = pool_manifest(lab, "bench-plugin", node_count // 2, namespace=namespace, paused=True)
            pool["spec"]["nodeSelector"] = {"matchLabels": {label: "true"}}  # replaced: overrides would merge with the lab's label
            apply(lab, pool)
            waited, share = _settle(lab, settle_names)
            print(f"     control plane settled {waited:.1f} s after the last write ({share:.2f} of a core; load {os.getloadavg()[0]:.1f})")
            _measure_plugin(lab, namespace, node_count, runs)
        finally:
            # The pods with no grace (no kubelet would ever confirm a graceful delete) and the Nodes,
            # each kind in as few requests as the apiserver takes (one deletes what it can in its
            # 60 s; 5,000 requests of a node's pods each took minutes on a loaded machine): the next
            # run starts on a clean apiserver.
            t0 = time.monotonic()
            _delete_collection(lambda: api.delete_collection_namespaced_pod(namespace, grace_period_seconds=0, _preload_content=False,
                                                                            _request_timeout=120),
                               lambda: api.list_namespaced_pod(namespace, limit=1, _preload_content=False))
            _delete_collection(lambda: api.delete_collection_node(label_selector=f"{label}=true", _preload_content=False, _request_timeout=120),
                               lambda: api.list_node(label_selector=f"{label}=true", limit=1, _preload_content=False))
            lab.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
            print(f"     deleted the pods and Nodes in {time.monotonic() - t0:.1f} s")


def _delete_collection(delete, left, tries: int = 20) -> None:
    """`delete()` (a deletecollection) again until `left()` (a list of at most one) is empty."""
    from urllib3.exceptions import HTTPError

    from kubernetes import client

    for _ in range(tries):
        try:
            delete()
        except (client.exceptions.ApiException, HTTPError) as err:  # a timeout: what it deleted meanwhile stays deleted
            print(f"     deletecollection: {str(err).splitlines()[0][:120]}; again")
        if not json.loads(left().data).get("items"):
            return


def _measure_plugin(lab, namespace: str, node_count: int, runs: int) -> None:
    env = {**lab.env, "PATH": f"{Path(sys.executable).parent}:{lab.env['PATH']}", "COLUMNS": "120"}
    apiserver = _lab_pid(lab, "kube-apiserver")
    walls, peaks = [], []
    for _ in range(runs):
        run = _run_plugin(lab, env, apiserver, "status", "bench-plugin", "-n", namespace)
        rows = sum(1 for line in run.stdout.splitlines() if line.startswith("bp-"))
        if rows != node_count:
            raise RuntimeError(f"status showed {rows} of {node_count} nodes")
        walls.append(run.wall)
        peaks.append(run.rss)
        print(f"     run: {run.describe()}")
    wall, peak = statistics.median(walls), max(peaks)
    record("plugin_status_5000_nodes_50000_pods_seconds", wall, "s", "< 2 s", wall < 2)
    record("plugin_status_5000_nodes_50000_pods_rss", peak, "MiB", "< 150 MiB", peak < 150)
    # `plan` on the same pool: pods, what each needs of a node where a move needs it, and planner
    # passes; paused, so nothing starts: the figure is the read. Once, as the on-call runs it before a change.
    run = _run_plugin(lab, env, apiserver, "plan", "bench-plugin", "-n", namespace, "--slurm-nodes", str(node_count // 4))
    if "Plan for" not in run.stdout:
        raise RuntimeError(f"kubectl slurmpool plan printed no plan: {run.stdout[-500:]}")
    print(f"     plan: {run.describe()}")
    record("plugin_plan_5000_nodes_50000_pods_seconds", run.wall, "s", "< 5 s", run.wall < 5)
    record("plugin_plan_5000_nodes_50000_pods_rss", run.rss, "MiB", "< 150 MiB", run.rss < 150)


@dataclass
class _PluginRun:
    wall: float  # seconds
    rss: float  # MiB, the peak (kubectl execs the plugin in place)
    user: float
    system: float
    served: float  # the apiserver's CPU seconds meanwhile
    stdout: str

    def describe(self) -> str:
        # Its CPU time (user+sys, every thread): what the wall time comes down to on a quiet machine,
        # but for the apiserver's share (2 shared cores: the wall time also waits for other processes).
        return (f"{self.wall:.2f} s, peak RSS {self.rss:.0f} MiB, CPU {self.user + self.system:.2f} s (user {self.user:.2f}, "
                f"sys {self.system:.2f}), the apiserver's CPU meanwhile {self.served:.2f} s, load {os.getloadavg()[0]:.1f}")


def _run_plugin(lab, env: dict, apiserver: int, *args: str) -> _PluginRun:
    """`kubectl slurmpool ARGS` under /usr/bin/time; RuntimeError if it fails."""
    t0, served = time.monotonic(), _cpu_seconds(apiserver)
    out = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", str(lab.bin_dir / "kubectl"), "slurmpool", *args],
                         env=env, capture_output=True, text=True, timeout=600)
    wall, served = time.monotonic() - t0, _cpu_seconds(apiserver) - served
    if out.returncode != 0:
        raise RuntimeError(f"kubectl slurmpool {args[0]} failed: {out.stderr[-2000:]}")
    rss, user, system = out.stderr.strip().splitlines()[-1].split()
    return _PluginRun(wall, int(rss) / 1024, float(user), float(system), served, out.stdout)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


PARTS = ("planner", "calls", "fragmentation", "health", "moves", "gang", "parking", "drill", "dra", "handover", "oncall", "memory",
         "plugin", "load", "restjobs", "demand")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-lab", action="store_true", help="skip the figures that need the lab")
    parser.add_argument("--no-load", action="store_true", help="skip the load figures (500 simulated nodes)")
    parser.add_argument("--only", default=os.environ.get("BENCH_ONLY", ""), help=f"comma-separated parts of {', '.join(PARTS)}")
    parser.add_argument("--matrix", action="store_true",
                        help="also time the idle moves on each Slurm version and access path (restarts the lab per row; BENCH_MATRIX=1)")
    parser.add_argument("--matrix-only", nargs="*", metavar="ROW",
                        help="only the matrix's idle moves (on the rows named, or all); merged into --out")
    parser.add_argument("--out", default=str(REPO / "bench-results.json"))
    args = parser.parse_args()
    only = {p.strip() for p in args.only.split(",") if p.strip()} or set(PARTS)
    if only - set(PARTS):
        parser.error(f"unknown part(s) {', '.join(sorted(only - set(PARTS)))}; known: {', '.join(PARTS)}")
    if args.no_lab:
        only -= {"moves", "gang", "parking", "drill", "dra", "handover", "oncall", "memory", "plugin", "load"}
    if args.no_load:
        only.discard("load")
    t0 = time.monotonic()
    unknown = set(args.matrix_only or ()) - set(MATRIX_ROWS)
    if unknown:
        parser.error(f"unknown matrix rows {sorted(unknown)}; rows: {', '.join(MATRIX_ROWS)}")
    if args.matrix_only is not None:
        bench_matrix(args.matrix_only or list(MATRIX_ROWS))
        out = Path(args.out)
        # Keep the other figures of the last full run: this only adds or replaces the matrix's.
        RESULTS.update({**(json.loads(out.read_text()) if out.exists() else {}), **RESULTS})
    else:
        for part, run in (("planner", bench_planner), ("calls", bench_calls), ("fragmentation", bench_fragmentation),
                          ("health", bench_health_fragmentation), ("moves", bench_lab), ("gang", bench_gang), ("parking", bench_parking),
                          ("drill", bench_drill), ("dra", bench_dra),
                          ("handover", bench_handover), ("oncall", bench_oncall),
                          ("memory", bench_memory),
                          ("plugin", bench_plugin), ("load", bench_load), ("restjobs", bench_rest_jobs),
                          ("demand", bench_demand_round)):
            if part in only:
                run()
        if not args.no_lab and (args.matrix or os.environ.get("BENCH_MATRIX") == "1"):
            bench_matrix(list(MATRIX_ROWS))
    Path(args.out).write_text(json.dumps(RESULTS, indent=2) + "\n")
    missed = [k for k, v in RESULTS.items() if not v["ok"]]
    print(f"\n{len(RESULTS) - len(missed)}/{len(RESULTS)} figures meet their targets in {time.monotonic() - t0:.0f} s; wrote {args.out}")
    if missed:
        print("missed: " + ", ".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
