"""What the lab leaves on the machine when it stops.

* real-nodes.sh stop leaves no process, cgroup, lo address, bridge, mount or sysctl change behind,
  and start brings the real nodes back (LAB_REAL_NODES; skipped without). Its own module, after
  test_real_nodes.py: it restarts the real nodes, so it runs once nothing else uses them.
* `make lab-down` (e2e/lab/down.sh) leaves no process of the lab, mount under LAB_DIR, cgroup, lo
  address, bridge or sysctl change behind. It takes the lab down, so it is the session's last test
  (marker lab_down, conftest.py); a lab brought up by hand is brought up again after it, one the
  session brought up stays down (the session is over). Only this lab (LAB_DIR, LAB_PORT_OFFSET) is
  looked at or stopped, and not while another pytest session uses it.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

import harness
from conftest import _other_users
from test_real_nodes import LAB, REPO, port_offset, real  # noqa: F401 - real is a fixture

SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward")

def machine_state(k: int, lab_dir: str, cgroups_of: str = "real") -> dict:
    """What this lab's real nodes could leave on the machine, as text: processes of their cgroups, the
    cgroups, lo addresses, bridges (by the offset's K), mounts (under LAB_DIR) and the sysctls the
    kubelet writes. Another lab's (make test runs the matrix beside this one) are not looked at.
    cgroups_of: the cgroups looked at, `slurmpool-labK-<cgroups_of>*`: the real nodes' by default, ""
    for all of the lab's (with LAB_CGROUPS=1 each simulated slurmd has one too: slurmpool-labK-slurmd-NODE)."""
    cgroups = sorted(str(p) for p in Path("/sys/fs/cgroup").glob(f"*/slurmpool-lab{k}-{cgroups_of}*"))
    procs = sorted({pid for c in cgroups for f in Path(c).rglob("cgroup.procs") for pid in f.read_text().split()})
    addrs = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {
        "cgroups": cgroups, "processes": procs,
        "addresses": sorted(set(re.findall(rf"10\.250\.{k}\.\d+", addrs))),
        "bridges": sorted(set(re.findall(rf"\bsp{k}r\d+\b", links))),
        "mounts": [m for m in Path("/proc/self/mountinfo").read_text().splitlines()
                   if os.path.realpath(lab_dir) + "/real/real" in m],
        "sysctl": sysctls(),
    }


def sysctls() -> dict[str, str]:
    return {f: Path(f"/proc/sys/{f}").read_text().strip() for f in SYSCTLS}


def test_stop_leaves_nothing_behind_and_start_joins_again(lab, real):
    k = port_offset(lab) // 100
    before = machine_state(k, lab.env["LAB_DIR"])
    assert before["addresses"] and before["cgroups"] and before["processes"], before
    # the kubelet did write its sysctls, into its private files only
    private = Path(lab.env["LAB_DIR"]) / "real" / real[0] / "sysctl" / "panic"
    assert private.read_text().strip() == "10", private.read_text()
    env = {**lab.env, "LAB_REAL_NODES": str(len(real)), "LAB_PORT_OFFSET": str(port_offset(lab))}
    p = subprocess.run([str(LAB / "real-nodes.sh"), "stop"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    after = machine_state(k, lab.env["LAB_DIR"])
    assert after == {**{key: [] for key in ("cgroups", "processes", "addresses", "bridges", "mounts")},
                     "sysctl": before["sysctl"]}, after
    assert not (Path(lab.env["LAB_DIR"]) / "real").exists()
    assert not [n for n in harness.nodes_json(lab, "slurmpool.io/real=true")]
    crbs = lab.kubectl("get", "clusterrolebinding", "-l", "slurmpool.io/real-node=true", "-o", "name").stdout.split()
    assert not crbs, crbs
    t0 = time.monotonic()
    p = subprocess.run([str(LAB / "real-nodes.sh"), "start"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    print(f"real nodes stopped, nothing left; {len(real)} started again and Ready in {time.monotonic() - t0:.1f} s:\n"
          + "\n".join(line for line in p.stdout.splitlines() if "joined" in line))
    # the images went with the nodes' state: import them again for later sessions
    subprocess.run([str(REPO / "deploy" / "docker" / "build-images.sh"), "--import"], env={**lab.env, "SLURMD_PYXIS": "0"},
                   capture_output=True, timeout=600)


# ---------------------------------------------------------------- make lab-down


def ancestors() -> set[int]:
    """This process and its ancestors: they carry the lab's environment (pytest, make) but are not the lab."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids


def lab_processes(lab_dir: str) -> dict[int, str]:
    """Processes of this lab: any process whose command line, environment or working directory names
    LAB_DIR (daemons, the agent and its slurmd, slurmstepd and jobs, kubelets and containerd of real
    nodes, the 24.11 chroots), but not this test's own ancestors. PID -> command line."""
    mark = lab_dir.rstrip("/") + "/"
    found, mine = {}, ancestors()
    for d in Path("/proc").glob("[0-9]*"):
        pid = int(d.name)
        if pid in mine:
            continue
        try:
            cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (d / "environ").read_bytes().decode(errors="replace")
            cwd = os.readlink(d / "cwd") + "/"
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if mark in cmdline or mark in environ or cwd.startswith(mark) or cwd == mark:
            found[pid] = cmdline[:160]
    return found


def lab_footprint(lab_dir: str, k: int) -> dict:
    """Everything of this lab on the machine: its processes and mounts (by LAB_DIR), and what real
    nodes add (lo addresses, bridges; by the offset's K), every cgroup of the lab (real nodes' and,
    LAB_CGROUPS=1, the simulated slurmds') with the processes in them, and the sysctls."""
    real_nodes = machine_state(k, lab_dir, cgroups_of="")
    return {
        "processes": lab_processes(lab_dir),
        "mounts": [m for m in Path("/proc/self/mountinfo").read_text().splitlines() if lab_dir.rstrip("/") + "/" in m],
        **{key: real_nodes[key] for key in ("cgroups", "addresses", "bridges")},
        "cgroup processes": real_nodes["processes"],
        "sysctl": real_nodes["sysctl"],
    }


@pytest.mark.lab_down
def test_lab_down_leaves_nothing_behind(lab):
    lab_dir = lab.env["LAB_DIR"]
    users = Path(lab_dir) / "users"
    if _other_users(users):
        pytest.skip(f"another pytest session uses this lab ({users}): make lab-down would stop it under them")
    k = port_offset(lab) // 100
    started_by_pytest = (users / "started-by-pytest").exists()
    before = lab_footprint(lab_dir, k)
    # the lab does run here, so the checks below can see it: its daemons, and real nodes' state if any
    cmdlines = " ".join(before["processes"].values())
    assert "kube-apiserver" in cmdlines and "slurmctld" in cmdlines and "agent.py" in cmdlines, before["processes"]
    if lab.real_nodes:
        assert before["cgroups"] and before["addresses"] and before["cgroup processes"], before
    env = {k_: v for k_, v in lab.env.items() if k_ != "LAB_LOCKED"}
    t0 = time.monotonic()
    p = subprocess.run([str(LAB / "down.sh")], env=env, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    after = lab_footprint(lab_dir, k)
    assert after == {"processes": {}, "mounts": [], "cgroups": [], "addresses": [], "bridges": [],
                     "cgroup processes": [], "sysctl": before["sysctl"]}, after
    print(f"make lab-down in {took:.1f} s: {len(before['processes'])} processes, {len(before['mounts'])} mounts, "
          f"{len(before['cgroups'])} cgroups, {len(before['addresses'])} lo addresses before; nothing after")
    if not started_by_pytest:
        # a lab brought up by hand (make lab-up) is up again, as its user left it
        p = subprocess.run([str(LAB / "up.sh")], env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
