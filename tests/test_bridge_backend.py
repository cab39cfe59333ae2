"""ScontrolBackend against a recording fake runner; LocalRunner against real subprocesses; SshRunner
against an in-process asyncssh server (real SSH protocol, host keys and auth)."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from collections.abc import Callable

import asyncssh
import pytest

from slurmbridge import SlurmError, SlurmUnavailable
from slurmbridge import backend as backend_module
from slurmbridge.backend import ScontrolBackend, SlurmBackend
from slurmbridge.runner import LocalRunner
from slurmbridge.errors import command_failed
from slurmbridge.ssh import SshRunner, remote_command

NODE = (
    "NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=1.21 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8 GresDrain=N/A "
    "GresUsed=gpu:h100:0(IDX:N/A) NodeAddr=127.0.0.1 NodeHostName=localhost Port=27002 Version=22.05.8 "
    "OS=Linux 6.18.44-fc-v857 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=0 FreeMem=22106 "
    "Sockets=16 Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=gpu  BootTime=2026-11-29T15:40:59 SlurmdStartTime=2026-11-29T15:55:19 "
    "LastBusyTime=2026-11-29T15:55:14 CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES= CapWatts=n/a "
    "CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s"
)

Reply = str | BaseException | Callable[[list[str]], str]


class FakeRunner:
    """Records every argv; answers from a queue of replies (a str, an exception, or a function)."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.calls: list[list[str]] = []
        self.closed = False

    async def run(self, argv: list[str], timeout: float) -> str:
        assert all(isinstance(a, str) for a in argv)
        self.calls.append(list(argv))
        reply = self.replies.pop(0) if self.replies else ""
        if isinstance(reply, BaseException):
            raise reply
        return reply(argv) if callable(reply) else reply

    async def close(self) -> None:
        self.closed = True


def backend(*replies: Reply, **kw) -> tuple[ScontrolBackend, FakeRunner]:
    runner = FakeRunner(*replies)
    kw.setdefault("backoff", 0.001)
    return ScontrolBackend(runner, **kw), runner


def down(msg: str = "slurm_load_node error: Unable to contact slurm controller (connect failure)") -> SlurmUnavailable:
    return SlurmUnavailable(msg, stderr=msg, returncode=1)


def failed(stderr: str = "", stdout: str = "") -> SlurmError:
    return SlurmError(f"exit 1: {stderr or stdout}", stderr=stderr, stdout=stdout, returncode=1)


def squeue_reply(*rows: list[str]) -> Callable[[list[str]], str]:
    """Answer squeue with the separator the backend chose for this very call."""

    def reply(argv: list[str]) -> str:
        fmt = argv[argv.index("-o") + 1]
        sep = fmt[fmt.index("%i") + 2 : fmt.index("%T")]
        return "".join(sep.join(r) + sep + "\n" for r in rows)

    return reply


# ---------------------------------------------------------------- nodes
def test_backend_satisfies_protocol():
    assert isinstance(backend()[0], SlurmBackend)


async def test_nodes_is_one_scontrol_call_for_all():
    text = "\n".join(NODE.format(name=f"gpu{i:02d}", state="IDLE") for i in range(1, 9)) + "\n"
    b, r = backend(text)
    nodes = await b.nodes()
    assert r.calls == [["scontrol", "-o", "-d", "show", "node"]]
    assert sorted(nodes) == [f"gpu{i:02d}" for i in range(1, 9)] and b.commands_run == 1


async def test_nodes_by_name_uses_one_compressed_hostlist():
    b, r = backend(NODE.format(name="gpu01", state="IDLE"))
    await b.nodes(["gpu03", "gpu01", "gpu02", "gpu07", "gpu01"])
    assert r.calls == [["scontrol", "-o", "-d", "show", "node", "gpu[01-03,07]"]]


async def test_nodes_by_name_skips_unknown_nodes():
    out = NODE.format(name="gpu01", state="IDLE+DRAIN") + "\nNode gpu09 not found\n"
    b, r = backend(failed(stdout=out))
    nodes = await b.nodes(["gpu01", "gpu09"])
    assert list(nodes) == ["gpu01"] and nodes["gpu01"].drain_set and len(r.calls) == 1


async def test_nodes_empty_selection_runs_nothing():
    b, r = backend()
    assert await b.nodes([]) == {} and r.calls == [] and b.commands_run == 0


async def test_nodes_other_failure_is_raised():
    b, _ = backend(failed(stderr="scontrol: error: Invalid user"))
    with pytest.raises(SlurmError):
        await b.nodes()


@pytest.mark.parametrize("bad", ["gpu01;touch x", "gpu[01-02]", "-gpu", "gpu 01", "", "$(id)", "a" * 64, "gpu01\n"])
async def test_bad_node_names_are_refused_before_anything_runs(bad):
    b, r = backend()
    for call in (b.nodes([bad]), b.drain(["gpu01", bad], "slurmpool: x"), b.resume([bad])):
        with pytest.raises(ValueError, match="invalid Slurm node name"):
            await call
    assert r.calls == []


async def test_a_bare_string_is_not_a_list_of_nodes():
    b, r = backend()
    with pytest.raises(TypeError):
        await b.drain("gpu01", "slurmpool: x")  # type: ignore[arg-type]
    assert r.calls == []


# ---------------------------------------------------------------- jobs
async def test_jobs_one_squeue_with_filters():
    row = ["8", "RUNNING", "gpu", "alice", "2", "gpu[01-02]", "gres:gpu:h100:4", "2026-11-29T15:55:33",
           "2026-11-29T16:05:33", "None", "train"]
    b, r = backend(squeue_reply(row))
    jobs = await b.jobs(partition="gpu", states=["running", "COMPLETING"])
    assert len(r.calls) == 1
    argv = r.calls[0]
    assert argv[:4] == ["squeue", "-h", "-a", "-o"]
    assert argv[5:] == ["-p", "gpu", "-t", "RUNNING,COMPLETING"]
    assert [(j.job_id, j.nodes, j.gpus_wanted) for j in jobs] == [("8", ("gpu01", "gpu02"), 8)]


async def test_jobs_separator_is_fresh_per_call():
    b, r = backend(squeue_reply(), squeue_reply())
    await b.jobs()
    await b.jobs()
    assert r.calls[0][4] != r.calls[1][4]


async def test_jobs_with_forged_looking_name_from_slurm():
    evil = "x\n999|~slurmbridge~|RUNNING|~slurmbridge~|gpu\n"
    row = ["11", "PENDING", "gpu", "mallory", "1", "", "N/A", "N/A", "NONE", "BeginTime", evil]
    b, _ = backend(squeue_reply(row))
    jobs = await b.jobs()
    assert [(j.job_id, j.name) for j in jobs] == [("11", evil)]


async def test_jobs_garbled_output_is_a_slurm_error():
    b, _ = backend("this is not squeue output\n")
    with pytest.raises(SlurmError, match="cannot parse squeue output"):
        await b.jobs()


@pytest.mark.parametrize("kw", [{"partition": "gpu;id"}, {"partition": "-t"}, {"states": ["RUNNING,PENDING"]},
                                {"states": ["R U"]}, {"states": "RUNNING"}])
async def test_jobs_filters_are_validated(kw):
    b, r = backend()
    with pytest.raises((ValueError, TypeError)):
        await b.jobs(**kw)
    assert r.calls == []


# ---------------------------------------------------------------- drain / resume
async def test_drain_is_one_update_with_hostlist_and_quoted_reason():
    b, r = backend()
    reason = 'slurmpool: a; touch /tmp/pwned $(id) `x` \'q\' "d"'
    await b.drain(["gpu02", "gpu01", "gpu04"], reason)
    assert r.calls == [["scontrol", "update", "NodeName=gpu[01-02,04]", "State=DRAIN", f'Reason="{reason}"']]


@pytest.mark.parametrize("reason", ["", "   ", "line1\nline2", "tab\there", "bell\x07", "x" * 201, None])
async def test_bad_reasons_are_refused(reason):
    b, r = backend()
    with pytest.raises(ValueError, match="reason"):
        await b.drain(["gpu01"], reason)  # type: ignore[arg-type]
    assert r.calls == []


async def test_drain_nothing_runs_nothing():
    b, r = backend()
    await b.drain([], "slurmpool: x")
    await b.resume([])
    assert r.calls == []


async def test_resume_is_one_update_and_idempotent():
    b, r = backend("", failed(stderr="slurm_update error: Invalid node state specified"))
    await b.resume(["gpu01", "gpu02"])
    await b.resume(["gpu01", "gpu02"])  # already resumed: scontrol complains, the goal holds
    assert r.calls == [["scontrol", "update", "NodeName=gpu[01-02]", "State=RESUME"]] * 2


async def test_resume_of_a_node_not_drained_on_26_05_is_fine_but_not_of_one_still_drained():
    # Slurm 26.05 names the same refusal differently (measured in the lab, LAB_SLURM=26.05), in
    # words not specific to it: the node is read back before the refusal is forgiven.
    refused = failed(stderr="slurm_update error: Invalid node state transition")
    b, r = backend(refused, NODE.format(name="gpu01", state="IDLE"))
    await b.resume(["gpu01"])
    assert r.calls == [["scontrol", "update", "NodeName=gpu01", "State=RESUME"], ["scontrol", "-o", "-d", "show", "node", "gpu01"]]
    b, _ = backend(refused, NODE.format(name="gpu01", state="IDLE+DRAIN"))
    with pytest.raises(SlurmError, match="transition"):
        await b.resume(["gpu01"])


async def test_resume_real_errors_are_raised():
    b, _ = backend(failed(stderr="slurm_update error: Invalid node name specified"))
    with pytest.raises(SlurmError, match="Invalid node name"):
        await b.resume(["gpu09"])


# ---------------------------------------------------------------- requeue / cancel
async def test_requeue_waits_for_pending_then_clears_begin_time():
    b, r = backend("", "8|COMPLETING\n12_1|PENDING\n", "8|PENDING\n12_1|PENDING\n", "")
    await b.requeue(["8", "12_1"])
    assert r.calls[0] == ["scontrol", "requeue", "8,12_1"]
    assert r.calls[1] == ["squeue", "-h", "-t", "all", "-j", "8,12_1", "-o", "%i|%T"] == r.calls[2]
    assert r.calls[3] == ["scontrol", "update", "JobId=8,12_1", "StartTime=now"]
    assert b.commands_run == 4


async def test_requeue_again_is_harmless():
    b, r = backend(failed(stderr="Job is pending execution for job 8"), "8|PENDING\n", "")
    await b.requeue([8])  # ints are accepted and rendered as ids
    assert [c[1] for c in r.calls] == ["requeue", "-h", "update"]


async def test_requeue_release_of_jobs_that_moved_on_is_fine():
    release = failed(stderr="Job is no longer pending execution for job 8\nJob has already finished for job 9\n"
                            "Invalid job id specified for job 10")
    b, r = backend("", "8|RUNNING\n9|COMPLETED\n", release)
    await b.requeue(["8", "9", "10"])
    assert len(r.calls) == 3


async def test_requeue_gives_up_waiting_but_still_releases():
    b, r = backend("", *["8|COMPLETING\n"] * 50, requeue_settle=0.3)
    await b.requeue(["8"])
    assert r.calls[-1] == ["scontrol", "update", "JobId=8", "StartTime=now"]


async def test_requeue_not_allowed_is_raised():
    b, _ = backend(failed(stderr="Requested operation is presently disabled for job 8"))
    with pytest.raises(SlurmError, match="disabled"):
        await b.requeue(["8"])


async def test_a_job_slurm_may_not_requeue_does_not_hold_back_the_others_of_the_batch():
    """26.05.3 (tests/fixtures/checkpoint): `scontrol requeue` of a --no-requeue job says so and exits 1;
    the other jobs of the same call are requeued and released, then the refusal is raised."""
    refusal = failed(stderr="Requested operation is presently disabled for job 8")
    b, r = backend(refusal, "7|PENDING\n8|RUNNING\n", None)
    with pytest.raises(SlurmError, match="presently disabled"):
        await b.requeue(["7", "8"])
    assert r.calls[0] == ["scontrol", "requeue", "7,8"] and r.calls[-1] == ["scontrol", "update", "JobId=7,8", "StartTime=now"]


@pytest.mark.parametrize("bad", ["8;id", "8,9", "-1", "12_[1-3", "12_[a]", "5+", "5+1+2", "abc", "", "8 ", "7_[0-3];id"])
async def test_bad_job_ids_are_refused(bad):
    b, r = backend()
    for call in (b.requeue(["7", bad]), b.cancel([bad])):
        with pytest.raises(ValueError, match="invalid Slurm job id"):
            await call
    assert r.calls == []


async def test_every_job_id_form_squeue_prints_is_cancelled_as_printed():
    b, r = backend()
    ids = ["8", "12_3", "7_[0-3]", "7_[1,4-6%2]", "5+1"]
    await b.cancel(ids)
    assert r.calls == [["scancel", *ids]]


async def test_requeue_of_a_heterogeneous_job_part_requeues_the_job_through_its_leader():
    b, r = backend("", "", "")
    await b.requeue(["5+0", "5+1", "9"])
    assert r.calls[0] == ["scontrol", "requeue", "5,9"]
    assert r.calls[-1] == ["scontrol", "update", "JobId=5,9", "StartTime=now"]


async def test_requeue_releases_every_part_of_a_heterogeneous_job():
    """On 26.05, releasing the leader alone left the other part waiting out its BeginTime."""
    b, r = backend("", "5+0|COMPLETING\n5+1|COMPLETING\n9|PENDING\n", "5+0|PENDING\n5+1|PENDING\n9|PENDING\n", "")
    await b.requeue(["5+1", "9"])
    assert r.calls[0] == ["scontrol", "requeue", "5,9"]
    assert r.calls[-1] == ["scontrol", "update", "JobId=5+0,5+1,9", "StartTime=now"]


async def test_cancel_of_jobs_already_gone_is_done_but_a_refusal_is_raised():
    b, _ = backend(failed(stderr="scancel: error: Kill job error on job id 8: Job/step already completing or completed"))
    await b.cancel(["8"])
    b, _ = backend(failed(stderr="scancel: error: Kill job error on job id 8: Access/permission denied"))
    with pytest.raises(SlurmError, match="permission denied"):
        await b.cancel(["8"])


async def test_cancel_is_one_scancel():
    b, r = backend()
    await b.cancel(["8", "12_3"])
    assert r.calls == [["scancel", "8", "12_3"]]


async def test_signal_is_one_scancel_to_the_batch_shell_or_every_step():
    b, r = backend(None, None)
    await b.signal(["8", "12_3"], "USR1", batch_only=True)
    await b.signal(["9"], "SIGTERM", batch_only=False)
    assert r.calls == [["scancel", "--signal=USR1", "--batch", "8", "12_3"], ["scancel", "--signal=SIGTERM", "--full", "9"]]


async def test_signal_of_a_job_already_gone_is_done_but_a_refusal_is_raised_and_a_bad_signal_never_sent():
    b, _ = backend(failed(stderr="scancel: error: Kill job error on job id 8: Job/step already completing or completed"))
    await b.signal(["8"], "USR1", batch_only=True)
    b, _ = backend(failed(stderr="scancel: error: Kill job error on job id 8: Access/permission denied"))
    with pytest.raises(SlurmError, match="permission denied"):
        await b.signal(["8"], "USR1", batch_only=True)
    b, r = backend()
    with pytest.raises(ValueError, match="invalid signal"):
        await b.signal(["8"], "USR1; reboot", batch_only=True)
    assert r.calls == []


# ---------------------------------------------------------------- ping / close
async def test_ping_down_is_unavailable():
    out = "Slurmctld(primary) at vm is DOWN\n"
    b, _ = backend(failed(stdout=out))
    with pytest.raises(SlurmUnavailable, match="is DOWN"):
        await b.ping()
    b, r = backend("Slurmctld(primary) at vm is UP\n")
    await b.ping()
    assert r.calls == [["scontrol", "ping"]]


async def test_close_closes_the_runner():
    b, r = backend()
    await b.close()
    assert r.closed


# ---------------------------------------------------------------- retries
async def test_reads_retry_with_exponential_backoff():
    b, r = backend(down(), down(), "Slurmctld(primary) at vm is UP\n", retries=2, backoff=0.05, jitter=0)
    t0 = time.monotonic()
    await b.ping()
    assert len(r.calls) == 3 and b.commands_run == 3
    assert time.monotonic() - t0 >= 0.05 + 0.1 - 0.01  # 0.05 then 0.1



async def test_retry_delays_double_up_to_max_backoff_and_jitter_only_shortens_them(monkeypatch):
    slept = []

    async def sleep(seconds):
        slept.append(seconds)

    monkeypatch.setattr(backend_module.asyncio, "sleep", sleep)
    b, _ = backend(*[down()] * 5, "Slurmctld(primary) at vm is UP\n", retries=5, backoff=1.0, max_backoff=4.0)
    await b.ping()
    assert len(slept) == 5
    assert all(0.8 * full <= got <= full for got, full in zip(slept, [1.0, 2.0, 4.0, 4.0, 4.0]))

async def test_retries_are_bounded():
    b, r = backend(*[down()] * 10, retries=2)
    with pytest.raises(SlurmUnavailable, match="Unable to contact"):
        await b.nodes()
    assert len(r.calls) == 3


async def test_mutations_are_retried_too():
    b, r = backend(down("Socket timed out on send/recv operation"), "", retries=3)
    await b.drain(["gpu01"], "slurmpool: x")
    assert len(r.calls) == 2 and r.calls[0] == r.calls[1]


async def test_command_errors_are_not_retried():
    b, r = backend(failed(stderr="slurm_update error: Invalid node name specified"), retries=5)
    with pytest.raises(SlurmError) as info:
        await b.drain(["gpu09"], "slurmpool: x")
    assert not isinstance(info.value, SlurmUnavailable) and len(r.calls) == 1


@pytest.mark.parametrize(
    "stderr, unavailable",
    [
        ("slurm_load_node error: Unable to contact slurm controller (connect failure)", True),
        ("slurm_load_jobs error: Socket timed out on send/recv operation", True),
        ("scontrol: error: Munge encode failed: Failed to access \"/run/munge/munge.socket.2\"", True),
        ("slurm_load_node error: Protocol authentication error", True),
        ("error: Invalid authentication credential", True),
        ("slurm_load_partitions: Connection refused", True),
        ("Zero Bytes were transmitted or received", True),
        ("slurm_update error: Invalid node name specified", False),
        ("Invalid job id specified for job 999", False),
        ("", False),
    ],
)
def test_error_mapping(stderr, unavailable):
    err = command_failed(["scontrol", "ping"], 1, "", stderr)
    assert isinstance(err, SlurmUnavailable) is unavailable
    assert isinstance(err, SlurmError) and (stderr or "(no output)") in str(err)


def test_free_text_on_stdout_does_not_fake_an_outage():
    err = command_failed(["scontrol"], 1, "Reason=munge broken; Connection refused", "Node gpu09 not found")
    assert type(err) is SlurmError


def test_command_not_found_is_unavailable():
    assert isinstance(command_failed(["scontrol"], 127, "", "env: 'scontrol': No such file"), SlurmUnavailable)


# ---------------------------------------------------------------- LocalRunner (real processes)
PY = [sys.executable, "-c"]


async def test_local_runner_passes_argv_verbatim_and_env():
    runner = LocalRunner(env={"SLURM_CONF": "/x/slurm.conf"})
    nasty = "a; touch /tmp/pwned-local $(id) `x` 'q' \"d\" | >"
    code = "import os,sys,json; print(json.dumps([sys.argv[1:], os.environ['SLURM_CONF'], os.environ['TZ'], os.environ['SLURM_TIME_FORMAT']]))"
    out = await runner.run([*PY, code, nasty, "Reason=x y"], timeout=10)
    assert out.strip() == __import__("json").dumps([[nasty, "Reason=x y"], "/x/slurm.conf", "UTC", "standard"])
    assert not os.path.exists("/tmp/pwned-local")


async def test_local_runner_failure_carries_output():
    runner = LocalRunner()
    with pytest.raises(SlurmError) as info:
        await runner.run([*PY, "import sys; print('Node gpu09 not found'); sys.exit(1)"], timeout=10)
    assert info.value.returncode == 1 and "gpu09 not found" in info.value.stdout
    with pytest.raises(SlurmUnavailable):
        await runner.run([*PY, "import sys; sys.stderr.write('Unable to contact slurm controller'); sys.exit(1)"], 10)


async def test_an_error_on_stderr_with_exit_0_is_a_failure_and_a_warning_is_not():
    runner = LocalRunner()
    with pytest.raises(SlurmError, match="permission denied") as info:
        await runner.run([*PY, "import sys; sys.stderr.write('scancel: error: Kill job error on job id 7: Access/permission denied\\n')"], 10)
    assert info.value.returncode == 0
    with pytest.raises(SlurmError, match="Invalid node"):
        await runner.run([*PY, "import sys; sys.stderr.write('slurm_update error: Invalid node name specified\\n')"], 10)
    out = await runner.run([*PY, "import sys; sys.stderr.write('scontrol: warning: deprecated option\\n'); print('ok')"], 10)
    assert out.strip() == "ok"


async def test_local_runner_timeout_kills_the_command():
    runner = LocalRunner()
    t0 = time.monotonic()
    with pytest.raises(SlurmUnavailable, match="timed out"):
        await runner.run([*PY, "import time; time.sleep(30)"], timeout=0.3)
    assert time.monotonic() - t0 < 5


async def test_local_runner_missing_binary_is_unavailable():
    with pytest.raises(SlurmUnavailable, match="cannot run"):
        await LocalRunner().run(["/nonexistent/scontrol", "ping"], timeout=5)


# ---------------------------------------------------------------- SshRunner (in-process SSH server)
class _Server(asyncssh.SSHServer):
    connections = 0

    def connection_made(self, conn):
        _Server.connections += 1

    def begin_auth(self, username):
        return True


@pytest.fixture
async def ssh_server(tmp_path):
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    (tmp_path / "id").write_bytes(client_key.export_private_key())
    seen: list[str] = []

    async def handle(process: asyncssh.SSHServerProcess) -> None:
        seen.append(process.command)
        words = shlex.split(process.command)
        if words[-1] == "fail":
            process.stderr.write("slurm_load_node error: Unable to contact slurm controller\n")
            process.exit(1)
        elif words[-1] == "drop":  # the connection dies while the command runs
            process.get_extra_info("connection").abort()
        elif words[-1] == "sleep":
            await asyncio.sleep(30)
            process.exit(0)
        else:
            process.stdout.write(repr(words) + "\n")
            process.exit(0)

    _Server.connections = 0
    server = await asyncssh.create_server(
        _Server, "127.0.0.1", 0, server_host_keys=[host_key],
        authorized_client_keys=asyncssh.import_authorized_keys(client_key.export_public_key().decode()),
        process_factory=handle,
    )
    port = server.sockets[0].getsockname()[1]
    known = f"[127.0.0.1]:{port} {host_key.export_public_key().decode().strip()}\n"
    (tmp_path / "known_hosts").write_text(known)
    yield {"port": port, "key": str(tmp_path / "id"), "known_hosts": str(tmp_path / "known_hosts"),
           "known_text": known, "key_text": client_key.export_private_key().decode(), "seen": seen,
           "server": server}
    server.close()
    await server.wait_closed()


async def test_ssh_runner_quotes_and_reuses_one_connection(ssh_server):
    s = ssh_server
    runner = SshRunner("127.0.0.1", s["port"], "root", s["key"], s["known_hosts"], env={"SLURM_CONF": "/l/s.conf"})
    nasty = "slurmpool: a; touch /tmp/pwned $(id) `x` 'q' \"d\""
    argv = ["scontrol", "update", "NodeName=gpu01", "State=DRAIN", f'Reason="{nasty}"']
    for _ in range(3):
        out = await runner.run(argv, timeout=10)
    assert out.strip() == repr(["env", "SLURM_TIME_FORMAT=standard", "TZ=UTC", "SLURM_CONF=/l/s.conf", *argv])
    assert s["seen"][0] == remote_command(argv, runner.env) and _Server.connections == 1
    await asyncio.gather(*(runner.run(["squeue"], 10) for _ in range(12)))  # more than MaxSessions
    assert _Server.connections == 1
    await runner.close()


async def test_ssh_runner_accepts_key_and_known_hosts_as_text(ssh_server):
    s = ssh_server
    runner = SshRunner("127.0.0.1", s["port"], "root", s["key_text"], s["known_text"])
    assert "scontrol" in await runner.run(["scontrol", "ping"], 10)
    await runner.close()


async def test_ssh_runner_host_key_mismatch_is_unavailable(ssh_server):
    s = ssh_server
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    runner = SshRunner("127.0.0.1", s["port"], "root", s["key"], f"[127.0.0.1]:{s['port']} {other}\n")
    with pytest.raises(SlurmUnavailable, match="host key"):
        await runner.run(["scontrol", "ping"], 10)
    empty = SshRunner("127.0.0.1", s["port"], "root", s["key"], "")  # trusts nobody
    with pytest.raises(SlurmUnavailable, match="host key"):
        await empty.run(["scontrol", "ping"], 10)
    assert s["seen"] == []


def test_ssh_runner_requires_known_hosts_and_a_valid_key(ssh_server):
    s = ssh_server
    with pytest.raises(TypeError, match="known_hosts"):
        SshRunner("127.0.0.1", s["port"], "root", s["key"], None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="client key"):
        SshRunner("127.0.0.1", s["port"], "root", "-----BEGIN OPENSSH PRIVATE KEY-----\nnope\n", s["known_hosts"])
    with pytest.raises(ValueError, match="environment variable"):
        SshRunner("127.0.0.1", s["port"], "root", s["key"], s["known_hosts"], env={"A B": "x"})


async def test_ssh_runner_errors_timeouts_and_reconnect(ssh_server):
    s = ssh_server
    runner = SshRunner("127.0.0.1", s["port"], "root", s["key"], s["known_hosts"])
    with pytest.raises(SlurmUnavailable, match="Unable to contact"):
        await runner.run(["scontrol", "fail"], 10)
    with pytest.raises(SlurmUnavailable, match="timed out"):
        await runner.run(["scontrol", "sleep"], 0.3)
    assert _Server.connections == 1
    with pytest.raises(SlurmUnavailable, match="connection lost"):
        await runner.run(["scontrol", "drop"], 10)
    assert "ok" in await runner.run(["echo", "ok"], 10)  # reconnected lazily
    assert _Server.connections == 2
    runner._conn.abort()  # type: ignore[union-attr]  # closed while idle: noticed before use
    await asyncio.sleep(0.05)
    assert "ok" in await runner.run(["echo", "ok"], 10)
    assert _Server.connections == 3
    await runner.close()


async def test_ssh_runner_connection_refused_is_unavailable():
    runner = SshRunner("127.0.0.1", 1, "root", asyncssh.generate_private_key("ssh-ed25519").export_private_key(),
                       "[127.0.0.1]:1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
                       connect_timeout=2)
    with pytest.raises(SlurmUnavailable, match="cannot connect"):
        await runner.run(["scontrol", "ping"], 5)


# ---------------------------------------------------------------- topology
TREE = """SwitchName=rack-1 Level=0 LinkSpeed=1 Nodes=gpu01,gpu02
SwitchName=rack-2 Level=0 LinkSpeed=1 Nodes=gpu03,gpu04
SwitchName=block-1 Level=1 LinkSpeed=1 Nodes=gpu[01-04] Switches=rack-1,rack-2
SwitchName=empty Level=0 LinkSpeed=1 Nodes=(null)
SwitchName=spine Level=2 LinkSpeed=1 Nodes=gpu[01-04] Switches=block-1
"""
BLOCKS = "BlockName=b1 BlockIndex=0 Nodes=gpu[01-04] BlockSize=4\nBlockName=b2 BlockIndex=1 Nodes=gpu[05-08] BlockSize=4\n"


async def test_topology_reads_switches_with_levels_and_blocks():
    b, r = backend(TREE)
    groups = await b.topology()
    assert r.calls == [["scontrol", "show", "topology"]]
    assert [(g.name, g.level, g.nodes) for g in groups] == [
        ("rack-1", 0, ("gpu01", "gpu02")), ("rack-2", 0, ("gpu03", "gpu04")),
        ("block-1", 1, ("gpu01", "gpu02", "gpu03", "gpu04")), ("spine", 2, ("gpu01", "gpu02", "gpu03", "gpu04"))]
    b, _ = backend(BLOCKS)
    assert [(g.name, g.kind, len(g.nodes)) for g in await b.topology()] == [("b1", "block", 4), ("b2", "block", 4)]


async def test_no_topology_plugin_is_no_blocks_but_slurm_down_is_an_error():
    b, _ = backend(failed(stdout="No topology information available"))
    assert await b.topology() == []
    b, _ = backend(down(), down(), down())
    with pytest.raises(SlurmUnavailable):
        await b.topology()


# ---------------------------------------------------------------- reservations (issue 24)

RESERVATIONS_2205 = (Path(__file__).parent / "fixtures" / "reservations" / "22.05-scontrol.txt").read_text()


def test_reservations_parse_real_output_and_list_everyones():
    from slurmbridge.parse import parse_reservations

    every = parse_reservations(RESERVATIONS_2205)
    assert [r.name for r in every] == ["slurmpool-ns-gpu", "maint-friday"]
    ours = every[0]
    assert ours.nodes == ("gpu03", "gpu04") and ours.state == "INACTIVE"
    assert {"MAINT", "IGNORE_JOBS"} <= ours.flags and ours.start is not None and ours.end - ours.start == timedelta(minutes=10)
    assert parse_reservations("No reservations in the system\n") == []
    b, _ = backend(RESERVATIONS_2205)
    # an admin's too (issue 37): the planner keeps the nodes of others' reservations in Slurm
    listed = asyncio.run(b.reservations())
    assert [r.name for r in listed] == ["slurmpool-ns-gpu", "maint-friday"]
    theirs = listed[1]
    assert theirs.nodes == ("gpu01",) and theirs.flags == {"MAINT", "SPEC_NODES"} and theirs.state == "ACTIVE"
    assert theirs.end - theirs.start == timedelta(minutes=5)


def test_create_reservation_names_nodes_start_and_flags():
    b, runner = backend("Reservation created: slurmpool-ns-gpu\n")
    start = datetime(2026, 12, 2, 20, 15, 16, tzinfo=timezone.utc)
    asyncio.run(b.create_reservation("slurmpool-ns-gpu", ["gpu04", "gpu03"], start, 10, ["MAINT", "IGNORE_JOBS"]))
    assert runner.calls == [["scontrol", "create", "reservation", "ReservationName=slurmpool-ns-gpu", "StartTime=2026-12-02T20:15:16",
                             "Duration=10", "Nodes=gpu[03-04]", "Users=root", "Flags=MAINT,IGNORE_JOBS"]]


def test_reservations_not_the_operators_are_never_touched():
    b, runner = backend()
    start = datetime(2026, 12, 2, 20, 15, tzinfo=timezone.utc)
    for bad in ("maint-friday", "slurmpool-", "slurmpool-x y", "slurmpool-a;rm"):
        with pytest.raises(ValueError):
            asyncio.run(b.delete_reservation(bad))
        with pytest.raises(ValueError):
            asyncio.run(b.create_reservation(bad, ["gpu01"], start, 10, ["MAINT"]))
    with pytest.raises(ValueError):
        asyncio.run(b.create_reservation("slurmpool-ns-gpu", ["gpu01"], start, 10, ["MAINT", "ANY_NODES"]))
    assert runner.calls == []


def test_deleting_a_reservation_already_gone_is_done():
    gone = SlurmError("exit 1", argv=["scontrol"], stderr="delete_reservation ReservationName=slurmpool-ns-gpu: Requested reservation is invalid")
    b, runner = backend(gone)
    asyncio.run(b.delete_reservation("slurmpool-ns-gpu"))
    assert runner.calls == [["scontrol", "delete", "ReservationName=slurmpool-ns-gpu"]]
    b, _ = backend(SlurmError("exit 1", argv=["scontrol"], stderr="Access/permission denied"))
    with pytest.raises(SlurmError):
        asyncio.run(b.delete_reservation("slurmpool-ns-gpu"))


async def test_jobs_read_exclusive_from_oversubscribe_only_where_squeue_means_it():
    """%h is NO for an --exclusive job before 26.05; 26.05 prints NO for every job of an
    OverSubscribe=NO partition, so there the job reads as not known. The version is asked once,
    the first time a job reads as exclusive."""
    whole = ["9", "PENDING", "gpu", "bob", "2", "", "N/A", "N/A", "N/A", "ReqNodeNotAvail, UnavailableNodes:gpu[07-08]",
             "gpu[07-08]", "NO", "pinned"]
    shared = ["10", "PENDING", "gpu", "bob", "1", "", "gres:gpu:8", "N/A", "N/A", "Priority", "", "OK", "one"]
    old, _ = backend(squeue_reply(whole, shared), "slurm 22.05.8\n", squeue_reply(whole))
    jobs = await old.jobs()
    assert [(j.job_id, j.exclusive, j.required_nodes) for j in jobs] == [("9", True, ("gpu07", "gpu08")), ("10", False, ())]
    assert (await old.jobs())[0].exclusive is True and old.commands_run == 3  # asked once
    new, r = backend(squeue_reply(whole, shared), "slurm 26.05.3\n")
    assert [j.exclusive for j in await new.jobs()] == [None, None]
    assert r.calls[1] == ["squeue", "--version"]
    unknown, _ = backend(squeue_reply(whole), failed("squeue: unrecognized option"))
    assert [j.exclusive for j in await unknown.jobs()] == [None]
    quiet, r = backend(squeue_reply(shared))
    assert [j.exclusive for j in await quiet.jobs()] == [False] and len(r.calls) == 1  # nothing to ask
