"""The adopting path of docs/adopting.md, walked (issue 41, item 5): a node whose slurmd runs outside
Kubernetes, with a job running on it and drained by hand, is taken into a pool's Slurm side with
`slurmpool.io/adopt=resume-drain`, selected by a site label the person controls. The job is never
touched: it runs on while the outside slurmd stops and the node's slurmd pod takes over (the spool
directory is the host's: its slurmstepd is found again), and it completes.

The lab's nodes get slurmd only from pods; here the "outside" slurmd is a plain process started as
a host's systemd would (`slurmd -D -N NODE`, the lab's slurm.conf: its port, spool and PID file).
The pool's slurmd pod command waits until the node's port is free before it starts slurmd, as the
slurmd image's entrypoint does (deploy/docker/slurmd/entrypoint.sh)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from datetime import datetime, timezone

import pytest
from harness import (
    NAMESPACE,
    Operator,
    apply,
    ensure_namespace_and_secret,
    events,
    install_crd,
    job_state,
    node_json,
    pods_json,
    pool_manifest,
    reset_lab,
    sbatch,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "adopting"
NODE = "gpu08"
SITE_LABEL = "example.com/slurm-pool"  # the site's own label: the selector never names a cloud-set key
PERSONS_DRAIN = "moving to slurmpool"
# The slurmd image's entrypoint, as the lab runs pods (host processes): slurmd starts once nothing
# answers on the node's port, so it never races the slurmd that runs outside Kubernetes.
WAIT_FOR_PORT = ('while (exec 3<>"/dev/tcp/127.0.0.1/$SLURMPOOL_LAB_SLURMD_PORT") 2>/dev/null; do sleep 0.5; done; '
                 'exec slurmd -D -N "$SLURM_NODENAME"')


def show_node(lab, node: str) -> dict[str, str]:
    out = lab.slurm("scontrol", "-o", "show", "node", lab.slurm_name(node)).stdout
    fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
    reason = out.split("Reason=", 1)[1].rsplit(" [", 1)[0] if "Reason=" in out else ""
    return {**fields, "Reason": reason}


def show_job(lab, job_id: str) -> dict[str, str]:
    out = lab.slurm("scontrol", "-o", "show", "job", job_id).stdout
    return dict(w.split("=", 1) for w in out.split() if "=" in w)


def slurm_time(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(timezone.utc)  # scontrol prints local time, no zone


@pytest.fixture
def outside_slurmd(lab):
    """The node's slurmd as a host runs it today, outside Kubernetes; stopped at the end if still up."""
    if lab.slurm_version != "22.05" or lab.dynamic_nodes:
        pytest.skip("the outside slurmd is started with 22.05's static node lines (the lab's main row)")
    log = open(lab.dir / "log" / f"outside-slurmd-{NODE}.log", "ab")
    proc = subprocess.Popen(["slurmd", "-D", "-N", lab.slurm_name(NODE)], env=lab.env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


@pytest.fixture
def op(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    operator = Operator(lab, "operator-adopting.log").start()
    yield operator
    operator.stop()
    lab.slurm("scontrol", "update", f"nodename={lab.slurm_name(NODE)}", "state=resume", check=False)  # the person's drain, if left
    lab.kubectl("label", "node", NODE, f"{SITE_LABEL}-", check=False)
    reset_lab(lab)


def test_a_node_with_an_outside_slurmd_and_a_running_job_is_adopted_without_touching_the_job(lab, outside_slurmd, op):
    # Today: slurmd under "systemd", a job running, and the person's own drain (docs/adopting.md step 2).
    wait(lambda: show_node(lab, NODE).get("State", "").startswith("IDLE"), 30, what=f"the outside slurmd of {NODE} registered")
    outside_start = show_node(lab, NODE)["SlurmdStartTime"]
    job = sbatch(lab, lab.slurm_name(NODE), 45, limit_minutes=5)
    wait(lambda: job_state(lab, job) == "RUNNING", 30, what="the job running under the outside slurmd")
    lab.slurm("scontrol", "update", f"nodename={lab.slurm_name(NODE)}", "state=drain", f"reason={PERSONS_DRAIN}")
    # Slurm and the pod both stamp whole seconds: a pod made in the second the outside slurmd
    # started is indistinguishable from its own (a host's slurmd runs long before; here it had not).
    started = datetime.fromisoformat(outside_start).replace(tzinfo=datetime.now().astimezone().tzinfo)
    time.sleep(max(0.0, 2 - (datetime.now().astimezone() - started).total_seconds()))

    # A paused pool that selects the node by the site's label; the node asked for as it is.
    command = ["bash", "-c", WAIT_FOR_PORT]
    apply(lab, pool_manifest(lab, POOL, 1, paused=True, nodeSelector={"matchLabels": {SITE_LABEL: POOL}},
                             slurm={"slurmdPod": {"command": command}}))
    lab.kubectl("annotate", "node", NODE, "slurmpool.io/adopt=resume-drain")
    lab.kubectl("label", "node", NODE, f"{SITE_LABEL}={POOL}")

    # Placed in Slurm at once: record, side, taint, cordon; its slurmd pod made; nothing else.
    def placed() -> bool:
        n = node_json(lab, NODE)
        return (n["metadata"].get("annotations", {}).get("slurmpool.io/placement") == "slurm"
                and n["metadata"]["labels"].get("slurmpool.io/side") == "slurm" and bool(n["spec"].get("unschedulable")))
    wait(placed, 30, what=f"{NODE} placed in Slurm")
    wait(lambda: events(lab, "AdoptionStarted"), 30, what="the AdoptionStarted Event")
    pod = wait(lambda: next((p for p in pods_json(lab, selector="slurmpool.io/component=slurmd") if p["spec"]["nodeName"] == NODE), None),
               30, what="its slurmd pod")
    pod_created = datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    # While the outside slurmd holds the port, the pod's slurmd waits and the adoption is not done.
    time.sleep(5)
    now = show_node(lab, NODE)
    assert now["SlurmdStartTime"] == outside_start and now["Reason"] == PERSONS_DRAIN, now
    assert "slurmpool.io/adopt" in node_json(lab, NODE)["metadata"]["annotations"]
    assert job_state(lab, job) == "RUNNING" and outside_slurmd.poll() is None

    # The person stops the outside slurmd (systemctl disable --now slurmd): the pod's starts at once.
    outside_slurmd.send_signal(signal.SIGTERM)
    outside_slurmd.wait(30)
    wait(lambda: "slurmpool.io/adopt" not in node_json(lab, NODE)["metadata"].get("annotations", {}), 60,
         what="the adoption done (annotation removed)")
    (done,) = wait(lambda: events(lab, "AdoptionCompleted"), 30, what="the AdoptionCompleted Event")
    after = show_node(lab, NODE)
    assert slurm_time(after["SlurmdStartTime"]) >= pod_created.replace(microsecond=0), (after, pod_created)
    assert "DRAIN" not in after["State"] and "NOT_RESPONDING" not in after["State"], after  # the drain handed over, lifted
    running = show_job(lab, job)
    assert running["JobState"] == "RUNNING" and running["Restarts"] == "0", running

    # The job ends by itself, under the pod's slurmd; and the node takes new work.
    wait(lambda: job_state(lab, job) != "RUNNING", 90, what="the job's end")
    ended = show_job(lab, job)
    assert ended["JobState"] == "COMPLETED" and ended["ExitCode"] == "0:0" and ended["Restarts"] == "0", ended
    second = sbatch(lab, lab.slurm_name(NODE), 1, limit_minutes=2)
    wait(lambda: job_state(lab, second) == "COMPLETED", 60, what="a new job on the adopted node")
    status = json.loads(lab.kubectl("get", "snp", POOL, "-n", NAMESPACE, "-o", "json").stdout)["status"]
    print(f"ADOPTED | {NODE} | job {job} ran on from {outside_start} across the handover and completed | {done}")
    assert status.get("slurm", {}).get("ready") == 1, status
