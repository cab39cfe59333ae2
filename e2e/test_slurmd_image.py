"""The 26.05 slurmd image's entrypoint, run for real against the lab's slurmctld: dynamic node,
configless, auth/slurm with slurm.key from a (Secret-like) directory. Runs on a lab with
LAB_SLURM=26.05 LAB_SLURM_NODES=dynamic (the matrix's 26.05-dynamic rows); skipped elsewhere.

The image (deploy/docker/build-images.sh --slurmd-only, SLURMD_VERSIONS=26.05; cached) is unpacked
and run as a container would run it, without a container engine: its root filesystem by chroot, in
its own mount and PID namespaces (the entrypoint is PID 1 and sees only its own processes), on the
host's network like the slurmd pods of slurmpool. The lab directory is bound at its own path (slurm.conf
names its spool, log and fake GPU devices there). The node is a new dynamic node, imgtest01, with its
own port; it is deleted from Slurm at the end.

Checked: the node registers with the --conf line (GPUs, feature, DYNAMIC_NORM), a job runs to
completion, and on SIGTERM with a job running the entrypoint keeps slurmd serving: the node is never
DOWN, the job runs to COMPLETED, and only then does the entrypoint exit, 0.
With real kubelet nodes (LAB_REAL_NODES, the matrix's 26.05-dynamic-rest row), the same image runs
as a pod of the real kubelet (containerd, hostNetwork, slurm.key from a Secret, GPUs requested as
nvidia.com/gpu): it registers and runs a job, and the pod deleted during a job ends only once the job
completed, the node never DOWN.
The static + munge + slurm.conf modes run on real kubelet nodes (e2e/test_real_nodes.py, 22.05).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from harness import job_state, wait

REPO = Path(__file__).resolve().parents[1]
NODE = "imgtest01"
FEATURE = "slurmd-image"


@pytest.fixture(scope="module")
def dynamic_26(lab):
    if lab.slurm_version != "26.05" or not lab.dynamic_nodes:
        pytest.skip("the slurmd image's dynamic/configless/auth-slurm run needs LAB_SLURM=26.05 LAB_SLURM_NODES=dynamic")
    return lab


@pytest.fixture(scope="module")
def rootfs(dynamic_26) -> Path:
    """The 26.05 slurmd image, built (cached when unchanged) and unpacked from its OCI archive."""
    lab = dynamic_26
    t0 = time.monotonic()
    p = subprocess.run([str(REPO / "deploy" / "docker" / "build-images.sh"), "--slurmd-only"],
                       env={**lab.env, "SLURMD_VERSIONS": "26.05"}, capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    name, archive = p.stdout.split()[-1].split("=", 1)
    assert name.endswith(":26.05"), p.stdout
    root = Path(lab.env["LAB_DIR"]) / "slurmd-image-rootfs"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    unpack(archive, root)
    (root / ".image").write_text(f"{name}={archive}")
    print(f"slurmd image {name} built/unpacked in {time.monotonic() - t0:.1f} s")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def unpack(archive: str, root: Path) -> None:
    """The layers of an OCI archive's first manifest, in order, into root (tar of tar, as root)."""
    import json
    import tarfile

    with tarfile.open(archive) as t:
        index = json.load(t.extractfile("index.json"))
        digest = index["manifests"][0]["digest"].split(":", 1)[1]
        manifest = json.load(t.extractfile(f"blobs/sha256/{digest}"))
    for layer in manifest["layers"]:
        blob = f"blobs/sha256/{layer['digest'].split(':', 1)[1]}"
        subprocess.run(f"tar -xOf '{archive}' '{blob}' | tar -xz --numeric-owner -C '{root}'", shell=True, check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def conf_value(path: Path, key: str) -> str:
    m = re.findall(rf"^{key}=(\S+)", path.read_text(), re.M)
    assert m, f"no {key}= in {path}"
    return m[-1]


class Container:
    """The image's entrypoint as PID 1 of its own mount and PID namespaces, chrooted into the image,
    with an auth 'Secret' (slurm.key) on /etc/slurm-auth, a tmpfs on /run as a container has, and
    the host's /etc/hosts and resolv.conf as a hostNetwork pod has."""

    def __init__(self, lab, root: Path, env: dict[str, str]):
        self.lab, self.root = lab, root
        lab_dir = lab.env["LAB_DIR"]
        self.secret = Path(lab_dir) / "slurmd-image-secret"
        self.secret.mkdir(exist_ok=True)
        shutil.copy(Path(lab_dir) / "etc" / "slurm.key", self.secret / "slurm.key")
        os.chmod(self.secret / "slurm.key", 0o644)  # as a Secret volume shows it
        self.log = Path(lab_dir) / "log" / "slurmd-image.log"
        script = r'''
set -e
r=$0; lab=$1; secret=$2; shift 2
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount --rbind /sys "$r/sys"
mount -t tmpfs -o mode=0755 tmpfs "$r/run"
mkdir -p "$r$lab" "$r/etc/slurm-auth"
mount --bind "$lab" "$r$lab"
mount --bind -o ro "$secret" "$r/etc/slurm-auth"
# as the kubelet gives a hostNetwork pod: the host's /etc/hosts and resolv.conf
touch "$r/etc/hosts" "$r/etc/resolv.conf"
mount --bind -o ro /etc/hosts "$r/etc/hosts"
mount --bind -o ro /etc/resolv.conf "$r/etc/resolv.conf"
exec chroot "$r" /usr/bin/env -i "$@" /usr/local/bin/slurmd-entrypoint'''
        argv = ["unshare", "--mount", "--pid", "--fork", "--propagation", "private", "--", "bash", "-c", script,
                str(root), lab_dir, str(self.secret)] + [f"{k}={v}" for k, v in env.items()]
        self.out = self.log.open("w")
        self.proc = subprocess.Popen(argv, stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True)

    def pid1(self) -> int:
        """The entrypoint's PID on the host: unshare's child (PID 1 of the new namespace)."""
        def child():
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            return int(kids[0]) if kids else 0
        return wait(child, 10, what="the container's PID 1")

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.out.close()
        shutil.rmtree(self.secret, ignore_errors=True)


def node_line(lab, node: str) -> str:
    return lab.slurm("scontrol", "-o", "show", "node", node, check=False).stdout


def field(line: str, key: str) -> str:
    return next((w.split("=", 1)[1] for w in line.split() if w.startswith(key + "=")), "")


def submit(lab, seconds: int) -> str:
    """A job of `seconds` on the test's node, holding all its GPUs; its id."""
    return lab.slurm("sbatch", "--parsable", "-w", NODE, "--gres=gpu:8", "-D", "/tmp", "-o", "/dev/null",
                     "--wrap", f"sleep {seconds}").stdout.strip().split(";")[0]


def test_entrypoint_dynamic_configless_auth_slurm_registers_runs_a_job_and_sigterm_keeps_it(dynamic_26, rootfs):
    lab = dynamic_26
    conf = Path(lab.env["SLURM_CONF"])
    server = f"127.0.0.1:{conf_value(conf, 'SlurmctldPort')}"
    port = free_port()
    # the lab's own dynamic nodes' line (nodes.tsv), with this node's port and a feature
    lab_line = (Path(lab.env["LAB_DIR"]) / "etc" / "nodes.tsv").read_text().splitlines()[-1].split("\t")[2]
    node_conf = re.sub(r"Port=\d+", f"Port={port}", lab_line) + f" Features={FEATURE}"
    c = Container(lab, rootfs, {"NODE_NAME": NODE, "SLURMD_MODE": "dynamic", "SLURM_CONF_SERVER": server,
                                "SLURMD_NODE_CONF": node_conf, "SLURM_AUTH_DIR": "/etc/slurm-auth",
                                "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
    try:
        t0 = time.monotonic()
        wait(lambda: "IDLE" in field(node_line(lab, NODE), "State") or c.proc.poll() is not None, 60,
             what=f"{NODE} registered by the image's slurmd")
        assert c.proc.poll() is None, c.logs()
        joined = time.monotonic() - t0
        line = node_line(lab, NODE)
        assert "DYNAMIC_NORM" in field(line, "State"), line
        assert FEATURE in field(line, "AvailableFeatures").split(","), line
        assert field(line, "Gres").startswith("gpu:h100:8"), line
        assert "auth/slurm key from /etc/slurm-auth" in c.logs() and "--conf-server" in c.logs(), c.logs()

        first = submit(lab, 1)
        wait(lambda: job_state(lab, first) == "COMPLETED", 60, what="a job to complete on the image's slurmd")

        held = submit(lab, 20)
        wait(lambda: job_state(lab, held) == "RUNNING", 30, what="a job to run")
        os.kill(c.pid1(), signal.SIGTERM)
        seen = []
        while job_state(lab, held) == "RUNNING":
            state = field(node_line(lab, NODE), "State")
            seen.append(state)
            assert "DOWN" not in state and c.proc.poll() is None, (state, c.logs())
            time.sleep(1)
        assert len(seen) >= 5, seen  # the job outlived the SIGTERM by seconds (it runs 20 s)
        assert job_state(lab, held) == "COMPLETED", (job_state(lab, held), c.logs())
        assert "SIGTERM with job steps running" in c.logs(), c.logs()
        rc = c.proc.wait(30)
        assert rc == 0, c.logs()
        assert "DOWN" not in field(node_line(lab, NODE), "State")
        print(f"slurmd image (26.05): {NODE} dynamic, configless, auth/slurm registered in {joined:.1f} s; "
              f"job {first} COMPLETED; SIGTERM while job {held} ran: node states {sorted(set(seen))} over {len(seen)} s, job COMPLETED, exit 0")
    finally:
        c.stop()
        # the dynamic node goes with its test (it can be deleted once no job is on it)
        wait(lambda: lab.slurm("scontrol", "delete", f"nodename={NODE}", check=False).returncode == 0
             or "not found" in node_line(lab, NODE).lower() + lab.slurm("scontrol", "show", "node", NODE,
                                                                       check=False).stderr.lower(),
             30, interval=1, what=f"{NODE} deleted from Slurm")


def test_real_kubelet_runs_the_image_dynamic_and_a_pod_deleted_during_a_job_waits_for_it(dynamic_26, rootfs):
    lab = dynamic_26
    if not lab.real_nodes:
        pytest.skip("no real kubelet nodes (LAB_REAL_NODES=0)")
    from harness import NAMESPACE, apply, ensure_namespace_and_secret, pods_json

    name, archive = (rootfs / ".image").read_text().split("=", 1)
    lab.run(str(REPO / "e2e" / "lab" / "real-nodes.sh"), "import", archive, timeout=300)
    ensure_namespace_and_secret(lab)
    lab_dir, host = lab.env["LAB_DIR"], lab.real_nodes[-1]
    server = f"127.0.0.1:{conf_value(Path(lab.env['SLURM_CONF']), 'SlurmctldPort')}"
    lab_line = (Path(lab_dir) / "etc" / "nodes.tsv").read_text().splitlines()[-1].split("\t")[2]
    node_conf = re.sub(r"Port=\d+", f"Port={free_port()}", lab_line) + f" Features={FEATURE}"
    key = (Path(lab_dir) / "etc" / "slurm.key").read_bytes()
    import base64
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "slurm-auth-26", "namespace": NAMESPACE},
              "data": {"slurm.key": base64.b64encode(key).decode()}}
    # slurm.conf (fetched from slurmctld) names the lab's spool and log directories and fake GPUs
    paths = {"state": f"{lab_dir}/state", "log": f"{lab_dir}/log", "fakedev": f"{lab_dir}/fakedev"}
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "slurmd-image-26", "namespace": NAMESPACE, "labels": {"app": "slurmd-image-26"}},
        "spec": {
            "nodeName": host, "hostNetwork": True, "terminationGracePeriodSeconds": 120,
            "tolerations": [{"key": "slurmpool.io/real-node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{
                "name": "slurmd", "image": name, "imagePullPolicy": "Never",
                "env": [{"name": "NODE_NAME", "value": NODE}, {"name": "SLURMD_MODE", "value": "dynamic"},
                        {"name": "SLURM_CONF_SERVER", "value": server}, {"name": "SLURMD_NODE_CONF", "value": node_conf}],
                "resources": {"limits": {"nvidia.com/gpu": "8"}},
                "volumeMounts": [{"name": k, "mountPath": v} for k, v in paths.items()]
                + [{"name": "auth", "mountPath": "/etc/slurm-auth", "readOnly": True}],
            }],
            "volumes": [{"name": k, "hostPath": {"path": v, "type": "Directory"}} for k, v in paths.items()]
            + [{"name": "auth", "secret": {"secretName": "slurm-auth-26", "defaultMode": 0o400}}],
        },
    }
    t0 = time.monotonic()
    apply(lab, [secret, pod])
    try:
        wait(lambda: "IDLE" in field(node_line(lab, NODE), "State"), 90, what=f"{NODE} registered by the pod's slurmd")
        joined = time.monotonic() - t0
        line = node_line(lab, NODE)
        assert "DYNAMIC_NORM" in field(line, "State") and FEATURE in field(line, "AvailableFeatures"), line

        first = submit(lab, 1)
        wait(lambda: job_state(lab, first) == "COMPLETED", 60, what="a job to complete on the pod's slurmd")
        held = submit(lab, 15)
        wait(lambda: job_state(lab, held) == "RUNNING", 30, what="a job to run")
        lab.kubectl("delete", "pod", "slurmd-image-26", "-n", NAMESPACE, "--wait=false")
        seen = []
        while job_state(lab, held) == "RUNNING":
            state = field(node_line(lab, NODE), "State")
            seen.append(state)
            assert "DOWN" not in state, state
            assert pods_json(lab, NAMESPACE, "app=slurmd-image-26"), "the pod went while its job ran"
            time.sleep(1)
        assert len(seen) >= 5, seen
        assert job_state(lab, held) == "COMPLETED"
        wait(lambda: not pods_json(lab, NAMESPACE, "app=slurmd-image-26"), 60, what="the pod to go once the job ended")
        print(f"slurmd image {name} under the real kubelet on {host}: {NODE} registered {joined:.1f} s after the pod "
              f"was created; job {first} COMPLETED; pod deleted during job {held}: node {sorted(set(seen))} for "
              f"{len(seen)} s, job COMPLETED, then the pod went")
    finally:
        lab.kubectl("delete", "pod", "slurmd-image-26", "-n", NAMESPACE, "--ignore-not-found", "--grace-period=0",
                    "--force", check=False)
        lab.kubectl("delete", "secret", "slurm-auth-26", "-n", NAMESPACE, "--ignore-not-found", check=False)
        wait(lambda: lab.slurm("scontrol", "delete", f"nodename={NODE}", check=False).returncode == 0
             or "not found" in lab.slurm("scontrol", "show", "node", NODE, check=False).stderr.lower()
             + node_line(lab, NODE).lower(), 30, interval=1, what=f"{NODE} deleted from Slurm")
