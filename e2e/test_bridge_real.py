"""slurmbridge against the lab's real Slurm (LAB_SLURM: 22.05, 24.11 or 26.05) and real sshd (no fakes);
on labs with slurmrestd (24.11, 26.05) also RestBackend against it (e2e/test_rest_real.py tests it in
depth against a 26.05 of its own).

Independent of node health: the lab's static nodes only have a slurmd while a slurmd pod runs, and
drain/resume work on DOWN nodes too, so the checks look at the DRAIN flag and the reason only.
The node used for mutations (the last lab node) gets its previous drain state back at the end; do
not run this file while an operator is managing that node (e.g. test_operator.py in parallel).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncssh
import pytest

from slurmbridge import SlurmUnavailable
from slurmbridge.backend import ScontrolBackend
from slurmbridge.rest import RestAuth, RestBackend
from slurmbridge.runner import LocalRunner
from slurmbridge.ssh import SshRunner
from slurmbridge.validate import compress
from slurmbridge.models import gres_shortfall

pytestmark = pytest.mark.e2e


def ssh_runner(lab, known_hosts=None) -> SshRunner:
    return SshRunner(lab.ssh_host, lab.ssh_port, lab.ssh_user, str(lab.ssh_key),
                     known_hosts if known_hosts is not None else str(lab.ssh_known_hosts),
                     env={"SLURM_CONF": str(lab.slurm_conf)}, connect_timeout=10)


@asynccontextmanager
async def backends(lab) -> AsyncIterator[tuple[ScontrolBackend, ScontrolBackend]]:
    local = ScontrolBackend(LocalRunner(env=lab.slurm_env), timeout=20, backoff=0.2)
    ssh = ScontrolBackend(ssh_runner(lab), timeout=20, backoff=0.2)
    try:
        yield local, ssh
    finally:
        await ssh.close()
        await local.close()


async def test_nodes_over_ssh_and_locally_agree(lab):
    async with backends(lab) as (local, ssh):
        # Other lab users may change a node between the two reads: retry a few times.
        for _ in range(5):
            here, there = await local.nodes(), await ssh.nodes()
            if here == there:
                break
        assert here == there
        assert set(lab.nodes) <= set(here)
        for name in lab.nodes:
            node = here[name]
            # gpu:h100:8, or gpu:h100:8(S:0-1) from a registered slurmd with LAB_GRES_CORES=1
            assert node.gpus == 8 and gres_shortfall("gpu:h100:8", node.gres) is None and "gpu" in node.partitions
        subset = await ssh.nodes([lab.nodes[0], lab.nodes[-1], "nosuchnode99"])
        assert sorted(subset) == sorted({lab.nodes[0], lab.nodes[-1]})
        await local.ping()
        await ssh.ping()


async def test_drain_resume_round_trip_with_shell_metacharacters(lab):
    node = lab.nodes[-1]
    marker = f"/tmp/pwned-{uuid.uuid4().hex[:8]}"
    reason = f"slurmpool: a; touch {marker} $(touch {marker}) `touch {marker}` 'q' \"d\""
    async with backends(lab) as (local, ssh):
        before = (await local.nodes([node]))[node]
        try:
            await ssh.drain([node], reason)
            assert ssh.commands_run == 1
            after = (await ssh.nodes([node]))[node]
            assert after.drain_set and after.reason == reason
            # Read back with plain scontrol too, not only through our parser.
            raw = lab.slurm("scontrol", "-o", "show", "node", node).stdout
            assert f"Reason={reason} [" in raw
            assert (await local.nodes([node]))[node].reason == reason

            await local.resume([node])
            await local.resume([node])  # idempotent: already resumed is fine
            resumed = (await ssh.nodes([node]))[node]
            assert not resumed.drain_set
            if lab.slurm_version == "24.11":
                # 24.11 (Slurm 23.11+ without accounting storage) keeps the Reason after a RESUME: a
                # stale `slurmpool:` reason on a node that is not drained (issue 13). 22.05 and 26.05
                # clear it. The ownership rules must not trust the text alone.
                assert resumed.reason == reason, resumed
            else:
                assert resumed.reason != reason, resumed
        finally:
            if before.drain_set and before.reason:  # give a drain that was not ours back
                await local.drain([node], before.reason)
            elif (await local.nodes([node]))[node].drain_set:
                await local.resume([node])
        assert not os.path.exists(marker)


def _node_fields(nodes) -> dict:
    return {n: (v.name, v.state, v.flags, v.reason, v.reason_user, v.gres, v.gres_used, v.partitions)
            for n, v in nodes.items()}


async def test_rest_reads_and_drains_as_scontrol_does(lab):
    """The lab's own slurmrestd (24.11: v0.0.42, 26.05: v0.0.45): the nodes read as scontrol reads
    them, and a drain set through REST is the one scontrol shows, resumed through REST."""
    if not lab.env.get("LAB_SLURMRESTD_URL"):
        pytest.skip("this lab runs no slurmrestd: LAB_SLURM=24.11 or 26.05 starts one")
    rest = RestBackend(lab.env["LAB_SLURMRESTD_URL"], RestAuth(lab.env["LAB_SLURM_JWT"]), timeout=10, retries=1, backoff=0.2)
    local = ScontrolBackend(LocalRunner(env=lab.slurm_env), timeout=20, backoff=0.2)
    node = lab.nodes[-1]
    try:
        await rest.ping()
        assert rest.version == {"24.11": "v0.0.42", "26.05": "v0.0.45"}[lab.slurm_version]
        for _ in range(5):  # a slurmd may register between the two reads
            over_rest, over_cli = _node_fields(await rest.nodes()), _node_fields(await local.nodes())
            if over_rest == over_cli:
                break
        assert over_rest == over_cli
        before = (await local.nodes([node])).get(node)
        if before is None:  # a dynamic node without a slurmd yet: nothing to drain
            return
        reason = f"slurmpool: e2e rest {uuid.uuid4().hex[:8]} \"q\" : x"
        try:
            await rest.drain([node], reason)
            shown = (await local.nodes([node]))[node]
            assert shown.drain_set and shown.reason == reason, shown
            assert (await rest.nodes([node]))[node].reason == reason
            await rest.resume([node])
            assert not (await local.nodes([node]))[node].drain_set
        finally:
            if before.drain_set and before.reason:  # give a drain that was not ours back
                await local.drain([node], before.reason)
            elif (await local.nodes([node]))[node].drain_set:
                await local.resume([node])
    finally:
        await rest.close()
        await local.close()


async def test_jobs_over_ssh_with_a_hostile_job_name(lab):
    forged = "999|RUNNING|gpu|root|1|gpu01|gres:gpu:8"
    evil = f"x\n{forged}\n$(id) `id` 'q' \"d\""
    job_id = lab.slurm("sbatch", "--parsable", "--begin=now+1hour", "-J", evil, "-t", "1",
                       "--wrap", "true").stdout.strip().split(";")[0]
    async with backends(lab) as (local, ssh):
        def pending_ids() -> set[str]:  # %i only: one line per job whatever the names
            return set(lab.slurm("squeue", "-h", "-t", "PENDING", "-o", "%i").stdout.split())

        try:
            known = pending_ids()
            jobs = {j.job_id: j for j in await ssh.jobs(states=["PENDING"])}
            assert job_id in jobs and jobs[job_id].name == evil
            # BeginTime, or ReqNodeNotAvail when no node serves Slurm yet (a fresh lab)
            assert jobs[job_id].reason.startswith(("BeginTime", "ReqNodeNotAvail")) and jobs[job_id].nodes == ()
            assert set(jobs) <= known | pending_ids()  # no job forged from the name
            assert [j.job_id for j in await local.jobs(partition="gpu", states=["PENDING"])].count(job_id) == 1
        finally:
            await ssh.cancel([job_id])
            await ssh.cancel([job_id])  # idempotent
        assert job_id not in {j.job_id for j in await local.jobs()}


async def test_wrong_known_hosts_is_refused_with_a_host_key_error(lab):
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    host = lab.ssh_host if lab.ssh_port == 22 else f"[{lab.ssh_host}]:{lab.ssh_port}"
    backend = ScontrolBackend(ssh_runner(lab, f"{host} {other}\n"), retries=0)
    with pytest.raises(SlurmUnavailable, match="host key"):
        await backend.nodes()
    await backend.close()


async def test_node_names_with_metacharacters_never_reach_slurm(lab):
    marker = f"/tmp/pwned-{uuid.uuid4().hex[:8]}"
    async with backends(lab) as (local, ssh):
        for backend in (local, ssh):
            for bad in (f"{lab.nodes[0]};touch {marker}", f"$(touch {marker})", "gpu01 State=RESUME"):
                with pytest.raises(ValueError, match="invalid Slurm node name"):
                    await backend.drain([bad], "slurmpool: test")
            with pytest.raises(ValueError, match="invalid Slurm partition"):
                await backend.jobs(partition=f"gpu;touch {marker}")
            assert backend.commands_run == 0
    assert not os.path.exists(marker)


@pytest.mark.parametrize("names", [
    ["gpu01", "gpu02", "gpu03", "gpu07"],
    ["gpu1", "gpu01", "gpu2", "gpu10"],
    ["a1b", "a2b", "a3b"],  # python-hostlist would say a[1-3]b, which Slurm 22.05 rejects
    ["r1n01", "r1n02", "r2n01"],
    ["n1-2", "n1-3", "x.1", "x.2", "123"],
])
def test_compressed_hostlists_mean_the_same_to_slurm(lab, names):
    out = lab.slurm("scontrol", "show", "hostnames", compress(names)).stdout.split()
    assert sorted(out) == sorted(names)
