"""Training jobs in containers (issue 29): pyxis and enroot on nodes the operator moved into Slurm.

Needs a lab brought up with LAB_PYXIS=1 (e2e/lab/up.sh: pyxis built for the lab's Slurm,
PlugStackConfig=, a busybox squashfs image made offline, per-node enroot paths). The matrix rows
26.05 and 22.05-pyxis-real (with a real kubelet node, for the slurmd pod of the 22.05-pyxis image)
run it (e2e/matrix.sh, both in `make test`); on another lab it is skipped, saying so.

Registry pulls (`--container-image=registry#image:tag`) need a registry, which the lab has not:
pyxis hands a squashfs path and a registry reference to the same `enroot create` step, so the
local image checks the path a pulled image takes after the pull (docs/install.md: credentials)."""

from __future__ import annotations

import re
import secrets
import shutil
import time
from pathlib import Path

import pytest

from harness import (
    imported_slurmd_image,
    module_operator,
    munge_secret,
    real_slurmd_pod,
    NAMESPACE,
    apply,
    job_state,
    node_placements,
    pool_manifest,
    pool_status,
    reset_nodes,
    resume_our_drains,
    slurmd_pods,
    slurm_states,
    split_reached,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "gpu"
FIGURES: dict[str, float] = {}


@pytest.fixture(scope="module")
def image(lab) -> str:
    if lab.env.get("LAB_PYXIS") != "1":
        pytest.skip("needs a lab with pyxis (LAB_PYXIS=1; e2e/matrix.sh rows 26.05 and 22.05-pyxis-real run it)")
    path = lab.env["LAB_PYXIS_IMAGE"]
    assert Path(path).is_file(), path
    return path


@pytest.fixture(scope="module")
def op(lab, image):
    yield from module_operator(lab)
    print("figures:", FIGURES)


def slurm_nodes(lab) -> list[str]:
    return sorted(n for n, p in node_placements(lab).items() if p == "slurm")


def scale_to(lab, slurm: int) -> list[str]:
    """The pool at `slurm` Slurm nodes, the operator's moves all done; the Slurm nodes, sorted."""
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={slurm}")
    wait(lambda: split_reached(lab, POOL, slurm), 180, what=f"split {slurm}/{8 - slurm}")
    return slurm_nodes(lab)


def srun(lab, *args: str, timeout: float = 120) -> tuple[str, float]:
    """srun in the gpu partition; its output and wall time (a figure, never asserted on)."""
    t0 = time.monotonic()
    p = lab.slurm("srun", "-p", "gpu", "--time=5", *args, timeout=timeout)
    return p.stdout, time.monotonic() - t0


@pytest.fixture(scope="module")
def two_nodes(lab, op) -> list[str]:
    """The pool created with no Slurm node, then two nodes moved into Slurm by the operator."""
    apply(lab, pool_manifest(lab, POOL, 0))
    wait(lambda: split_reached(lab, POOL, 0), 180, what="split 0/8")
    nodes = scale_to(lab, 2)
    assert len(nodes) == 2
    return nodes


def test_container_job_on_two_moved_nodes_runs_in_the_image(lab, image, two_nodes):
    host = Path("/etc/os-release").read_text()
    out, took = srun(lab, "-N2", "-w", ",".join(two_nodes), f"--container-image={image}", "cat", "/etc/os-release")
    assert out.count("ID=slurmpool-lab") == 2, out  # one per node, from the image
    assert not any(line in out.splitlines() for line in host.splitlines() if line.startswith("ID=")), out
    FIGURES["container_srun_2_nodes_first_s"] = round(took, 2)
    # the start time beside a plain srun (docs/install.md), once enroot has run on these nodes
    _, again = srun(lab, "-N2", "-w", ",".join(two_nodes), f"--container-image={image}", "true")
    _, plain = srun(lab, "-N2", "-w", ",".join(two_nodes), "true")
    FIGURES["container_srun_2_nodes_s"], FIGURES["plain_srun_2_nodes_s"] = round(again, 2), round(plain, 2)
    print(f"srun -N2: {took:.2f} s first in a container, then {again:.2f} s; {plain:.2f} s plain")


def test_container_mounts_and_gres_reach_the_job(lab, image, two_nodes):
    shared = Path(lab.env["LAB_DIR"]) / "pyxis" / "mnt"
    shared.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(8)
    (shared / "marker").write_text(token + "\n")
    out, _ = srun(lab, "-N1", "-w", two_nodes[0], "--gres=gpu:2", f"--container-image={image}",
                  f"--container-mounts={shared}:/data:ro", "sh", "-c",
                  'cat /data/marker; echo "CVD=$CUDA_VISIBLE_DEVICES"')
    lines = out.split()
    assert token in lines, out
    assert "CVD=0,1" in lines, out  # two GPUs of the node's eight, as Slurm's GRES gives them


def enroot_leftovers(node_dir: Path) -> list[str]:
    """What is left of a node's slurmd, enroot and pyxis: processes in a mount namespace that holds
    the node's run directory (its slurmd and job steps, enroot and the container's processes, whose
    mounts come from the node's enroot paths), and containers in enroot's data directory."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            mounts = [line.split()[4] for line in (proc / "mountinfo").read_text().splitlines() if str(node_dir) in line]
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if mounts:
            found.append(f"process {proc.name} ({argv[:120]}) with mounts {mounts}")
    data = node_dir / "enroot" / "data"
    if data.is_dir():
        found += [f"container {p}" for p in data.glob("user-*/*")]
    return sorted(found)


def node_run_dir(lab, node: str) -> Path:
    """The per-node directory the agent puts on /run/slurm for a node's slurmd (e2e/lab/up.sh)."""
    sub = "state/sack/slurmd" if lab.slurm_version == "26.05" else "state/noderun"
    return Path(lab.env["LAB_DIR"]) / sub / node


def test_a_container_job_ending_in_a_move_back_leaves_nothing_behind(lab, image, two_nodes):
    """A container job on both nodes, the pool scaled to 0 while it runs: the drain waits for the job
    and its epilog (pyxis's cleanup), the job completes, both nodes go to inference undrained by
    Slurm (no "Epilog error"), and no enroot mount, process or container is left on them."""
    job = lab.slurm("sbatch", "--parsable", "-p", "gpu", "-N2", "-w", ",".join(two_nodes), "--time=5", "-o", "/dev/null",
                    "--wrap", f"srun --container-image={image} sh -c 'sleep 20; cat /etc/os-release'").stdout.strip()
    # the check below sees a container: its processes while the job runs
    wait(lambda: [f for f in enroot_leftovers(node_run_dir(lab, two_nodes[1])) if "enroot" in f], 90,
         interval=0.5, what=f"job {job}'s container on {two_nodes[1]}")
    assert job_state(lab, job) == "RUNNING", job_state(lab, job)
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=0")
    wait(lambda: split_reached(lab, POOL, 0), 240, what="split 0/8")
    assert job_state(lab, job) in ("COMPLETED", "GONE"), job_state(lab, job)
    states = slurm_states(lab)
    for node in two_nodes:
        out = lab.slurm("scontrol", "show", "node", "-o", node).stdout
        reason = re.search(r"Reason=(.*?)(?: \[|$)", out)
        assert reason and reason.group(1).startswith("slurmpool:"), (node, states.get(node), out)
        assert "Epilog" not in out, out
    for node in two_nodes:
        deadline = time.monotonic() + 30
        while (left := enroot_leftovers(node_run_dir(lab, node))) and time.monotonic() < deadline:
            time.sleep(1)
        assert not left, (node, left)


@pytest.fixture(scope="module")
def pyxis_image(lab, image) -> str:
    """The 22.05 -pyxis slurmd image, built (cached) and imported into the real nodes' containerd."""
    if not lab.real_nodes or lab.slurm_version != "22.05":
        pytest.skip("needs real kubelet nodes on a 22.05 lab with pyxis (LAB_REAL_NODES=1 LAB_PYXIS=1)")
    return imported_slurmd_image(lab, "22.05-pyxis")[0]


def real_pod_conf(lab) -> Path:
    """slurm.conf for the slurmd pod: the lab's, whose plugstack.conf (found beside slurm.conf) names
    the image's pyxis, not the lab's build on the host."""
    lab_dir = Path(lab.env["LAB_DIR"])
    etc = lab_dir / "pyxis" / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    conf = [line for line in (lab_dir / "etc" / "slurm.conf").read_text().splitlines() if not line.startswith("PlugStackConfig=")]
    (etc / "slurm.conf").write_text("\n".join(conf) + "\n")
    for f in ("topology.conf", "gres.conf", "cgroup.conf"):
        if (lab_dir / "etc" / f).exists():
            shutil.copy(lab_dir / "etc" / f, etc / f)
    (etc / "plugstack.conf").write_text("required /usr/local/lib/slurm/spank_pyxis.so\n")
    return etc / "slurm.conf"


def test_container_job_in_a_slurmd_pod_on_a_real_kubelet_node(lab, op, image, pyxis_image):
    """The -pyxis image as the slurmd pod of a real kubelet node the operator moves into Slurm, with the
    pod's security context as docs/install.md says (none set: the runtime's defaults, not privileged;
    with LAB_CGROUPS=1, CAP_SYS_ADMIN added for Slurm's cgroups, docs/slurmd-pod.md), enroot's paths on emptyDir volumes: the container job runs, with its mount and GPUs, and the node
    moves back to inference (the kubelet stops the pod). Not checked here: what enroot leaves on a real
    node (a container's processes were not found from the host's /proc, so such a check could not fail)."""
    node = lab.real_nodes[0]
    lab_dir = lab.env["LAB_DIR"]
    pool = pool_manifest(lab, "real-pyxis", 1)
    pool["spec"]["nodeSelector"] = {"matchLabels": {"slurmpool.io/real": "true", "kubernetes.io/hostname": node}}
    pool["spec"]["slurm"]["slurmdPod"] = real_slurmd_pod(
        lab, pyxis_image, "pyxis-auth", conf=str(real_pod_conf(lab)), dirs={"pyxis": f"{lab_dir}/pyxis"}, grace=30,
        volumes=({"name": "enroot-data", "emptyDir": {}}, {"name": "enroot-run", "emptyDir": {"medium": "Memory"}}),
        volume_mounts=({"name": "enroot-data", "mountPath": "/var/lib/enroot"}, {"name": "enroot-run", "mountPath": "/run/enroot"}))
    secret = munge_secret(lab, "pyxis-auth")

    def at(slurm: int, inference: int) -> bool:
        s = pool_status(lab, "real-pyxis")
        return s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == inference and s.get("moving") == 0
    shared = Path(lab_dir) / "pyxis" / "mnt"
    shared.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(8)
    (shared / "marker").write_text(token + "\n")
    try:
        apply(lab, [secret, pool])
        wait(lambda: at(1, 0), 240, what=f"{node} in Slurm, served by {pyxis_image}")
        out, took = srun(lab, "-N1", "-w", node, "--gres=gpu:2", f"--container-image={image}",
                         f"--container-mounts={shared}:/data:ro", "sh", "-c",
                         'grep ^ID= /etc/os-release; cat /data/marker; echo "CVD=$CUDA_VISIBLE_DEVICES"')
        assert out.split() == ["ID=slurmpool-lab", token, "CVD=0,1"], out
        _, plain = srun(lab, "-N1", "-w", node, "true")
        FIGURES["real_node_container_srun_s"], FIGURES["real_node_plain_srun_s"] = round(took, 2), round(plain, 2)
        lab.kubectl("scale", "snp", "real-pyxis", "-n", NAMESPACE, "--replicas=0")
        wait(lambda: at(0, 1), 240, what=f"{node} back to inference")
        wait(lambda: not [p for p in slurmd_pods(lab) if p["spec"].get("nodeName") == node], 120,
             what=f"the real kubelet stopping the slurmd pod on {node}")
    finally:
        lab.kubectl("delete", "snp", "real-pyxis", "-n", NAMESPACE, "--ignore-not-found", "--wait=true", check=False)
        lab.kubectl("delete", "secret", "pyxis-auth", "-n", NAMESPACE, "--ignore-not-found", check=False)
        lab.kubectl("delete", "pod", "-n", NAMESPACE, "-l", "slurmpool.io/component=slurmd", "--field-selector",
                    f"spec.nodeName={node}", "--wait=true", check=False)
        reset_nodes(lab, [node])
        resume_our_drains(lab, [node])

