"""GPUs isolated by cgroups (issue 41, item 1), on a lab with LAB_CGROUPS=1: Slurm runs
proctrack/cgroup and task/cgroup with ConstrainDevices=yes, each node's GPUs are stand-ins with
NVIDIA's device numbers (195, 0-7: e2e/lab/up.sh), and each slurmd runs in a cgroup namespace of
its own, as in a pod (e2e/lab/cgexec.sh). On nodes the operator moved into Slurm, a job step
given 2 GPUs can open its 2 devices ("No such device or address": no driver here, so access was
allowed) and gets "Operation not permitted" on the other 6; across two nodes of one job, each
node's step sees its own. The same in slurmd pods on real kubelet nodes (the e2e-main lane).
Skipped on a lab without LAB_CGROUPS=1."""

from __future__ import annotations

import os

import pytest
from harness import (
    Operator,
    apply,
    ensure_namespace_and_secret,
    imported_slurmd_image,
    install_crd,
    pool_manifest,
    real_nodes_in_slurm,
    reset_lab,
    split_reached,
    two_real_nodes,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "isolation"
# sh, not Python: 24.11's slurmd runs in a Debian 13 root without it. The open's error, by its text.
PROBE = """for d in 0 1 2 3 4 5 6 7 ctl; do
  if err=$( (exec 3<>"$1/nvidia$d") 2>&1 ); then got=OPENED
  else case $err in *"No such device or address"*) got=ENXIO ;; *"not permitted"*) got=EPERM ;; *) got=OTHER ;; esac; fi
  echo "$SLURMD_NODENAME $d $got"
done
"""


def probe(lab, *srun: str) -> dict[str, dict[str, str]]:
    """node -> device (0-7, ctl) -> ENXIO (allowed: no driver), EPERM (refused) or OPENED, per srun task."""
    out = lab.slurm("srun", "-p", "gpu", *srun, "sh", "-c", PROBE, "sh", os.path.join(lab.dir, "fakedev"), timeout=60).stdout
    seen: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        node, device, got = line.split()
        seen.setdefault(node, {})[device] = got
    return seen


def devices(allowed: range) -> dict[str, str]:
    """What a step given the GPUs ALLOWED sees: those open, the other GPUs refused, and NVIDIA's
    control device open (every CUDA process opens it, and no job's GPUs name it)."""
    return {**{str(i): "ENXIO" if i in allowed else "EPERM" for i in range(8)}, "ctl": "ENXIO"}


def check_isolation(lab, pair: list[str]) -> None:
    """On each node of a two-node job given 2 GPUs a node, its step opens devices 0 and 1 and is
    refused the other 6; a step given all 8 opens all; a step given none opens none. Every step
    opens the control device."""
    two = probe(lab, "-N2", "-w", ",".join(pair), "--gres=gpu:2")
    assert sorted(two) == sorted(pair), two
    for node, seen in two.items():
        assert seen == devices(range(2)), (node, seen)
    whole = probe(lab, "-N1", "-w", pair[0], "--gres=gpu:8", "--exclusive")
    assert whole == {pair[0]: devices(range(8))}, whole
    none = probe(lab, "-N1", "-w", pair[1])
    assert none == {pair[1]: devices(range(0))}, none


def test_a_job_opens_only_the_gpus_it_was_given_on_nodes_the_operator_moved_in(lab):
    if lab.env.get("LAB_CGROUPS") != "1":
        pytest.skip("needs a lab with LAB_CGROUPS=1 (device cgroups)")
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    total = len(lab.nodes)
    op = Operator(lab, "operator-gpu-isolation.log").start()
    try:
        apply(lab, pool_manifest(lab, POOL, 0))
        wait(lambda: split_reached(lab, POOL, 0, total), 120, what="every node in inference")
        apply(lab, pool_manifest(lab, POOL, total))
        wait(lambda: split_reached(lab, POOL, total, total), 180, what="every node moved into Slurm")
        check_isolation(lab, [lab.slurm_name(n) for n in lab.nodes[:2]])
    finally:
        op.stop()
        reset_lab(lab)


def test_in_slurmd_pods_of_real_kubelet_nodes_a_job_opens_only_its_gpus(lab):
    """The same in the slurmd pods of two real kubelet nodes (22.05 image): the lab's device plugin
    gives each pod the node's 8 stand-ins (`rw`), as NVIDIA's plugin gives GPUs; the pod has slurmd's
    own capabilities and CAP_SYS_ADMIN, not privileged (harness.CGROUPS_SECURITY_CONTEXT), and its
    entrypoint makes the container's cgroup view writable, allows mknod of its GPUs and starts slurmd
    in a cgroup namespace of its own (docs/slurmd-pod.md)."""
    if lab.env.get("LAB_CGROUPS") != "1":
        pytest.skip("needs a lab with LAB_CGROUPS=1 (device cgroups)")
    nodes = two_real_nodes(lab)
    image, _ = imported_slurmd_image(lab, "22.05")
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    op = Operator(lab, "operator-gpu-isolation-real.log").start()
    try:
        with real_nodes_in_slurm(lab, "isolation-real", nodes, image) as pair:
            check_isolation(lab, pair)
    finally:
        op.stop()
