"""Issue 4 on the real lab: who decides the split (manual, schedule, demand) and the on-call's
kubectl plugin. Real time, real kubectl (the lab's binary, the plugin found on PATH), real
Slurm jobs and real unschedulable pods. Tests run in order on one pool over the 8 nodes."""

from __future__ import annotations

import json
import math
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml
from kubernetes.client.rest import ApiException

from harness import (
    install_crd,
    NAMESPACE,
    Operator,
    apply,
    ensure_namespace_and_secret,
    events_json,
    get_json,
    node_json,
    node_placements,
    pool_json,
    pool_manifest,
    pool_status,
    reset_lab,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "oncall"
TIMINGS: dict[str, float] = {}
VENV_BIN = Path(sys.executable).parent  # where `pip install` put kubectl-slurmpool


@pytest.fixture(scope="module")
def op(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    operator = Operator(lab, "operator-oncall.log").start()
    yield operator
    operator.stop()
    print(operator.log_tail(30))
    reset_lab(lab)
    print("timings:", TIMINGS)


def plugin(lab, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`kubectl slurmpool ...` through the lab's real kubectl, the plugin found on PATH."""
    env = {**lab.env, "PATH": f"{VENV_BIN}:{lab.env['PATH']}", "COLUMNS": "100"}
    p = subprocess.run([str(lab.bin_dir / "kubectl"), "slurmpool", *args], env=env, capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError(f"kubectl slurmpool {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def plugin_json(lab, *args: str) -> dict:
    return json.loads(plugin(lab, *args, "-n", NAMESPACE, "-o", "json").stdout)


def target(lab) -> dict:
    return pool_status(lab, POOL).get("target") or {}


def settled(lab, slurm: int):
    def check():
        s = pool_status(lab, POOL)
        ok = s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == 8 - slurm and s.get("moving") == 0
        return s if ok else None

    return check


def ensure_pool(lab, slurm: int = 5) -> int | None:
    """The module's pool, created (at `slurm` Slurm nodes, as the first test makes it) if no test
    before made it, so that each test also runs alone (-k). Its spec.slurmNodes, or None if it
    was created here."""
    try:
        return pool_json(lab, POOL)["spec"]["slurmNodes"]
    except ApiException as err:
        if err.status != 404:
            raise
    apply(lab, pool_manifest(lab, POOL, slurm, maxConcurrentMoves=8))
    return None


def at_split(lab, slurm: int) -> None:
    """Start a test from `slurm` Slurm nodes, whichever tests ran before (or none). No scale when
    the spec already says so: on this apiserver a no-op `kubectl scale` right after `kubectl apply`
    leaves no managedFields entry owning spec.slurmNodes, and the next change's author is lost."""
    current = ensure_pool(lab, slurm)
    if current is not None and current != slurm:
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={slurm}")
    wait(settled(lab, slurm), 120, what=f"{slurm}/{8 - slurm}")


def placements(lab) -> dict[str, str]:
    return {n: p for n, p in node_placements(lab).items() if n in lab.nodes}


def sbatch(lab, *args: str) -> str:
    return lab.slurm("sbatch", "--parsable", "-p", "gpu", "--gres=gpu:8", "-o", "/dev/null", *args).stdout.strip().split(";")[0]


def job_state(lab, job_id: str) -> str:
    return lab.slurm("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()


def cancel_all(lab) -> None:
    jobs = lab.slurm("squeue", "-h", "-o", "%i").stdout.split()
    if jobs:
        lab.slurm("scancel", *jobs)
    wait(lambda: not lab.slurm("squeue", "-h").stdout.strip(), 30, what="no jobs left")


def events(lab, reason: str) -> list[dict]:
    items = events_json(lab, NAMESPACE, f"reason={reason},involvedObject.name={POOL}")
    return sorted(items, key=lambda e: e.get("firstTimestamp") or "")


def test_status_names_the_manual_source_and_the_plugin_shows_every_node(lab, op):
    t0 = time.monotonic()
    apply(lab, pool_manifest(lab, POOL, 5, maxConcurrentMoves=8))
    wait(settled(lab, 5), 120, what="5/3")
    TIMINGS["initial 5/3"] = time.monotonic() - t0
    t = target(lab)
    assert t["source"] == "Manual" and t["slurmNodes"] == 5 and "kubectl" in (t.get("by") or ""), t
    view = plugin_json(lab, "status", POOL)
    assert [n["node"] for n in view["nodes"]] == lab.nodes
    assert sum(1 for n in view["nodes"] if n["side"] == "slurm") == 5
    assert view["target"]["source"] == "Manual"
    text = plugin(lab, "status", POOL, "-n", NAMESPACE).stdout
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert "source Manual" in text and all(n in text for n in lab.nodes)


def test_plan_lists_exactly_the_nodes_and_jobs_the_real_move_touches(lab, op):
    at_split(lab, 5)
    slurm_nodes = sorted(n for n, p in placements(lab).items() if p == "slurm")
    # Distinct time limits: the planner takes the nodes whose jobs end first.
    jobs = {n: sbatch(lab, "-w", n, f"--time={10 + 5 * i}", "--wrap", "sleep 600") for i, n in enumerate(slurm_nodes)}
    wait(lambda: all(job_state(lab, j) == "RUNNING" for j in jobs.values()), 30, what="jobs running")

    def published():
        view = plugin_json(lab, "status", POOL)
        return view if all(n["jobs"] == [jobs[n["node"]]] for n in view["nodes"] if n["node"] in jobs) else None

    status_view = wait(published, 20, what="jobs published on the nodes")
    assert {n["node"]: n["jobs"] for n in status_view["nodes"] if n["jobs"]} == {n: [j] for n, j in jobs.items()}
    plan = plugin_json(lab, "plan", POOL, "--slurm-nodes", "3")
    planned = {m["node"]: m["jobs"] for m in plan["moves"]}
    assert len(planned) == 2 and all(m["to"] == "inference:llm" and m["wave"] == 1 for m in plan["moves"])
    assert set(planned) == set(slurm_nodes[:2])  # the two shortest jobs
    text = plugin(lab, "plan", POOL, "-n", NAMESPACE, "--slurm-nodes", "3").stdout
    assert all(f"jobs {jobs[n]}" in text for n in planned), text
    assert sum(p == "slurm" for p in placements(lab).values()) == 5  # a dry run moved nothing

    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=3")

    def moves_blocked():
        moves = pool_status(lab, POOL).get("moves", [])
        return moves if len(moves) == 2 and all(m["blockedBy"] for m in moves) else None

    moves = wait(moves_blocked, 20, what="two moves blocked by their jobs")
    assert {m["node"]: [b.removeprefix("job/") for b in m["blockedBy"]] for m in moves} == planned
    lab.slurm("scancel", *[jobs[n] for n in planned])
    wait(settled(lab, 3), 60, what="3/5 once the planned jobs ended")
    assert all(job_state(lab, jobs[n]) == "RUNNING" for n in slurm_nodes[2:]), "a job the plan did not list was touched"
    cancel_all(lab)


def test_move_now_pause_resume_and_pin_through_kubectl(lab, op):
    at_split(lab, 3)
    t0 = time.monotonic()
    assert plugin_json(lab, "pause", POOL)["paused"] is True
    assert get_json(lab, "snp", POOL, "-n", NAMESPACE)["spec"]["paused"] is True
    node = sorted(n for n, p in placements(lab).items() if p == "slurm")[0]
    out = plugin(lab, "move", node, "--to", "inference").stdout
    assert "move-now=inference" in out
    time.sleep(3)
    assert placements(lab)[node] == "slurm" and pool_status(lab, POOL).get("moving") == 0, "moved while paused"
    row = next(n for n in plugin_json(lab, "status", POOL)["nodes"] if n["node"] == node)
    assert row["moveNow"] == "inference"
    plugin(lab, "resume", POOL, "-n", NAMESPACE)
    wait(lambda: placements(lab)[node] == "inference:llm", 60, what=f"{node} moved now")
    wait(settled(lab, 3), 60, what="the split kept at 3/5 (a swap)")
    wait(lambda: "slurmpool.io/move-now" not in (node_json(lab, node)["metadata"].get("annotations") or {}), 20,
         what="move-now cleared")
    wait(lambda: events(lab, "MoveNowDone"), 20, what="the MoveNowDone Event (Events are posted by workers, after the pass)")
    TIMINGS["move-now swap"] = time.monotonic() - t0

    # A pin brings its node to its side; another node swaps; the pinned node never leaves.
    pinned = node
    lab.kubectl("annotate", "node", pinned, "slurmpool.io/pin=slurm", "--overwrite")
    wait(lambda: placements(lab)[pinned] == "slurm", 60, what="pinned node back in Slurm")
    wait(settled(lab, 3), 60, what="3/5 with the pin")
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=1")
    wait(settled(lab, 1), 60, what="1/7")
    assert placements(lab)[pinned] == "slurm"
    lab.kubectl("annotate", "node", pinned, "slurmpool.io/pin-")
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=3")
    wait(settled(lab, 3), 60, what="3/5")


def _window_now(tz: ZoneInfo, open_for: float) -> tuple[datetime, int]:
    """A daily window whose cron fires at the current minute in `tz` (so it is open already) and
    whose duration closes it `open_for` seconds from now: (its start, its duration in seconds).
    Nothing waits for a minute boundary; the timed edge under test is the window's end."""
    now = datetime.now(tz)
    start = now.replace(second=0, microsecond=0)
    return start, math.ceil((now - start).total_seconds() + open_for)


def _utc(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_schedule_window_moves_nodes_at_its_edges_in_its_time_zone(lab, op):
    at_split(lab, 3)
    tz = ZoneInfo("Asia/Kolkata")  # UTC+05:30: a wrong zone would be off by hours and a half
    # Before a window opens: it is the next change, and nothing moves for it.
    later = (datetime.now(tz) + timedelta(hours=2)).replace(second=0, microsecond=0)
    window = {"name": "burst", "cron": f"{later.minute} {later.hour} * * *", "duration": "1m", "timeZone": "Asia/Kolkata",
              "slurmNodes": 6}
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", json.dumps({"spec": {"schedule": [window]}}))
    wait(lambda: target(lab).get("nextChange") == _utc(later), 10, what=f"nextChange {_utc(later)}")
    assert target(lab)["source"] == "Manual"
    quiet_until = time.monotonic() + 2
    while time.monotonic() < quiet_until:
        assert pool_status(lab, POOL)["slurm"]["desired"] == 3, "moved before the window"
        time.sleep(0.25)

    # The same window on the current minute of that zone: open at once, closing OPEN_FOR s from now.
    start, seconds = _window_now(tz, open_for=40)
    end = start + timedelta(seconds=seconds)
    window.update(cron=f"{start.minute} {start.hour} * * *", duration=f"{seconds}s")
    patched = datetime.now(timezone.utc)
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", json.dumps({"spec": {"schedule": [window]}}))
    opened = wait(lambda: target(lab) if target(lab).get("source") == "Schedule" else None, 10, what="window open")
    lag = (datetime.now(timezone.utc) - patched).total_seconds()
    TIMINGS["open window seen after"] = lag
    assert opened["window"] == "burst" and opened["slurmNodes"] == 6 and lag < 5, (opened, lag)
    assert opened["since"] == _utc(start) and opened["nextChange"] == _utc(end), opened
    assert events(lab, "ScheduleWindowStarted")
    wait(settled(lab, 6), 30, what="6/2 inside the window")
    TIMINGS["window: 3 nodes to Slurm"] = (datetime.now(timezone.utc) - patched).total_seconds()
    assert datetime.now(timezone.utc) < end, "the moves took the whole window"

    # At the end (a timed edge, no event to wake the operator): spec.slurmNodes (3) again.
    closing = (end - datetime.now(timezone.utc)).total_seconds()
    wait(lambda: target(lab).get("source") == "Manual" and target(lab).get("slurmNodes") == 3, closing + 15, what="window closed")
    lag = (datetime.now(timezone.utc) - end).total_seconds()
    TIMINGS["window end seen after"] = lag
    assert -1 < lag < 5, lag
    assert events(lab, "ScheduleWindowEnded")
    assert target(lab)["nextChange"] == _utc(start + timedelta(days=1)), target(lab)  # tomorrow, same wall-clock minute
    wait(settled(lab, 3), 60, what="3/5 after the window")
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=json", "-p", '[{"op":"remove","path":"/spec/schedule"}]')


def test_manual_change_during_a_window_holds_until_its_end(lab, op):
    at_split(lab, 3)
    tz = ZoneInfo("America/New_York")
    start, seconds = _window_now(tz, open_for=25)
    end = _utc(start + timedelta(seconds=seconds))
    window = {"name": "hold", "cron": f"{start.minute} {start.hour} * * *", "duration": f"{seconds}s",
              "timeZone": "America/New_York", "slurmPercent": 75}
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", json.dumps({"spec": {"schedule": [window]}}))
    wait(lambda: target(lab).get("source") == "Schedule" and target(lab)["slurmNodes"] == 6, 10, what="window open (75% of 8)")
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=4")
    t = wait(lambda: target(lab) if target(lab).get("source") == "Manual" else None, 10, what="manual wins in the window")
    assert t["slurmNodes"] == 4 and t["manualUntil"] == end and "kubectl" in t["by"], t
    assert "during window hold" in t["reason"]
    wait(settled(lab, 4), 60, what="4/4 by hand")
    closing = (start + timedelta(seconds=seconds) - datetime.now(timezone.utc)).total_seconds()
    wait(lambda: target(lab).get("window") is None, max(closing, 0) + 15, what="window closed")
    assert datetime.now(timezone.utc) >= start + timedelta(seconds=seconds), "the window closed early"
    assert target(lab)["slurmNodes"] == 4 and target(lab)["source"] == "Manual"
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=json", "-p", '[{"op":"remove","path":"/spec/schedule"}]')
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=3")
    wait(settled(lab, 3), 60, what="3/5")


COOLDOWN = 8


def _deployment(replicas: int) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "llm"}},
            "template": {
                "metadata": {"labels": {"app": "llm"}},
                "spec": {
                    "nodeSelector": {"slurmpool.io/inference-pool": "llm"},
                    "tolerations": [{"key": "slurmpool.io/inference", "operator": "Exists"}],
                    "containers": [{"name": "server", "image": "vllm:latest", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                },
            },
        },
    }


def test_demand_grows_slurm_to_its_max_then_inference_without_flapping(lab, op):
    at_split(lab, 3)
    demand = {"slurm": {"maxNodes": 5}, "inference": {"maxNodes": 7}, "cooldown": f"{COOLDOWN}s", "whenBothWant": "PreferSlurm"}
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", json.dumps({"spec": {"demand": demand}}))
    t0 = time.monotonic()
    # 3 Slurm nodes; 6 one-node GPU jobs: 3 run, 3 cannot start -> Slurm grows, but only to 5.
    jobs = [sbatch(lab, "--time=30", "--wrap", "sleep 900") for _ in range(6)]
    grown = wait(lambda: target(lab) if target(lab).get("slurmNodes") == 5 else None, 60, what="demand grows Slurm to 5")
    assert grown["source"] == "Demand" and "pending job" in grown["reason"], grown
    TIMINGS["demand: Slurm 3 -> 5 decided"] = time.monotonic() - t0
    wait(settled(lab, 5), 60, what="5/3")
    wait(lambda: sum(job_state(lab, j) == "RUNNING" for j in jobs) == 5, 30, what="5 jobs running on the grown side")
    # Demand sees the one job that still cannot start; past the cooldown of its last change (and at
    # least a few passes later) it could act again: it must not grow past its max.
    wait(lambda: target(lab)["demand"]["pendingJobs"] == 1, 30, what="demand seeing the one job still pending")
    last = datetime.fromisoformat(target(lab)["demand"]["lastChange"].replace("Z", "+00:00"))
    time.sleep(max(2.0, (last + timedelta(seconds=COOLDOWN + 2) - datetime.now(timezone.utc)).total_seconds()))
    assert target(lab)["slurmNodes"] == 5, "grew past slurm.maxNodes"
    assert target(lab)["demand"]["pendingJobs"] == 1

    # Inference pods that cannot be scheduled: 4 replicas of a whole-node pod on 3 nodes. Slurm still
    # wants one node and is preferred, but it is at its max: inference grows, by what it lacks.
    apply(lab, _deployment(4))
    shrunk = wait(lambda: target(lab) if target(lab).get("slurmNodes") == 4 else None, 60, what="demand grows inference")
    assert shrunk["source"] == "Demand", shrunk
    # Why it changed is in its Event: the status's reason is the latest pass's, which may already be
    # the cooldown's (Slurm, below its max again, would take the node back once the cooldown ends).
    why = wait(lambda: next((e["message"] for e in events(lab, "DemandChanged") if "5 -> 4 Slurm" in e["message"]), None),
               30, what="the DemandChanged Event of 5 -> 4")
    assert "unschedulable pod" in why, why
    cancel_all(lab)  # jobs leave; the draining node frees
    wait(settled(lab, 4), 90, what="4/4")
    lab.kubectl("rollout", "status", "deployment/llm", "-n", NAMESPACE, "--timeout=60s")
    TIMINGS["demand: inference grown, pods running"] = time.monotonic() - t0

    # Alternate the demand faster than the cooldown: inference hungry, then Slurm hungry, ...
    for _ in range(3):
        apply(lab, _deployment(6))  # 2 more whole-node pods than inference nodes
        time.sleep(3)
        lab.kubectl("scale", "deployment/llm", "-n", NAMESPACE, "--replicas=1")
        for _ in range(6):
            sbatch(lab, "--time=30", "--wrap", "sleep 900")  # more jobs than Slurm nodes
        time.sleep(3)
        cancel_all(lab)
    changes = events(lab, "DemandChanged")
    stamps = [datetime.fromisoformat(e["firstTimestamp"].replace("Z", "+00:00")) for e in changes]
    assert len(stamps) >= 2
    gaps = [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:])]
    assert all(g >= COOLDOWN - 1 for g in gaps), gaps  # event stamps have one-second resolution
    TIMINGS["demand changes"] = len(stamps)
    lab.kubectl("delete", "deployment", "llm", "-n", NAMESPACE)
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=json", "-p", '[{"op":"remove","path":"/spec/demand"}]')
    wait(lambda: target(lab).get("source") == "Manual", 10, what="demand off: the manual count again")


def test_status_yaml_and_watch_follow_a_scale(lab, op):
    """`-o yaml` is the JSON view; `status --watch -o yaml` keeps printing documents and shows a
    scale's new target and split without being restarted."""
    at_split(lab, 5)
    view = yaml.safe_load(plugin(lab, "status", POOL, "-n", NAMESPACE, "-o", "yaml").stdout)
    as_json = plugin_json(lab, "status", POOL)
    assert set(view) == set(as_json) and view["target"] == as_json["target"] and view["spec"] == as_json["spec"]
    assert [n["node"] for n in view["nodes"]] == lab.nodes and view["target"]["slurmNodes"] == 5

    env = {**lab.env, "PATH": f"{VENV_BIN}:{lab.env['PATH']}"}
    watcher = subprocess.Popen([str(lab.bin_dir / "kubectl"), "slurmpool", "status", POOL, "-n", NAMESPACE, "--watch",
                                "--interval", "1", "-o", "yaml"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    documents: queue.Queue = queue.Queue()

    def read() -> None:  # a document ends where the next begins ("---")
        lines: list[str] = []
        for line in watcher.stdout:
            if line.rstrip() == "---" and lines:
                documents.put(yaml.safe_load("".join(lines)))
                lines = []
            elif line.rstrip() != "---":
                lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        first = documents.get(timeout=60)
        assert first["target"]["slurmNodes"] == 5 and sum(n["side"] == "slurm" for n in first["nodes"]) == 5
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=4")
        deadline, seen = time.monotonic() + 180, 1
        while True:
            doc = documents.get(timeout=max(1.0, deadline - time.monotonic()))
            seen += 1
            if (doc["target"] or {}).get("slurmNodes") == 4 and sum(n["side"] == "slurm" for n in doc["nodes"]) == 4 \
                    and doc["moving"] == 0 and all(n["phase"] == "Settled" for n in doc["nodes"]):
                break
            assert time.monotonic() < deadline, f"--watch never showed 4/4 settled: {doc}"
        assert watcher.poll() is None, "--watch ended by itself"
        TIMINGS["watch documents until 4/4"] = seen
    finally:
        watcher.send_signal(signal.SIGINT)  # the on-call's Ctrl-C: exits 0, no traceback
        try:
            code = watcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            watcher.kill()
            raise
    assert code == 0 and "Traceback" not in watcher.stderr.read()


def test_kubectl_completes_the_plugins_words(lab, op):
    """kubectl's own completion (`kubectl __complete`, what the shell calls) runs
    kubectl_complete-slurmpool from PATH: subcommands, the namespace's pools, node names."""
    ensure_pool(lab)
    env = {**lab.env, "PATH": f"{VENV_BIN}:{lab.env['PATH']}"}

    def candidates(*words: str) -> list[str]:
        p = subprocess.run([str(lab.bin_dir / "kubectl"), "__complete", "slurmpool", *words], env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return [line for line in p.stdout.splitlines() if line and not line.startswith(":")]

    assert candidates("st") == ["status"]
    assert POOL in candidates("status", "-n", NAMESPACE, "")
    assert set(lab.nodes) <= set(candidates("move", ""))
    assert candidates("status", POOL, "-o", "y") == ["yaml"]


def test_status_always_named_a_source(lab, op):
    """Every status the operator wrote in this module named its target's source."""
    if ensure_pool(lab) is None:  # run alone: give the operator a pool to write a status for
        wait(settled(lab, 5), 120, what="5/3")
    t = target(lab)
    assert t["source"] in ("Manual", "Schedule", "Demand") and t["since"] and t["reason"]
    log = Path(op.log_path).read_text(errors="replace")
    assert "Traceback" not in log, op.log_tail(60)
