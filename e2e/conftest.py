"""Fixtures for end-to-end tests on the local lab (e2e/lab/README.md).

Use the session-scoped ``lab`` fixture::

    import pytest
    pytestmark = pytest.mark.e2e

    def test_something(lab):
        nodes = lab.kubectl_json("get", "nodes")["items"]
        out = lab.slurm("scontrol", "show", "node", "gpu01").stdout
        lab.wait_for(lambda: lab.node_state("gpu01") == "IDLE", timeout=10)

If ``$LAB_DIR/env`` exists and the lab is healthy (e2e/lab/health.sh), the tests use it and leave
it running; otherwise the fixture runs e2e/lab/up.sh and, when the last pytest session using the lab
ends, down.sh. Tests share one lab: leave it as you found it (no pods, jobs, cordons or drains;
harness.reset_lab). Every test in e2e/ is marked ``e2e`` automatically. For polls, read through
``lab.api()`` (harness.py's in-process readers) rather than a kubectl process per read. At the end of
the session the wall time of each module is printed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from identity import apply_admission_policies

REPO = Path(__file__).resolve().parent.parent
LAB_SCRIPTS = REPO / "e2e" / "lab"


def lab_dir() -> Path:
    return Path(os.environ.get("LAB_DIR") or REPO / ".lab")


def _read_env(path: Path) -> dict[str, str]:
    """The variables $LAB_DIR/env exports, as the shell computes them."""
    out = subprocess.run(["bash", "-c", 'set -a; . "$0" >/dev/null; env -0', str(path)],
                         check=True, capture_output=True).stdout
    return dict(kv.split("=", 1) for kv in out.decode().split("\0") if "=" in kv)


def without_node_model(state: str) -> str:
    """IDLE+DRAIN+DYNAMIC_NORM -> IDLE+DRAIN: the e2e suite compares states the same way on static and
    dynamic nodes (LAB_SLURM_NODES); the operator's parser reads DYNAMIC_NORM as a flag like any other."""
    return "+".join(f for f in state.split("+") if f != "DYNAMIC_NORM")


class LabTimeout(AssertionError):
    """wait_for gave up."""


class LabCommandError(subprocess.CalledProcessError):
    """A lab command failed; str() includes its output."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


@dataclass
class Lab:
    """A running lab. Paths and settings come from $LAB_DIR/env (written by up.sh)."""

    dir: Path
    env: dict[str, str]  # full environment for subprocesses: os.environ + the lab's exports
    kubeconfig: Path
    slurm_conf: Path
    bin_dir: Path
    nodes: list[str]  # gpu01..gpuNN: Kubernetes node names (Slurm's too, unless LAB_SLURM_NAME_PREFIX: slurm_name)
    ssh_host: str
    ssh_port: int
    ssh_user: str
    ssh_key: Path
    ssh_known_hosts: Path
    ssh_command: list[str] = field(default_factory=list)  # argv of $LAB_SSH; append the remote command
    slurmd_timeout: int = 10  # Slurm's SlurmdTimeout in the lab, seconds
    sim_nodes: list[str] = field(default_factory=list)  # sim001..: LAB_SIM_NODES, for load tests
    real_nodes: list[str] = field(default_factory=list)  # real01..: LAB_REAL_NODES, real kubelets (test_real_nodes.py)
    _api: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_env_file(cls, path: Path) -> "Lab":
        e = _read_env(path)
        env = dict(os.environ)
        env.update(e)
        n = int(e["LAB_NODES"])
        return cls(dir=Path(e["LAB_DIR"]), env=env, kubeconfig=Path(e["KUBECONFIG"]),
                   slurm_conf=Path(e["SLURM_CONF"]), bin_dir=Path(e["LAB_BIN"]),
                   nodes=[f"gpu{i:02d}" for i in range(1, n + 1)],
                   ssh_host=e["LAB_SSH_HOST"], ssh_port=int(e["LAB_SSH_PORT"]), ssh_user=e["LAB_SSH_USER"],
                   ssh_key=Path(e["LAB_SSH_KEY"]), ssh_known_hosts=Path(e["LAB_SSH_KNOWN_HOSTS"]),
                   ssh_command=shlex.split(e["LAB_SSH"]), slurmd_timeout=int(e.get("LAB_SLURMD_TIMEOUT", "10")),
                   sim_nodes=[f"sim{i:03d}" for i in range(1, int(e.get("LAB_SIM_NODES", "0")) + 1)],
                   real_nodes=[f"real{i:02d}" for i in range(1, int(e.get("LAB_REAL_NODES", "0")) + 1)])

    @property
    def slurm_version(self) -> str:
        """The lab's Slurm version (LAB_SLURM: 22.05 or 26.05)."""
        return self.env.get("LAB_SLURM", "22.05")

    def slurm_name(self, node: str) -> str:
        """The Slurm NodeName of a lab node: LAB_SLURM_NAME_PREFIX + its Kubernetes name (sgpu01 for gpu01)."""
        return self.env.get("LAB_SLURM_NAME_PREFIX", "") + node

    @property
    def slurm_env(self) -> dict[str, str]:
        """What a local Slurm client of this lab needs in its environment: SLURM_CONF, and on 26.05
        the built clients first in PATH and this lab's auth/slurm socket (SLURM_SACK_SOCKET)."""
        keys = ("SLURM_CONF", "PATH", "SLURM_SACK_SOCKET")
        return {k: self.env[k] for k in keys if k in self.env}

    # --- the API, in-process
    def api(self):
        """A `kubernetes.client.ApiClient` with the lab's admin kubeconfig, made once and kept (one
        keep-alive connection pool): for polls, where a kubectl process per read costs more than the
        read. harness.py has readers that return the same JSON as `kubectl get -o json`."""
        if self._api is None:
            from kubernetes import config

            self._api = config.new_client_from_config(str(self.kubeconfig))
        return self._api

    # --- commands
    def run(self, *args: str, check: bool = True, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a command with the lab's environment; text output captured. Raises LabCommandError
        (a subprocess.CalledProcessError whose message shows stdout/stderr) if check and it fails."""
        p = subprocess.run(list(args), env=self.env, input=input, capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode != 0:
            raise LabCommandError(p.returncode, p.args, p.stdout, p.stderr)
        return p

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess:
        """The lab's kubectl with the lab's admin KUBECONFIG."""
        return self.run(str(self.bin_dir / "kubectl"), *args, check=check, input=input, timeout=timeout)

    def kubectl_json(self, *args: str) -> Any:
        """kubectl ... -o json, parsed."""
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(self, manifest: str) -> subprocess.CompletedProcess:
        """kubectl apply -f - with a YAML/JSON manifest string."""
        return self.kubectl("apply", "-f", "-", input=manifest)

    def slurm(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """A local Slurm command (scontrol, sinfo, squeue, sbatch, scancel ...) with the lab's SLURM_CONF."""
        return self.run(*args, check=check, timeout=timeout)

    def ssh(self, command: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a command through the lab's sshd (as the operator reaches Slurm in production)."""
        return self.run(*self.ssh_command, command, check=check, timeout=timeout)

    def node_state(self, node: str) -> str:
        """Slurm's State= of a node, e.g. IDLE, IDLE+DRAIN, DOWN+NOT_RESPONDING; without the flag
        DYNAMIC_NORM of dynamic nodes (it names the node model, not a state: see `dynamic_nodes`)."""
        out = self.slurm("scontrol", "show", "node", "-o", node).stdout
        return without_node_model(next(w.split("=", 1)[1] for w in out.split() if w.startswith("State=")))

    @property
    def dynamic_nodes(self) -> bool:
        """LAB_SLURM_NODES=dynamic: a node exists in Slurm only once its slurmd registered, and its
        State= has the flag DYNAMIC_NORM (IDLE+DYNAMIC_NORM where a static node shows IDLE)."""
        return self.env.get("LAB_SLURM_NODES", "static") == "dynamic"

    def slurm_knows(self, node: str) -> bool:
        """False for a dynamic node whose slurmd never registered (Slurm: "Node ... not found")."""
        p = self.slurm("scontrol", "show", "node", "-o", node, check=False)
        if p.returncode == 0 and f"NodeName={node} " in p.stdout:
            return True
        if "not found" in (p.stdout + p.stderr).lower():
            return False
        raise LabCommandError(p.returncode, p.args, p.stdout, p.stderr)

    # --- polling
    @staticmethod
    def wait_for(predicate: Callable[[], Any], timeout: float = 30, interval: float = 0.1,
                 message: str = "") -> Any:
        """Call predicate until it returns something truthy (returned) or timeout seconds pass
        (LabTimeout, with the last value/exception). Exceptions count as 'not yet'."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = predicate()
                if last:
                    return last
            except Exception as e:  # noqa: BLE001 - e.g. a resource not created yet
                last = e
            if time.monotonic() >= deadline:
                raise LabTimeout(f"timed out after {timeout}s waiting for {message or predicate}; last: {last!r}")
            time.sleep(interval)


def _healthy(d: Path) -> bool:
    if not (d / "env").exists():
        return False
    running = _read_env(d / "env")
    # e.g. `make load`: a lab with other counts is restarted by up.sh; so is one of another Slurm
    # version, node model, real-node count, pyxis, Slurm name prefix or cgroups (LAB_SLURM, LAB_SLURM_NODES, LAB_REAL_NODES,
    # LAB_PYXIS, LAB_SLURM_NAME_PREFIX, LAB_CGROUPS).
    for key, default in (("LAB_SIM_NODES", "0"), ("LAB_SLURM", "22.05"), ("LAB_SLURM_NODES", "static"), ("LAB_SLURMDBD", "0"),
                         ("LAB_GRES_CORES", "0"), ("LAB_REAL_NODES", "0"), ("LAB_PYXIS", "0"), ("LAB_SLURM_NAME_PREFIX", ""),
                         ("LAB_CGROUPS", "0")):
        wanted = os.environ.get(key)
        if wanted is not None and running.get(key, default) != wanted:
            return False
    return subprocess.run([str(LAB_SCRIPTS / "health.sh")], env={**os.environ, "LAB_DIR": str(d)},
                          capture_output=True).returncode == 0


@contextlib.contextmanager
def _lab_lock(d: Path):
    """The lock up.sh and down.sh take; scripts run inside get LAB_LOCKED=1."""
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _other_users(users: Path) -> list[int]:
    """PIDs of other live pytest sessions using this lab (users/<pid> files; stale ones removed)."""
    live = []
    for f in users.glob("[0-9]*"):
        pid = int(f.name)
        if pid != os.getpid() and Path(f"/proc/{pid}").exists():
            live.append(pid)
        elif pid != os.getpid():
            f.unlink(missing_ok=True)
    return live


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """The running lab, brought up for this session unless one is already up and healthy.

    Sessions share the lab: each registers in $LAB_DIR/users/<pid>. A lab that a fixture brought up
    is taken down by the last session using it; a lab brought up by hand (make lab-up) stays up."""
    d = lab_dir()
    users = d / "users"
    started_marker = users / "started-by-pytest"
    env = {**os.environ, "LAB_DIR": str(d), "LAB_LOCKED": "1"}
    with _lab_lock(d):
        users.mkdir(exist_ok=True)
        (users / str(os.getpid())).touch()
        if not _healthy(d):
            p = subprocess.run([str(LAB_SCRIPTS / "up.sh")], env=env, capture_output=True, text=True)
            if p.returncode != 0:
                (users / str(os.getpid())).unlink(missing_ok=True)
                pytest.fail(f"e2e/lab/up.sh failed ({p.returncode}):\n{p.stdout}\n{p.stderr}", pytrace=False)
            print(p.stdout.strip().splitlines()[-1])
            started_marker.touch()
    try:
        lab = Lab.from_env_file(d / "env")
        from harness import stop_demo  # harness imports the kubernetes client; conftest stays light

        with _lab_lock(d):
            stop_demo(lab)  # `make demo` then `make test`: the demo's pool would hold the lab's nodes
        apply_admission_policies(lab)  # every test runs with the chart's admission policies (e2e/identity.py)
        _SESSION_LAB.append(lab)
        yield lab
    finally:
        with _lab_lock(d):
            (users / str(os.getpid())).unlink(missing_ok=True)
            if not _other_users(users) and (d / "env").exists():
                # The tests' namespaces, emptied by each module (harness.reset_lab), go now, once.
                subprocess.run([str(Lab.from_env_file(d / "env").bin_dir / "kubectl"), "delete", "namespace",
                                "-l", "slurmpool.io/e2e=true", "--wait=false"],
                               env={**env, **_read_env(d / "env")}, capture_output=True, timeout=60)
            if started_marker.exists() and not _other_users(users):
                subprocess.run([str(LAB_SCRIPTS / "down.sh")], env=env, capture_output=True)
                started_marker.unlink(missing_ok=True)


_SESSION_LAB: list[Lab] = []


@pytest.fixture(scope="module", autouse=True)
def _module_leaves_no_operator_or_pool():
    """After each module: an operator its fixtures started and never stopped (a fixture that
    failed before its yield skips its own teardown) is stopped, and a pool left in the test
    namespace is cleared with reset_lab, so one module's failure is not every later module's."""
    yield
    if not _SESSION_LAB:
        return
    from harness import NAMESPACE, Operator, pools_left, reset_lab

    lab = _SESSION_LAB[0]
    for operator in list(Operator.running):
        print(f"\n[lab] the module left an operator running ({operator.log_path.name}): stopped")
        operator.stop()
    try:
        left = pools_left(lab, NAMESPACE)
    except Exception as err:  # noqa: BLE001 - a module that took the lab down (marker lab_down)
        print(f"\n[lab] could not list pools after the module: {err}")
        return
    if left:
        print(f"\n[lab] the module left pools {left} in {NAMESPACE}: reset_lab")
        reset_lab(lab)


# ---------------------------------------------------------------- wall time per module

_MODULE_SECONDS: dict[str, float] = {}
_SESSION_START: list[float] = []


def pytest_sessionstart(session):
    _SESSION_START.append(time.monotonic())


def pytest_runtest_logreport(report):
    """Setup, call and teardown of every test, summed per module: module fixtures (an operator, a
    pool, reset_lab) count for the module whose test set them up or tore them down; the session's
    `lab` fixture counts for the first test that used it."""
    module = report.nodeid.split("::", 1)[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _MODULE_SECONDS:
        return
    tr = terminalreporter
    tr.write_sep("=", "wall time per module (setup + call + teardown), slowest first")
    for module, seconds in sorted(_MODULE_SECONDS.items(), key=lambda kv: -kv[1]):
        tr.write_line(f"{seconds:8.1f} s  {module}")
    total = sum(_MODULE_SECONDS.values())
    session = time.monotonic() - _SESSION_START[0] if _SESSION_START else total
    tr.write_line(f"{total:8.1f} s  in tests ({session:.1f} s session)")


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)
    # A test that takes the lab down (marker lab_down) runs after every other test of the session.
    items.sort(key=lambda item: item.get_closest_marker("lab_down") is not None)


# ---------------------------------------------------------------- what the lab looked like when a test failed


def _lab_at_failure(lab: Lab) -> str:
    """Slurm's nodes not idle or allocated (with reasons), reservations, jobs, each pool's counts,
    conditions and moves, and Nodes not Ready or cordoned: what CI's output must show to explain a
    failure after the lab is gone. Each part is read on its own; one that fails says so."""
    parts: list[str] = []

    def part(title: str, read: Callable[[], str]) -> None:
        try:
            text = read().strip()
        except Exception as e:  # noqa: BLE001 - a diagnostic must not hide the failure itself
            text = f"(could not read: {e})"
        parts.append(f"--- {title}\n{text or '(none)'}")

    def slurm_nodes() -> str:
        out = lab.slurm("sinfo", "-h", "-N", "-o", "%N|%T|%E|%H", timeout=15).stdout.splitlines()
        return "\n".join(sorted({line for line in out if line.split("|")[1] not in ("idle", "allocated", "mixed")}))

    def pools() -> str:
        lines = []
        for p in lab.kubectl_json("get", "slurmnodepools", "-A").get("items", []):
            s = p.get("status") or {}
            ready = next((c for c in s.get("conditions") or [] if c.get("type") == "Ready"), {})
            infer = {q.get("name"): (q.get("desired"), q.get("ready")) for q in (s.get("inference") or {}).get("pools") or []}
            lines.append(f"{p['metadata']['namespace']}/{p['metadata']['name']} gen {p['metadata'].get('generation')}"
                         f" observed {s.get('observedGeneration')}: slurm {s.get('slurm')} inference {infer}"
                         f" moving {s.get('moving')}; Ready {ready.get('status')} {ready.get('reason')}: {ready.get('message')}")
            for bad in s.get("unhealthyNodes") or []:
                lines.append(f"    unhealthy {bad}")
            for c in s.get("conditions") or []:
                if c.get("type") != "Ready" and c.get("status") == "True":
                    lines.append(f"    {c.get('type')} {c.get('reason')}: {c.get('message')}")
        return "\n".join(lines)

    def nodes() -> str:
        lines = []
        for n in lab.kubectl_json("get", "nodes").get("items", []):
            ready = next((c for c in n.get("status", {}).get("conditions") or [] if c.get("type") == "Ready"), {})
            cordoned = n.get("spec", {}).get("unschedulable")
            if ready.get("status") != "True" or cordoned:
                lines.append(f"{n['metadata']['name']}: Ready={ready.get('status')} {ready.get('reason')}"
                             f"{' cordoned' if cordoned else ''}")
        return "\n".join(lines)

    part("Slurm nodes not idle or allocated (node|state|reason|reason's stamp)", slurm_nodes)
    part("reservations", lambda: lab.slurm("scontrol", "show", "reservation", check=False, timeout=15).stdout)
    part("jobs", lambda: lab.slurm("squeue", "-h", "-o", "%i %T %r %N %l %S", timeout=15).stdout)
    part("pools", pools)
    part("Nodes not Ready or cordoned", nodes)
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    lab = getattr(item, "funcargs", {}).get("lab")
    if report.failed and report.when in ("setup", "call") and isinstance(lab, Lab):
        report.sections.append(("lab at failure", _lab_at_failure(lab)))
