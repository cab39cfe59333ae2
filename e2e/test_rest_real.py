"""RestBackend against a real slurmrestd 26.05 (no fakes): slurmctld, two slurmd and slurmrestd of
a Slurm 26.05 build, started here in a temporary directory (not the lab: it needs no Kubernetes).

Every read is checked against what scontrol/squeue say about the same cluster (ScontrolBackend
through LocalRunner), so the REST mapping is the scontrol parser's, field by field.

The cluster: auth/munge with its own munged (no auth/slurm: its sockets under /run are host-wide and
would meet a lab's 26.05), auth/jwt for slurmrestd's tokens (`scontrol token`), static nodes gpu01
and gpu02 (each slurmd on its own port, 2 fake GPUs), slurmrestd as user daemon (it refuses root)
in its own mount namespace when daemon cannot reach the build under /root (as the lab does).

Needs root and the Slurm 26.05 build: SLURMPOOL_SLURM_2605=PREFIX, or the newest complete
~/.cache/slurmpool/slurm-26.05.3-*/ (made by `e2e/lab/build-slurm.sh`, about 4 minutes on 2 cores).
Skipped, saying so, only when that build is absent.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurmbridge import SlurmError, SlurmUnavailable
from slurmbridge.backend import ScontrolBackend
from slurmbridge.rest import RestAuth, RestBackend, SlurmAuthError
from slurmbridge.runner import LocalRunner

pytestmark = pytest.mark.e2e

HOW_TO_BUILD = ("build it with `e2e/lab/build-slurm.sh` (Slurm 26.05.3 from ../shared/vendor into ~/.cache/slurmpool, "
                "about 4 min on 2 cores), or point SLURMPOOL_SLURM_2605 at an install prefix")


def slurm_2605() -> Path | None:
    given = os.environ.get("SLURMPOOL_SLURM_2605")
    if given:
        return Path(given)
    cache = Path(os.environ.get("SLURMPOOL_CACHE", Path.home() / ".cache" / "slurmpool"))
    built = [p for p in cache.glob("slurm-26.05.*-*") if (p / ".complete").exists() and (p / "sbin" / "slurmrestd").exists()]
    return max(built, key=lambda p: p.stat().st_mtime) if built else None


PREFIX = slurm_2605()
if PREFIX is None or not (PREFIX / "sbin" / "slurmrestd").exists():
    pytest.skip(f"no Slurm 26.05 build found: {HOW_TO_BUILD}", allow_module_level=True)


def check_host() -> None:
    """With the build there, a missing piece of the host is a failure, not a skip."""
    if os.geteuid() != 0:
        pytest.fail("e2e/test_rest_real.py needs root (slurmd, munged as munge, slurmrestd as daemon)")
    missing = [t for t in ("munged", "mungekey", "setpriv", "unshare", "mount") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found (Debian: apt-get install munge util-linux mount; "
                    "make deps installs them)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, timeout: float, what: str, step: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except Exception as err:  # noqa: BLE001 - keep the last reason for the failure message
            last = err
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last})")


@dataclass
class Cluster:
    dir: Path
    env: dict[str, str]
    rest_port: int
    procs: dict[str, subprocess.Popen]
    restd_argv: list[str]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        # In the cluster's directory: sbatch's jobs write their slurm-N.out there, not in the checkout.
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=60, check=check,
                              cwd=self.dir)

    def token(self, lifespan: int = 3600) -> str:
        out = self.run("scontrol", "token", "username=root", f"lifespan={lifespan}").stdout
        return next(line.split("=", 1)[1] for line in out.splitlines() if line.startswith("SLURM_JWT="))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def start(self, name: str, argv: list[str], env: dict | None = None) -> None:
        log = open(self.dir / "log" / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(argv, env=env or self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)  # our own session: this process and its children only
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def start_restd(self, name: str = "slurmrestd", port: int | None = None, parsers: str | None = None) -> str:
        """Start slurmrestd (another one with `name`, `port` and only the data `parsers` given);
        its URL."""
        port = port or self.rest_port
        argv = [a.replace(f"127.0.0.1:{self.rest_port}", f"127.0.0.1:{port}") for a in self.restd_argv]
        if parsers:
            argv[-1:-1] = ["-d", parsers]  # before the listen address
        self.start(name, argv, env={**self.env, "SLURM_JWT": "daemon"})
        wait_until(lambda: socket.create_connection(("127.0.0.1", port), 1).close() or True, 30,
                   f"{name} to listen")
        return f"http://127.0.0.1:{port}"


def blocked_dir(prefix: Path) -> Path | None:
    """The highest directory above the build that user daemon cannot search (e.g. /root), if any."""
    blocked, d = None, prefix
    while d != d.parent:
        d = d.parent
        if subprocess.run(["setpriv", "--reuid=daemon", "--regid=daemon", "--clear-groups", "test", "-x", str(d)]).returncode:
            blocked = d
    return blocked


@pytest.fixture(scope="module")
def cluster():
    check_host()
    d = Path(tempfile.mkdtemp(prefix="slurmpool-rest-e2e-"))
    os.chmod(d, 0o755)
    for sub in ("etc", "log", "state", "spool", "munge", "fakedev"):
        (d / sub).mkdir()
    ctld, restd = free_port(), free_port()
    slurmd_ports = {"gpu01": free_port(), "gpu02": free_port()}
    env = {**os.environ, "SLURM_CONF": str(d / "etc" / "slurm.conf"), "SLURM_TIME_FORMAT": "standard", "TZ": "UTC",
           "PATH": f"{PREFIX}/sbin:{PREFIX}/bin:{os.environ.get('PATH', '')}"}
    for var in ("SLURM_SACK_SOCKET", "SLURM_SACK_KEY", "SLURM_JWT"):
        env.pop(var, None)
    c = Cluster(d, env, restd, {}, [])
    try:
        # munge, private to this cluster
        subprocess.run(["mungekey", "--create", f"--keyfile={d}/munge/munge.key"], check=True)
        shutil.chown(d / "munge", "munge", "munge")
        shutil.chown(d / "munge" / "munge.key", "munge", "munge")
        os.chmod(d / "munge" / "munge.key", 0o400)
        c.start("munged", ["setpriv", "--reuid=munge", "--regid=munge", "--init-groups", "munged", "-F",
                           f"--socket={d}/munge/munge.socket", f"--key-file={d}/munge/munge.key",
                           f"--log-file={d}/log/munged.log", f"--pid-file={d}/munge/munged.pid",
                           f"--seed-file={d}/munge/munged.seed"])
        wait_until(lambda: (d / "munge" / "munge.socket").exists(), 20, "munged")
        (d / "etc" / "jwt.key").write_bytes(os.urandom(32))
        os.chmod(d / "etc" / "jwt.key", 0o600)
        for i in range(2):
            dev = d / "fakedev" / f"nvidia{i}"
            os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # a character device, as /dev/null
        nodes = "\n".join(
            f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={p} CPUs=4 RealMemory=1000 "
            f"Gres=gpu:h100:2 Feature=gpu,h100 State=UNKNOWN" for n, p in slurmd_ports.items())
        (d / "etc" / "slurm.conf").write_text(f"""\
ClusterName=restlab
SlurmctldHost=localhost
SlurmctldPort={ctld}
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
AuthInfo=socket={d}/munge/munge.socket
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={d}/etc/jwt.key
TaskPlugin=task/affinity
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/state/slurmctld.pid
SlurmdPidFile={d}/state/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=10
KillWait=2
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
MailProg=/bin/true
MinJobAge=60
{nodes}
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        (d / "etc" / "gres.conf").write_text(f"AutoDetect=off\nName=gpu Type=h100 File={d}/fakedev/nvidia[0-1]\n")
        (d / "etc" / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
        os.chmod(d / "etc" / "slurm.conf", 0o644)
        c.start("slurmctld", ["slurmctld", "-D", "-i"])
        wait_until(lambda: c.run("scontrol", "ping").returncode == 0, 30, "slurmctld")
        for n in slurmd_ports:
            c.start(f"slurmd-{n}", ["slurmd", "-D", "-N", n])
        wait_until(lambda: "idle" in c.run("sinfo", "-h", "-n", "gpu01,gpu02", "-o", "%T").stdout
                   and "unk" not in c.run("sinfo", "-h", "-o", "%T").stdout.lower(), 60, "both slurmd to register")
        restd_cmd = ["slurmrestd", "-u", "daemon", "-g", "daemon", "-a", "rest_auth/jwt", f"127.0.0.1:{restd}"]
        blocked = blocked_dir(PREFIX)
        if blocked:  # daemon cannot reach the build: bind it back under a tmpfs in a private mount namespace
            (d / "restd-prefix").mkdir()
            restd_cmd = ["unshare", "-m", "--propagation", "private", "--", "sh", "-c",
                         'mount --bind "$0" "$1" && mount -t tmpfs -o mode=755 lab "$2" && mkdir -p "$0" && '
                         'mount --bind "$1" "$0" && shift 2 && exec "$@"',
                         str(PREFIX), str(d / "restd-prefix"), str(blocked), *restd_cmd]
        c.restd_argv = restd_cmd
        c.start_restd()
        yield c
    finally:
        for name in list(c.procs)[::-1]:
            c.stop(name)
        if os.environ.get("SLURMPOOL_KEEP_REST_E2E"):
            print(f"kept {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
async def both(cluster):
    rest = RestBackend(cluster.url, RestAuth(cluster.token()), timeout=10, retries=1, backoff=0.2, requeue_settle=60)
    cli = ScontrolBackend(LocalRunner(env={k: cluster.env[k] for k in ("SLURM_CONF", "PATH")}), timeout=20, backoff=0.2)
    yield rest, cli
    await rest.close()
    await cli.close()


async def test_version_and_nodes_read_as_scontrol_reads_them(both):
    rest, cli = both
    await rest.ping()
    assert rest.version == "v0.0.45"  # 26.05 serves v0.0.42..v0.0.45: the highest
    for _ in range(5):  # a slurmd may register between the two reads
        over_rest, over_cli = await rest.nodes(), await cli.nodes()
        strip = {n: (v.name, v.state, v.flags, v.reason, v.gres, v.gres_used, v.features, v.partitions, v.slurmd_start)
                 for n, v in over_rest.items()}
        if strip == {n: (v.name, v.state, v.flags, v.reason, v.gres, v.gres_used, v.features, v.partitions,
                         v.slurmd_start) for n, v in over_cli.items()}:
            break
    assert strip == {n: (v.name, v.state, v.flags, v.reason, v.gres, v.gres_used, v.features, v.partitions,
                         v.slurmd_start) for n, v in over_cli.items()}
    assert set(over_rest) == {"gpu01", "gpu02"} and over_rest["gpu01"].gpus == 2
    assert over_rest["gpu01"].features == ("gpu", "h100") and over_rest["gpu01"].slurmd_start is not None
    assert set(await rest.nodes(["gpu02", "nosuch"])) == {"gpu02"}


async def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


async def test_drain_then_resume(both):
    rest, cli = both
    reason = 'slurmpool: move 4f1c to inference "quoted" : and more'
    await rest.drain(["gpu02"], reason)
    node = (await cli.nodes(["gpu02"]))["gpu02"]
    assert node.drain_set and node.reason == reason
    over_rest = (await rest.nodes(["gpu02"]))["gpu02"]
    assert over_rest.drain_set and over_rest.reason == reason
    assert over_rest.reason_user == "root" and over_rest.reason_time is not None  # the stamp's parts,
    assert (over_rest.reason_user, over_rest.reason_time) == (node.reason_user, node.reason_time)  # as scontrol's
    await rest.drain(["gpu02"], reason)  # again: still fine
    await rest.resume(["gpu02", "gpu01"])  # gpu01 was not drained: fine, as with scontrol
    assert not (await cli.nodes(["gpu02"]))["gpu02"].drain_set
    with pytest.raises(SlurmError):
        await rest.drain(["gpu99"], "slurmpool: no such node")


async def test_jobs_of_every_id_form_read_as_squeue_prints_them_and_cancel(cluster, both):
    rest, cli = both
    script = cluster.dir / "het.sh"
    script.write_text("#!/bin/sh\n#SBATCH -n1\n#SBATCH hetjob\n#SBATCH -n1\nsleep 600\n")
    submitted = [
        cluster.run("sbatch", "--parsable", "-w", "gpu01", "--gres=gpu:1", "--wrap", "sleep 600").stdout.strip(),
        cluster.run("sbatch", "--parsable", "--hold", "--array=0-3", "--wrap", "sleep 600").stdout.strip(),
        cluster.run("sbatch", "--parsable", "--hold", str(script)).stdout.strip(),
    ]
    running, array, het = (s.split(";")[0] for s in submitted)

    async def seen():
        jobs = {j.job_id: j for j in await rest.jobs()}
        return jobs if running in jobs and jobs[running].state == "RUNNING" else None

    jobs = await wait_for(seen, 30, f"job {running} running")
    assert {running, f"{array}_[0-3]", f"{het}+0", f"{het}+1"} <= set(jobs)
    by_squeue = {j.job_id: j for j in await cli.jobs()}
    for job_id in (running, f"{array}_[0-3]", f"{het}+0", f"{het}+1"):
        r, s = jobs[job_id], by_squeue[job_id]
        assert (r.name, r.user, r.state, r.partition, r.nodes, r.gpus_per_node, r.num_nodes, r.start_time, r.reason) == (
            s.name, s.user, s.state, s.partition, s.nodes, s.gpus_per_node, s.num_nodes, s.start_time, s.reason), job_id
    assert jobs[running].nodes == ("gpu01",) and jobs[running].gpus_per_node == 1
    assert [j.job_id for j in await rest.jobs(states=["PENDING"]) if j.job_id.startswith(array)] == [f"{array}_[0-3]"]
    await rest.cancel([running, f"{array}_[0-3]", f"{het}+0"])

    async def gone():
        left = {j.job_id for j in await cli.jobs()} & {running, f"{array}_[0-3]", f"{het}+0", f"{het}+1"}
        return not left

    await wait_for(gone, 30, "the cancelled jobs to leave squeue")
    await rest.cancel([running])  # already finished: fine, as scancel


async def test_a_running_job_is_requeued_and_runs_again(cluster, both):
    rest, cli = both
    job = cluster.run("sbatch", "--parsable", "--requeue", "-w", "gpu02", "--wrap", "sleep 600").stdout.strip()

    async def state():
        jobs = {j.job_id: j for j in await cli.jobs(states=["all"])}
        return jobs.get(job)

    first = await wait_for(lambda: _running(state), 30, f"job {job} running")
    await _into_the_next_second(first.start_time)
    await rest.requeue([job])  # requeued, then released (BeginTime now) once PENDING
    again = await wait_for(lambda: _running(state, after=first.start_time), 60, f"job {job} running again")
    assert again.start_time > first.start_time
    await rest.cancel([job])


async def test_a_heterogeneous_job_is_requeued_through_its_leader(cluster, both):
    rest, cli = both
    script = cluster.dir / "het-run.sh"
    script.write_text("#!/bin/sh\n#SBATCH -n1 -w gpu01\n#SBATCH --requeue\n#SBATCH hetjob\n#SBATCH -n1 -w gpu02\nsleep 600\n")
    leader = cluster.run("sbatch", "--parsable", str(script)).stdout.strip().split(";")[0]

    async def part():
        return {j.job_id: j for j in await cli.jobs(states=["all"])}.get(f"{leader}+1")

    first = await wait_for(lambda: _running(part), 30, f"het job {leader} running")
    await _into_the_next_second(first.start_time)
    await rest.requeue([f"{leader}+1"])  # through the leader: Slurm requeues only whole het jobs
    again = await wait_for(lambda: _running(part, after=first.start_time), 60, f"het job {leader} running again")
    assert again.start_time > first.start_time
    await rest.cancel([f"{leader}+0"])


async def test_requeue_of_a_pending_or_unknown_job_is_no_failure(cluster, both):
    rest, cli = both
    job = cluster.run("sbatch", "--parsable", "--hold", "--wrap", "sleep 600").stdout.strip()
    await rest.requeue([job])  # "Job is pending execution": already where a requeue would put it
    await rest.requeue(["999999"])  # purged since it was seen: "Invalid job id specified"
    assert job in {j.job_id for j in await cli.jobs(states=["PENDING"])}
    await rest.cancel([job])


async def _into_the_next_second(start_time):
    """A StartTime has whole seconds: a job requeued and started again within the second it first
    started shows the same StartTime, and "running again" could never be seen."""
    while datetime.now(timezone.utc).replace(microsecond=0) <= start_time:
        await asyncio.sleep(0.1)


async def _running(state, after=None):
    job = await state()
    if job and job.state == "RUNNING" and (after is None or (job.start_time and job.start_time > after)):
        return job
    return None


async def test_slurmrestd_stopped_fails_closed_and_recovers(cluster, both):
    rest, _ = both
    await rest.nodes()
    cluster.stop("slurmrestd")
    try:
        with pytest.raises(SlurmUnavailable, match="unreachable"):
            await rest.nodes()
    finally:
        cluster.start_restd()
    assert set(await rest.nodes()) == {"gpu01", "gpu02"}


async def test_an_expired_or_foreign_token_is_a_clear_error(cluster):
    short = cluster.token(lifespan=1)
    rest = RestBackend(cluster.url, RestAuth(short), timeout=10, retries=0)
    try:
        await asyncio.sleep(2.5)  # let it expire
        with pytest.raises(SlurmAuthError, match="did not accept the token") as info:
            await rest.nodes()
        assert info.value.returncode in (401, 511)
    finally:
        await rest.close()
    forged = RestBackend(cluster.url, RestAuth("eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJyb290In0.c2lnbmF0dXJl"), timeout=10, retries=0)
    try:
        with pytest.raises(SlurmAuthError):
            await forged.ping()
    finally:
        await forged.close()


async def test_an_older_api_version_reads_the_same_and_cannot_requeue(cluster, both):
    """slurmrestd limited to the v0.0.42 data parser (what 24.11 serves at most): the backend
    negotiates it, reads nodes and jobs as scontrol does, drains and resumes, and refuses a
    requeue with a clear error (the first requeue endpoint is v0.0.45's)."""
    _, cli = both
    url = cluster.start_restd("slurmrestd-v42", free_port(), "v0.0.42")
    old = RestBackend(url, RestAuth(cluster.token()), timeout=10, retries=1, backoff=0.2)
    try:
        over_rest = await old.nodes()
        assert old.version == "v0.0.42"
        over_cli = await cli.nodes()
        assert {n: (v.state, v.flags, v.gres, v.features, v.partitions, v.slurmd_start) for n, v in over_rest.items()} == \
            {n: (v.state, v.flags, v.gres, v.features, v.partitions, v.slurmd_start) for n, v in over_cli.items()}
        await old.drain(["gpu01"], "slurmpool: over v0.0.42")
        assert (await cli.nodes(["gpu01"]))["gpu01"].reason == "slurmpool: over v0.0.42"
        await old.resume(["gpu01"])
        assert not (await cli.nodes(["gpu01"]))["gpu01"].drain_set
        job = cluster.run("sbatch", "--parsable", "--hold", "--array=0-1", "--wrap", "sleep 600").stdout.strip()
        assert f"{job}_[0-1]" in {j.job_id for j in await old.jobs()}
        with pytest.raises(SlurmError, match="slurmrestd v0.0.42 has no requeue endpoint"):
            await old.requeue(["1"])
        await old.cancel([f"{job}_[0-1]"])
    finally:
        await old.close()
        cluster.stop("slurmrestd-v42")


async def test_slurmctld_down_behind_slurmrestd_is_unavailable(cluster):
    """slurmrestd up, slurmctld stopped: its answer (502, "Unable to contact slurm controller") is
    SlurmUnavailable, the operator's fail-closed path; everything works again once slurmctld is back."""
    rest = RestBackend(cluster.url, RestAuth(cluster.token()), timeout=60, retries=0)
    try:
        await rest.ping()
        cluster.stop("slurmctld")
        try:
            with pytest.raises(SlurmUnavailable) as info:
                await rest.nodes()
            assert info.value.returncode in (502, 503, 504), info.value
            with pytest.raises(SlurmUnavailable):
                await rest.ping()
        finally:
            cluster.start("slurmctld", ["slurmctld", "-D", "-i"])
            wait_until(lambda: cluster.run("scontrol", "ping", check=False).returncode == 0, 30, "slurmctld back")
        assert set(await rest.nodes()) == {"gpu01", "gpu02"}
    finally:
        await rest.close()


async def test_the_operators_access_pool_polls_through_it_and_follows_the_secret(cluster):
    """What the operator runs for a pool with spec.slurm.access.rest: the shared access pool builds
    the backend from the token Secret and polls nodes and jobs; when the token expires, the renewed
    one in the Secret is used at once; a Secret whose token slurmctld refuses is the pool's
    SlurmUnavailable reason."""
    from slurmbridge.backoff import Backoff
    from slurmpool.adapters.access import SlurmAccessPool, Wanted
    from slurmpool.core.models import SlurmAccess

    secrets = {("slurm", "slurm-jwt"): {"token": cluster.token(lifespan=3)}}

    async def read_secret(namespace, name):
        return dict(secrets[(namespace, name)])

    access = SlurmAccess.model_validate({"rest": {"url": cluster.url, "tokenSecretRef": {"name": "slurm-jwt"}}})
    pool = SlurmAccessPool(read_secret, retries=0, backoff=Backoff(0, 0))
    try:
        _, view = await pool.observe("slurm", access, Wanted(max_age=0))
        assert view.available and set(view.nodes) == {"gpu01", "gpu02"}, view.error
        await asyncio.sleep(4)  # the token expires; whoever renews tokens writes a new one
        secrets[("slurm", "slurm-jwt")] = {"token": cluster.token()}
        _, view = await pool.observe("slurm", access, Wanted(max_age=0))  # 511, the Secret read again, asked again
        assert view.available, view.error
    finally:
        await pool.close()
    secrets[("slurm", "slurm-jwt")] = {"token": "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJyb290In0.c2lnbmF0dXJl"}
    pool = SlurmAccessPool(read_secret, retries=0, backoff=Backoff(0, 0))
    try:
        _, view = await pool.observe("slurm", access, Wanted(max_age=0))
        assert not view.available and "511" in view.error and "did not accept the token" in view.error, view.error
    finally:
        await pool.close()
