"""Helpers for the operator's end-to-end tests: run the real operator as a process on the
lab (so a test can SIGKILL it), and build SlurmNodePools that reach Slurm over the lab's
real sshd."""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from slurmpool.core.poolpolicy import SLURMD_CAPABILITIES

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "slurmpool-e2e"
GROUP, VERSION, PLURAL = "slurmpool.io", "v1alpha1", "slurmnodepools"
# A short Lease for the tests that wait for one to expire (a follower taking over from a killed
# leader); the operator's defaults are 15 s and 3 s (leader.py).
SHORT_LEASE = {"SLURMPOOL_LEASE_DURATION": "6", "SLURMPOOL_LEASE_RENEW": "1"}


class Operator:
    """The operator as a child process, logging to a file under the lab directory.

    It runs as the chart's ServiceAccount (identity "serviceaccount", the default): the RBAC of
    deploy/manifests/slurmpool.yaml is applied to the lab and the operator gets a kubeconfig with
    that account's token (e2e/identity.py), so a permission the chart lacks fails the test.
    identity="admin" (or SLURMPOOL_E2E_IDENTITY=admin) uses the lab's admin kubeconfig instead."""

    # Started and not yet stopped: a module fixture that fails before its yield never stops its
    # operator, and conftest's module teardown does (with the module's pools).
    running: set["Operator"] = set()

    def __init__(self, lab, log_name: str = "operator.log", extra_env: dict | None = None, identity: str | None = None,
                 args: list[str] | None = None):
        self.lab = lab
        self.args = args or ["run", "--metrics-port", "0"]  # e.g. the chart Deployment's args
        self.log_path = Path(lab.dir) / "log" / log_name
        self.extra_env = extra_env or {}
        self.identity = identity or os.environ.get("SLURMPOOL_E2E_IDENTITY", "serviceaccount")
        self.proc: subprocess.Popen | None = None

    def start(self) -> Operator:
        from identity import lab_pool_policy

        env = {**os.environ, **self.lab.env, "SLURMPOOL_INTERVAL": "0.5",
               "SLURMPOOL_POOL_POLICY": json.dumps(lab_pool_policy()), **self.extra_env}
        if self.identity == "serviceaccount" and "KUBECONFIG" not in self.extra_env:
            env["KUBECONFIG"] = str(_operator_kubeconfig(self.lab))
            # The chart grants the Lease only in the release namespace (leader-rbac.yaml).
            env.setdefault("SLURMPOOL_LEASE_NAMESPACE", "slurmpool-system")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slurmpool", *self.args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
        Operator.running.add(self)
        return self

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last status write. What a crash looks like."""
        Operator.running.discard(self)
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        Operator.running.discard(self)
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


_SA_KUBECONFIGS: dict[str, Path] = {}


def _operator_kubeconfig(lab) -> Path:
    """identity.operator_kubeconfig (the chart's RBAC applied, a 12 h token of its ServiceAccount),
    once per pytest session and lab: no test removes that RBAC or account, so every operator the
    session starts after the first reuses the kubeconfig instead of three more kubectl runs."""
    from identity import operator_kubeconfig

    # The env file is written anew by each lab-up: a lab restarted in the same session (bench.py's
    # Slurm matrix) has new ServiceAccount keys, and the old token would be refused.
    env_file = Path(lab.dir) / "env"
    key = f"{lab.dir}:{env_file.stat().st_mtime_ns if env_file.exists() else 0}"
    path = _SA_KUBECONFIGS.get(key)
    if path is None or not path.exists():
        path = _SA_KUBECONFIGS[key] = operator_kubeconfig(lab)
    return path


def lab_access() -> str:
    """How the e2e pools reach Slurm: LAB_ACCESS=ssh (default) or rest (the lab's slurmrestd, 26.05
    and 24.11 labs). The Slurm matrix (e2e/matrix.sh) runs the same modules both ways."""
    access = os.environ.get("LAB_ACCESS", "ssh")
    if access not in ("ssh", "rest"):
        raise ValueError(f"LAB_ACCESS must be ssh or rest, not {access!r}")
    return access


def access_spec(lab, access: str | None = None) -> dict:
    if (access or lab_access()) == "rest":
        if not lab.env.get("LAB_SLURMRESTD_URL"):
            raise RuntimeError("LAB_ACCESS=rest needs a lab with slurmrestd (LAB_SLURM=26.05 or 24.11)")
        return {"rest": {"url": lab.env["LAB_SLURMRESTD_URL"], "tokenSecretRef": {"name": "slurm-jwt"}}}
    return {"ssh": {"host": lab.ssh_host, "port": int(lab.ssh_port), "user": lab.ssh_user, "secretRef": {"name": "slurm-ssh"}}}


def pool_manifest(lab, name: str, slurm_nodes: int, namespace: str = NAMESPACE, **overrides) -> dict:
    spec = {
        "nodeSelector": {"matchLabels": {"slurmpool.io/lab": "true"}},
        "slurmNodes": slurm_nodes,
        "maxConcurrentMoves": 8,
        "slurm": {
            "partition": "gpu",
            "gres": "gpu:h100:8",
            "slurmdPod": {"image": "slurmd:22.05", "command": ["slurmd", "-D", "-N", "$(NODE_NAME)"]},
            "access": access_spec(lab),
            "registerTimeout": "60s",
        },
        "inference": {
            "pools": [
                {
                    "name": "llm",
                    "labels": {"slurmpool.io/inference-pool": "llm"},
                    "taints": [{"key": "slurmpool.io/inference", "value": "llm", "effect": "NoSchedule"}],
                }
            ]
        },
        "drain": {"timeout": "10m"},
    }
    _merge(spec, overrides)
    return {"apiVersion": "slurmpool.io/v1alpha1", "kind": "SlurmNodePool", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


# What a slurmd pod needs for Slurm's cgroups (LAB_CGROUPS=1; docs/slurmd-pod.md): the capabilities
# the operator gives slurmd, and CAP_SYS_ADMIN (the entrypoint makes the container's cgroup view
# writable and starts slurmd in a cgroup namespace; slurmd writes its jobs' device rules). Not privileged.
CGROUPS_SECURITY_CONTEXT = {"capabilities": {"drop": ["ALL"], "add": [*SLURMD_CAPABILITIES, "SYS_ADMIN"]}}


def munge_secret(lab, name: str, namespace: str = NAMESPACE) -> dict:
    """A Secret with the lab's munge.key, for a slurmd pod's auth volume."""
    key = Path(lab.env["LAB_DIR"]) / "munge" / "munge.key"
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": {"munge.key": base64.b64encode(key.read_bytes()).decode()}}


def real_slurmd_pod(lab, image: str, secret: str, *, conf: str | None = None, dirs: dict[str, str] | None = None,
                    volumes: tuple[dict, ...] = (), volume_mounts: tuple[dict, ...] = (), grace: int = 60) -> dict:
    """The slurmd pod of a real kubelet node: the shipped IMAGE's entrypoint, munge.key from the
    Secret SECRET, the lab's slurm.conf (or CONF) and fake GPUs (and DIRS: name -> lab directory) from
    read-only hostPath volumes at the same paths, the node's 8 GPUs requested. With LAB_CGROUPS=1,
    what Slurm's cgroups need (CGROUPS_SECURITY_CONTEXT)."""
    from identity import TOLERATE_REAL

    lab_dir = lab.env["LAB_DIR"]
    cgroups = lab.env.get("LAB_CGROUPS") == "1"
    # LAB_CGROUPS=1: the GPU stand-ins come from the lab's device plugin (as NVIDIA's plugin gives
    # GPUs), into the pod's device cgroup; a hostPath volume of them could not be opened.
    paths = {"etc": f"{lab_dir}/etc", **({} if cgroups else {"fakedev": f"{lab_dir}/fakedev"}), **(dirs or {})}
    pod = {
        "image": image, "command": ["/usr/local/bin/slurmd-entrypoint"],
        "env": [{"name": "SLURM_CONF", "value": conf or f"{lab_dir}/etc/slurm.conf"}],
        "resources": {"limits": {"nvidia.com/gpu": "8"}},
        "tolerations": [TOLERATE_REAL], "terminationGracePeriodSeconds": grace,
        "volumes": [*({"name": n, "hostPath": {"path": p, "type": "Directory"}} for n, p in paths.items()),
                    {"name": "auth", "secret": {"secretName": secret, "defaultMode": 0o400}}, *volumes],
        "volumeMounts": [*({"name": n, "mountPath": p, "readOnly": True} for n, p in paths.items()),
                         {"name": "auth", "mountPath": "/etc/slurm-auth", "readOnly": True}, *volume_mounts],
    }
    if cgroups:
        pod["securityContext"] = CGROUPS_SECURITY_CONTEXT
    return pod


@contextlib.contextmanager
def real_nodes_in_slurm(lab, pool_name: str, nodes: list[str], image: str, dirs: dict[str, str] | None = None):
    """A pool of the real NODES, all moved into Slurm by the operator, each served by a slurmd pod of
    IMAGE (real_slurmd_pod, with DIRS). Yields their Slurm names. At the end they go back to inference
    (the kubelets stop the slurmd pods), the pool is deleted and the nodes are clean."""
    secret = f"{pool_name}-auth"
    pool = pool_manifest(lab, pool_name, len(nodes))
    pool["spec"]["nodeSelector"] = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}],
                                    "matchLabels": {"slurmpool.io/real": "true"}}
    pool["spec"]["slurm"]["slurmdPod"] = real_slurmd_pod(lab, image, secret, dirs=dirs)

    def at(slurm: int, inference: int) -> bool:
        s = pool_status(lab, pool_name)
        return s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == inference and s.get("moving") == 0

    def pods() -> list[dict]:
        return [p for p in slurmd_pods(lab) if p["spec"].get("nodeName") in nodes]
    try:
        apply(lab, [munge_secret(lab, secret), pool])
        wait(lambda: at(len(nodes), 0), 240, what=f"{nodes} in Slurm, served by {image}")
        assert sorted(p["spec"]["nodeName"] for p in pods()) == sorted(nodes), [p["metadata"]["name"] for p in pods()]
        assert all(p["spec"]["containers"][0]["image"] == image for p in pods())
        for node in nodes:
            assert lab.node_state(lab.slurm_name(node)).startswith("IDLE"), lab.node_state(lab.slurm_name(node))
        yield [lab.slurm_name(n) for n in nodes]
        lab.kubectl("scale", "snp", pool_name, "-n", NAMESPACE, "--replicas=0")
        wait(lambda: at(0, len(nodes)), 240, what=f"{nodes} back to inference")
        wait(lambda: not pods(), 120, what="the real kubelets stopping the slurmd pods")
    finally:
        lab.kubectl("delete", "snp", pool_name, "-n", NAMESPACE, "--ignore-not-found", "--wait=true", check=False)
        lab.kubectl("delete", "secret", secret, "-n", NAMESPACE, "--ignore-not-found", check=False)
        for node in nodes:
            lab.kubectl("delete", "pod", "-n", NAMESPACE, "-l", "slurmpool.io/component=slurmd", "--field-selector",
                        f"spec.nodeName={node}", "--wait=true", check=False)
        reset_nodes(lab, nodes)
        resume_our_drains(lab, nodes)


def two_real_nodes(lab) -> list[str]:
    """The lab's first two real nodes, Ready, for a job across two slurmd pods of the 22.05 image;
    skips the test elsewhere, saying why."""
    import pytest

    if lab.slurm_version != "22.05" or len(lab.real_nodes) < 2:
        pytest.skip("needs a 22.05 lab with two real kubelet nodes (LAB_REAL_NODES=2, as make e2e's)")
    if lab.env.get("LAB_PYXIS") == "1":
        pytest.skip("the lab's plugstack.conf names the host's pyxis, which the slurmd image has not (e2e/test_pyxis.py)")
    nodes = lab.real_nodes[:2]

    def ready(name):
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node_json(lab, name)["status"]["conditions"])
    wait(lambda: all(ready(n) for n in nodes), 60, what="two real nodes Ready")
    return nodes


def srun_pmix(lab, nodes: list[str], *command: str) -> list[str]:
    """`srun --mpi=pmix`, one task on each of NODES, from the lab host; its output lines, sorted."""
    p = lab.slurm("srun", "-p", "gpu", "--time=5", f"-N{len(nodes)}", "--ntasks-per-node=1", "-w", ",".join(nodes),
                  "--mpi=pmix", *command, check=False, timeout=120)
    assert p.returncode == 0, f"srun exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return sorted(p.stdout.splitlines())


def imported_slurmd_image(lab, tag: str = "22.05") -> tuple[str, str]:
    """The slurmd image TAG (e.g. 22.05, 22.05-pyxis) built by deploy/docker/build-images.sh (cached
    when unchanged) and imported into the real nodes' containerd: its name and its OCI archive."""
    env = {**lab.env, "SLURMD_VERSIONS": tag.split("-")[0], "SLURMD_PYXIS": "1" if tag.endswith("-pyxis") else "0"}
    p = subprocess.run([str(REPO / "deploy" / "docker" / "build-images.sh"), "--slurmd-only"], env=env,
                       capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, p.stderr[-3000:]
    name, archive = next(line.split("=", 1) for line in p.stdout.split() if line.split("=", 1)[0].endswith(f":{tag}"))
    p = subprocess.run([str(REPO / "e2e" / "lab" / "real-nodes.sh"), "import", archive], env=lab.env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return name, archive


def _merge(base: dict, extra: dict) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def apply(lab, obj: dict | list) -> None:
    docs = obj if isinstance(obj, list) else [obj]
    lab.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(d) for d in docs))


def install_crd(lab) -> None:
    """The generated CRD, applied and Established (server-side, so re-applies never conflict)."""
    lab.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds/slurmpool.io_slurmnodepools.yaml"))
    wait_crd_established(lab)


def wait_crd_established(lab, name: str = "slurmnodepools.slurmpool.io", timeout: float = 30) -> None:
    """Until the CRD is Established. Not `kubectl wait`: on a CRD the apiserver has not given any
    condition yet (just created, a busy apiserver) it fails at once ("accessor error: <nil>")."""
    api = client.ApiextensionsV1Api(lab.api())

    def established() -> bool:
        conditions = _raw(api.read_custom_resource_definition(name, _preload_content=False)).get("status", {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    lab.wait_for(established, timeout=timeout, interval=0.1, message=f"CRD {name} Established")


E2E_NAMESPACE_LABEL = "slurmpool.io/e2e"  # test namespaces: deleted when the last pytest session using the lab ends


def ensure_namespace_and_secret(lab, namespace: str = NAMESPACE) -> None:
    """The test namespace (labelled E2E_NAMESPACE_LABEL) with the Secrets that let the operator
    reach the lab's sshd and, on labs that run it, slurmrestd; one kubectl apply."""
    key = Path(lab.ssh_key).read_text()
    known = Path(lab.ssh_known_hosts).read_text()
    def terminating() -> bool:  # e.g. deleted at the end of a session that just ended
        try:
            return _raw(core(lab).read_namespace(namespace, _preload_content=False)).get("status", {}).get("phase") == "Terminating"
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    wait(lambda: not terminating(), 90, what=f"namespace {namespace} deleted before it is made again")
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {E2E_NAMESPACE_LABEL: "true"}}}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "slurm-ssh", "namespace": namespace},
        "stringData": {"ssh-privatekey": key, "known_hosts": known},
    }
    secrets = [secret]
    if lab.env.get("LAB_SLURM_JWT"):
        secrets.append(jwt_secret(lab.env["LAB_SLURM_JWT"], namespace))
    apply(lab, [ns, *secrets])


def jwt_secret(token: str, namespace: str = NAMESPACE) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "slurm-jwt", "namespace": namespace}, "stringData": {"token": token}}


def get_json(lab, *args) -> dict:
    """kubectl get ... -o json, parsed. Polls use the in-process readers below instead."""
    return json.loads(lab.kubectl("get", *args, "-o", "json").stdout)


# ---------------------------------------------------------------- in-process reads (no kubectl per poll)
# The same JSON kubectl prints (camelCase, plain dicts), read with the `kubernetes` client over one
# keep-alive connection with the lab's admin kubeconfig (Lab.api()). A missing object raises
# ApiException (kubectl get would fail the same way).


def core(lab) -> client.CoreV1Api:
    return client.CoreV1Api(lab.api())


def custom(lab) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(lab.api())


def _raw(response) -> dict:
    return json.loads(response.data)


def pool_json(lab, name: str, namespace: str = NAMESPACE) -> dict:
    """The SlurmNodePool as `kubectl get snp NAME -o json` prints it."""
    return custom(lab).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def pool_status(lab, name: str, namespace: str = NAMESPACE) -> dict:
    return pool_json(lab, name, namespace).get("status") or {}


def node_json(lab, name: str) -> dict:
    return _raw(core(lab).read_node(name, _preload_content=False))


def nodes_json(lab, selector: str | None = None) -> list[dict]:
    return _raw(core(lab).list_node(label_selector=selector, _preload_content=False))["items"]


def pods_json(lab, namespace: str = NAMESPACE, selector: str | None = None) -> list[dict]:
    return _raw(core(lab).list_namespaced_pod(namespace, label_selector=selector, _preload_content=False))["items"]


def pod_json(lab, name: str, namespace: str = NAMESPACE) -> dict:
    return _raw(core(lab).read_namespaced_pod(name, namespace, _preload_content=False))


def events_json(lab, namespace: str = NAMESPACE, field_selector: str | None = None) -> list[dict]:
    """Events (core/v1) of a namespace, oldest first by creationTimestamp (kubectl --sort-by)."""
    items = _raw(core(lab).list_namespaced_event(namespace, field_selector=field_selector, _preload_content=False))["items"]
    return sorted(items, key=lambda e: e["metadata"].get("creationTimestamp") or "")


def pdb_json(lab, name: str, namespace: str = NAMESPACE) -> dict:
    return _raw(client.PolicyV1Api(lab.api()).read_namespaced_pod_disruption_budget(name, namespace, _preload_content=False))


def readyz(lab) -> bool:
    """The apiserver's /readyz answers 200 (False while it is down or starting)."""
    api = lab.api()
    try:
        response = api.call_api(*api.param_serialize("GET", "/readyz", auth_settings=["BearerToken"]), _request_timeout=5)
        response.read()
        return response.status == 200
    except Exception:  # noqa: BLE001 - connection refused while it restarts
        return False


def slurmd_pods(lab, namespace: str = NAMESPACE) -> list[dict]:
    return pods_json(lab, namespace, "slurmpool.io/component=slurmd")


def slurm_states(lab) -> dict[str, str]:
    """node -> State= as `scontrol show node -o` prints it (e.g. IDLE, IDLE+DRAIN), without dynamic
    nodes' DYNAMIC_NORM (conftest.without_node_model)."""
    out = lab.slurm("scontrol", "-o", "show", "node").stdout
    states = {}
    for line in out.splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        # real01..: Slurm nodes of the real kubelet nodes (LAB_REAL_NODES), served only while
        # test_real_nodes.py runs a slurmd pod there: not part of the lab's gpu nodes
        if "NodeName" in fields and not re.fullmatch(r"real\d+", fields["NodeName"]):
            states[fields["NodeName"]] = "+".join(f for f in fields.get("State", "").split("+") if f != "DYNAMIC_NORM")
    return states


def lent_nodes(lab) -> list[str]:
    """Parked nodes Slurm shows powered down and not drained (`idle~`: lent), by Slurm name."""
    return sorted(n for n, s in slurm_states(lab).items() if "POWERED_DOWN" in s.split("+") and "DRAIN" not in s.split("+"))


def job_nodes(lab, job_id: str) -> list[str]:
    """The nodes Slurm allocated to a job, sorted; [] while it has none."""
    out = lab.slurm("scontrol", "-o", "show", "job", job_id).stdout
    nodelist = next((w.split("=", 1)[1] for w in out.split() if w.startswith("NodeList=")), "")
    if nodelist in ("", "(null)"):
        return []
    return sorted(lab.slurm("scontrol", "show", "hostnames", nodelist).stdout.split())


def node_placements(lab) -> dict[str, str]:
    """The lab's real nodes (not the simulated ones of a load lab) and their placements."""
    nodes = nodes_json(lab, "slurmpool.io/lab=true")
    return {n["metadata"]["name"]: (n["metadata"].get("annotations") or {}).get("slurmpool.io/placement", "none") for n in nodes}


def wait(predicate, timeout: float, interval: float = 0.25, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


RESET_ANNOTATION_PREFIX = "slurmpool.io/"  # placement, move, pool, hold-until, pin, move-now, slurm, settled-at ...
RESET_LABELS = ("slurmpool.io/side", "slurmpool.io/inference-pool")
RESET_TAINTS = ("slurmpool.io/slurm", "slurmpool.io/inference")


def pools_left(lab, namespace: str = NAMESPACE) -> list[str]:
    """Names of the SlurmNodePools in a namespace ([] without the namespace or the CRD)."""
    try:
        return [p["metadata"]["name"] for p in custom(lab).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]]
    except ApiException as err:
        if err.status != 404:
            raise
        return []


def clear_namespace(lab, namespace: str = NAMESPACE, timeout: float = 60) -> None:
    """Everything the tests make in a namespace gone, the namespace itself (and its SSH Secret)
    kept: pools, Deployments and ReplicaSets, PDBs, pods (slurmd pods too: the agent stops their
    slurmd) and Events. One delete-collection call per kind, then a poll until the pods (which
    the agent removes after stopping their process) and pools are gone. A namespace delete would
    do the same but costs the namespace controller's passes (5-10 s on the lab)."""
    apps, policy, core_api, crds = client.AppsV1Api(lab.api()), client.PolicyV1Api(lab.api()), core(lab), custom(lab)
    calls = [
        lambda: crds.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL),
        lambda: apps.delete_collection_namespaced_deployment(namespace, propagation_policy="Background"),
        lambda: apps.delete_collection_namespaced_replica_set(namespace, propagation_policy="Background"),
        lambda: policy.delete_collection_namespaced_pod_disruption_budget(namespace),
        lambda: core_api.delete_collection_namespaced_pod(namespace),
        lambda: core_api.delete_collection_namespaced_event(namespace),
    ]
    for call in calls:
        try:
            call()
        except ApiException as err:
            if err.status != 404:  # no such namespace or no CRD: nothing to delete
                raise

    def empty():
        pods = pods_json(lab, namespace)
        try:
            pools = crds.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
        except ApiException as err:
            if err.status != 404:
                raise
            pools = []
        return not pods and not pools

    wait(empty, timeout, what=f"namespace {namespace} emptied")


def node_reset_patch(node: dict) -> dict | None:
    """The JSON merge patch that takes off a Node everything slurmpool (or a test) put on it: its
    annotations, side and pool labels, taints and cordon; None if there is nothing to take off.
    It carries the resourceVersion read, so a concurrent write makes it fail (409) instead of
    losing that write."""
    meta, spec = node["metadata"], node.get("spec") or {}
    annotations = {k: None for k in meta.get("annotations") or {} if k.startswith(RESET_ANNOTATION_PREFIX)}
    labels = {k: None for k in RESET_LABELS if k in (meta.get("labels") or {})}
    taints = spec.get("taints") or []
    kept = [t for t in taints if t["key"] not in RESET_TAINTS]
    patch: dict = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {}}
    if annotations:
        patch["metadata"]["annotations"] = annotations
    if labels:
        patch["metadata"]["labels"] = labels
    if len(kept) != len(taints):
        patch["spec"]["taints"] = kept or None
    if spec.get("unschedulable"):
        patch["spec"]["unschedulable"] = None
    if not (annotations or labels or "taints" in patch["spec"] or "unschedulable" in patch["spec"]):
        return None
    return patch


def reset_nodes(lab, names=None) -> int:
    """One merge patch per lab Node that needs one (see node_reset_patch); a 409 (the Node changed
    under us: the agent's status is a subresource, so someone else wrote it) is read again and
    retried. Returns how many Nodes were patched."""
    names = set(names or lab.nodes)
    patched = 0
    for node in nodes_json(lab):
        name = node["metadata"]["name"]
        if name not in names:
            continue
        for _ in range(5):
            patch = node_reset_patch(node)
            if patch is None:
                break
            try:
                core(lab).patch_node(name, patch, _content_type="application/merge-patch+json", _preload_content=False)
                patched += 1
                break
            except ApiException as err:
                if err.status != 409:
                    raise
                node = node_json(lab, name)
        else:
            raise AssertionError(f"reset: {name} kept changing under the reset patch")
    return patched


def resume_our_drains(lab, names=None) -> list[str]:
    """Resume (one scontrol call) the lab nodes slurmpool left drained in Slurm (reason `slurmpool:`),
    so the next test finds them as the lab leaves them. An admin's drain (another reason) stays."""
    names = set(names or map(lab.slurm_name, lab.nodes))
    ours = [f.split("=", 1)[1] for line in lab.slurm("scontrol", "-o", "show", "node").stdout.splitlines()
            for f in line.split()[:1]
            if f.startswith("NodeName=") and f.split("=", 1)[1] in names and "Reason=slurmpool:" in line]
    if ours:
        lab.slurm("scontrol", "update", f"nodename={','.join(ours)}", "state=resume", check=False)
    return ours


def module_operator(lab, log_name: str = "operator.log"):
    """A module fixture's operator (`yield from module_operator(lab)`): the CRD and the test
    namespace in place, the operator started; afterwards it is stopped, the end of its log printed,
    and the lab left as found (reset_lab: no jobs, pools, slurmd pods, nothing of ours on the nodes)."""
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    operator = Operator(lab, log_name).start()
    yield operator
    operator.stop()
    print(operator.log_tail(20))
    reset_lab(lab)


def reset_lab(lab, namespace: str = NAMESPACE) -> None:
    """Leave the lab as a test found it: no jobs, nothing in the test namespace (no pools, no
    slurmd pods, no Events; clear_namespace), nodes uncordoned and without anything slurmpool put
    on them, and no slurmpool drain left in Slurm. One scancel, one delete per kind, one patch per
    node that needs one, one resume. The empty test namespace itself is deleted at the end of the
    pytest session (conftest.py, label E2E_NAMESPACE_LABEL)."""
    jobs = lab.slurm("squeue", "-h", "-o", "%i").stdout.split()
    if jobs:
        lab.slurm("scancel", *jobs)
        # Their slurmd pods go next: a slurmd stopped while a job's epilog runs (pyxis's takes a
        # moment) leaves the node drained "Epilog error", which nothing resumes and every later
        # module would trip over. So the jobs leave Slurm (COMPLETING included) first.
        # A job whose node is already gone stays COMPLETING: after 60 s the reset goes on anyway.
        deadline = time.monotonic() + 60
        while lab.slurm("squeue", "-h", "-o", "%i", check=False).stdout.split() and time.monotonic() < deadline:
            time.sleep(0.5)
    clear_namespace(lab, namespace)
    reset_nodes(lab)
    resume_our_drains(lab)


DEMO_NAMESPACE = "slurmpool-demo"


def stop_demo(lab) -> bool:
    """Put away what `make demo` leaves running: its operator (the PID in $LAB_DIR/run/operator.pid)
    and its pool `gpu`, which selects the lab's nodes (a test's or the bench's pool would overlap it
    and nothing would move). Its nodes are reset as reset_lab does. True if there was a demo."""
    pidfile = Path(lab.dir) / "run" / "operator.pid"
    demo_ns = lab.kubectl("get", "namespace", DEMO_NAMESPACE, "--ignore-not-found", "-o", "name").stdout.strip()
    if not pidfile.exists() and not demo_ns:
        return False
    if pidfile.exists():
        pid = int(pidfile.read_text().strip() or 0)
        cmdline = Path(f"/proc/{pid}/cmdline")
        if pid and cmdline.exists() and b"slurmpool" in cmdline.read_bytes():  # not a PID reused by another process
            os.kill(pid, signal.SIGTERM)
            wait(lambda: not Path(f"/proc/{pid}").exists() or b"State:\tZ" in Path(f"/proc/{pid}/status").read_bytes(),
                 20, what="make demo's operator stopped")
        pidfile.unlink(missing_ok=True)
        (Path(lab.dir) / "prometheus" / "targets" / "demo.json").unlink(missing_ok=True)  # prometheus.unregister
    if demo_ns:
        reset_lab(lab, DEMO_NAMESPACE)
        lab.kubectl("delete", "namespace", DEMO_NAMESPACE, "--wait=true", "--timeout=120s", check=False, timeout=150)
    print(f"stopped make demo's operator and deleted namespace {DEMO_NAMESPACE}: this needs the lab's nodes to itself")
    return True


# ---------------------------------------------------------------- fault tests: observations and the lab's daemons


def condition(lab, pool: str, type_: str) -> dict:
    return next((c for c in pool_status(lab, pool).get("conditions", []) if c["type"] == type_), {})


def split_reached(lab, pool: str, slurm: int, total: int = 8) -> bool:
    """The pool's status reports `slurm` ready Slurm nodes, the rest ready in inference, no move."""
    s = pool_status(lab, pool)
    return s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == total - slurm and s.get("moving") == 0


def events(lab, reason: str, since: str = "") -> list[str]:
    """Messages of the test namespace's Events with this reason, oldest first (those posted at or after
    `since`, an RFC 3339 time from now_rfc3339(), when given). An Event posted again is one Event
    with its count and lastTimestamp raised (adapters/eventseries.py): its last posting counts."""
    items = sorted(events_json(lab, NAMESPACE, f"reason={reason}"), key=posted_at)
    return [e.get("message") or "" for e in items if posted_at(e) >= since]


def posted_at(event: dict) -> str:
    return event.get("lastTimestamp") or event["metadata"].get("creationTimestamp") or ""


def now_rfc3339() -> str:
    """A `since` for events(): the start of the next whole second, once it has come. Event
    timestamps have 1 s resolution, so an Event created before this call is stamped earlier and one
    created after it is not: a `since` one second back counted the Events of a move the test
    before made a moment earlier (the lab moves a node in about a second)."""
    now = time.time()
    time.sleep(math.floor(now) + 1 - now)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(math.floor(now) + 1))


def daemon(lab, action: str, name: str) -> None:
    """e2e/lab/daemon.sh: stop a lab daemon by its PID file, start it with the same command line."""
    lab.run(str(REPO / "e2e" / "lab" / "daemon.sh"), action, name, timeout=60)


def sbatch(lab, node: str, seconds: int, limit_minutes: int = 30) -> str:
    out = lab.slurm("sbatch", "--parsable", "-w", node, "--gres=gpu:8", f"--time={limit_minutes}", "-o", "/dev/null",
                    "--wrap", f"sleep {seconds}").stdout
    return out.strip().split(";")[0]


def job_state(lab, job_id: str) -> str:
    """RUNNING, PENDING, COMPLETED, CANCELLED ... (scontrol keeps finished jobs for MinJobAge)."""
    out = lab.slurm("scontrol", "-o", "show", "job", job_id, check=False).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "GONE")


def lost_jobs(lab, running: list[str], finished: list[str] = ()) -> list[str]:
    """Jobs that should still run but do not, and jobs that should have ended by themselves but did not complete."""
    bad = [j for j in running if job_state(lab, j) != "RUNNING"]
    return bad + [j for j in finished if job_state(lab, j) != "COMPLETED"]


def stranded(lab, pool: str) -> list[str]:
    """Nodes not settled in exactly one side: a move record left, no placement, or a shape that
    contradicts the placement (Slurm: slurmd pod, cordoned, slurm taint, responding in Slurm;
    inference: no slurmd pod, no slurm taint, drained in Slurm)."""
    nodes = nodes_json(lab, "slurmpool.io/lab=true")
    pods = slurmd_pods(lab)
    slurmd_on = {p["spec"].get("nodeName") for p in pods if not p["metadata"].get("deletionTimestamp")}
    states = slurm_states(lab)
    bad = []
    for n in nodes:
        name, ann = n["metadata"]["name"], n["metadata"].get("annotations") or {}
        placement = ann.get("slurmpool.io/placement", "none")
        tainted = any(t["key"] == "slurmpool.io/slurm" for t in n["spec"].get("taints") or [])
        cordoned = bool(n["spec"].get("unschedulable"))
        state = states.get(name, "")
        if "slurmpool.io/move" in ann:
            bad.append(f"{name}: move in flight {ann['slurmpool.io/move']}")
        elif placement == "slurm":
            if name not in slurmd_on or not (cordoned and tainted) or "NOT_RESPONDING" in state:
                bad.append(f"{name}: slurm but slurmd={name in slurmd_on} cordoned={cordoned} tainted={tainted} state={state}")
        elif placement.startswith("inference:"):
            if name in slurmd_on or tainted or "DRAIN" not in state:
                bad.append(f"{name}: {placement} but slurmd={name in slurmd_on} tainted={tainted} state={state}")
        else:
            bad.append(f"{name}: placement {placement!r}")
    return bad


def settle_sides(lab, pool: str, timeout: float = 30) -> list[str]:
    """stranded(), given Slurm time to catch up: a slurmd just stopped or restarted can show
    NOT_RESPONDING for a ping cycle after the move is done. Returns what is still stranded."""
    left = stranded(lab, pool)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = stranded(lab, pool)
    return left


def fault_line(name: str, did: str, recover_s: float, jobs_lost: int | str, nodes_stranded: int) -> str:
    """One row of docs/faults.md; jobs_lost is a count of the jobs the test ran, or "none running"."""
    line = f"FAULT | {name} | {did} | {recover_s:.1f} s | {jobs_lost} | {nodes_stranded}"
    print(line)
    return line


@contextlib.contextmanager
def slurmd_timeout(lab, seconds: int):
    """Slurm's SlurmdTimeout raised for a while (slurm.conf + scontrol reconfigure), then restored.
    The lab's 10 s makes slurmctld itself down every node (killing its jobs) when munge is gone for
    10 s; sites run the 300 s default. The operator's behaviour is what a fault test measures."""
    conf = Path(lab.slurm_conf)
    original = conf.read_text()
    conf.write_text("\n".join(f"SlurmdTimeout={seconds}" if line.startswith("SlurmdTimeout=") else line
                              for line in original.splitlines()) + "\n")
    lab.slurm("scontrol", "reconfigure")
    try:
        yield
    finally:
        conf.write_text(original)
        wait(lambda: lab.slurm("scontrol", "reconfigure", check=False).returncode == 0, 60, interval=1, what="scontrol reconfigure")


# ---------------------------------------------------------------- holding a move in Evicting


HOLD = "e2e.slurmpool.io/hold"  # a finalizer: an evicted pod stays Terminating until the test lets it go


def held_server(node: str) -> dict:
    """An inference server bound to the node, kept Terminating after its eviction by a finalizer.
    A bare pod: nothing of kube-controller-manager (whose caches lag an apiserver restart) in the way."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"server-{node}", "namespace": NAMESPACE, "labels": {"app": "held-server"},
                         "finalizers": [HOLD]},
            "spec": {"nodeName": node, "tolerations": [{"key": "slurmpool.io/inference", "operator": "Exists"}],
                     "containers": [{"name": "server", "image": "vllm:latest"}]}}


def release_held_servers(lab, timeout: float = 60) -> bool:
    """The held servers gone: finalizer removed, then force-deleted (after an apiserver restart the
    lab's agent may not confirm a graceful deletion for a while). Retried until none is left."""
    deadline = time.monotonic() + timeout
    while (held := pods_json(lab, NAMESPACE, "app=held-server")) and time.monotonic() < deadline:
        for pod in held:
            name = pod["metadata"]["name"]
            if pod["metadata"].get("finalizers"):
                lab.kubectl("patch", "pod", name, "-n", NAMESPACE, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                            check=False)
            lab.kubectl("delete", "pod", name, "-n", NAMESPACE, "--ignore-not-found", "--grace-period=0", "--force",
                        "--wait=false", check=False)
        time.sleep(0.5)
    return not pods_json(lab, NAMESPACE, "app=held-server")
