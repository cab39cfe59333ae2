"""real-nodes.sh stop leaves no process, cgroup, lo address, bridge, mount or sysctl change behind,
and start brings the real nodes back (LAB_REAL_NODES; skipped without). Its own module, after
test_real_nodes.py: it restarts the real nodes, so it runs once nothing else uses them."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import harness
from test_real_nodes import LAB, REPO, port_offset, real  # noqa: F401 - real is a fixture

def machine_state(k: int) -> dict:
    """What real nodes could leave on the machine, as text: processes of their cgroups, the cgroups,
    lo addresses, bridges, mounts and the sysctls the kubelet writes."""
    cgroups = sorted(str(p) for p in Path("/sys/fs/cgroup").glob(f"*/slurmpool-lab{k}-*"))
    procs = sorted({pid for c in cgroups for f in Path(c).rglob("cgroup.procs") for pid in f.read_text().split()})
    addrs = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {
        "cgroups": cgroups, "processes": procs,
        "addresses": sorted(set(re.findall(rf"10\.250\.{k}\.\d+", addrs))),
        "bridges": sorted(set(re.findall(rf"\bsp{k}r\d+\b", links))),
        "mounts": [m for m in Path("/proc/self/mountinfo").read_text().splitlines() if "/real/real" in m],
        "sysctl": {f: Path(f"/proc/sys/{f}").read_text().strip() for f in
                   ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward")},
    }


def test_stop_leaves_nothing_behind_and_start_joins_again(lab, real):
    k = port_offset(lab) // 100
    before = machine_state(k)
    assert before["addresses"] and before["cgroups"] and before["processes"], before
    # the kubelet did write its sysctls, into its private files only
    private = Path(lab.env["LAB_DIR"]) / "real" / real[0] / "sysctl" / "panic"
    assert private.read_text().strip() == "10", private.read_text()
    env = {**lab.env, "LAB_REAL_NODES": str(len(real)), "LAB_PORT_OFFSET": str(port_offset(lab))}
    p = subprocess.run([str(LAB / "real-nodes.sh"), "stop"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    after = machine_state(k)
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
    subprocess.run([str(REPO / "deploy" / "docker" / "build-images.sh"), "--import"], env=lab.env, capture_output=True, timeout=600)
