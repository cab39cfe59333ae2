"""Faults on the real lab (issue 7, first part): two replicas, sshd down mid-move, slurmctld
restarted. The operator must fail closed (no Kubernetes-side step that could strand a node),
report Degraded with the cause, and recover by itself; and only one replica may act."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from harness import (
    install_crd,
    NAMESPACE,
    Operator,
    apply,
    ensure_namespace_and_secret,
    get_json,
    node_placements,
    pool_manifest,
    pool_status,
    reset_lab,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "faults"


@pytest.fixture(scope="module")
def pool(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    op = Operator(lab, "operator-faults.log").start()
    apply(lab, pool_manifest(lab, POOL, 8))
    wait(lambda: pool_status(lab, POOL).get("slurm", {}).get("ready") == 8, 120, what="8 Slurm nodes")
    op.stop()
    yield
    reset_lab(lab)


def condition(lab, type_):
    return next((c for c in pool_status(lab, POOL).get("conditions", []) if c["type"] == type_), {})


def settled(lab, slurm):
    s = pool_status(lab, POOL)
    return s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == 8 - slurm and s.get("moving") == 0


def events(lab, reason):
    out = lab.kubectl("get", "events", "-n", NAMESPACE, "--field-selector", f"reason={reason}",
                      "-o", "jsonpath={range .items[*]}{.message}{'\\n'}{end}").stdout
    return [line for line in out.splitlines() if line]


# ---------------------------------------------------------------- lab daemons, stopped and started by PID


def stop_daemon(lab, name: str, binary: str) -> None:
    pid = int((Path(lab.dir) / "run" / f"{name}.pid").read_text())
    assert binary in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"), f"{name} PID {pid} is not {binary}"
    os.kill(pid, signal.SIGTERM)
    wait(lambda: not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", 15,
         what=f"{name} to stop")


def start_daemon(lab, name: str, *argv: str) -> None:
    pidfile = Path(lab.dir) / "run" / f"{name}.pid"
    pidfile.unlink(missing_ok=True)
    log = open(Path(lab.dir) / "log" / f"{name}.log", "ab")
    subprocess.Popen(["setsid", "bash", "-c", 'echo $$ > "$0"; exec "$@"', str(pidfile), *argv],
                     env=lab.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    wait(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, what=f"{name} PID file")


def test_two_replicas_only_one_acts_and_the_other_takes_over(lab, pool):
    for name in ("operator-replica-a.log", "operator-replica-b.log"):
        (Path(lab.dir) / "log" / name).unlink(missing_ok=True)
    a = Operator(lab, "operator-replica-a.log", {"SLURMPOOL_IDENTITY": "replica-a"}).start()
    b = Operator(lab, "operator-replica-b.log", {"SLURMPOOL_IDENTITY": "replica-b"}).start()
    try:
        before = len(events(lab, "MoveStarted"))
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=6")
        wait(lambda: settled(lab, 6), 60, what="6/2 with two replicas")
        assert len(events(lab, "MoveStarted")) - before <= 2 * 2, "moves started twice"  # pool + node event each
        lease_ns = "slurmpool-system" if a.identity == "serviceaccount" else "default"
        holder = get_json(lab, "lease", "slurmpool", "-n", lease_ns)["spec"]["holderIdentity"]
        assert holder in ("replica-a", "replica-b")
        leader, follower = (a, b) if holder == "replica-a" else (b, a)
        assert "acquired" not in follower.log_tail(200)
        leader.kill()  # SIGKILL: the Lease is not released; the follower waits for it to expire
        t0 = time.monotonic()
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=8")
        wait(lambda: settled(lab, 8), 90, what="the follower finishing the work")
        print(f"takeover and move back: {time.monotonic() - t0:.1f} s")
        assert "acquired" in follower.log_tail(400)
    finally:
        a.stop()
        b.stop()


def test_sshd_down_fails_closed_then_recovers(lab, pool):
    op = Operator(lab, "operator-faults.log").start()
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    try:
        wait(lambda: settled(lab, 8), 60, what="8/0")
        job = lab.slurm("sbatch", "--parsable", "-w", "gpu01", "--gres=gpu:8", "-o", "/dev/null", "--wrap", "sleep 600").stdout.strip()
        stop_daemon(lab, "sshd", "sshd")
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=7")
        cond = wait(lambda: (c := condition(lab, "Degraded")).get("status") == "True" and c, 60, what="Degraded")
        assert cond["reason"] == "SlurmUnavailable", cond
        time.sleep(3)
        # Fail closed: nothing left Slurm; no slurmd pod stopped, no node relabelled.
        assert set(node_placements(lab).values()) == {"slurm"}
        pods = get_json(lab, "pods", "-n", NAMESPACE, "-l", "slurmpool.io/component=slurmd")["items"]
        assert len([p for p in pods if not p["metadata"].get("deletionTimestamp")]) == 8
        start_daemon(lab, "sshd", sshd, "-D", "-e", "-f", str(Path(lab.dir) / "ssh" / "sshd_config"))
        t0 = time.monotonic()
        wait(lambda: settled(lab, 7), 90, what="recovery after sshd is back")
        wait(lambda: condition(lab, "Degraded").get("status") == "False", 30, what="Degraded cleared")
        print(f"recovered {time.monotonic() - t0:.1f} s after sshd came back")
        assert lab.slurm("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING", "the job was touched"
        lab.slurm("scancel", job)
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=8")
        wait(lambda: settled(lab, 8), 60, what="8/0 again")
    finally:
        if not (Path(lab.dir) / "run" / "sshd.pid").exists():
            start_daemon(lab, "sshd", sshd, "-D", "-e", "-f", str(Path(lab.dir) / "ssh" / "sshd_config"))
        op.stop()


def test_slurmctld_restart_mid_move(lab, pool):
    op = Operator(lab, "operator-faults.log").start()
    try:
        wait(lambda: settled(lab, 8), 60, what="8/0")
        stop_daemon(lab, "slurmctld", "slurmctld")
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=6")
        cond = wait(lambda: (c := condition(lab, "Degraded")).get("status") == "True" and c, 90, what="Degraded")
        assert cond["reason"] == "SlurmUnavailable", cond
        assert set(node_placements(lab).values()) == {"slurm"}
        start_daemon(lab, "slurmctld", "slurmctld", "-D", "-i")
        t0 = time.monotonic()
        wait(lambda: settled(lab, 6), 120, what="recovery after slurmctld is back")
        print(f"recovered {time.monotonic() - t0:.1f} s after slurmctld came back")
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=8")
        wait(lambda: settled(lab, 8), 90, what="8/0 again")
    finally:
        if not (Path(lab.dir) / "run" / "slurmctld.pid").exists():
            start_daemon(lab, "slurmctld", "slurmctld", "-D", "-i")
        op.stop()
