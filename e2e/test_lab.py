"""Acceptance of the lab itself (issue 2): real Kubernetes, real Slurm, real sshd on one machine.

Each test cleans up what it creates and leaves the lab as it found it: nodes uncordoned, no slurmd
pods, no jobs, no drained Slurm nodes.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import subprocess
import time
import uuid

import pytest
from kubernetes.client.rest import ApiException
from slurmbridge.models import gres_shortfall

from harness import pdb_json, pod_json, pods_json

pytestmark = pytest.mark.e2e

SLURMD_NODE = "gpu01"


def report(capsys, text: str) -> None:
    """Print a measurement even under pytest -q."""
    with capsys.disabled():
        print(f"\n  [lab] {text}")


def slurmd_pod_manifest(name: str, node: str) -> dict:
    """A slurmd pod as the operator's template makes it (see e2e/lab/README.md, the contract)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"slurmpool.io/component": "slurmd"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "slurmd", "image": "slurmd:lab",
                "command": ["slurmd", "-D", "-N", "$(NODE_NAME)"],
                "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            }],
        },
    }


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pod_or_none(lab, name: str, ns: str = "default") -> dict | None:
    """The pod as `kubectl get pod -o json` prints it, or None if it does not exist (read in-process:
    polled every 0.1 s)."""
    try:
        return pod_json(lab, name, ns)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


@contextlib.contextmanager
def slurm_node_cleanup(lab, node: str):
    """Whatever happens, leave no slurmd pod and no job on node, and the node not drained."""
    try:
        yield
    finally:
        lab.kubectl("delete", "pod", "-n", "default", "-l", "slurmpool.io/component=slurmd",
                    f"--field-selector=spec.nodeName={node}", "--wait=true", "--timeout=30s", check=False)
        lab.slurm("scancel", "-w", node, check=False)
        lab.slurm("scontrol", "update", f"nodename={node}", "state=undrain", check=False)


def test_nodes_ready_with_gpus(lab):
    nodes = {n["metadata"]["name"]: n for n in lab.kubectl_json("get", "nodes")["items"]}
    assert sorted(nodes) == lab.nodes + lab.real_nodes + lab.sim_nodes
    for i, name in enumerate(lab.nodes, start=1):
        n = nodes[name]
        ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", f"{name} not Ready"
        assert n["status"]["capacity"]["nvidia.com/gpu"] == "8"
        assert n["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        labels = n["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == name
        assert labels["slurmpool.io/lab"] == "true"
        assert labels["topology.slurmpool.io/block"] == f"block-{(i - 1) // 4 + 1}"
        assert labels["topology.slurmpool.io/rack"] == f"rack-{(i - 1) // 2 + 1}"
        assert not n["spec"].get("unschedulable"), f"{name} is cordoned"
        assert not [t for t in n["spec"].get("taints") or [] if t["key"].startswith("node.kubernetes.io/")]
    # The agent renews each node's Lease, so the node lifecycle controller never taints them.
    leases = {x["metadata"]["name"]: x for x in lab.kubectl_json("get", "leases", "-n", "kube-node-lease")["items"]}
    now = datetime.datetime.now(datetime.timezone.utc)
    for name in lab.nodes:
        renewed = datetime.datetime.fromisoformat(leases[name]["spec"]["renewTime"].replace("Z", "+00:00"))
        assert (now - renewed).total_seconds() < 30, f"lease of {name} is stale"
    # Simulated nodes (LAB_SIM_NODES): Ready by their Lease alone (renewed every 20 s), in groups.
    for i, name in enumerate(lab.sim_nodes, start=1):
        n = nodes[name]
        assert [c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready"] == ["True"], f"{name} not Ready"
        assert n["metadata"]["labels"]["slurmpool.io/sim-group"] == f"g{(i - 1) // int(lab.env.get('LAB_SIM_GROUP', '25')) + 1:02d}"
        renewed = datetime.datetime.fromisoformat(leases[name]["spec"]["renewTime"].replace("Z", "+00:00"))
        assert (now - renewed).total_seconds() < 45, f"lease of {name} is stale"


def test_slurmd_pod_lifecycle(lab, tmp_path, capsys):
    node = SLURMD_NODE
    name = f"slurmd-{node}-{uuid.uuid4().hex[:6]}"
    pid_file = lab.dir / "run" / f"slurmd-{node}.pid"
    assert not lab.kubectl("get", "pods", "-A", "-l", "slurmpool.io/component=slurmd",
                           f"--field-selector=spec.nodeName={node}", "-o", "name").stdout.strip(), \
        f"a slurmd pod already runs on {node}"
    # A slurmd stopped by an earlier test is noticed by Slurm only after SlurmdTimeout (~20 s).
    # (A dynamic node whose slurmd never ran is not in Slurm at all.)
    lab.wait_for(lambda: not lab.slurm_knows(node) or
                 ((st := lab.node_state(node)) and ("NOT_RESPONDING" in st or st.startswith(("UNKNOWN", "DOWN"))) and st),
                 timeout=60, interval=0.5, message=f"{node} out of Slurm service before the test")

    with slurm_node_cleanup(lab, node):
        # 1. a slurmd pod brings the node into Slurm: idle with 8 GPUs within 10 s
        t0 = time.monotonic()
        lab.apply(json.dumps(slurmd_pod_manifest(name, node)))

        def idle_with_gpus():
            out = lab.slurm("sinfo", "-h", "-N", "-n", node, "-o", "%N %t %G").stdout.split()
            # LAB_GRES_CORES=1: the registered slurmd reports socket affinity, as real GPUs do.
            affinity = "(S:0-1)" in out[-1] if os.environ.get("LAB_GRES_CORES") == "1" else True
            return out if out[1:2] == ["idle"] and len(out) == 3 and gres_shortfall("gpu:h100:8", out[2]) is None and affinity else None
        lab.wait_for(idle_with_gpus, timeout=10, interval=0.05, message=f"{node} idle in sinfo")
        elapsed = time.monotonic() - t0
        report(capsys, f"slurmd pod created -> {node} idle with gpu:h100:8 in {elapsed:.2f} s")
        assert lab.node_state(node) == "IDLE"

        pod = lab.wait_for(lambda: (p := pod_or_none(lab, name)) and p["status"].get("phase") == "Running" and p,
                           timeout=10, message="pod Running")
        conds = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert conds["Ready"] == "True"
        cs = pod["status"]["containerStatuses"][0]
        assert cs["ready"] and "running" in cs["state"] and cs["restartCount"] == 0
        pid = int(pid_file.read_text())
        assert pid_alive(pid)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode().split("\0")
        assert argv[:4] == ["slurmd", "-D", "-N", node]
        if lab.dynamic_nodes:
            # The agent appended what a dynamic slurmd needs (README: the slurmd pod contract), and
            # the node Slurm created has the port and the place in the topology of its --conf line.
            ctld = f"{lab.env.get('LAB_SLURMCTLD_ADDR', '127.0.0.1')}:{lab.env['LAB_SLURMCTLD_PORT']}"
            assert argv[4:7] == ["-Z", "--conf-server", ctld], argv
            shown = lab.slurm("scontrol", "show", "node", "-o", node).stdout
            if lab.slurm_version == "24.11":
                # No Port= in 24.11's --conf: the slurmd runs in its node's network namespace
                # (e2e/lab/netns.sh) and Slurm knows it by the address it registered from.
                assert "Port=" not in argv[8], argv
                assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
                addr = lab.env["LAB_SLURMCTLD_ADDR"].rsplit(".", 1)[0] + f".{10 + int(node[3:])}"
                assert f" NodeAddr={addr} " in shown, shown
            else:
                port = argv[8].split("Port=")[1].split()[0]
                assert f" Port={port} " in shown and "Topology=default:spine:block-1:rack-1" in shown, shown
            assert " State=IDLE+DYNAMIC_NORM " in shown, shown
            assert "NodeName=gpu" not in lab.slurm_conf.read_text()  # Slurm knows nodes only from their slurmd

        # 2. a crashed slurmd is restarted (restartPolicy Always) and registers again
        os.kill(pid, 9)

        def restarted():
            p = pod_or_none(lab, name)
            c = p["status"]["containerStatuses"][0]
            return p if c["restartCount"] == 1 and c["ready"] else None
        pod = lab.wait_for(restarted, timeout=10, message="slurmd restarted")
        assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 137
        new_pid = int(pid_file.read_text())
        assert new_pid != pid and pid_alive(new_pid)
        lab.wait_for(lambda: lab.node_state(node) == "IDLE", timeout=10, message=f"{node} IDLE after restart")

        # 3. a job asking for all 8 GPUs of the node runs there to completion
        out = tmp_path / "job.out"
        job = lab.slurm("sbatch", "--parsable", "--gres=gpu:8", "-w", node, "-o", str(out),
                        "--wrap", "echo node=$SLURMD_NODENAME; sleep 5").stdout.strip()

        def job_state():
            txt = lab.slurm("scontrol", "show", "job", job).stdout
            return next(w.split("=", 1)[1] for w in txt.split() if w.startswith("JobState="))
        lab.wait_for(lambda: job_state() == "RUNNING", timeout=15, message=f"job {job} running")
        detail = lab.slurm("scontrol", "show", "node", "-d", node).stdout
        assert "GresUsed=gpu:h100:8" in detail, detail
        lab.wait_for(lambda: job_state() == "COMPLETED", timeout=30, interval=0.25, message=f"job {job} completed")
        assert out.read_text().strip() == f"node={node}"
        if lab.env.get("LAB_SLURMDBD") == "1":  # accounting on: slurmdbd recorded the job
            lab.wait_for(lambda: lab.slurm("sacct", "-n", "-X", "-j", job, "-o", "State,NodeList%20").stdout.split()
                         == ["COMPLETED", node], timeout=30, interval=0.25, message=f"job {job} in sacct")
        assert not lab.slurm("squeue", "-h", "-j", job, check=False).stdout.strip()

        # 4. the operator drains the node, then deletes the pod: slurmd stops at once (SIGTERM)
        #    and Slurm stops counting on the node once SlurmdTimeout passes
        lab.slurm("scontrol", "update", f"nodename={node}", "state=drain", "reason=e2e-test")
        assert "DRAIN" in lab.node_state(node)
        t0 = time.monotonic()
        lab.kubectl("delete", "pod", name, "--wait=false")
        lab.wait_for(lambda: not pid_alive(new_pid), timeout=6, interval=0.05, message="slurmd process gone")
        report(capsys, f"pod deleted -> slurmd process gone in {time.monotonic() - t0:.2f} s")
        lab.wait_for(lambda: pod_or_none(lab, name) is None, timeout=10, message="pod object gone")
        assert not pid_file.exists()
        lab.wait_for(lambda: "NOT_RESPONDING" in lab.node_state(node), timeout=3 * lab.slurmd_timeout + 10,
                     interval=0.5, message=f"{node} NOT_RESPONDING")
        state = lab.node_state(node)
        assert "DRAIN" in state, state
        report(capsys, f"pod deleted -> Slurm shows {node} {state} after {time.monotonic() - t0:.1f} s")
        assert lab.slurm("sinfo", "-h", "-N", "-n", node, "-o", "%t").stdout.strip().endswith("*")


def test_ssh_runs_scontrol(lab):
    if lab.dynamic_nodes:  # gpu01 exists in Slurm only once a slurmd registered it
        out = lab.ssh("scontrol show partition gpu").stdout
        assert "PartitionName=gpu" in out and "Nodes=ALL" in out, out
    else:
        out = lab.ssh("scontrol show node gpu01").stdout
        assert "NodeName=gpu01" in out and "Gres=gpu:h100:8" in out
    # Remote commands talk to the lab's slurmctld (sshd's SetEnv), as the operator's would, with the
    # clients of the lab's Slurm version (26.05: the built ones, first in the SetEnv PATH).
    assert lab.ssh("echo $SLURM_CONF").stdout.strip() == str(lab.slurm_conf)
    version = lab.ssh("scontrol --version").stdout.split()
    assert version[0] in ("slurm", "slurm-wlm") and version[1].startswith(lab.slurm_version + "."), version


def test_26_05_auth_socket_is_the_labs_own(lab):
    """auth/slurm serves tokens on host-wide paths; the lab's slurmctld has its own (a bind mount in its
    mount namespace), and its clients reach it only through SLURM_SACK_SOCKET."""
    import stat

    if lab.slurm_version != "26.05":
        pytest.skip("auth/slurm: LAB_SLURM=26.05")
    sock = lab.env["SLURM_SACK_SOCKET"]
    assert sock.startswith(str(lab.dir) + "/") and stat.S_ISSOCK(os.stat(sock).st_mode), sock
    ctld = int((lab.dir / "run" / "slurmctld.pid").read_text())
    with open(f"/proc/{ctld}/mountinfo") as f:
        assert any(line.split()[4] == "/run/slurmctld" for line in f), "slurmctld has no /run/slurmctld of its own"
    assert not os.path.exists("/run/slurmctld/sack.socket") or os.stat("/run/slurmctld/sack.socket").st_ino != os.stat(sock).st_ino
    # Without the lab's socket a client cannot authenticate: the lab's Slurm is not reached through
    # anything host-wide.
    env = {**lab.env, "SLURM_SACK_SOCKET": str(lab.dir / "no-such.socket")}
    p = subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 or "DOWN" in p.stdout, p.stdout + p.stderr


def test_slurmrestd_takes_the_labs_jwt(lab):
    """24.11 and 26.05: slurmrestd (rest_auth/jwt) answers 401 without a token and serves the highest
    API version of its Slurm with the token up.sh wrote into the env file."""
    import urllib.error
    import urllib.request

    if lab.slurm_version == "22.05":
        pytest.skip("slurmrestd: LAB_SLURM=24.11 or 26.05")
    api, major = {"24.11": ("v0.0.42", "24"), "26.05": ("v0.0.45", "26")}[lab.slurm_version]
    url = lab.env["LAB_SLURMRESTD_URL"] + f"/slurm/{api}/ping"
    with pytest.raises(urllib.error.HTTPError) as no_token:
        urllib.request.urlopen(url, timeout=10)
    assert no_token.value.code == 401
    req = urllib.request.Request(url, headers={"X-SLURM-USER-NAME": lab.env["LAB_SLURM_JWT_USER"],
                                               "X-SLURM-USER-TOKEN": lab.env["LAB_SLURM_JWT"]})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = json.loads(r.read())
    assert body["pings"][0]["responding"] and not body.get("errors"), body
    assert body["meta"]["slurm"]["version"]["major"] == major, body["meta"]


def test_deployment_with_pdb_and_drain(lab, capsys):
    app = f"lab-web-{uuid.uuid4().hex[:6]}"
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"nodeSelector": {"slurmpool.io/lab": "true"}, "terminationGracePeriodSeconds": 5,
                         "containers": [{"name": "web", "image": "inference:lab"}]},
            },
        },
    }
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": app, "namespace": "default"},
           "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": app}}}}
    drained = None
    try:
        lab.apply(json.dumps(deployment))
        lab.apply(json.dumps(pdb))
        lab.kubectl("rollout", "status", f"deployment/{app}", "--timeout=60s", timeout=70)
        pods = lab.kubectl_json("get", "pods", "-l", f"app={app}")["items"]
        assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)
        assert all(p["spec"]["nodeName"] in lab.nodes for p in pods)
        lab.wait_for(lambda: pdb_json(lab, app, "default")["status"].get("currentHealthy") == 2,
                     timeout=30, message="PDB sees 2 healthy pods")
        drained = pods[0]["spec"]["nodeName"]

        # The PDB allows no disruption: drain cordons the node, then cannot evict the pod.
        p = lab.kubectl("drain", drained, "--ignore-daemonsets", "--timeout=10s", check=False, timeout=60)
        assert p.returncode != 0, p.stdout
        assert "violate the pod's disruption budget" in p.stdout + p.stderr, p.stdout + p.stderr
        assert lab.kubectl_json("get", "node", drained)["spec"].get("unschedulable") is True
        on_node = [q for q in lab.kubectl_json("get", "pods", "-l", f"app={app}")["items"]
                   if q["spec"]["nodeName"] == drained]
        assert on_node and not on_node[0]["metadata"].get("deletionTimestamp"), "PDB did not protect the pod"

        # Relaxing the PDB lets the drain finish; the Deployment comes back on other nodes.
        lab.kubectl("patch", "pdb", app, "--type=merge", "-p", '{"spec":{"minAvailable":null,"maxUnavailable":1}}')
        lab.wait_for(lambda: pdb_json(lab, app, "default")["status"].get("disruptionsAllowed") == 1,
                     timeout=30, message="PDB allows one disruption")
        t0 = time.monotonic()
        lab.kubectl("drain", drained, "--ignore-daemonsets", "--timeout=60s", timeout=90)
        report(capsys, f"drain of {drained} after relaxing the PDB took {time.monotonic() - t0:.1f} s")
        lab.kubectl("rollout", "status", f"deployment/{app}", "--timeout=60s", timeout=70)
        pods = lab.kubectl_json("get", "pods", "-l", f"app={app}")["items"]
        running = [q for q in pods if not q["metadata"].get("deletionTimestamp")]
        assert len(running) == 2 and all(q["spec"]["nodeName"] != drained for q in running)
    finally:
        if drained:
            lab.kubectl("uncordon", drained, check=False)
        lab.kubectl("delete", "pdb", app, "--ignore-not-found", check=False)
        lab.kubectl("delete", "deployment", app, "--ignore-not-found", "--wait=true", "--timeout=30s", check=False)
        lab.wait_for(lambda: not pods_json(lab, "default", f"app={app}"), timeout=30,
                     message="deployment pods gone")
    assert drained and not lab.kubectl_json("get", "node", drained)["spec"].get("unschedulable")
