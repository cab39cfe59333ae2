"""Slurm backends for the pools' `spec.slurm.access`, built once and shared.

Pools that reach the same controller share one backend (one SSH connection) and one
observation per reconcile pass, so Slurm sees a constant number of commands per pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

from slurmbridge import PowerSave, SlurmError, SlurmJob, SlurmNode, SlurmReservation, TopologyGroup
from slurmbridge.backend import ScontrolBackend, SlurmBackend
from slurmbridge.backoff import Backoff
from slurmbridge.runner import CommandRunner, LocalRunner
from slurmbridge.ssh import SshRunner, load_client_key, load_known_hosts

from slurmpool.adapters import metrics
from slurmpool.core.models import SlurmAccess, SshAccess
from slurmpool.adapters.restaccess import build_rest_backend, rest_key
from slurmpool.core.view import ACTIVE_JOB_STATES, SlurmView

ReadSecret = Callable[[str, str], Awaitable[dict[str, str]]]
TOPOLOGY_MAX_AGE = 60.0  # seconds: slurm.conf's topology changes with a reconfigure, rarely
POWER_SAVE_MAX_AGE = 60.0  # seconds: slurm.conf's power saving too (a failed read is kept as long: "not known")
SECRET_MAX_AGE = 30.0  # seconds: SSH keys are read again this often (the REST token too: restaccess.py)
PENDING_FOR = 60.0  # seconds: a pool's partition is polled for pending jobs this long after it last looked
RETIRE_AFTER = 60.0  # seconds: an SSH connection replaced by a new key is closed this much later
RETIRE_CLOSE_TIMEOUT = 10.0  # seconds a close of such a connection may take
STALE_WHILE_POLLING = 3  # x max_age: how much older a view may be, rather than wait for a poll in progress
log = logging.getLogger("slurmpool.access")
T = TypeVar("T")


@dataclass(frozen=True)
class Wanted:
    """What a pool's look asks of a poll. How fresh it must be is the controller's rule
    (controller/freshness.py); here it is only checked against the polls made."""

    max_age: float  # begun at most this long ago
    newer_than: float | None = None  # begun after this
    since: float | None = None  # begun at or after this (the pool's own last change: pools own disjoint nodes)
    pool: str = ""  # who asks (their pending partitions are polled for a while)
    pending: str | None = None  # the pool's partition, with demand on: its pending jobs are read
    topology: bool = False  # Slurm's switches or blocks too
    power_save: bool = False  # Slurm's power-save settings too (a PowerSave pool)

    def shown_by(self, began: float, oldest: float) -> bool:
        """Does a poll begun at `began` answer it (no older than `oldest`)?"""
        since = float("-inf") if self.since is None else self.since
        return began >= oldest and began >= since and (self.newer_than is None or began > self.newer_than)


def access_key(namespace: str, access: SlurmAccess) -> tuple:
    if access.ssh:
        s = access.ssh
        return ("ssh", s.host, s.port, s.user, namespace, s.secret_ref.name)
    if access.rest:
        return rest_key(namespace, access.rest)
    return ("local", access.local.slurm_conf if access.local else None)


async def observe_slurm(backend: SlurmBackend, pending: frozenset[str] | None = None) -> SlurmView:
    """`scontrol show node` and `squeue` for the whole pool, side by side (each is a round trip
    over SSH). Fails closed. `pending`: the partitions whose pending jobs are read (the pools with
    demand on); running jobs are read from every partition (a node may run any). None: every job.
    100k pending jobs were 17 MB per poll: squeue filters (`-t`, `-p`); slurmrestd cannot, so its
    one answer is filtered as it comes (the states: rest.py) and by partition here. Every
    reservation too (once the nodes and jobs are read), wherever the access can list them: every
    pool's planner keeps the nodes of others' in Slurm, and a pool with a planned handover finds its own there."""
    if pending is None:
        calls = [backend.jobs()]
    elif backend.filters_jobs:
        calls = [backend.jobs(states=sorted(ACTIVE_JOB_STATES))] + [backend.jobs(partition=p, states=["PENDING"]) for p in sorted(pending)]
    else:  # one answer of every job: the states that matter kept as it is read
        calls = [backend.jobs(states=sorted(ACTIVE_JOB_STATES | ({"PENDING"} if pending else set())))]
    polled, answers = await asyncio.gather(backend.nodes(), _settled(calls), return_exceptions=True)
    failed = next((r for r in (polled, *_value(answers)) if isinstance(r, BaseException)), None)
    if isinstance(failed, SlurmError):
        return SlurmView(available=False, error=str(failed)[:500])
    if failed is not None:
        raise failed
    # Only once Slurm answered: an unreachable Slurm (SSH connects one at a time, each waiting out
    # its timeout) would otherwise take two more timeouts to say so.
    found, max_times, error, api = await _reservations(backend)
    nodes, jobs = _value(polled), [j for answer in _value(answers) for j in _value(answer)]
    if pending is not None:
        jobs = [j for j in jobs if j.state in ACTIVE_JOB_STATES or (j.state == "PENDING" and pending & set(j.partition.split(",")))]
    return SlurmView(available=True, nodes=nodes, jobs=tuple(dict((j.job_id, j) for j in jobs).values()), pending_partitions=pending,
                     reservations=found, reservations_error=error, reservations_api=api,
                     max_times=max_times)


async def _settled(calls: list[Coroutine[Any, Any, list[SlurmJob]]]) -> list[list[SlurmJob] | BaseException]:
    """The job reads side by side, each its answer or its failure."""
    return await asyncio.gather(*calls, return_exceptions=True)


def _value(result: T | BaseException) -> T:
    if isinstance(result, BaseException):
        raise result
    return result


Listed = tuple[tuple[SlurmReservation, ...] | None, dict[str, timedelta | None], str | None, bool]


async def _reservations(backend: SlurmBackend) -> Listed:
    """Every reservation (planned handovers, and others' that keep their nodes in Slurm) and the
    partitions' MaxTime (the default lead time), after the node poll answered: two more calls, made
    side by side; and whether the access can reserve at all. Every access lists them, slurmrestd of
    every version too (its GET is in v0.0.40 on), so others' are kept in Slurm even where no handover
    can be made (slurmrestd before v0.0.43). A failure fails neither the poll nor the moves: the
    handover waits, and the planner keeps holding what the pool's last status showed held
    (core/reservations.py)."""
    api = True
    try:
        api = await makes_reservations(backend)
        found, max_times = await asyncio.gather(backend.reservations(), backend.partition_max_times())
        return tuple(found), max_times, None, api
    except SlurmError as err:
        return None, {}, f"cannot list reservations: {err}"[:500], api


async def makes_reservations(backend: SlurmBackend) -> bool:
    """Can this access create and delete reservations? scontrol (SSH, local) can; slurmrestd says
    from its API version (v0.0.43+, Slurm 25.05+), known once negotiated (no call per pass)."""
    return await backend.can_reserve()


def _ssh_material(secret: dict[str, str], ssh) -> tuple:
    return (secret.get(ssh.secret_ref.private_key_key), secret.get(ssh.secret_ref.known_hosts_key))


def ssh_runner(namespace: str, ssh: SshAccess, secret: dict[str, str]) -> SshRunner:
    """The Secret's values are always content, never a path (bytes say so), and a bad one is named
    by Secret and key only: a key body must never reach a status, an Event or a log line."""
    ref = ssh.secret_ref
    try:
        key = load_client_key(secret[ref.private_key_key].encode())
    except ValueError:
        raise ValueError(f"Secret {namespace}/{ref.name} key {ref.private_key_key!r} is not an SSH private key "
                         "(OpenSSH or PEM text, unencrypted)") from None
    try:
        known_hosts = load_known_hosts(secret[ref.known_hosts_key].encode())
    except ValueError:
        raise ValueError(f"Secret {namespace}/{ref.name} key {ref.known_hosts_key!r} is not known_hosts text") from None
    return SshRunner(host=ssh.host, port=ssh.port, username=ssh.user, client_key=key, known_hosts=known_hosts)


class Instrumented:
    """A SlurmBackend that times each Slurm command of the one it wraps and counts its failures
    (slurmpool_slurm_command_*{command=...}, one method per name of slurm_commands()); the
    capabilities, topology and close pass through untimed."""

    def __init__(self, backend: SlurmBackend, clock: Callable[[], float] = time.monotonic):
        self.inner = backend
        self.clock = clock

    async def _timed(self, command: str, call: Awaitable[T]) -> T:
        started = self.clock()
        try:
            return await call
        except Exception:
            metrics.SLURM_COMMAND_ERRORS.labels(command=command).inc()
            raise
        finally:
            metrics.SLURM_COMMAND_SECONDS.labels(command=command).observe(self.clock() - started)

    async def nodes(self, names: Sequence[str] | None = None) -> dict[str, SlurmNode]:
        return await self._timed("nodes", self.inner.nodes(names))

    async def jobs(self, partition: str | None = None, states: Sequence[str] | None = None) -> list[SlurmJob]:
        return await self._timed("jobs", self.inner.jobs(partition, states))

    async def drain(self, nodes: Sequence[str], reason: str) -> None:
        await self._timed("drain", self.inner.drain(nodes, reason))

    async def resume(self, nodes: Sequence[str]) -> None:
        await self._timed("resume", self.inner.resume(nodes))

    async def requeue(self, job_ids: Sequence[str]) -> None:
        await self._timed("requeue", self.inner.requeue(job_ids))

    async def cancel(self, job_ids: Sequence[str]) -> None:
        await self._timed("cancel", self.inner.cancel(job_ids))

    async def ping(self) -> None:
        await self._timed("ping", self.inner.ping())

    async def reservations(self) -> list[SlurmReservation]:
        return await self._timed("reservations", self.inner.reservations())

    async def partition_max_times(self) -> dict[str, timedelta | None]:
        return await self._timed("partition_max_times", self.inner.partition_max_times())

    async def create_reservation(self, name: str, nodes: Sequence[str], start: datetime, minutes: int, flags: Sequence[str]) -> None:
        await self._timed("create_reservation", self.inner.create_reservation(name, nodes, start, minutes, flags))

    async def delete_reservation(self, name: str) -> None:
        await self._timed("delete_reservation", self.inner.delete_reservation(name))

    async def power_down(self, nodes: Sequence[str], again: bool = False) -> None:
        await self._timed("power_down", self.inner.power_down(nodes, again))

    async def power_up(self, nodes: Sequence[str]) -> None:
        await self._timed("power_up", self.inner.power_up(nodes))

    async def power_save(self) -> PowerSave:
        return await self._timed("power_save", self.inner.power_save())

    async def signal(self, job_ids: Sequence[str], signal: str, batch_only: bool) -> None:
        await self._timed("signal", self.inner.signal(job_ids, signal, batch_only))

    @property
    def commands_run(self) -> int:
        return self.inner.commands_run

    @property
    def filters_jobs(self) -> bool:
        return self.inner.filters_jobs

    async def can_reserve(self) -> bool:
        return await self.inner.can_reserve()

    async def topology(self) -> list[TopologyGroup]:
        return await self.inner.topology()

    async def close(self) -> None:
        await self.inner.close()


async def _close_quietly(backend: SlurmBackend) -> None:
    try:
        await asyncio.wait_for(backend.close(), RETIRE_CLOSE_TIMEOUT)
    except Exception as err:  # noqa: BLE001 - the connection is dropped either way
        log.warning("closing a replaced Slurm connection failed: %s", err)


class SlurmAccessPool:
    """`backoff`: after a failed poll, the next one waits 1, 2, 4 ... 10 seconds (jittered: a
    little less), munge or slurmctld down: no hammering, one SSH login per pass; the failed view,
    with the retry time in its error, stands in meanwhile. Reset on success. `clock`: every time
    it reads (monotonic seconds)."""

    def __init__(self, read_secret: ReadSecret, command_timeout: float = 20.0, retries: int = 1,
                 backoff: Backoff | None = None, clock: Callable[[], float] | None = None):
        self._read_secret = read_secret
        self._backends: dict[tuple, SlurmBackend] = {}
        self._retired: list[tuple[float, SlurmBackend]] = []  # (close at, backend): replaced by a new key
        self._closing: set[asyncio.Task] = set()
        self._views: dict[tuple, tuple[float, SlurmView]] = {}  # key -> (when its poll began, view)
        self._topology: dict[tuple, tuple[float, tuple]] = {}  # key -> (when, groups): changes rarely
        self._power_save: dict[tuple, tuple[float, PowerSave | None]] = {}  # key -> (when, settings; None: not known)
        self._failing: dict[tuple, tuple[int, float, SlurmView]] = {}  # key -> (failures, retry at, view)
        self._locks: dict[tuple, asyncio.Lock] = {}
        self._ssh_read: dict[tuple, float] = {}  # key -> when its SSH Secret was last read
        self._ssh_seen: dict[tuple, tuple] = {}  # key -> the key and known_hosts its connection uses
        self._pending: dict[tuple, dict[str, tuple[str | None, float]]] = {}  # key -> pool -> (partition if demand on, asked at)
        self.command_timeout = command_timeout
        self.retries = retries
        self.backoff = backoff if backoff is not None else Backoff(1.0, 10.0)
        self.clock = clock or time.monotonic

    async def backend(self, namespace: str, access: SlurmAccess) -> SlurmBackend:
        key = access_key(namespace, access)
        self._close_retired()
        if key in self._backends and access.ssh and self.clock() - self._ssh_read.get(key, float("-inf")) >= SECRET_MAX_AGE:
            await self._reread_ssh_secret(key, namespace, access.ssh)
        if key not in self._backends:
            self._backends[key] = await self._build(namespace, access)
            self._ssh_read[key] = self.clock()
        return self._backends[key]

    async def _reread_ssh_secret(self, key: tuple, namespace: str, s: SshAccess) -> None:
        """A rotated client key or host key is used without a restart: the Secret is read again
        every SECRET_MAX_AGE (and at once after a failed poll); a changed one builds a new
        connection. The old one is closed a little later (a drain may be running on it)."""
        self._ssh_read[key] = self.clock()
        secret = await self._read_secret(namespace, s.secret_ref.name)
        if _ssh_material(secret, s) == self._ssh_seen.get(key):
            return
        log.info("Secret %s/%s changed: a new SSH connection to %s", namespace, s.secret_ref.name, s.host)
        self._retired.append((self.clock() + RETIRE_AFTER, self._backends.pop(key)))

    def _close_retired(self) -> None:
        """Connections replaced by a new key, due now, are closed in tasks of their own: a slow or
        failing close never holds the poll (nor every pool on that Slurm) that found them due."""
        due = [b for at, b in self._retired if self.clock() >= at]
        self._retired = [(at, b) for at, b in self._retired if self.clock() < at]
        for backend in due:
            task = asyncio.create_task(_close_quietly(backend))
            self._closing.add(task)  # held until done: a task nothing references may be collected mid-close
            task.add_done_callback(self._closing.discard)

    async def _build(self, namespace: str, access: SlurmAccess) -> SlurmBackend:
        if access.rest:
            return Instrumented(await build_rest_backend(
                self._read_secret, namespace, access.rest, timeout=self.command_timeout, retries=self.retries), self.clock)
        runner: CommandRunner
        if access.ssh:
            s = access.ssh
            secret = await self._read_secret(namespace, s.secret_ref.name)
            for key in (s.secret_ref.private_key_key, s.secret_ref.known_hosts_key):
                if not secret.get(key):
                    raise ValueError(f"Secret {namespace}/{s.secret_ref.name} has no key {key!r}")
            self._ssh_seen[access_key(namespace, access)] = _ssh_material(secret, s)
            runner = ssh_runner(namespace, s, secret)
        else:
            conf = access.local.slurm_conf if access.local else None
            runner = LocalRunner(env={"SLURM_CONF": conf} if conf else None)
        return Instrumented(ScontrolBackend(runner, timeout=self.command_timeout, retries=self.retries), self.clock)

    async def observe(self, namespace: str, access: SlurmAccess, wanted: Wanted) -> tuple[SlurmBackend | None, SlurmView]:
        """Slurm's state for this access, polled at most once per `wanted.max_age` seconds (and by a
        poll begun after `newer_than`, at or after `since`); with `topology`, its switches or blocks
        too, polled at most once per TOPOLOGY_MAX_AGE. The view's `polled_at` is when its poll began."""
        key = access_key(namespace, access)
        self._pending.setdefault(key, {})[wanted.pool] = (wanted.pending, self.clock())
        # What will do, fixed on arrival: a pool that waited for another pool's poll takes it
        # rather than polling again after it (pools sharing one Slurm queue on its lock).
        oldest = self.clock() - wanted.max_age
        lock = self._locks.setdefault(key, asyncio.Lock())
        backend, view = None, None
        if lock.locked():  # another pool is polling: a view a little older does rather than queue behind it
            cached = self._views.get(key)
            if cached and wanted.shown_by(cached[0], oldest - STALE_WHILE_POLLING * wanted.max_age) and \
                    cached[1].has_pending(wanted.pending) and \
                    (not wanted.topology or cached[1].topology or not cached[1].available):
                backend, view = self._backends.get(key), cached[1]
        if view is None:
            async with lock:  # pools reconcile concurrently: one poll
                backend, view = await self._observe(key, namespace, access, oldest, wanted)
        if wanted.power_save and view.available and view.power_save is None and backend is not None:
            plain, view = view, replace(view, power_save=await self._power_saving(key, backend))
            cached = self._views.get(key)
            if cached is not None and cached[1] is plain:  # the other pools of this poll share it, and its indexes
                self._views[key] = (cached[0], view)
        return backend, view

    async def _power_saving(self, key: tuple, backend: SlurmBackend) -> PowerSave | None:
        """Slurm's power-save settings, read at most once per POWER_SAVE_MAX_AGE. A failure (or an
        access that cannot tell: SlurmUnsupported) is "not known" for as long, and never fails the
        pass: a PowerSave pool then parks by drain and says so (status: PowerSaveReady Unknown)."""
        known = self._power_save.get(key)
        if known and self.clock() - known[0] < POWER_SAVE_MAX_AGE:
            return known[1]
        try:
            value: PowerSave | None = await backend.power_save()
        except SlurmError as err:
            log.warning("cannot read Slurm's power-save settings: %s", err)
            value = None
        self._power_save[key] = (self.clock(), value)
        return value

    def _pending_partitions(self, key: tuple, now: float) -> frozenset[str]:
        """The union of the partitions whose pools have demand on, as they asked lately: a deleted
        pool (or one whose demand went off) stops costing a squeue after PENDING_FOR."""
        asked = self._pending.get(key, {})
        for pool in [p for p, (_, at) in asked.items() if now - at > PENDING_FOR]:
            del asked[pool]
        return frozenset(part for part, _ in asked.values() if part)

    async def _observe(self, key: tuple, namespace: str, access: SlurmAccess, oldest: float, wanted: Wanted):
        now = self.clock()
        cached = self._views.get(key)
        # Pools that changed Slurm while a poll ran, or want a newer look than their last, share
        # the next poll instead of polling one after another.
        if cached and wanted.shown_by(cached[0], oldest) and (not cached[1].available or (
                cached[1].has_pending(wanted.pending))):
            backend, view = self._backends.get(key), cached[1]
            if wanted.topology and view.available and not view.topology and backend is not None:
                view = replace(view, topology=await self._groups(key, backend))  # another pool polled without it
                self._views[key] = (cached[0], view)
            return backend, view
        failing = self._failing.get(key)
        if failing and now < failing[1]:
            return self._backends.get(key), failing[2]
        began = self.clock()
        try:
            backend = await self.backend(namespace, access)
        except Exception as err:  # noqa: BLE001 - a missing Secret is reported, not raised
            backend, view = None, SlurmView(available=False, error=f"cannot reach Slurm: {err}")
        else:
            view = await observe_slurm(backend, self._pending_partitions(key, now))
            if wanted.topology and view.available:
                view = replace(view, topology=await self._groups(key, backend))
        if view.available:
            self._failing.pop(key, None)
        else:
            self._ssh_read.pop(key, None)  # a refused key or host key: read the Secret again next time
            failures = (failing[0] if failing else 0) + 1
            delay = self.backoff.delay(failures)
            view = replace(view, error=f"{view.error} (failed {failures} time(s); next try in {delay:.2g}s)")
            self._failing[key] = (failures, self.clock() + delay, view)
        view = replace(view, polled_at=began)
        self._views[key] = (began, view)
        return backend, view

    async def _groups(self, key: tuple, backend: SlurmBackend) -> tuple:
        known = self._topology.get(key)
        if known and self.clock() - known[0] < TOPOLOGY_MAX_AGE:
            return known[1]
        try:
            groups = tuple(await backend.topology())
        except SlurmError as err:  # keep what we knew; without it, blocks fall back to labels
            log.warning("cannot read Slurm's topology: %s", err)
            return known[1] if known else ()
        self._topology[key] = (self.clock(), groups)
        return groups

    async def close(self) -> None:
        for backend in [*self._backends.values(), *(b for _, b in self._retired)]:
            await backend.close()
        self._backends.clear()
        self._retired.clear()
