#!/usr/bin/env python3
"""The lab's node agent: one process standing in for the kubelet of every simulated GPU node.

* Keeps the Node objects gpu01..gpuNN: creates a missing one (with the lab's labels), keeps its
  status Ready and renews its Lease in kube-node-lease every 10 s. On an existing Node it writes
  only the status subresource: labels, taints and spec.unschedulable belong to the operator.
* A Node annotated lab.slurmpool.io/not-ready=true is reported NotReady (Ready=False), as a
  kubelet that lost its runtime would; conditions others set (node-problem-detector's, a test's)
  are kept in every status write.
* Simulated nodes sim001..simNNN (--sim-nodes, for load tests) are kept alive by their Lease
  alone (every 20 s, paced over the interval; no GET, no status heartbeat), so 500 of them cost the
  apiserver a steady ~25 writes/s.
* Runs the pods bound to those nodes. A pod labelled slurmpool.io/component=slurmd runs its first
  container's command+args as a real host process (the slurmd of that node); any other pod is only
  reported Running and Ready. Deletion follows kubelet semantics: SIGTERM, up to the pod's grace
  period, SIGKILL, then the final delete (grace 0, UID precondition).

The contract the operator relies on is written down in e2e/lab/README.md; keep them in sync.
Only the standard library and PyYAML are used: the agent talks to the apiserver over plain HTTPS.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import logging
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

import yaml

log = logging.getLogger("agent")

SLURMD_LABEL = ("slurmpool.io/component", "slurmd")
NOT_READY_ANNOTATION = "lab.slurmpool.io/not-ready"  # "true": the agent reports the Node NotReady
AGENT_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
POD_IP = "127.0.0.1"
LEASE_SECONDS = 40
RENEW_INTERVAL = 10.0
STATUS_HEARTBEAT = 60.0
BACKOFF_MAX = 10.0
BACKOFF_RESET_AFTER = 20.0  # a process that ran this long restarts without accumulated back-off
FORGET_AFTER = 600.0
SIM_RENEW_INTERVAL = 20.0  # well inside the node lifecycle controller's 50 s grace period
SIM_THREADS = 4
SIM_READY_CHECK = 60.0  # a LIST of the simulated Nodes: any not Ready (after a late round) is set Ready again
# The lab's stand-in for NVIDIA's DRA driver (gpu.nvidia.com): its kubelet plugin publishes a
# node's ResourceSlice once it runs there, i.e. once the node serves inference (no Slurm taint,
# not cordoned) for DRA_PUBLISH_DELAY seconds, and takes it down when the node leaves.
DRA_DRIVER = "gpu.nvidia.com"
DRA_DEVICES = 8
DRA_PUBLISH_DELAY = float(os.environ.get("LAB_DRA_PUBLISH_DELAY", "2"))
DRA_INTERVAL = 0.5
SLURM_TAINT = "slurmpool.io/slurm"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- apiserver client
class ApiError(Exception):
    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body[:400]}")
        self.status, self.body = status, body


class Kube:
    """A small JSON client for the apiserver; one keep-alive connection per thread."""

    def __init__(self, kubeconfig: str):
        with open(kubeconfig) as f:
            cfg = yaml.safe_load(f)
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == cfg["current-context"])
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
        url = urllib.parse.urlsplit(cluster["server"])
        self.host, self.port = url.hostname, url.port or 443
        self.headers = {"Accept": "application/json", "User-Agent": "slurmpool-lab-agent"}
        self.ssl = ssl.create_default_context()
        if "certificate-authority-data" in cluster:
            import base64
            self.ssl.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif "certificate-authority" in cluster:
            self.ssl.load_verify_locations(cafile=cluster["certificate-authority"])
        if "token" in user:
            self.headers["Authorization"] = f"Bearer {user['token']}"
        if "client-certificate-data" in user or "client-certificate" in user:
            import base64
            with tempfile.TemporaryDirectory() as tmp:  # ssl wants files; they are read at once
                def path(key: str) -> str:
                    if key in user:
                        return user[key]
                    p = os.path.join(tmp, key)
                    with open(os.open(p, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as out:
                        out.write(base64.b64decode(user[key + "-data"]))
                    return p
                self.ssl.load_cert_chain(path("client-certificate"), path("client-key"))
        self.local = threading.local()

    def _connection(self, timeout: float) -> http.client.HTTPSConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.ssl, timeout=timeout)
            self.local.conn = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def request(self, method: str, path: str, body=None, content_type="application/json", timeout=30.0):
        payload = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers)
        if payload is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):  # a kept-alive connection may have been closed by the server
            conn = self._connection(timeout)
            try:
                conn.request(method, path, body=payload, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
                continue
            if resp.status >= 400:
                raise ApiError(resp.status, data.decode(errors="replace"))
            return json.loads(data) if data else None

    def watch(self, path: str, timeout: float):
        """Yield the events of a watch request (its own connection) until the server ends it."""
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.ssl, timeout=timeout)
        try:
            conn.request("GET", path, headers=self.headers)
            resp = conn.getresponse()
            if resp.status != 200:
                raise ApiError(resp.status, resp.read().decode(errors="replace"))
            while True:
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()


# --------------------------------------------------------------------------- helpers
def expand(text: str, env: dict[str, str]) -> str:
    """Kubelet-style $(VAR) expansion: $(VAR) -> value if VAR is defined, else left as is;
    $$ -> $ (so $$(VAR) stays literal)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                j = text.find(")", i + 2)
                if j != -1:
                    name = text[i + 2:j]
                    out.append(env[name] if name in env else text[i:j + 1])
                    i = j + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)


class ConfigError(Exception):
    """The container cannot be started as specified (kubelet: CreateContainerConfigError)."""


def field_value(pod: dict, path: str) -> str:
    md, spec, st = pod["metadata"], pod["spec"], pod.get("status") or {}
    simple = {
        "metadata.name": md.get("name", ""),
        "metadata.namespace": md.get("namespace", ""),
        "metadata.uid": md.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": st.get("hostIP") or POD_IP,
        "status.podIP": st.get("podIP") or POD_IP,
    }
    if path in simple:
        return simple[path]
    for prefix, key in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return (md.get(key) or {}).get(path[len(prefix) + 2:-2], "")
    raise ConfigError(f"unsupported fieldRef {path!r}")


def proc_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def proc_has_env(pid: int, entry: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry.encode() in f.read().split(b"\0")
    except OSError:
        return False


def write_file(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def remove_if(path: str, content: str) -> None:
    try:
        with open(path) as f:
            if f.read().strip() == content:
                os.unlink(path)
    except OSError:
        pass


# --------------------------------------------------------------------------- processes
class Proc:
    """A slurmd-pod process: a child of ours (Popen) or adopted after an agent restart."""

    def __init__(self, pid: int, marker: str, started_at: str, popen: subprocess.Popen | None = None):
        self.pid, self.marker, self.started_at, self.popen = pid, marker, started_at, popen
        self.t0 = time.monotonic()

    def exit_code(self) -> int | None:
        """None while running; the container-style exit code (128+signal if killed) once gone."""
        if self.popen is not None:
            rc = self.popen.poll()
            if rc is None:
                return None
            return 128 - rc if rc < 0 else rc
        if proc_alive(self.pid) and proc_has_env(self.pid, self.marker):
            return None
        return 255  # adopted: the real exit status went to our predecessor

    def signal(self, sig: int) -> None:
        if self.exit_code() is not None:
            return
        try:
            os.killpg(self.pid, sig)  # its own session: the whole "container"
        except ProcessLookupError:
            pass


# --------------------------------------------------------------------------- pods
class PodWorker(threading.Thread):
    """Drives one pod bound to one of our nodes, from first sight to the final delete."""

    def __init__(self, agent: "Agent", pod: dict):
        md = pod["metadata"]
        super().__init__(name=f"pod-{md['namespace']}/{md['name']}", daemon=True)
        self.agent, self.kube = agent, agent.kube
        self.uid, self.ns, self.pod_name = md["uid"], md["namespace"], md["name"]
        self.node = pod["spec"]["nodeName"]
        self.pod = pod
        self.gone = False
        self.wake = threading.Event()
        self.slurmd = (md.get("labels") or {}).get(SLURMD_LABEL[0]) == SLURMD_LABEL[1]
        st = pod.get("status") or {}
        self.start_time = st.get("startTime") or now()
        self.terminal = st.get("phase") if st.get("phase") in ("Succeeded", "Failed") else None
        self.cond_times: dict[str, tuple[str, str]] = {
            c["type"]: (c.get("status"), c.get("lastTransitionTime") or now()) for c in st.get("conditions") or []}
        self.reported: dict | None = None
        # slurmd process state
        cs0 = (st.get("containerStatuses") or [{}])[0]
        self.restarts = cs0.get("restartCount", 0)
        self.started_once = bool(cs0.get("state", {}).get("running") or cs0.get("lastState") or self.restarts)
        self.last_term: dict | None = (cs0.get("lastState") or {}).get("terminated")
        self.proc: Proc | None = None
        self.backoff = 1.0
        self.next_start = 0.0
        self.waiting = ("ContainerCreating", "")
        self.marker = f"SLURMPOOL_POD_UID={self.uid}"
        self.pid_file = os.path.join(agent.run_dir, "pods", f"{self.uid}.pid")
        self.node_pid_file = os.path.join(agent.run_dir, f"slurmd-{self.node}.pid")
        if self.slurmd and not self.terminal:
            self._adopt(cs0)

    # --- called from the watch thread
    def update(self, pod: dict) -> None:
        self.pod = pod
        self.wake.set()

    def vanish(self) -> None:
        self.gone = True
        self.wake.set()

    # --- the loop
    def run(self) -> None:
        while True:
            try:
                if self._step():
                    break
            except Exception:
                log.exception("%s/%s: step failed; retrying", self.ns, self.pod_name)
                self.wake.wait(1.0)
                self.wake.clear()
        self.agent.forget(self)

    def _step(self) -> bool:
        pod = self.pod
        md = pod["metadata"]
        if self.gone:  # deleted from the API without us (force delete): stop what runs
            self._stop(min(float(pod["spec"].get("terminationGracePeriodSeconds", 30)), 2.0))
            return True
        if md.get("deletionTimestamp"):
            grace = md.get("deletionGracePeriodSeconds")
            self._stop(float(30 if grace is None else grace))
            self._final_delete()
            return True
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") and not self.terminal:
            # Ended by someone else's status write, as a kubelet ends an evicted pod: its containers
            # stop and stay stopped (the API refuses a terminal phase going back to Running).
            log.info("%s/%s: marked %s (%s): stopping its process", self.ns, self.pod_name, phase, (pod.get("status") or {}).get("reason"))
            self.terminal = phase
            self._stop(2.0)
            self.reported = None
        if self.slurmd and not self.terminal:
            self._drive_process()
        if self.terminal and phase in ("Succeeded", "Failed"):
            return self._wait_for_delete()
        self._report()
        self.wake.wait(self._timeout())
        self.wake.clear()
        return False

    def _wait_for_delete(self) -> bool:
        """A pod someone else ended keeps the status they wrote (reason, message): nothing to report."""
        self.wake.wait(self._timeout())
        self.wake.clear()
        return False

    def _timeout(self) -> float:
        if self.proc is not None:
            return 30.0 if self.proc.popen is not None else 0.5  # our children wake us on exit
        if self.slurmd and not self.terminal:
            return max(0.05, self.next_start - time.monotonic())
        return 60.0

    # --- slurmd process management
    def _adopt(self, cs0: dict) -> None:
        try:
            pid = int(open(self.pid_file).read().strip())
        except (OSError, ValueError):
            return
        if proc_alive(pid) and proc_has_env(pid, self.marker):
            started = (cs0.get("state", {}).get("running") or {}).get("startedAt") or now()
            self.proc = Proc(pid, self.marker, started)
            self.started_once = True
            log.info("%s/%s: adopted running process %d", self.ns, self.pod_name, pid)

    def _drive_process(self) -> None:
        spec = self.pod["spec"]
        policy = spec.get("restartPolicy", "Always")
        if self.proc is not None:
            code = self.proc.exit_code()
            if code is None:
                if time.monotonic() - self.proc.t0 >= BACKOFF_RESET_AFTER:
                    self.backoff = 1.0
                return
            ran = time.monotonic() - self.proc.t0
            self.last_term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                              "startedAt": self.proc.started_at, "finishedAt": now(),
                              "containerID": f"lab://{self.proc.pid}"}
            log.info("%s/%s: process %d exited with %d after %.1fs", self.ns, self.pod_name, self.proc.pid, code, ran)
            self._forget_process()
            self._after_exit(code, policy)
            return
        if time.monotonic() < self.next_start:
            return
        try:
            self._start_process()
        except ConfigError as e:
            log.warning("%s/%s: cannot start: %s", self.ns, self.pod_name, e)
            self.waiting = ("CreateContainerConfigError", str(e))
            self._schedule_retry()
        except OSError as e:  # exec failed: kubelet reports StartError with exit code 128
            log.warning("%s/%s: start failed: %s", self.ns, self.pod_name, e)
            if self.started_once:  # a failed attempt counts as a restart, as with the kubelet
                self.restarts += 1
            self.started_once = True
            self.last_term = {"exitCode": 128, "reason": "StartError", "message": str(e),
                              "startedAt": now(), "finishedAt": now()}
            self._after_exit(128, policy)

    def _after_exit(self, code: int, policy: str) -> None:
        if policy == "Never" or (policy == "OnFailure" and code == 0):
            self.terminal = "Succeeded" if code == 0 else "Failed"
            return
        delay = self._schedule_retry()
        c = self.pod["spec"]["containers"][0]["name"]
        self.waiting = ("CrashLoopBackOff",
                        f"back-off {delay:g}s restarting failed container={c} pod={self.pod_name}_{self.ns}({self.uid})")

    def _schedule_retry(self) -> float:
        delay = self.backoff
        self.backoff = min(self.backoff * 2, BACKOFF_MAX)
        self.next_start = time.monotonic() + delay
        return delay

    def _container_env(self, c: dict) -> dict[str, str]:
        env: dict[str, str] = {}
        for e in c.get("env") or []:
            name = e["name"]
            if "value" in e:
                env[name] = expand(e.get("value") or "", env)
            elif "valueFrom" in e:
                vf = e["valueFrom"]
                if "fieldRef" in vf:
                    env[name] = field_value(self.pod, vf["fieldRef"]["fieldPath"])
                elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
                    env[name] = self._key_ref(vf)
                else:
                    raise ConfigError(f"env {name}: unsupported valueFrom {sorted(vf)}")
            else:
                env[name] = ""
        return env

    def _key_ref(self, vf: dict) -> str:
        import base64
        kind, ref = ("configmaps", vf["configMapKeyRef"]) if "configMapKeyRef" in vf else ("secrets", vf["secretKeyRef"])
        try:
            obj = self.kube.request("GET", f"/api/v1/namespaces/{self.ns}/{kind}/{ref['name']}")
        except ApiError as e:
            if e.status == 404 and ref.get("optional"):
                return ""
            raise ConfigError(f"{kind[:-1]} {ref['name']!r}: {e}") from None
        data = obj.get("data") or {}
        if ref["key"] not in data:
            if ref.get("optional"):
                return ""
            raise ConfigError(f"key {ref['key']!r} not found in {kind[:-1]} {ref['name']!r}")
        value = data[ref["key"]]
        return base64.b64decode(value).decode() if kind == "secrets" else value

    def _start_process(self) -> None:
        c = self.pod["spec"]["containers"][0]
        if not c.get("command"):
            raise ConfigError("the lab runs no images: a slurmd pod's first container must set 'command'")
        # What the lab offers this node's slurmd (its port, the conf server, its --conf line for
        # dynamic nodes) can be referenced as $(SLURMPOOL_LAB_...), like the Service variables a
        # kubelet injects; the container's own env wins.
        lab_vars = self.agent.node_vars(self.node)
        env = {**lab_vars, **self._container_env(c)}
        argv = [expand(a, env) for a in (c.get("command") or []) + (c.get("args") or [])]
        argv = self.agent.slurmd_argv(self.node, argv)
        penv = {"HOME": "/root", "LANG": "C.UTF-8"}
        penv.update(env)
        # The lab's values win: images (and their PATH/config) do not exist here.
        penv.update({"PATH": self.agent.path, "SLURM_CONF": self.agent.slurm_conf,
                     "SLURMPOOL_LAB_DIR": self.agent.lab_dir, "SLURMPOOL_POD_UID": self.uid})
        penv.update(self.agent.slurm_env)
        if self.agent.slurmd_netns and self.node in self.agent.dynamic and argv and "slurmd" in argv:
            # A configless slurmd has no slurm.conf of its own (it fetches it). 24.11's, given the
            # lab's in SLURM_CONF, authenticates its config request with auth/slurm (slurmctld logs
            # "auth/slurm(103) not found", the slurmd "Protocol authentication error").
            penv.pop("SLURM_CONF", None)
        workdir = c.get("workingDir") if os.path.isdir(c.get("workingDir") or "") else self.agent.lab_dir
        logpath = os.path.join(self.agent.pod_log_dir, f"{self.ns}_{self.pod_name}.log")
        with open(logpath, "ab") as out:
            popen = subprocess.Popen(argv, env=penv, cwd=workdir, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        self.proc = Proc(popen.pid, self.marker, now(), popen)
        threading.Thread(target=self._reap, args=(popen,), daemon=True, name=f"wait-{popen.pid}").start()
        write_file(self.pid_file, f"{popen.pid}\n")
        write_file(self.node_pid_file, f"{popen.pid}\n")
        if self.started_once:
            self.restarts += 1
        self.started_once = True
        log.info("%s/%s: started %s as pid %d on %s", self.ns, self.pod_name, argv, popen.pid, self.node)

    def _reap(self, popen: subprocess.Popen) -> None:
        popen.wait()
        self.wake.set()

    def _forget_process(self) -> None:
        if self.proc is not None:
            remove_if(self.pid_file, str(self.proc.pid))
            remove_if(self.node_pid_file, str(self.proc.pid))
        self.proc = None

    def _stop(self, grace: float) -> None:
        """Kubelet-style kill: SIGTERM to the process group, wait up to grace, SIGKILL."""
        p = self.proc
        if p is None:
            return
        log.info("%s/%s: stopping pid %d (grace %gs)", self.ns, self.pod_name, p.pid, grace)
        p.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while p.exit_code() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.exit_code() is None:
            log.info("%s/%s: pid %d did not exit in %gs: SIGKILL", self.ns, self.pod_name, p.pid, grace)
            p.signal(signal.SIGKILL)
            deadline = time.monotonic() + 5
            while p.exit_code() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        try:  # the rest of its process group (children that outlived it)
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._forget_process()

    # --- API writes
    def _final_delete(self) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": self.uid}}
        try:
            self.kube.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{self.pod_name}", body)
            log.info("%s/%s: deleted", self.ns, self.pod_name)
        except ApiError as e:
            if e.status not in (404, 409):  # gone already / a new pod of the same name
                raise

    def _condition(self, ctype: str, ok: bool) -> dict:
        status = "True" if ok else "False"
        prev = self.cond_times.get(ctype)
        if prev is None or prev[0] != status:
            self.cond_times[ctype] = (status, now())
        return {"type": ctype, "status": status, "lastProbeTime": None,
                "lastTransitionTime": self.cond_times[ctype][1]}

    def _status(self) -> dict:
        spec = self.pod["spec"]
        statuses = []
        for i, c in enumerate(spec["containers"]):
            cs = {"name": c["name"], "image": c.get("image") or "none", "imageID": "", "restartCount": 0}
            if self.slurmd and i == 0:
                running = self.proc is not None
                cs["restartCount"] = self.restarts
                if running:
                    cs["state"] = {"running": {"startedAt": self.proc.started_at}}
                    cs["containerID"] = f"lab://{self.proc.pid}"
                elif self.terminal and self.last_term:
                    cs["state"] = {"terminated": self.last_term}
                else:
                    reason, message = self.waiting
                    cs["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
                if self.last_term and not self.terminal:
                    cs["lastState"] = {"terminated": self.last_term}
                cs["ready"] = cs["started"] = running
            elif self.terminal:
                finished = (self.last_term or {}).get("finishedAt") or self.start_time
                cs["state"] = {"terminated": {"exitCode": 0, "reason": "Completed",
                                              "startedAt": self.start_time, "finishedAt": finished}}
                cs["ready"] = cs["started"] = False
            else:
                cs["state"] = {"running": {"startedAt": self.start_time}}
                cs["ready"] = cs["started"] = True
            statuses.append(cs)
        ready = all(cs["ready"] for cs in statuses) and not self.terminal
        inits = [{"name": c["name"], "image": c.get("image") or "none", "imageID": "", "restartCount": 0,
                  "ready": True, "started": False,
                  "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                           "startedAt": self.start_time, "finishedAt": self.start_time}}}
                 for c in spec.get("initContainers") or []]
        status = {
            "phase": self.terminal or "Running",
            "hostIP": POD_IP, "hostIPs": [{"ip": POD_IP}],
            "podIP": POD_IP, "podIPs": [{"ip": POD_IP}],
            "startTime": self.start_time,
            "conditions": [self._condition("PodReadyToStartContainers", True),
                           self._condition("Initialized", True),
                           self._condition("Ready", ready),
                           self._condition("ContainersReady", ready),
                           self._condition("PodScheduled", True)],
            "containerStatuses": statuses,
        }
        if inits:
            status["initContainerStatuses"] = inits
        return status

    def _report(self) -> None:
        status = self._status()
        if status == self.reported:
            return
        body = {"metadata": {"uid": self.uid}, "status": status}  # uid: never patch a namesake
        try:
            self.kube.request("PATCH", f"/api/v1/namespaces/{self.ns}/pods/{self.pod_name}/status", body,
                              content_type="application/merge-patch+json")
        except ApiError as e:
            # 404: deleted; 422 "metadata.uid ... immutable": a new pod of the same name
            if e.status == 404 or (e.status in (409, 422) and "metadata.uid" in e.body):
                log.info("%s/%s: gone while reporting status (%s)", self.ns, self.pod_name, e.status)
                self.gone = True
                return
            raise
        self.reported = status


# --------------------------------------------------------------------------- the agent
class Agent:
    def __init__(self, args):
        self.kube = Kube(args.kubeconfig)
        self.lab_dir = os.path.abspath(args.lab_dir)
        self.run_dir = os.path.join(self.lab_dir, "run")
        self.pod_log_dir = os.path.join(self.lab_dir, "log", "pods")
        os.makedirs(os.path.join(self.run_dir, "pods"), exist_ok=True)
        os.makedirs(self.pod_log_dir, exist_ok=True)
        self.slurm_conf = args.slurm_conf
        self.path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        if args.slurm_path:  # the lab's Slurm (26.05's prefix, 24.11's chroot wrappers) comes first
            self.path = f"{args.slurm_path}:{self.path}"
        # Extra environment of slurmd processes (26.05: SLURM_SACK_KEY, SLURM_SACK_SOCKET).
        self.slurm_env = dict(kv.split("=", 1) for kv in args.slurm_env)
        # 26.05: each slurmd runs in its own mount namespace with <dir>/<node> on /run/slurm, so its
        # host-wide auth/slurm socket (/run/slurm/sack.socket) and configless link (/run/slurm/conf)
        # are its own, not another slurmd's or another lab's.
        self.slurmd_run_dir = args.slurmd_run_dir
        # Dynamic nodes: node -> its `--conf` line (from up.sh), and the conf server (slurmctld).
        self.conf_server = args.conf_server
        # 24.11's dynamic nodes: more slurmd arguments (munge's socket: --authinfo), and each slurmd
        # in its node's network namespace (a path pattern, %s: the node; e2e/lab/netns.sh).
        self.dynamic_args: list[str] = list(args.dynamic_arg)
        self.slurmd_netns = args.slurmd_netns
        # LAB_CGROUPS=1: each slurmd in a cgroup of its own (<prefix><node>) and a cgroup namespace
        # rooted there, as a pod's (cgexec.sh), so Slurm's job cgroups of two nodes never meet.
        self.slurmd_cgroup_prefix = args.slurmd_cgroup_prefix
        self.dynamic: dict[str, str] = {}
        self.ports: dict[str, str] = {}
        if args.node_conf:
            with open(args.node_conf) as f:
                for line in f:
                    if line.strip() and not line.startswith("#"):
                        name, port, conf = line.rstrip("\n").split("\t", 2)
                        self.ports[name] = port
                        if conf:
                            self.dynamic[name] = conf
        self.nodes = [f"gpu{i:02d}" for i in range(1, args.nodes + 1)]
        self.sim_nodes = [f"sim{i:03d}" for i in range(1, args.sim_nodes + 1)]
        self.sim_set = set(self.sim_nodes)
        self.sim_group = args.sim_group
        self.sim_started = False
        self.dra_started = False
        self.node_set = set(self.nodes) | set(self.sim_nodes)
        self.workers: dict[str, PodWorker] = {}
        self.done: dict[str, float] = {}  # uids whose final delete we made: ignore late events
        self.lock = threading.Lock()
        self.boot_id = str(uuid.uuid4())
        self.ready_since = now()

    # --- slurmd processes
    def node_vars(self, node: str) -> dict[str, str]:
        """$(SLURMPOOL_LAB_...) values a slurmd pod on `node` may reference (README: the contract)."""
        out = {}
        if node in self.ports:
            out["SLURMPOOL_LAB_SLURMD_PORT"] = self.ports[node]
        if self.conf_server:
            out["SLURMPOOL_LAB_CONF_SERVER"] = self.conf_server
        if node in self.dynamic:
            out["SLURMPOOL_LAB_SLURMD_CONF"] = self.dynamic[node]
        return out

    def slurmd_argv(self, node: str, argv: list[str]) -> list[str]:
        """The lab's slurmd "image": with dynamic nodes, a `slurmd` command without -Z gets
        `-Z --conf-server HOST:PORT --conf LINE` appended (what the entrypoint of a Slinky-style
        slurmd image adds); a command with -Z runs as written. With a slurmd run directory, the
        process runs in its own mount namespace (unshare -m) with that directory on /run/slurm. With
        network namespaces (24.11's dynamic nodes), it runs in its node's (nsenter --net)."""
        is_slurmd = bool(argv) and os.path.basename(argv[0]) == "slurmd"
        if is_slurmd and node in self.dynamic and "-Z" not in argv:
            argv = argv + ["-Z", "--conf-server", self.conf_server, "--conf", self.dynamic[node], *self.dynamic_args]
        if is_slurmd and self.slurmd_netns and node in self.dynamic:
            argv = ["nsenter", f"--net={self.slurmd_netns % node}", "--"] + argv
        if is_slurmd and self.slurmd_run_dir:
            d = os.path.join(self.slurmd_run_dir, node)
            os.makedirs(d, exist_ok=True)
            os.makedirs("/run/slurm", exist_ok=True)
            argv = ["unshare", "-m", "--propagation", "private", "--", "sh", "-c",
                    'mount --bind "$0" /run/slurm && exec "$@"', d] + argv
        if is_slurmd and self.slurmd_cgroup_prefix:
            argv = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "cgexec.sh"), self.slurmd_cgroup_prefix + node] + argv
        return argv

    # --- nodes
    def node_labels(self, name: str) -> dict[str, str]:
        i = int(name[3:])
        if name.startswith("sim"):  # not slurmpool.io/lab: the tests of the 8 real nodes never see them
            return {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                    "slurmpool.io/sim": "true", "nvidia.com/gpu.present": "true",
                    "slurmpool.io/sim-group": f"g{(i - 1) // self.sim_group + 1:02d}"}
        return {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "slurmpool.io/lab": "true", "nvidia.com/gpu.present": "true",
                "topology.slurmpool.io/block": f"block-{(i - 1) // 4 + 1}",
                "topology.slurmpool.io/rack": f"rack-{(i - 1) // 2 + 1}"}

    def node_status(self, name: str, ready: bool = True, others: list | None = None) -> dict:
        """The status the agent writes; `others`: conditions set by anyone else, kept as they are
        (a merge patch replaces the whole list)."""
        # amd.com/gpu beside nvidia.com/gpu: a pool may count either (spec.demand.inference.resources)
        res = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8", "amd.com/gpu": "8", "ephemeral-storage": "100Gi"}
        t = now()

        def cond(ctype, status, reason, message, since=None):
            return {"type": ctype, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": t, "lastTransitionTime": since or self.ready_since}
        ready_cond = (cond("Ready", "True", "KubeletReady", "slurmpool lab agent is posting ready status") if ready else
                      cond("Ready", "False", "KubeletNotReady", f"{NOT_READY_ANNOTATION}=true", t))
        return {
            "capacity": res, "allocatable": res,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "lab node"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "lab node"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "lab node"),
                ready_cond,
            ] + list(others or []),
            "addresses": [{"type": "InternalIP", "address": POD_IP}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": name, "systemUUID": name, "bootID": self.boot_id,
                         "kernelVersion": os.uname().release, "osImage": "slurmpool lab node",
                         "containerRuntimeVersion": "lab://1", "kubeletVersion": "v1.37.2",
                         "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
        }

    def _create_node(self, name: str) -> dict:
        node = self.kube.request("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": self.node_labels(name)},
            "spec": {}, "status": self.node_status(name)})
        log.info("node %s created", name)
        return node

    def _create_lease(self, name: str, uid: str) -> None:
        try:
            self.kube.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now_micro()}})
        except ApiError as e:
            if e.status != 409:
                raise

    def keep_sim_node(self, name: str) -> None:
        """Renew the Lease only; recreate the Node (and Lease) if either is gone."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        try:
            self.kube.request("PATCH", path, {"spec": {"renewTime": now_micro(), "holderIdentity": name}},
                              content_type="application/merge-patch+json")
            return
        except ApiError as e:
            if e.status != 404:
                raise
        try:
            node = self.kube.request("GET", f"/api/v1/nodes/{name}")
        except ApiError as e:
            if e.status != 404:
                raise
            node = self._create_node(name)
        conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions") or []}
        if conds.get("Ready") != "True":
            self.kube.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": self.node_status(name)},
                              content_type="application/merge-patch+json")
        self._create_lease(name, node["metadata"]["uid"])

    def sim_loop(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        rounds = 0
        last_check = time.monotonic()
        with ThreadPoolExecutor(SIM_THREADS, thread_name_prefix="sim") as pool:
            while True:
                t0 = time.monotonic()
                failed = 0
                # Paced over the interval, as kubelets each renew on their own timer: unpaced, a
                # burst of 500 renewals every 20 s could land in the middle of make load's moves.
                # The first round (creating the Nodes) is not paced: the lab waits for them.
                pace = SIM_RENEW_INTERVAL * 0.8 / max(1, len(self.sim_nodes)) if rounds else 0.0
                rounds += 1
                futures = []
                for i, n in enumerate(self.sim_nodes):
                    time.sleep(max(0.0, t0 + i * pace - time.monotonic()))
                    futures.append(pool.submit(self.keep_sim_node, n))
                for f in futures:
                    try:
                        f.result()
                    except Exception as e:
                        failed += 1
                        if failed == 1:
                            log.warning("simulated node: %s", e)
                took = time.monotonic() - t0
                if failed:
                    log.warning("%d simulated node(s) not renewed", failed)
                late = took > SIM_RENEW_INTERVAL
                if failed or late or time.monotonic() - last_check >= SIM_READY_CHECK:
                    last_check = time.monotonic()
                    self._restore_sim_ready()
                time.sleep(max(1.0, SIM_RENEW_INTERVAL - took) if not failed else 1.0)

    def _restore_sim_ready(self) -> None:
        """What a kubelet does after the node lifecycle controller marked its Node Ready=Unknown
        (a lease round that ran past the 50 s grace on a starved machine): post Ready again.
        Renewing only the Lease never clears Unknown."""
        try:
            sel = urllib.parse.quote("slurmpool.io/sim=true")
            nodes = self.kube.request("GET", f"/api/v1/nodes?labelSelector={sel}", timeout=60)
        except Exception as e:
            log.warning("simulated nodes: list failed: %s", e)
            return
        restored = 0
        for node in nodes.get("items") or []:
            name = node["metadata"]["name"]
            conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions") or []}
            if name not in self.sim_set or conds.get("Ready") == "True":
                continue
            try:
                self.kube.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": self.node_status(name)},
                                  content_type="application/merge-patch+json")
                restored += 1
            except Exception as e:
                log.warning("simulated node %s: status: %s", name, e)
        if restored:
            log.warning("%d simulated node(s) were not Ready: status posted again", restored)

    def keep_node(self, name: str, heartbeat_due: bool) -> None:
        try:
            node = self.kube.request("GET", f"/api/v1/nodes/{name}")
        except ApiError as e:
            if e.status != 404:
                raise
            node = self._create_node(name)
            heartbeat_due = True
        all_conds = node.get("status", {}).get("conditions") or []
        conds = {c["type"]: c["status"] for c in all_conds}
        ready = (node["metadata"].get("annotations") or {}).get(NOT_READY_ANNOTATION) != "true"
        if heartbeat_due or conds.get("Ready") != ("True" if ready else "False"):
            # Only the status subresource: labels, taints and unschedulable are the operator's.
            others = [c for c in all_conds if c.get("type") not in AGENT_CONDITIONS]
            self.kube.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": self.node_status(name, ready, others)},
                              content_type="application/merge-patch+json")
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        try:
            self.kube.request("PATCH", lease_path, {"spec": {"renewTime": now_micro(), "holderIdentity": name}},
                              content_type="application/merge-patch+json")
        except ApiError as e:
            if e.status != 404:
                raise
            self._create_lease(name, node["metadata"]["uid"])

    def node_loop(self) -> None:
        last_heartbeat = 0.0
        while True:
            t0 = time.monotonic()
            due = t0 - last_heartbeat >= STATUS_HEARTBEAT
            ok = True
            for name in self.nodes:
                try:
                    self.keep_node(name, due)
                except Exception as e:
                    ok = False
                    log.warning("node %s: %s", name, e)
                    break  # most likely the apiserver is down: do not repeat the error per node
            if ok and due:
                last_heartbeat = t0
            if ok and not self.dra_started:  # the nodes exist: the DRA driver publishes for them
                self.dra_started = True
                threading.Thread(target=self.dra_loop, name="dra-driver", daemon=True).start()
            if ok and self.sim_nodes and not self.sim_started:  # the real nodes first, then the crowd
                self.sim_started = True
                threading.Thread(target=self.sim_loop, name="sim-nodes", daemon=True).start()
            time.sleep(RENEW_INTERVAL if ok else 1.0)

    # --- the DRA driver's ResourceSlices
    def resource_slice(self, node: dict) -> dict:
        """A node's ResourceSlice as NVIDIA's driver publishes whole GPUs (attributes of
        cmd/gpu-kubelet-plugin/deviceinfo.go; tests/fixtures/dra/README.md)."""
        name, uid = node["metadata"]["name"], node["metadata"]["uid"]
        devices = [{"name": f"gpu-{i}", "attributes": {
            "type": {"string": "gpu"}, "uuid": {"string": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{name}-{i}')}"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"}, "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"}, "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "570.124.6"}, "cudaDriverVersion": {"version": "12.8.0"},
            "pcieBusID": {"string": f"0000:{0x18 + i:02x}:00.0"}, "addressingMode": {"string": "HMM"}},
            "capacity": {"memory": {"value": "81559Mi"}}} for i in range(DRA_DEVICES)]
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{DRA_DRIVER}",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid, "controller": True}]},
                "spec": {"driver": DRA_DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                         "devices": devices}}

    def dra_loop(self) -> None:
        serving_since: dict[str, float] = {}
        published: dict[str, bool] = {}  # what the agent last made true (unknown at start: written once)
        while True:
            try:
                sel = urllib.parse.quote("slurmpool.io/lab=true")
                nodes = self.kube.request("GET", f"/api/v1/nodes?labelSelector={sel}").get("items") or []
                for node in nodes:
                    name, spec = node["metadata"]["name"], node.get("spec") or {}
                    serving = not spec.get("unschedulable") and not any(t.get("key") == SLURM_TAINT for t in spec.get("taints") or [])
                    since = serving_since.setdefault(name, time.monotonic()) if serving else serving_since.pop(name, None)
                    want = serving and since is not None and time.monotonic() - since >= DRA_PUBLISH_DELAY
                    if published.get(name) == want:
                        continue
                    path = "/apis/resource.k8s.io/v1/resourceslices"
                    try:
                        if want:
                            self.kube.request("POST", path, self.resource_slice(node))
                        else:
                            self.kube.request("DELETE", f"{path}/{name}-{DRA_DRIVER}")
                    except ApiError as e:
                        if e.status not in (404, 409):
                            raise
                    published[name] = want
                    log.info("node %s: ResourceSlice of %s %s", name, DRA_DRIVER, "published" if want else "withdrawn")
            except Exception as e:
                log.warning("DRA driver: %s", e)
            time.sleep(DRA_INTERVAL)

    # --- pods
    def ours(self, pod: dict) -> bool:
        return pod.get("spec", {}).get("nodeName") in self.node_set

    def dispatch(self, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            if uid in self.done:
                return
            w = self.workers.get(uid)
            if w is None:
                w = self.workers[uid] = PodWorker(self, pod)
                w.start()
            else:
                w.update(pod)

    def forget(self, w: PodWorker) -> None:
        with self.lock:
            self.workers.pop(w.uid, None)
            t = time.monotonic()
            self.done[w.uid] = t
            for uid, when in list(self.done.items()):
                if t - when > FORGET_AFTER:
                    del self.done[uid]

    def vanish_except(self, present: set[str]) -> None:
        with self.lock:
            for uid, w in self.workers.items():
                if uid not in present:
                    w.vanish()

    def kill_orphans(self, present: set[str]) -> None:
        """Processes of pods that no longer exist (deleted while the agent was down)."""
        pods_dir = os.path.join(self.run_dir, "pods")
        for f in os.listdir(pods_dir):
            uid = f.removesuffix(".pid")
            if not f.endswith(".pid") or uid in present:
                continue
            path = os.path.join(pods_dir, f)
            try:
                pid = int(open(path).read().strip())
                if proc_alive(pid) and proc_has_env(pid, f"SLURMPOOL_POD_UID={uid}"):
                    log.info("killing pid %d of vanished pod %s", pid, uid)
                    os.killpg(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass
            try:
                os.unlink(path)
            except OSError:
                pass

    def pod_loop(self) -> None:
        sel = urllib.parse.quote("spec.nodeName!=")
        first = True
        while True:
            try:
                lst = self.kube.request("GET", f"/api/v1/pods?fieldSelector={sel}", timeout=60)
                rv = lst["metadata"]["resourceVersion"]
                present = set()
                for pod in lst.get("items") or []:
                    if self.ours(pod):
                        present.add(pod["metadata"]["uid"])
                        self.dispatch(pod)
                self.vanish_except(present)
                if first:
                    self.kill_orphans(present)
                    first = False
                log.info("synced %d pods at resourceVersion %s", len(present), rv)
                while True:  # watch from rv; a normal end of the watch just continues from there
                    path = (f"/api/v1/pods?watch=1&fieldSelector={sel}&resourceVersion={rv}"
                            f"&allowWatchBookmarks=true&timeoutSeconds=300")
                    for ev in self.kube.watch(path, timeout=330):
                        kind, obj = ev.get("type"), ev.get("object") or {}
                        if kind == "ERROR":
                            raise ApiError(obj.get("code", 500), obj.get("message", "watch error"))
                        rv = obj["metadata"]["resourceVersion"]
                        if kind == "BOOKMARK" or not self.ours(obj):
                            continue
                        if kind == "DELETED":
                            with self.lock:
                                w = self.workers.get(obj["metadata"]["uid"])
                            if w is not None:
                                w.vanish()
                        else:
                            self.dispatch(obj)
            except Exception as e:  # apiserver restart, 410 Gone, ...: relist (level-triggered)
                log.warning("pod watch: %s; relisting", e)
                time.sleep(1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab-dir", required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--sim-nodes", type=int, default=0, help="simulated nodes sim001.. (load tests)")
    ap.add_argument("--sim-group", type=int, default=25, help="simulated nodes per slurmpool.io/sim-group label")
    ap.add_argument("--slurm-conf", required=True)
    ap.add_argument("--slurm-path", default="", help="directories of the lab's Slurm binaries, first in PATH")
    ap.add_argument("--slurm-env", action="append", default=[], help="KEY=VALUE for slurmd processes (repeatable)")
    ap.add_argument("--slurmd-run-dir", default="", help="run slurmd in a mount namespace with DIR/<node> on /run/slurm")
    ap.add_argument("--slurmd-cgroup-prefix", default="", help="run slurmd in cgroup PREFIX<node> and a cgroup namespace (cgexec.sh)")
    ap.add_argument("--conf-server", default="", help="HOST:PORT of slurmctld for configless slurmd")
    ap.add_argument("--dynamic-arg", action="append", default=[], help="one more argument of dynamic slurmd (repeatable)")
    ap.add_argument("--slurmd-netns", default="", help="network namespace of a dynamic slurmd: a path, %%s the node")
    ap.add_argument("--node-conf", default="", help="file of NAME<TAB>PORT<TAB>DYNAMIC_CONF lines (empty conf: static)")
    args = ap.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    # SIGTERM ends the agent only; slurmd processes keep running (a kubelet restart does not kill
    # containers) and are adopted by the next agent, or stopped by down.sh.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    agent = Agent(args)
    log.info("agent for nodes %s..%s, lab %s", agent.nodes[0], agent.nodes[-1], agent.lab_dir)
    threading.Thread(target=agent.node_loop, name="nodes", daemon=True).start()
    agent.pod_loop()


if __name__ == "__main__":
    main()
