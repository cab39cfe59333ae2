"""Power saving (issue 39) through slurmbridge against the lab's real Slurm, on every access path
the row has: local scontrol, scontrol over SSH, and slurmrestd (24.11: v0.0.42, 26.05: v0.0.45).

The lab's slurm.conf has the power-save block (e2e/lab/up.sh; docs/slurm-admin.md): power_save()
reads it back as on. The round trip parks the last lab node as slurmpool does (drain, stop its
slurmd, power down), lends it (resume: idle~), powers it up by hand, forces a node that powers up
without a job back down, and gives it back with a slurmd started with -b; a request repeated on
each path sends nothing (Slurm would take it as a new one). The node is left as found: its slurmd
pod deleted, resumed, powered up.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from slurmbridge.backend import ScontrolBackend
from slurmbridge.errors import SlurmUnsupported
from slurmbridge.rest import RestAuth, RestBackend
from slurmbridge.runner import LocalRunner
from slurmpool.core.moves import BOOT_AFTER_POWER_UP
from test_bridge_real import ssh_runner

pytestmark = pytest.mark.e2e

POD = "e2e-power-slurmd"


def slurmd_pod(lab, node: str, *args: str) -> None:
    """A slurmd pod on `node` as the operator's template makes it; `args` appended (-b)."""
    lab.apply(json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": POD, "namespace": "default", "labels": {"slurmpool.io/component": "slurmd"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "slurmd", "image": "slurmd:lab",
                                 "command": ["slurmd", "-D", "-N", lab.slurm_name(node), *args]}]},
    }))


def no_slurmd_pod(lab) -> None:
    lab.kubectl("delete", "pod", "-n", "default", POD, "--ignore-not-found", "--wait=true", "--timeout=60s")


def flags(lab, node: str) -> set[str]:
    state = lab.node_state(lab.slurm_name(node))
    return set(state.split("+"))


def wait_flags(lab, node: str, predicate, what: str, timeout: float = 60) -> None:
    seen: list[set[str]] = []

    def check() -> bool:
        seen[:] = [flags(lab, node)]
        return predicate(seen[0])
    try:
        lab.wait_for(check, timeout=timeout, interval=0.5, message=f"{node} {what}")
    except Exception as e:
        raise AssertionError(f"{e}; its last flags: {'+'.join(sorted(seen[0])) if seen else 'none read'}") from e


def boot_after_power_up() -> None:
    """Wait as the operator does (moves._starting_slurmd) before slurmd -b starts: a slurmd whose
    boot time falls in the second of the power-up request leaves the node POWERING_UP until
    ResumeTimeout (22.05; CI's e2e-main failed here once, the pod started 0.1 s after)."""
    time.sleep(BOOT_AFTER_POWER_UP.total_seconds())


def powered_down(f: set[str]) -> bool:
    return "POWERED_DOWN" in f and not f & {"POWER_DOWN", "POWERING_DOWN", "POWER_UP", "POWERING_UP"}


def rest_backend(lab) -> RestBackend | None:
    if not lab.env.get("LAB_SLURMRESTD_URL"):
        return None
    return RestBackend(lab.env["LAB_SLURMRESTD_URL"], RestAuth(lab.env["LAB_SLURM_JWT"]), timeout=10, retries=1, backoff=0.2)


async def test_power_save_reads_the_labs_block_on_every_path(lab):
    local = ScontrolBackend(LocalRunner(env=lab.slurm_env), timeout=20, backoff=0.2)
    ssh = ScontrolBackend(ssh_runner(lab), timeout=20, backoff=0.2)
    rest = rest_backend(lab)
    try:
        for backend in (local, ssh):
            ps = await backend.power_save()
            assert ps.on, ps.why_off
            assert ps.resume_timeout == timedelta(seconds=300) and ps.suspend_exc_parts == ("gpu",)
            assert ps.keeps_settings is (lab.slurm_version != "22.05")  # ReconfigFlags=KeepPowerSaveSettings: 23.02+
        if rest is not None:
            await rest.ping()
            if rest.version == "v0.0.45":
                assert await rest.power_save() == await local.power_save()
            else:
                with pytest.raises(SlurmUnsupported, match="does not tell slurm.conf's power saving"):
                    await rest.power_save()
    finally:
        for b in (local, ssh, rest):
            if b is not None:
                await b.close()


async def test_park_lend_power_up_force_down_and_give_back(lab):
    node = lab.nodes[-1]
    name = lab.slurm_name(node)
    local = ScontrolBackend(LocalRunner(env=lab.slurm_env), timeout=20, backoff=0.2)
    ssh = ScontrolBackend(ssh_runner(lab), timeout=20, backoff=0.2)
    rest = rest_backend(lab)
    paths = [b for b in (local, ssh, rest) if b is not None]
    down_path, up_path = (rest, ssh) if rest is not None else (ssh, local)
    try:
        if rest is not None:
            await rest.ping()  # the API version chosen before counting requests
        slurmd_pod(lab, node)
        wait_flags(lab, node, lambda f: f <= {"IDLE"}, "idle with its slurmd", 90)
        # Park it held: drain, stop slurmd, power down; repeated on every path: nothing more is sent.
        await local.drain([name], "slurmpool: e2e power")
        no_slurmd_pod(lab)
        await down_path.power_down([name])
        wait_flags(lab, node, powered_down, "powered down")
        for backend in paths:
            before = backend.commands_run
            await backend.power_down([name])
            assert backend.commands_run == before + 1  # the read only
        # Power-down clears a drain set before it (22.05 to 26.05): a held node is drained again.
        await local.drain([name], "slurmpool: e2e power")
        assert {"DRAIN", "POWERED_DOWN"} <= flags(lab, node)
        await local.resume([name])  # lent: idle~
        assert "DRAIN" not in flags(lab, node) and "POWERED_DOWN" in flags(lab, node)
        # Up by hand (the operator's PoweringUp), repeated: one request only.
        await up_path.power_up([name])
        wait_flags(lab, node, lambda f: "POWERING_UP" in f, "powering up", 30)
        for backend in paths:
            await backend.power_up([name])
        # Powering up without a job ignores POWER_DOWN: the backends force it.
        await down_path.power_down([name])
        wait_flags(lab, node, powered_down, "forced down")
        # Given back: powered up, and a slurmd started with -b registers.
        await local.power_up([name])
        wait_flags(lab, node, lambda f: "POWERING_UP" in f, "powering up", 30)
        started = time.monotonic()
        boot_after_power_up()
        slurmd_pod(lab, node, "-b")
        wait_flags(lab, node, lambda f: f <= {"IDLE"}, "registered after its power-up", 90)
        print(f"{lab.slurm_version}: POWERING_UP to registered with -b (its start held {BOOT_AFTER_POWER_UP.seconds} s): "
              f"{time.monotonic() - started:.1f}s")
        assert "POWER_UP" not in flags(lab, node)
    finally:
        await power_up_for_good(lab, local, node)
        for b in paths:
            await b.close()


async def power_up_for_good(lab, local: ScontrolBackend, node: str) -> None:
    """Leave the node as the lab has it without a slurmd pod: powered up (a slurmd with -b
    registers it), then its pod deleted, and no drain of ours."""
    name = lab.slurm_name(node)
    if flags(lab, node) & {"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "POWERING_UP", "POWER_UP"}:
        if "POWERING_DOWN" in flags(lab, node):
            wait_flags(lab, node, powered_down, "powered down")
        await local.power_up([name])
        no_slurmd_pod(lab)
        boot_after_power_up()
        slurmd_pod(lab, node, "-b")
        wait_flags(lab, node, lambda f: not f & {"POWERED_DOWN", "POWERING_UP", "POWER_UP", "NOT_RESPONDING"},
                   "registered", 90)
    no_slurmd_pod(lab)
    await local.resume([name])
