"""The planned handover ahead of a known edge (issue 24): before a schedule window's edge that
takes nodes out of Slurm, the operator reserves the leaving nodes in Slurm from the edge
(`slurmpool-<namespace>-<pool>`, MAINT,IGNORE_JOBS), so that only jobs that end by the edge
start there; at the edge the nodes move without a drain wait, no job is requeued or cancelled,
and the reservation is deleted once the moves are done. A SIGKILL of the operator between the
reservation and the edge, and another right after the first move at the edge is recorded, leave
nothing behind: a fresh operator finds the reservation by its name and finishes. On the default lab: Slurm 22.05 over SSH;
in the matrix also over slurmrestd on 26.05 (v0.0.43+ creates reservations) and, for the fallback, on 24.11.

Robust on a loaded machine: every wait polls with a generous deadline; no elapsed time is asserted.
The edge is 3-4 minutes ahead (a whole minute, as cron has it), so the test takes about 6 minutes."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone

import pytest
from harness import (
    NAMESPACE,
    Operator,
    apply,
    ensure_namespace_and_secret,
    events,
    install_crd,
    job_state,
    lab_access,
    node_json,
    now_rfc3339,
    pool_manifest,
    pool_status,
    reset_lab,
    split_reached,
    wait,
)

pytestmark = pytest.mark.e2e


def access_reserves() -> bool:
    """scontrol (SSH) can create reservations; slurmrestd from v0.0.43 (Slurm 25.05) on: the lab's
    26.05 can, its 24.11 (up to v0.0.42) cannot."""
    if lab_access() != "rest":
        return True
    major, minor = (int(p) for p in os.environ.get("LAB_SLURM", "22.05").split(".")[:2])
    return (major, minor) >= (25, 5)


reserving = pytest.mark.skipif(not access_reserves(), reason="slurmrestd before v0.0.43 cannot create reservations: see the fallback test")
POOL = "handover"
# handover.reservation_name: `slurmpool-<namespace>.<pool>-<hash of namespace, name and uid>`
RESERVATION = f"slurmpool-{NAMESPACE}.{POOL}-"
LEAVING = 3
ACTIVE = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "SUSPENDED")


def reservation(lab) -> dict[str, str] | None:
    """Our reservation as `scontrol -o show reservation` prints it, or None when there is none."""
    out = lab.slurm("scontrol", "-o", "show", "reservation", check=False)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith(f"ReservationName={RESERVATION}")), None)
    if line is None:
        return None
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def expand(lab, hostlist: str) -> list[str]:
    return lab.slurm("scontrol", "show", "hostnames", hostlist).stdout.split()


def submit(lab, seconds: int, limit_minutes: int, node: str | None = None) -> str:
    where = ["-w", node] if node else []
    out = lab.slurm("sbatch", "--parsable", "-p", "gpu", "-N1", "--exclusive", "--gres=gpu:8", f"--time={limit_minutes}", *where,
                    "-o", "/dev/null", "--wrap", f"sleep {seconds}").stdout
    return out.strip().split(";")[0]


def job_nodes(lab, job_id: str) -> list[str]:
    out = lab.slurm("scontrol", "-o", "show", "job", job_id, check=False).stdout
    hosts = next((w.split("=", 1)[1] for w in out.split() if w.startswith("NodeList=")), "(null)")
    return [] if hosts in ("(null)", "") else expand(lab, hosts)


def handover(lab) -> dict:
    return pool_status(lab, POOL).get("handover") or {}


@reserving
def test_a_planned_handover_reserves_the_leaving_nodes_and_moves_them_at_the_edge_without_a_drain_wait(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    since = now_rfc3339()
    op = Operator(lab, "operator-handover.log").start()
    jobs: list[str] = []
    try:
        # requeue: a job the drain timed out on would be requeued and reported (JobsRequeued): there must be none.
        apply(lab, pool_manifest(lab, POOL, total, drain={"timeout": "20s", "onTimeout": "Requeue"}))
        wait(lambda: split_reached(lab, POOL, total, total), 240, what=f"all {total} nodes in Slurm")

        # A busy partition: one job a node, staggered time limits, each ending by itself (sleep) long before them.
        jobs += [submit(lab, 20 + 5 * i, limit_minutes=2 + i) for i in range(total)]

        # A window whose start, 3-4 minutes ahead, takes LEAVING nodes to inference; the lead time covers it.
        edge = (datetime.now(timezone.utc) + timedelta(minutes=4)).replace(second=0, microsecond=0)
        window = {"name": "serve", "cron": f"{edge.minute} {edge.hour} * * *", "duration": "10m", "slurmNodes": total - LEAVING}
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p",
                    json.dumps({"spec": {"schedule": [window], "handover": {"leadTime": "15m"}}}))

        # Before the edge: ours, on the leaving nodes, MAINT, from the edge; the pool's status says so.
        res = wait(lambda: reservation(lab), 90, what=f"reservation {RESERVATION}")
        assert datetime.now(timezone.utc) < edge, "the reservation came after the edge"
        assert {"MAINT", "IGNORE_JOBS"} <= set(res["Flags"].split(",")), res
        # slurmctld prints local time (the lab runs on this machine)
        assert res["StartTime"] == edge.astimezone().strftime("%Y-%m-%dT%H:%M:%S"), (res, edge)
        reserved = expand(lab, res["Nodes"])
        assert len(reserved) == LEAVING, res
        status = wait(lambda: handover(lab) if handover(lab).get("state") == "Reserved" else None, 30, what="status.handover Reserved")
        assert status["reservation"] == res["ReservationName"] and sorted(status["nodes"]) == sorted(reserved), status
        assert events(lab, "HandoverReserved", since), "no HandoverReserved Event"
        assert pool_status(lab, POOL)["slurm"]["ready"] == total, "a node moved before the edge"

        # A crash between the reservation and the edge: a fresh operator finds the reservation by its name.
        # The fresh one kills itself in turn right after recording the first move at the edge
        # (SLURMPOOL_CRASH_AFTER_PHASE: record written, nothing done), while the reservation is in force.
        op.kill()
        op = Operator(lab, "operator-handover-2.log", {"SLURMPOOL_CRASH_AFTER_PHASE": "Draining"}).start()

        # A job whose time limit passes the edge never starts on a reserved node; one that ends before it may.
        late = submit(lab, 5, limit_minutes=30, node=reserved[0])
        wait(lambda: job_state(lab, late) == "PENDING" and _reason(lab, late) != "None", 30, what="the late job waits")
        # Jobs anywhere in the partition whose limits pass the edge: they wait for the unreserved nodes.
        stream = [submit(lab, 15, limit_minutes=20) for _ in range(total)]
        jobs += stream
        for _ in range(8):  # a few passes of the scheduler: the late job stays off its reserved node
            assert job_state(lab, late) == "PENDING", (late, job_state(lab, late))
            time.sleep(1)
        lab.slurm("scancel", late)  # never started: submitted only to show it is kept off
        # Every job ends by itself (sleeps far shorter than their limits); none ran on a reserved node.
        wait(lambda: not any(job_state(lab, j) in ACTIVE for j in jobs), 300, what="the jobs ended")
        states = {j: job_state(lab, j) for j in jobs}  # well within MinJobAge: no job is GONE yet
        assert all(s == "COMPLETED" for s in states.values()), states
        on_reserved = {j: job_nodes(lab, j) for j in stream if set(job_nodes(lab, j)) & set(reserved)}
        assert not on_reserved, f"jobs past the edge ran on reserved nodes: {on_reserved}"
        # The reserved nodes are idle when the edge comes (nothing new started there that outlasts it).
        assert not lab.slurm("squeue", "-h", "-w", ",".join(reserved)).stdout.strip() or datetime.now(timezone.utc) >= edge

        # At the edge: the reserved nodes move (found idle), and the reservation goes once they serve inference.
        until_edge = max(0.0, (edge - datetime.now(timezone.utc)).total_seconds())
        wait(lambda: op.proc.poll() is not None, until_edge + 120, what="the operator killed itself at the edge's first move")
        assert reservation(lab) is not None, "the reservation went with the crash"
        op = Operator(lab, "operator-handover-3.log").start()  # a third, fresh one finishes the handover
        wait(lambda: pool_status(lab, POOL).get("target", {}).get("source") == "Schedule", 60, what="the window opened")
        wait(lambda: split_reached(lab, POOL, total - LEAVING, total), 180, what=f"{LEAVING} nodes in inference")
        moved = sorted(n["metadata"]["name"] for n in _inference_nodes(lab))
        assert moved == sorted(reserved), (moved, reserved)
        wait(lambda: reservation(lab) is None, 60, what="the reservation deleted after the moves")
        wait(lambda: not handover(lab), 30, what="status.handover cleared")
        assert events(lab, "HandoverDone", since), "no HandoverDone Event"
        assert not events(lab, "HandoverReplanned", since), events(lab, "HandoverReplanned", since)  # the reservation held still
        assert len(events(lab, "HandoverReserved", since)) == 1, events(lab, "HandoverReserved", since)  # the fresh operator found it
        assert not events(lab, "JobsRequeued", since) and not events(lab, "JobsCancelled", since), "the handover requeued or cancelled jobs"
        assert all(job_state(lab, j) in ("COMPLETED", "GONE") for j in jobs), {j: job_state(lab, j) for j in jobs}
    finally:
        op.stop()
        for j in jobs:
            lab.slurm("scancel", j, check=False)
        if (left := reservation(lab)) is not None:
            lab.slurm("scontrol", "delete", f"ReservationName={left['ReservationName']}", check=False)
        reset_lab(lab)


def _reason(lab, job_id: str) -> str:
    out = lab.slurm("scontrol", "-o", "show", "job", job_id, check=False).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("Reason=")), "")


def _inference_nodes(lab) -> list[dict]:
    from harness import nodes_json

    return [n for n in nodes_json(lab, "slurmpool.io/lab=true")
            if (n["metadata"].get("annotations") or {}).get("slurmpool.io/placement", "").startswith("inference:")]



@reserving
def test_the_reservation_goes_with_its_pool_and_others_are_never_touched(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    # An admin's reservation beside ours, under a name the old sweep took for an orphan of a
    # deleted pool of this namespace (issue 37): the operator never touches it.
    foreign = f"slurmpool-{NAMESPACE}-maintenance"
    op = Operator(lab, "operator-handover-delete.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, total))
        wait(lambda: split_reached(lab, POOL, total, total), 240, what=f"all {total} nodes in Slurm")
        edge = (datetime.now(timezone.utc) + timedelta(minutes=20)).replace(second=0, microsecond=0)
        lab.slurm("scontrol", "create", "reservation", f"ReservationName={foreign}", "StartTime=now+1hour", "Duration=10",
                  f"Nodes={lab.nodes[0]}", "Users=root", "Flags=MAINT,IGNORE_JOBS")
        window = {"name": "later", "cron": f"{edge.minute} {edge.hour} * * *", "duration": "10m", "slurmNodes": total - 1}
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p",
                    json.dumps({"spec": {"schedule": [window], "handover": {"leadTime": "30m"}}}))
        res = wait(lambda: reservation(lab), 90, what=f"reservation {RESERVATION}")
        assert len(expand(lab, res["Nodes"])) == 1, res
        lab.kubectl("delete", "snp", POOL, "-n", NAMESPACE, "--wait=true")
        wait(lambda: reservation(lab) is None, 60, what="the reservation deleted with its pool")
        out = lab.slurm("scontrol", "-o", "show", "reservation", foreign).stdout
        assert f"ReservationName={foreign} " in out, out
    finally:
        op.stop()
        lab.slurm("scontrol", "delete", f"ReservationName={foreign}", check=False)
        if (left := reservation(lab)) is not None:
            lab.slurm("scontrol", "delete", f"ReservationName={left['ReservationName']}", check=False)
        reset_lab(lab)


@pytest.mark.skipif(access_reserves(), reason="only where the access cannot create reservations (LAB_ACCESS=rest on 24.11)")
def test_over_slurmrestd_the_pool_says_once_why_there_is_no_handover_and_the_edge_drains_as_before(lab):
    """Where slurmrestd cannot make reservations it still lists them (issue 37): an admin's
    maintenance on every node but one keeps those in Slurm, and the edge takes the one left."""
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    since = now_rfc3339()
    admins, free = "maint-by-hand", lab.nodes[total // 2]
    held = sorted(n for n in lab.nodes if n != free)
    op = Operator(lab, "operator-handover-rest.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, total))
        wait(lambda: split_reached(lab, POOL, total, total), 240, what=f"all {total} nodes in Slurm")
        lab.slurm("scontrol", "create", "reservation", f"ReservationName={admins}", "StartTime=now", "Duration=30",
                  f"Nodes={','.join(lab.slurm_name(n) for n in held)}", "Users=root", "Flags=MAINT,IGNORE_JOBS")
        wait(lambda: sorted(r["node"] for r in pool_status(lab, POOL).get("reservedNodes") or []) == held, 60,
             what=f"status.reservedNodes: the {len(held)} nodes of {admins}")
        edge = (datetime.now(timezone.utc) + timedelta(minutes=3)).replace(second=0, microsecond=0)
        window = {"name": "serve", "cron": f"{edge.minute} {edge.hour} * * *", "duration": "10m", "slurmNodes": total - 1}
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p",
                    json.dumps({"spec": {"schedule": [window], "handover": {"leadTime": "15m"}}}))
        status = wait(lambda: handover(lab) if handover(lab).get("state") == "Unavailable" else None, 90, what="status.handover Unavailable")
        assert "slurmrestd access cannot create reservations" in status["message"], status
        assert reservation(lab) is None
        until_edge = max(0.0, (edge - datetime.now(timezone.utc)).total_seconds())
        wait(lambda: split_reached(lab, POOL, total - 1, total), until_edge + 180, what="the edge moved one node as before")
        assert len(events(lab, "HandoverUnavailable", since)) == 1, events(lab, "HandoverUnavailable", since)
        assert reservation(lab) is None
        gone = [n for n in lab.nodes if (node_json(lab, n)["metadata"].get("annotations") or {}).get("slurmpool.io/placement", "")
                .startswith("inference")]
        assert gone == [free], (gone, free)
    finally:
        op.stop()
        lab.slurm("scontrol", "delete", f"ReservationName={admins}", check=False)
        reset_lab(lab)
