"""Real kubelet nodes (LAB_REAL_NODES=N, e2e/lab/real-nodes.sh): what the node agent can only
simulate, run by a real kubelet with containerd.

* the operator image (deploy/docker/build-images.sh) installed by `helm install` of the chart, as a
  pod on a real node under the chart's ServiceAccount, security context and liveness probe;
* the kubelet restarting the operator's container killed mid-move, the move completing once;
* two replicas: the leader's pod deleted, the other takes the Lease;
* the slurmd image serving a Slurm node: munge key from a Secret, a job run to completion, and a
  SIGTERM while a job runs leaving the job and the node's Slurm state alone;
* a PDB refusing a real kubelet's eviction, and the kubelet terminating the pod once allowed;
* real-nodes.sh stop leaving no process, cgroup, address, bridge, mount or sysctl change behind
  (last: it restarts the real nodes).

Skipped, with the reason, on a lab without real nodes (LAB_REAL_NODES=0, make lab-up's default).
"""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

import harness
from harness import (
    NAMESPACE,
    apply,
    ensure_namespace_and_secret,
    events,
    install_crd,
    job_state,
    munge_secret,
    node_json,
    pod_json,
    pods_json,
    pool_manifest,
    pool_status,
    real_slurmd_pod,
    reset_lab,
    sbatch,
    wait,
)
from identity import OPERATOR_NAMESPACE, TOLERATE_REAL, apply_admission_policies, apply_operator_rbac, chart_values, port_offset

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "slurmpool"
LAB = REPO / "e2e" / "lab"
POOL = "real-chart"
RELEASE = "slurmpool"


def node_ip(lab, node: str) -> str:
    return next(a["address"] for a in node_json(lab, node)["status"]["addresses"] if a["type"] == "InternalIP")


def kubelet_get(lab, node: str, path: str) -> str:
    """GET from the node's kubelet (https on its lo address; the lab's kubelets allow anonymous reads)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(f"https://{node_ip(lab, node)}:10250{path}", context=ctx, timeout=10) as r:
        return r.read().decode()


def probe_results(lab, node: str, pod: str) -> dict[str, float]:
    """The kubelet's own count of its liveness probes of the pod, by result."""
    out: dict[str, float] = {}
    for line in kubelet_get(lab, node, "/metrics/probes").splitlines():
        if line.startswith("prober_probe_total{") and f'pod="{pod}"' in line and 'probe_type="Liveness"' in line:
            result = re.search(r'result="([^"]+)"', line).group(1)
            out[result] = out.get(result, 0) + float(line.rsplit(" ", 1)[1])
    return out


def container_pids(lab, node: str, container_id: str) -> list[int]:
    """PIDs of one container, from the node's cgroups (the kubelet's cgroupRoot under /slurmpool-labK-NODE)."""
    k = port_offset(lab) // 100
    root = Path(f"/sys/fs/cgroup/pids/slurmpool-lab{k}-{node}")
    pids: set[int] = set()
    for d in root.rglob(f"*{container_id}*"):
        if (d / "cgroup.procs").exists():
            pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
    return sorted(pids)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def real(lab) -> list[str]:
    n = int(lab.env.get("LAB_REAL_NODES", "0"))
    if n == 0:
        pytest.skip("LAB_REAL_NODES=0: this lab has no real kubelet nodes (bring it up with LAB_REAL_NODES=2 make lab-up)")
    names = [f"real{i:02d}" for i in range(1, n + 1)]

    def ready(name):
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node_json(lab, name)["status"]["conditions"])
    wait(lambda: all(ready(x) for x in names), 60, what="real nodes Ready")
    return names


@pytest.fixture(scope="module")
def images(lab, real) -> dict[str, str]:
    """Both images built (cached when unchanged) and imported into the real nodes' containerd."""
    t0 = time.monotonic()
    # SLURMD_PYXIS=0: no -pyxis variant (e2e/test_pyxis.py's), not built or imported here
    p = subprocess.run([str(REPO / "deploy" / "docker" / "build-images.sh"), "--import"], env={**lab.env, "SLURMD_PYXIS": "0"},
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    names = dict(line.split("=", 1) for line in p.stdout.split())
    print(f"images built/imported in {time.monotonic() - t0:.1f} s: {sorted(names)}")
    operator = next(n for n in names if "/slurmpool:" in n)
    slurmd = next(n for n in names if "/slurmd:" in n and not n.endswith("-pyxis"))
    return {"operator": operator, "slurmd": slurmd}


def helm_bin() -> str:
    return subprocess.run([str(LAB / "build-helm.sh")], check=True, capture_output=True, text=True).stdout.strip()


class Chart:
    def __init__(self, lab, values: dict):
        self.lab, self.helm, self.values = lab, helm_bin(), values

    def run(self, verb: str, *extra: str) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            yaml.safe_dump(self.values, f)
            f.flush()
            p = subprocess.run([self.helm, verb, RELEASE, str(CHART), "-n", OPERATOR_NAMESPACE, "-f", f.name, *extra,
                                "--wait", "--timeout", "180s"], env=self.lab.env, capture_output=True, text=True, timeout=240)
        assert p.returncode == 0, p.stdout + p.stderr

    def uninstall(self) -> None:
        subprocess.run([self.helm, "uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--ignore-not-found", "--wait",
                        "--timeout", "120s"], env=self.lab.env, capture_output=True, text=True, timeout=180)

    def pods(self) -> list[dict]:
        return [p for p in pods_json(self.lab, OPERATOR_NAMESPACE, f"app.kubernetes.io/instance={RELEASE}")
                if not p["metadata"].get("deletionTimestamp")]


@pytest.fixture(scope="module")
def chart(lab, real, images):
    """`helm install` of the chart with the local image, on the real nodes. The lab's apiserver and
    sshd listen on 127.0.0.1 only, so the pod uses the node's network (hostNetwork: metrics and
    health bind the node's lo address) and the apiserver's address instead of the kubernetes Service
    (the lab runs no kube-proxy). The release takes over the RBAC objects the suite applied
    (--take-ownership); at the end they are applied again for the other modules."""
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    values = chart_values(lab, images["operator"])
    apply_operator_rbac(lab)  # the release namespace as the suite makes it (the release adopts the rest)
    # hostNetwork is outside the Pod Security level "restricted" the release namespace enforces
    # (deploy/manifests); apply_operator_rbac sets it back at the end.
    lab.kubectl("label", "namespace", OPERATOR_NAMESPACE, "pod-security.kubernetes.io/enforce=privileged", "--overwrite")
    c = Chart(lab, values)
    c.uninstall()  # a release an interrupted session left
    try:
        c.run("install", "--take-ownership", "--force-conflicts")
        yield c
    finally:
        c.uninstall()
        reset_lab(lab)
    # What the suite's other modules expect: the chart's RBAC (a new ServiceAccount: new tokens) and
    # admission policies.
    apply_operator_rbac(lab)
    harness._SA_KUBECONFIGS.clear()
    apply_admission_policies(lab)


def operator_pod(chart: Chart) -> dict:
    pods = wait(lambda: [p for p in chart.pods() if any(c["type"] == "Ready" and c["status"] == "True"
                                                        for c in p["status"].get("conditions", []))], 120,
                what="a Ready operator pod")
    return pods[0]


# ---------------------------------------------------------------- the operator as a pod


def test_operator_pod_runs_under_the_chart(lab, real, images, chart):
    pod = operator_pod(chart)
    name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
    assert node in real
    assert pod["spec"]["serviceAccountName"] == "slurmpool"
    status = pod["status"]["containerStatuses"][0]
    assert status["image"] == images["operator"] and status["ready"], status
    # the security context, enforced by the runtime: non-root uid, read-only root, no capabilities
    exec_ = ["exec", "-n", OPERATOR_NAMESPACE, name, "-c", "operator", "--"]
    assert lab.kubectl(*exec_, "id", "-u").stdout.strip() == "65532"
    ro = lab.kubectl(*exec_, "touch", "/probe", check=False)
    assert ro.returncode != 0 and "Read-only file system" in ro.stderr, ro
    caps = lab.kubectl(*exec_, "grep", "^CapEff", "/proc/1/status").stdout.split()[1]
    assert int(caps, 16) == 0, caps
    # the liveness probe, as the kubelet counts it: passed, never failed
    results = wait(lambda: (r := probe_results(lab, node, name)).get("successful", 0) >= 1 and r, 60,
                   what="a successful liveness probe")
    assert set(results) == {"successful"}, results
    mem = next(float(line.split()[1]) for line in kubelet_get(lab, node, "/metrics/resource").splitlines()
               if line.startswith("container_memory_working_set_bytes{") and f'pod="{name}"' in line)
    print(f"operator pod {name} on {node}: Ready, liveness {results}, memory working set {mem / 2**20:.0f} MiB")


def test_kubelet_restarts_the_killed_operator_and_the_move_completes_once(lab, real, chart):
    """The pod operator runs a pool of the lab's (simulated) gpu nodes; a move to inference waits in
    Draining for a job; the operator's container is SIGKILLed; the kubelet restarts it; the move
    completes once when the job ends."""
    apply(lab, pool_manifest(lab, POOL, 8))
    wait(lambda: pool_status(lab, POOL).get("slurm", {}).get("ready") == 8, 180, what="8 Slurm nodes (operator pod)")
    node = "gpu03"
    job = sbatch(lab, node, 600)
    wait(lambda: job_state(lab, job) == "RUNNING", 30, what="job running")
    lab.kubectl("annotate", "node", node, "slurmpool.io/move-now=inference", "--overwrite")
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=7")

    def phase():
        rec = (node_json(lab, node)["metadata"].get("annotations") or {}).get("slurmpool.io/move")
        return json.loads(rec)["phase"] if rec else None
    wait(lambda: phase() == "Draining", 60, what=f"{node} Draining")
    # Events are posted by workers after the record is written: a SIGKILL in between loses the
    # queued ones (a SIGTERM flushes them). The kill comes once the move's start is on record.
    wait(lambda: [m for m in events(lab, "MoveStarted") if m.startswith(f"{node}: slurm -> inference")], 30,
         what="the MoveStarted Event")
    pod = operator_pod(chart)
    name, on = pod["metadata"]["name"], pod["spec"]["nodeName"]
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    pids = container_pids(lab, on, cid)
    assert pids, f"no processes found for container {cid} on {on}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)

    def restarted():
        p = pod_json(lab, name, OPERATOR_NAMESPACE)
        cs = p["status"]["containerStatuses"][0]
        return cs["restartCount"] > restarts and cs["ready"] and cs
    cs = wait(restarted, 120, what="the kubelet to restart the operator container")
    assert cs["lastState"]["terminated"]["exitCode"] == 137, cs  # SIGKILL
    assert phase() == "Draining"  # the move waits for the job, across the restart
    lab.slurm("scancel", job)

    def settled():
        s = pool_status(lab, POOL)
        return s.get("slurm", {}).get("ready") == 7 and s.get("moving") == 0 and phase() is None
    wait(settled, 120, what="7/1 after the move")
    placement = (node_json(lab, node)["metadata"].get("annotations") or {}).get("slurmpool.io/placement", "")
    assert placement.startswith("inference"), placement
    # "gpu03: slurm -> inference:llm (move-now, move ID)", "gpu03 now serves inference:llm (move ID)"
    completed = wait(lambda: [m for m in events(lab, "MoveCompleted") if m.startswith(f"{node} now serves inference")], 60,
                     what="the MoveCompleted Event")
    started = [m for m in events(lab, "MoveStarted") if m.startswith(f"{node}: slurm -> inference")]
    assert len(started) == 1 and len(completed) == 1, (started, completed)
    assert started[0].rsplit("move ", 1)[1] == completed[0].rsplit("move ", 1)[1], (started, completed)  # the same move
    print(f"operator container SIGKILLed mid-move ({node} Draining); restarted by the kubelet "
          f"(restartCount {cs['restartCount']}); the move completed once: {completed[0]}")


def test_two_replicas_the_leaders_pod_deleted_the_other_takes_over(lab, real, chart):
    if len(real) < 2:
        pytest.skip("two replicas need two real nodes (their host ports are the same)")
    apply(lab, pool_manifest(lab, POOL, 7))  # a pool: the replicas elect a leader once they index one
    chart.values["replicas"] = 2
    try:
        try:
            chart.run("upgrade", "--force-conflicts")
        except AssertionError:
            print(json.dumps([(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"]) for p in chart.pods()], indent=1)[:4000])
            raise
        pods = wait(lambda: len(ps := [p for p in chart.pods() if p["status"].get("phase") == "Running"]) == 2 and ps, 120,
                    what="two operator pods")
        assert len({p["spec"]["nodeName"] for p in pods}) == 2, pods  # same host ports: one per node
        names = {p["metadata"]["name"] for p in pods}
        coord = client.CoordinationV1Api(lab.api())

        def holder():
            try:
                return coord.read_namespaced_lease("slurmpool", OPERATOR_NAMESPACE).spec.holder_identity
            except ApiException:
                return None
        leader = wait(lambda: (h := holder()) in names and h, 60, what="a replica holding the Lease")
        lab.kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, leader, "--wait=false")
        # The other replica, or the Deployment's replacement of the deleted one, takes it over: any
        # running replica but the deleted leader.
        def new_leader():
            running = {p["metadata"]["name"] for p in chart.pods() if p["status"].get("phase") == "Running"}
            h = holder()
            return h if h and h != leader and h in running else None
        try:
            other = wait(new_leader, 90, what=f"another replica to take the Lease from {leader}")
        except AssertionError:
            print(holder(), json.dumps([(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"))
                                        for p in chart.pods()]))
            raise
        # the new leader acts: a split change is carried out
        lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=8")
        wait(lambda: pool_status(lab, POOL).get("slurm", {}).get("ready") == 8 and pool_status(lab, POOL).get("moving") == 0,
             120, what="8/0 under the new leader")
        print(f"leader {leader} deleted; {other} took the Lease and moved the pool to 8/0")
    finally:
        chart.values["replicas"] = 1
        chart.run("upgrade", "--force-conflicts")


# ---------------------------------------------------------------- the slurmd image


def test_slurmd_image_serves_a_node_and_sigterm_leaves_running_jobs_alone(lab, real, images):
    """The slurmd image on a real node serves Slurm node gpu08 of the lab (static node, port
    17008 + offset on 127.0.0.1: the pod uses the host network), its munge key from a Secret,
    the lab's slurm.conf from a hostPath. A job runs to completion; then the pod is deleted while a
    job runs: the entrypoint keeps slurmd serving until the job ends, the node is never DOWN and the
    job COMPLETES; then the pod goes."""
    reset_lab(lab)  # no pool of an earlier test serves gpu08 through the node agent
    ensure_namespace_and_secret(lab)
    slurm_node, host = "gpu08", real[-1]
    t = real_slurmd_pod(lab, images["slurmd"], "slurm-auth", grace=300)
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "slurmd-image", "namespace": NAMESPACE, "labels": {"app": "slurmd-image"}},
        "spec": {
            "nodeName": host, "hostNetwork": True, "tolerations": t["tolerations"],
            "terminationGracePeriodSeconds": t["terminationGracePeriodSeconds"],
            "containers": [{
                "name": "slurmd", "image": t["image"], "imagePullPolicy": "Never",
                "env": [{"name": "NODE_NAME", "value": slurm_node}, *t["env"]],
                # GPUs through the ordinary request: the kubelet admits it against the node's capacity
                "resources": t["resources"], "volumeMounts": t["volumeMounts"],
                **({"securityContext": t["securityContext"]} if "securityContext" in t else {}),
            }],
            "volumes": t["volumes"],
        },
    }
    secret = munge_secret(lab, "slurm-auth")
    apply(lab, [secret, pod])
    try:
        wait(lambda: (s := lab.node_state(slurm_node)).startswith("IDLE") and "NOT_RESPONDING" not in s, 90,
             what=f"{slurm_node} IDLE, served by the image's slurmd")
        first = sbatch(lab, slurm_node, 1)
        wait(lambda: job_state(lab, first) == "COMPLETED", 60, what="a job to complete on the image's slurmd")
        long_job = sbatch(lab, slurm_node, 8)
        wait(lambda: job_state(lab, long_job) == "RUNNING", 30, what="a job running")
        lab.kubectl("delete", "pod", "slurmd-image", "-n", NAMESPACE, "--wait=false")
        logs = lambda: lab.kubectl("logs", "-n", NAMESPACE, "slurmd-image", check=False).stdout  # noqa: E731
        wait(lambda: "SIGTERM with job steps running" in logs(), 30, what="the entrypoint to hold slurmd for the job")
        states = []

        def job_done():
            states.append(lab.node_state(slurm_node))
            return job_state(lab, long_job) not in ("RUNNING", "COMPLETING") and job_state(lab, long_job)
        final = wait(job_done, 120, interval=0.5, what="the running job to end")
        assert final == "COMPLETED", (final, states)
        assert not any("DOWN" in s for s in states), states
        wait(lambda: not [p for p in pods_json(lab, NAMESPACE, "app=slurmd-image")], 60, what="the pod to go")
        print(f"slurmd image {images['slurmd']}: {slurm_node} served from {host}; job {first} COMPLETED; pod deleted "
              f"during job {long_job}: node states {sorted(set(states))}, job {final}")
    finally:
        lab.kubectl("delete", "pod", "slurmd-image", "-n", NAMESPACE, "--ignore-not-found", "--grace-period=0", "--force",
                    check=False)
        lab.kubectl("delete", "secret", "slurm-auth", "-n", NAMESPACE, "--ignore-not-found", check=False)
        lab.slurm("scancel", "-w", slurm_node, check=False)


# ---------------------------------------------------------------- evictions by a real kubelet


def test_pdb_refuses_eviction_then_the_real_kubelet_terminates_the_pod(lab, real):
    ensure_namespace_and_secret(lab)
    node = real[0]
    deploy = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "infer", "namespace": NAMESPACE},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "infer"}},
                 "template": {"metadata": {"labels": {"app": "infer"}}, "spec": {
                     "nodeSelector": {"kubernetes.io/hostname": node}, "tolerations": [TOLERATE_REAL],
                     "containers": [{"name": "infer", "image": "slurmpool.local/pause:1", "imagePullPolicy": "Never"}]}}},
    }
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "infer", "namespace": NAMESPACE},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "infer"}}}}
    apply(lab, [deploy, pdb])
    try:
        pod = wait(lambda: [p for p in pods_json(lab, NAMESPACE, "app=infer") if p["status"].get("phase") == "Running"
                            and harness.pdb_json(lab, "infer")["status"].get("disruptionsAllowed") == 0
                            and harness.pdb_json(lab, "infer")["status"].get("currentHealthy") == 1], 60,
                   what="the inference pod running on the real node")[0]
        name = pod["metadata"]["name"]
        cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        assert container_pids(lab, node, cid), "the container runs under the real node's kubelet"
        lab.kubectl("cordon", node)  # as the operator does before evicting: the replacement stays Pending
        core = client.CoreV1Api(lab.api())
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=NAMESPACE))
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod_eviction(name, NAMESPACE, body)
        assert refused.value.status == 429 and "disruption budget" in refused.value.body, refused.value.body
        lab.kubectl("patch", "pdb", "infer", "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"minAvailable":0}}')
        wait(lambda: harness.pdb_json(lab, "infer")["status"].get("disruptionsAllowed") == 1, 30, what="the PDB relaxed")
        core.create_namespaced_pod_eviction(name, NAMESPACE, body)
        wait(lambda: not [p for p in pods_json(lab, NAMESPACE, "app=infer") if p["metadata"]["name"] == name], 60,
             what="the evicted pod terminated and gone")
        assert not container_pids(lab, node, cid), "the kubelet stopped the container"
    finally:
        lab.kubectl("uncordon", node, check=False)
        lab.kubectl("delete", "deployment,pdb", "infer", "-n", NAMESPACE, "--ignore-not-found", check=False)


# ---------------------------------------------------------------- a real node moves both ways under the installed operator


def test_each_real_node_moves_both_ways_under_the_installed_operator(lab, real, images, chart):
    """Each real node in turn, the operator pod on another one (a node joining Slurm evicts every
    pod, the operator's too): see move_both_ways."""
    if len(real) < 2:
        pytest.skip("the operator pod needs a real node besides the one that moves")
    for node in sorted(real, key=lambda n: n == operator_pod(chart)["spec"]["nodeName"]):
        op_node = operator_pod(chart)["spec"]["nodeName"]
        if op_node == node:  # pin the operator to a node that already moved (it serves inference now)
            other = next(n for n in real if n != node)
            chart.values["nodeSelector"] = {"slurmpool.io/real": "true", "kubernetes.io/hostname": other}
            chart.values["tolerations"] = [TOLERATE_REAL, {"key": "slurmpool.io/inference", "operator": "Exists"}]
            chart.run("upgrade", "--force-conflicts")
            wait(lambda other=other: operator_pod(chart)["spec"]["nodeName"] == other, 120, what=f"the operator pod on {other}")
        move_both_ways(lab, images, chart, node)


def move_both_ways(lab, images, chart, node: str) -> None:
    """A pool of one real node (not the operator pod's), its slurmd pod the shipped image (munge.key
    from a Secret volume, the lab's slurm.conf and fake GPUs from hostPath volumes, the GPUs requested
    as nvidia.com/gpu). To Slurm: the image's slurmd registers and the node is resumed. A job runs;
    to inference: the drain waits for the job, which completes, then the real kubelet stops the
    slurmd pod. An inference Deployment held by a PDB; back to Slurm: the eviction is refused until
    the PDB allows it, then the kubelet terminates the pod and slurmd registers again."""
    assert operator_pod(chart)["spec"]["nodeName"] != node
    clean_real_node(lab, node)
    secret = munge_secret(lab, "slurm-auth")
    pool = pool_manifest(lab, "real-move", 1)
    pool["spec"]["nodeSelector"] = {"matchLabels": {"slurmpool.io/real": "true", "kubernetes.io/hostname": node}}
    pool["spec"]["slurm"]["slurmdPod"] = real_slurmd_pod(lab, images["slurmd"], "slurm-auth", grace=120)
    name = "real-move"

    def at(slurm: int, inference: int):
        s = pool_status(lab, name)
        return s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == inference and s.get("moving") == 0

    def slurmd_pod():
        return [p for p in harness.slurmd_pods(lab) if p["spec"].get("nodeName") == node]
    try:
        t0 = time.monotonic()
        apply(lab, [secret, pool])
        wait(lambda: at(1, 0), 180, what=f"{node} in Slurm, served by the slurmd image")
        to_slurm_idle = time.monotonic() - t0
        (sp,) = slurmd_pod()
        assert sp["spec"]["containers"][0]["image"] == images["slurmd"] and sp["status"]["containerStatuses"][0]["ready"]
        assert lab.node_state(node).startswith("IDLE"), lab.node_state(node)
        job = sbatch(lab, node, 6)
        wait(lambda: job_state(lab, job) == "RUNNING", 30, what="a job on the real node")
        t1 = time.monotonic()
        lab.kubectl("scale", "snp", name, "-n", NAMESPACE, "--replicas=0")
        wait(lambda: at(0, 1), 180, what=f"{node} to inference after its job")
        assert job_state(lab, job) == "COMPLETED", job_state(lab, job)  # 0 jobs lost
        assert not slurmd_pod(), "the real kubelet stopped the slurmd pod"
        to_inference_with_job = time.monotonic() - t1
        deploy = {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "llm", "namespace": NAMESPACE},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llm"}},
                     "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {
                         "nodeSelector": {"kubernetes.io/hostname": node, "slurmpool.io/inference-pool": "llm"},
                         "tolerations": [TOLERATE_REAL, {"key": "slurmpool.io/inference", "operator": "Exists"}],
                         "containers": [{"name": "llm", "image": "slurmpool.local/pause:1", "imagePullPolicy": "Never"}]}}}}
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "llm", "namespace": NAMESPACE},
               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "llm"}}}}
        apply(lab, [deploy, pdb])
        (llm,) = wait(lambda: [p for p in pods_json(lab, NAMESPACE, "app=llm") if p["status"].get("phase") == "Running"]
                      if harness.pdb_json(lab, "llm")["status"].get("currentHealthy") == 1 else None, 60, what="the inference pod")
        t2 = time.monotonic()
        lab.kubectl("scale", "snp", name, "-n", NAMESPACE, "--replicas=1")
        blocked = wait(lambda: (c := harness.condition(lab, name, "DrainBlocked")).get("status") == "True"
                       and llm["metadata"]["name"] in c.get("message", "") and c, 60,
                       what="the PDB refusing the eviction (condition DrainBlocked naming the pod)")
        print(f"DrainBlocked: {blocked['message']}")
        assert [p["metadata"]["name"] for p in pods_json(lab, NAMESPACE, "app=llm")] == [llm["metadata"]["name"]]
        lab.kubectl("patch", "pdb", "llm", "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"minAvailable":0}}')
        wait(lambda: at(1, 0), 180, what=f"{node} back in Slurm")
        to_slurm_after_pdb = time.monotonic() - t2
        # The evicted pod's containers had stopped before the node went on (Evicting waits while it runs):
        # the real kubelet gives it a terminal phase, then removes the object a moment later.
        evicted = [p for p in pods_json(lab, NAMESPACE, "app=llm") if p["metadata"]["name"] == llm["metadata"]["name"]]
        assert all(p["status"].get("phase") in ("Succeeded", "Failed") for p in evicted), evicted
        wait(lambda: llm["metadata"]["name"] not in [p["metadata"]["name"] for p in pods_json(lab, NAMESPACE, "app=llm")],
             60, what="the evicted pod removed by the kubelet")
        assert lab.node_state(node).startswith("IDLE"), lab.node_state(node)
        # one idle move each way, for the closing note
        t3 = time.monotonic()
        lab.kubectl("scale", "snp", name, "-n", NAMESPACE, "--replicas=0")
        wait(lambda: at(0, 1), 180, what=f"{node} to inference (idle)")
        idle_to_inference = time.monotonic() - t3
        print(f"real node {node} under the installed operator: to Slurm (idle, first) {to_slurm_idle:.1f} s; to inference "
              f"with a running job {to_inference_with_job:.1f} s (job COMPLETED); to Slurm past a PDB {to_slurm_after_pdb:.1f} s; "
              f"to inference idle {idle_to_inference:.1f} s")
    finally:
        lab.kubectl("delete", "deployment,pdb", "llm", "-n", NAMESPACE, "--ignore-not-found", "--wait=true", check=False)
        lab.kubectl("delete", "snp", name, "-n", NAMESPACE, "--ignore-not-found", "--wait=true", check=False)
        lab.kubectl("delete", "secret", "slurm-auth", "-n", NAMESPACE, "--ignore-not-found", check=False)
        lab.kubectl("delete", "pod", "-n", NAMESPACE, "-l", "slurmpool.io/component=slurmd", "--field-selector",
                    f"spec.nodeName={node}", "--wait=true", check=False)
        clean_real_node(lab, node)


def clean_real_node(lab, node: str) -> None:
    """The real node as the lab makes it: nothing of slurmpool on its Node (reset_lab's per-node patch)
    and no slurmpool drain in Slurm (reset_lab covers the gpu nodes only)."""
    harness.reset_nodes(lab, [node])
    harness.resume_our_drains(lab, [node])
