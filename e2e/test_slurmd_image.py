"""The slurmd image's entrypoint, run for real against the lab's slurmctld as a dynamic,
configless node, on the matrix's dynamic rows (skipped elsewhere):
- 26.05 (`26.05-dynamic`, `26.05-dynamic-rest`): auth/slurm, slurm.key from a (Secret-like) directory;
- 24.11 (`24.11-dynamic-requeue`, `24.11-dynamic`): munge, munge.key from that directory, the image's
  own munged on the socket slurm.conf names (so configless slurmd gets `--authinfo`), in a network
  namespace of its own as the lab's 24.11 dynamic nodes are (e2e/lab/netns.sh: 24.11 takes no Port=).

The image (deploy/docker/build-images.sh --slurmd-only, SLURMD_VERSIONS=<the lab's>; cached) is
unpacked and run as a container would run it, without a container engine: its root filesystem by
chroot, in its own mount and PID namespaces (the entrypoint is PID 1 and sees only its own
processes). 26.05: on the host's network like the slurmd pods of slurmpool, the lab directory bound
at its own path (slurm.conf names its spool, log and fake GPU devices there). 24.11: only those three
directories are bound, as a pod's hostPath volumes would be, so the lab's munged is not in reach.
The node is a new dynamic node, imgtest01; it is deleted from Slurm at the end.

Checked: the node registers with the --conf line (GPUs, feature, DYNAMIC_NORM), a job runs to
completion, and on SIGTERM with a job running the entrypoint keeps slurmd serving: the node is never
DOWN, the job runs to COMPLETED, and only then does the entrypoint exit, 0.
With real kubelet nodes (LAB_REAL_NODES, the matrix's 26.05-dynamic-rest row), the 26.05 image runs
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
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import job_state, wait

REPO = Path(__file__).resolve().parents[1]
NODE = "imgtest01"
FEATURE = "slurmd-image"


@pytest.fixture(scope="module")
def dynamic_lab(lab):
    if lab.slurm_version not in ("24.11", "26.05") or not lab.dynamic_nodes:
        pytest.skip("the slurmd image's dynamic/configless run needs LAB_SLURM=24.11 or 26.05 with LAB_SLURM_NODES=dynamic")
    return lab


@pytest.fixture(scope="module")
def rootfs(dynamic_lab) -> Path:
    """The lab's Slurm's slurmd image, built (cached when unchanged) and unpacked from its OCI archive."""
    lab = dynamic_lab
    t0 = time.monotonic()
    p = subprocess.run([str(REPO / "deploy" / "docker" / "build-images.sh"), "--slurmd-only"],
                       env={**lab.env, "SLURMD_VERSIONS": lab.slurm_version, "SLURMD_PYXIS": "0"}, capture_output=True, text=True,
                       timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    name, archive = p.stdout.split()[-1].split("=", 1)
    assert name.endswith(f":{lab.slurm_version}"), p.stdout
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


def image_labels(archive: str) -> dict[str, str]:
    """The Labels of an OCI archive's image config (its first manifest)."""
    import json
    import tarfile

    def blob(t, digest):
        return json.load(t.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}"))

    with tarfile.open(archive) as t:
        manifest = blob(t, json.load(t.extractfile("index.json"))["manifests"][0]["digest"])
        return blob(t, manifest["config"]["digest"])["config"].get("Labels") or {}


def test_image_labels_say_what_its_tree_holds_as_the_docs_table_does(dynamic_lab, rootfs):
    """The image's io.slurmpool.* labels equal docs/slurmd-pod.md's row for it (the table the unit
    test tests/test_slurmd_contents.py checks against the label computation)."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from test_slurmd_contents import docs_table

    archive = (rootfs / ".image").read_text().split("=", 1)[1]
    labels = image_labels(archive)
    version, plugins = docs_table()[dynamic_lab.slurm_version]
    assert labels.get("io.slurmpool.slurm.version") == version, labels
    assert labels.get("io.slurmpool.slurm.plugins") == ",".join(plugins), labels


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
    with an auth 'Secret' (`secret`: file name -> source) on /etc/slurm-auth, a tmpfs on /run as a
    container has, and the host's /etc/hosts and resolv.conf as a hostNetwork pod has. `binds`: host
    directories bound at their own paths; `netns`: a network namespace to run in (else the host's)."""

    def __init__(self, lab, root: Path, env: dict[str, str], secret: dict[str, Path], binds: list[str],
                 netns: str | None = None):
        self.lab, self.root = lab, root
        lab_dir = lab.env["LAB_DIR"]
        self.secret = Path(lab_dir) / "slurmd-image-secret"
        self.secret.mkdir(exist_ok=True)
        for name, source in secret.items():
            shutil.copy(source, self.secret / name)
            os.chmod(self.secret / name, 0o644)  # as a Secret volume shows it
        self.log = Path(lab_dir) / "log" / "slurmd-image.log"
        script = r'''
set -e
r=$0; binds=$1; secret=$2; shift 2
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount --rbind /sys "$r/sys"
mount -t tmpfs -o mode=0755 tmpfs "$r/run"
mkdir -p "$r/etc/slurm-auth"
IFS=: read -ra dirs <<< "$binds"
for d in "${dirs[@]}"; do mkdir -p "$r$d"; mount --bind "$d" "$r$d"; done
mount --bind -o ro "$secret" "$r/etc/slurm-auth"
# as the kubelet gives a hostNetwork pod: the host's /etc/hosts and resolv.conf
touch "$r/etc/hosts" "$r/etc/resolv.conf"
mount --bind -o ro /etc/hosts "$r/etc/hosts"
mount --bind -o ro /etc/resolv.conf "$r/etc/resolv.conf"
exec chroot "$r" /usr/bin/env -i "$@" /usr/local/bin/slurmd-entrypoint'''
        argv = ["unshare", "--mount", "--pid", "--fork", "--propagation", "private", "--", "bash", "-c", script,
                str(root), ":".join(binds), str(self.secret)] + [f"{k}={v}" for k, v in env.items()]
        if netns:
            argv = ["nsenter", f"--net={netns}", "--"] + argv  # nsenter execs: the PID stays unshare's
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


@dataclass
class Setup:
    """How the image meets this lab's Slurm: the container's environment, Secret and mounts."""
    env: dict[str, str]
    secret: dict[str, Path]
    binds: list[str]
    netns: str | None
    expect_log: tuple[str, ...]  # what the entrypoint says of the auth it set up


def setup_for(lab) -> Setup:
    lab_dir = Path(lab.env["LAB_DIR"])
    conf = Path(lab.env["SLURM_CONF"])
    # the lab's own dynamic nodes' line (nodes.tsv), with a port of its own (26.05) and a feature
    lab_line = (lab_dir / "etc" / "nodes.tsv").read_text().splitlines()[-1].split("\t")[2]
    node_conf = re.sub(r"Port=\d+", f"Port={free_port()}", lab_line) + f" Features={FEATURE}"
    env = {"NODE_NAME": NODE, "SLURMD_MODE": "dynamic", "SLURMD_NODE_CONF": node_conf,
           "SLURM_AUTH_DIR": "/etc/slurm-auth", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    port = conf_value(conf, "SlurmctldPort")
    if lab.slurm_version == "26.05":
        return Setup({**env, "SLURM_CONF_SERVER": f"127.0.0.1:{port}"}, {"slurm.key": lab_dir / "etc" / "slurm.key"},
                     [str(lab_dir)], None, ("auth/slurm key from /etc/slurm-auth",))
    # 24.11: munge. The image's munged listens where slurm.conf's AuthInfo says (configless slurmd
    # reads that only once it has fetched slurm.conf, so the entrypoint passes --authinfo too). Only
    # the directories slurm.conf names are bound: the lab's munged is out of reach.
    socket = re.search(r"socket=([^,\s]+)", conf_value(conf, "AuthInfo")).group(1)
    netns_sh = str(REPO / "e2e" / "lab" / "netns.sh")
    lab.run(netns_sh, "add", NODE)
    netns = lab.run(netns_sh, "addr").stdout.strip() % NODE
    return Setup({**env, "SLURM_CONF_SERVER": f"{lab.env['LAB_SLURMCTLD_ADDR']}:{port}", "MUNGE_SOCKET": socket},
                 {"munge.key": lab_dir / "munge" / "munge.key"},
                 [str(lab_dir / d) for d in ("state", "log", "fakedev")], netns,
                 (f"munged on {socket}", f"--authinfo socket={socket}"))


def node_line(lab, node: str) -> str:
    return lab.slurm("scontrol", "-o", "show", "node", node, check=False).stdout


def field(line: str, key: str) -> str:
    return next((w.split("=", 1)[1] for w in line.split() if w.startswith(key + "=")), "")


def submit(lab, seconds: int) -> str:
    """A job of `seconds` on the test's node, holding all its GPUs; its id."""
    return lab.slurm("sbatch", "--parsable", "-w", NODE, "--gres=gpu:8", "-D", "/tmp", "-o", "/dev/null",
                     "--wrap", f"sleep {seconds}").stdout.strip().split(";")[0]


def test_entrypoint_dynamic_configless_registers_runs_a_job_and_sigterm_keeps_it(dynamic_lab, rootfs):
    lab = dynamic_lab
    setup = setup_for(lab)
    c = Container(lab, rootfs, setup.env, setup.secret, setup.binds, setup.netns)
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
        assert all(said in c.logs() for said in setup.expect_log + ("--conf-server",)), c.logs()

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
        print(f"slurmd image ({lab.slurm_version}): {NODE} dynamic, configless, {'auth/slurm' if setup.netns is None else 'munge'} registered in {joined:.1f} s; "
              f"job {first} COMPLETED; SIGTERM while job {held} ran: node states {sorted(set(seen))} over {len(seen)} s, job COMPLETED, exit 0")
    finally:
        c.stop()
        # the dynamic node goes with its test (it can be deleted once no job is on it)
        wait(lambda: lab.slurm("scontrol", "delete", f"nodename={NODE}", check=False).returncode == 0
             or "not found" in node_line(lab, NODE).lower() + lab.slurm("scontrol", "show", "node", NODE,
                                                                       check=False).stderr.lower(),
             30, interval=1, what=f"{NODE} deleted from Slurm")
        if setup.netns:
            lab.run("ip", "netns", "del", Path(setup.netns).name, check=False)


def test_real_kubelet_runs_the_image_dynamic_and_a_pod_deleted_during_a_job_waits_for_it(dynamic_lab, rootfs):
    lab = dynamic_lab
    if not lab.real_nodes:
        pytest.skip("no real kubelet nodes (LAB_REAL_NODES=0)")
    if lab.slurm_version != "26.05":
        pytest.skip("under a real kubelet the 26.05 image runs (26.05-dynamic-rest); 24.11's dynamic slurmd need a network namespace each")
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
