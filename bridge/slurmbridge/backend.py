"""The Slurm interface (SlurmBackend: every call the operator makes) and its scontrol backend:
one command per call, validated and retried."""

from __future__ import annotations

import asyncio
import inspect
import logging
import secrets
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Protocol, runtime_checkable

from . import validate
from .backoff import Backoff
from .errors import SlurmError, SlurmUnavailable
from .models import PowerSave, SlurmJob, SlurmNode, SlurmReservation, TopologyGroup
from .parse import (
    oversubscribe_tells,
    parse_config,
    parse_partition_max_times,
    parse_reservations,
    parse_scontrol_nodes,
    parse_squeue,
    parse_topology,
    power_save_from_config,
    squeue_format,
)
from .runner import CommandRunner

log = logging.getLogger(__name__)

# Outcomes that mean the mutation already holds, so a retried or repeated call succeeds.
_RESUME_ALREADY = ("invalid node state specified",)  # RESUME on a node that is not drained/down (22.05)
# 26.05 says this for a node not drained too, but the words are not specific to it: the nodes are
# read, and the refusal forgiven only when none of them shows a drain or is down.
_RESUME_TRANSITION = ("invalid node state transition",)
# Requeue of a job that is already pending, or one that finished and was purged since it was seen.
_REQUEUE_ALREADY = ("job is pending execution", "invalid job id specified")
# A job Slurm may not requeue (sbatch --no-requeue; 26.05.3: "Requested operation is presently disabled
# for job 2", tests/fixtures/checkpoint) or not a batch job ("Only batch jobs are accepted or processed").
_REQUEUE_REFUSED = ("requested operation is presently disabled", "only batch jobs are accepted")
# Releasing (StartTime=now) a job that already started again, finished, or was purged.
_RELEASE_ALREADY = ("job is no longer pending execution", "job has already finished", "invalid job id specified")
# States a requeued job passes through before it is PENDING again.
_CANCEL_ALREADY = ("already completing or completed", "invalid job id specified")
_SETTLING = frozenset({"COMPLETING", "STAGE_OUT", "SIGNALING", "REQUEUED"})
_RESERVATION_GONE = ("requested reservation is invalid", "invalid reservation", "reservation not found")
# The poll while requeued jobs settle (both backends): 0.1 s, doubling, at most 2 s.
SETTLE_POLL = Backoff(0.1, 2.0)


class SlurmCommands(Protocol):
    """The calls that reach Slurm on a pool's pass, each timed and counted under its own name as
    slurmpool_slurm_command_*{command=...} (adapters/access.Instrumented; docs/metrics.md).

    A new call (a power state, a job signal) is a method here and in each backend: ScontrolBackend,
    RestBackend (rest.py), NoSlurm (controller/snapshots.py) and the tests' fakes (tests/slurmfake.py);
    its metric series and its timing follow from this list (slurm_commands). A backend that cannot
    make a call raises SlurmUnsupported."""

    async def nodes(self, names: Sequence[str] | None = None) -> dict[str, SlurmNode]: ...
    async def jobs(self, partition: str | None = None, states: Sequence[str] | None = None) -> list[SlurmJob]: ...
    async def drain(self, nodes: Sequence[str], reason: str) -> None: ...
    async def resume(self, nodes: Sequence[str]) -> None: ...
    async def requeue(self, job_ids: Sequence[str]) -> None: ...
    async def cancel(self, job_ids: Sequence[str]) -> None: ...
    async def ping(self) -> None: ...
    async def reservations(self) -> list[SlurmReservation]: ...
    async def partition_max_times(self) -> dict[str, timedelta | None]: ...
    async def create_reservation(self, name: str, nodes: Sequence[str], start: datetime, minutes: int, flags: Sequence[str]) -> None: ...
    async def delete_reservation(self, name: str) -> None: ...
    async def power_down(self, nodes: Sequence[str], again: bool = False) -> None: ...
    async def power_up(self, nodes: Sequence[str]) -> None: ...
    async def power_save(self) -> PowerSave: ...
    async def signal(self, job_ids: Sequence[str], signal: str, batch_only: bool) -> None: ...


@runtime_checkable
class SlurmBackend(SlurmCommands, Protocol):
    """Every call the operator makes on Slurm: the commands, and what a caller asks before it
    chooses its calls (capabilities), which are never looked up by name (no hasattr/getattr)."""

    @property
    def commands_run(self) -> int:
        """Commands (or HTTP requests) started so far, retries included."""

    @property
    def filters_jobs(self) -> bool:
        """Does jobs() filter at the source (squeue -p, -t)? False: every call answers every job
        (slurmrestd), so a caller wanting several filters asks once and filters itself."""

    async def can_reserve(self) -> bool:
        """Can it create and delete reservations (the planned handover)? Every backend lists them.
        Asked every pass: it must not cost a call to Slurm."""

    async def topology(self) -> list[TopologyGroup]:
        """Slurm's switches or blocks; read at most once a minute, and not timed (its series
        would be a new label value of slurmpool_slurm_command_*)."""

    async def close(self) -> None: ...


def slurm_commands() -> tuple[str, ...]:
    """SlurmCommands' calls, in their order: the one list of the metric's label values and of
    what Instrumented times."""
    return tuple(name for name, member in vars(SlurmCommands).items() if inspect.iscoroutinefunction(member))


class ScontrolBackend:
    """SlurmBackend over scontrol/squeue/scancel run by a CommandRunner (local or SSH).

    Every call is retried on SlurmUnavailable with exponential backoff (`backoff`, doubling, at
    most `max_backoff`, shortened by up to `jitter` of it; at most `retries` extra attempts);
    mutations are safe to retry because they are idempotent. Other SlurmErrors are raised at once.
    `commands_run` counts every command started, retries included.
    """

    def __init__(
        self,
        runner: CommandRunner,
        timeout: float = 20.0,
        retries: int = 2,
        backoff: float = 0.5,
        *,
        max_backoff: float = 5.0,
        jitter: float = 0.2,
        tz: tzinfo = timezone.utc,
        requeue_settle: float = 30.0,
    ) -> None:
        # 20 s: with slurmctld down, scontrol itself takes ~9 s to give up; let it say why.
        self.runner = runner
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.retry_backoff = Backoff(backoff, max_backoff, jitter)
        self.tz = tz  # zone of the times Slurm prints; runners pin TZ=UTC, so UTC by default
        self.requeue_settle = requeue_settle
        self.commands_run = 0
        self._node_lines: dict[str, SlurmNode] = {}  # the last full `show node`, parsed (parse.py)
        self._oversubscribe_tells: bool | None = None  # squeue's %h says --exclusive (parse.py); asked once

    filters_jobs = True  # squeue -p, -t

    async def can_reserve(self) -> bool:
        """scontrol lists, creates and deletes reservations in every Slurm version it talks to."""
        return True

    async def _run(self, argv: list[str]) -> str:
        for attempt in range(self.retries + 1):
            self.commands_run += 1
            try:
                return await self.runner.run(argv, self.timeout)
            except SlurmUnavailable as e:
                if attempt == self.retries:
                    raise
                delay = self.retry_backoff.delay(attempt + 1)
                log.warning("%s unavailable (attempt %d), retrying in %.2fs: %s", argv[0], attempt + 1, delay, e)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def nodes(self, names: Sequence[str] | None = None) -> dict[str, SlurmNode]:
        argv = ["scontrol", "-o", "-d", "show", "node"]
        if names is not None:
            checked = validate.node_names(names)
            if not checked:
                return {}
            argv.append(validate.compress(checked))
        try:
            out = await self._run(argv)
        except SlurmError as e:
            # Asking for names of which some do not exist: scontrol exits 1 but still prints the
            # others, with "Node X not found" on stdout. An unknown node is simply absent.
            if names is None or isinstance(e, SlurmUnavailable) or "not found" not in e.output:
                raise
            out = e.stdout
        return parse_scontrol_nodes(out, self.tz, self._node_lines if names is None else None)

    async def topology(self) -> list[TopologyGroup]:
        """Switches (topology/tree) or blocks (topology/block); empty without a topology plugin."""
        try:
            return parse_topology(await self._run(["scontrol", "show", "topology"]))
        except SlurmError as e:
            # topology/flat (or none): scontrol says there is no topology; that is no blocks.
            if isinstance(e, SlurmUnavailable) or "topology" not in e.output.lower():
                raise
            return []

    async def jobs(self, partition: str | None = None, states: Sequence[str] | None = None) -> list[SlurmJob]:
        # A fresh separator per call: job names are user-chosen (even newlines are allowed), so
        # only a separator nobody can predict keeps one job from forging another's record.
        sep = f"|{secrets.token_hex(6)}|"
        argv = ["squeue", "-h", "-a", "-o", squeue_format(sep)]
        if partition is not None:
            argv += ["-p", validate.partition(partition)]
        if states is not None:
            checked = validate.job_states(states)
            if not checked:
                return []
            argv += ["-t", ",".join(checked)]
        out = await self._run(argv)
        try:
            jobs = parse_squeue(out, sep, self.tz)
        except ValueError as e:
            raise SlurmError(f"cannot parse squeue output: {e}", argv=argv, stdout=out) from e
        if any(j.exclusive for j in jobs) and not await self._squeue_tells_exclusive():
            jobs = [replace(j, exclusive=None) for j in jobs]
        return jobs

    async def _squeue_tells_exclusive(self) -> bool:
        """Whether squeue's %h means --exclusive here (its version, asked the first time a job
        reads as exclusive); a squeue that does not say its version is taken as one that cannot tell."""
        if self._oversubscribe_tells is None:
            try:
                version = await self._run(["squeue", "--version"])
            except SlurmUnavailable:
                raise
            except SlurmError:
                version = ""
            self._oversubscribe_tells = oversubscribe_tells(version)
        return self._oversubscribe_tells

    async def drain(self, nodes: Sequence[str], reason: str) -> None:
        checked = validate.node_names(nodes)
        validate.reason(reason)
        if not checked:
            return
        # scontrol strips one leading and one trailing '"' from Reason; wrapping the reason in
        # quotes makes that strip exactly our quotes, so any reason (even one ending in '"')
        # reads back unchanged.
        await self._run(
            ["scontrol", "update", f"NodeName={validate.compress(checked)}", "State=DRAIN", f'Reason="{reason}"']
        )

    async def resume(self, nodes: Sequence[str]) -> None:
        checked = validate.node_names(nodes)
        if not checked:
            return
        try:
            await self._run(["scontrol", "update", f"NodeName={validate.compress(checked)}", "State=RESUME"])
        except SlurmError as e:
            # scontrol resumes every resumable node of the list and then complains about the rest
            # ("Invalid node state specified"): those were not drained or down, which is the goal.
            if isinstance(e, SlurmUnavailable):
                raise
            if _only(e, _RESUME_ALREADY):
                return
            if not _only(e, _RESUME_ALREADY + _RESUME_TRANSITION):
                raise
            after = await self.nodes(checked)
            if any(n.drain_set or n.state == "DOWN" for n in after.values()):
                raise

    async def reservations(self) -> list[SlurmReservation]:
        """Every reservation: the operator's (name prefix `slurmpool-`, the only ones it ever changes
        or deletes: validate.reservation_name) and everyone else's, which the planner keeps in Slurm."""
        return parse_reservations(await self._run(["scontrol", "-o", "show", "reservation"]), self.tz)

    async def partition_max_times(self) -> dict[str, timedelta | None]:
        """Each partition's MaxTime (None: UNLIMITED): the planned handover's default lead time."""
        return parse_partition_max_times(await self._run(["scontrol", "-o", "show", "partition"]))

    async def create_reservation(self, name: str, nodes: Sequence[str], start: datetime, minutes: int, flags: Sequence[str]) -> None:
        """Create an operator reservation (root's, on exactly these nodes) from `start` for `minutes`."""
        checked = validate.node_names(nodes)
        if not checked:
            raise ValueError("a reservation needs nodes")
        when = start.astimezone(self.tz).strftime("%Y-%m-%dT%H:%M:%S")
        await self._run([
            "scontrol", "create", "reservation", f"ReservationName={validate.reservation_name(name)}", f"StartTime={when}",
            f"Duration={max(1, int(minutes))}", f"Nodes={validate.compress(checked)}", "Users=root",
            f"Flags={','.join(validate.reservation_flags(flags))}",
        ])

    async def delete_reservation(self, name: str) -> None:
        """Delete an operator reservation; one already gone is done."""
        try:
            await self._run(["scontrol", "delete", f"ReservationName={validate.reservation_name(name)}"])
        except SlurmError as e:
            if isinstance(e, SlurmUnavailable) or not any(w in e.output.lower() for w in _RESERVATION_GONE):
                raise

    async def power_down(self, nodes: Sequence[str], again: bool = False) -> None:
        """Power the nodes down in Slurm (`State=POWER_DOWN`; 22.05 has no `scontrol power`), once:
        see power_requests for what is sent to which node (`again`: a power-down Slurm left queued)."""
        await self._power(nodes, down=True, again=again)

    async def power_up(self, nodes: Sequence[str]) -> None:
        """Ask Slurm to power the nodes up (`State=POWER_UP`), once: see power_requests."""
        await self._power(nodes, down=False)

    async def _power(self, nodes: Sequence[str], down: bool, again: bool = False) -> None:
        checked = validate.node_names(nodes)
        if not checked:
            return
        current = await self.nodes(checked)
        requests = power_requests([(name, current.get(name)) for name in checked], down, again)
        for state, names in requests.items():
            if state != REFUSED:
                await self._run(["scontrol", "update", f"NodeName={validate.compress(names)}", f"State={state}"])
        refuse_power_down(requests)

    async def power_save(self) -> PowerSave:
        """slurm.conf's power saving as slurmctld has it (`scontrol show config`)."""
        return power_save_from_config(parse_config(await self._run(["scontrol", "show", "config"])))

    async def signal(self, job_ids: Sequence[str], signal: str, batch_only: bool) -> None:
        """Send the jobs a signal, to the batch shell only (`scancel --batch`) or to every step and
        the batch shell (`--full`); a job already finished or purged is done (as cancel)."""
        ids = validate.job_ids(job_ids)
        if not ids:
            return
        whom = "--batch" if batch_only else "--full"
        try:
            await self._run(["scancel", f"--signal={validate.signal(signal)}", whom, *ids])
        except SlurmError as e:
            if isinstance(e, SlurmUnavailable) or not _only(e, _CANCEL_ALREADY):
                raise

    async def requeue(self, job_ids: Sequence[str]) -> None:
        """Requeue jobs and let them start again at once. A requeued job sits COMPLETING, then
        PENDING with BeginTime = now+120 s; `StartTime=now` only sticks once it is PENDING, so
        wait (bounded by `requeue_settle`) for that before clearing it.

        Caution: Slurm also requeues a batch job that has already finished (it runs again), so
        only requeue jobs just seen RUNNING."""
        ids = list(dict.fromkeys(validate.het_leader(i) for i in validate.job_ids(job_ids)))
        if not ids:
            return
        joined = ",".join(ids)
        refused: SlurmError | None = None
        try:
            await self._run(["scontrol", "requeue", joined])
        except SlurmError as e:
            if isinstance(e, SlurmUnavailable) or not _only(e, _REQUEUE_ALREADY + _REQUEUE_REFUSED):
                raise
            # A job Slurm may not requeue (--no-requeue, not a batch job) must not keep the others of
            # the batch waiting out their begin time: they are released, then the refusal is raised.
            refused = e if not _only(e, _REQUEUE_ALREADY) else None
        parts = await self._wait_pending(ids)
        try:
            await self._run(["scontrol", "update", f"JobId={','.join(parts)}", "StartTime=now"])
        except SlurmError as e:
            if isinstance(e, SlurmUnavailable) or not _only(e, _RELEASE_ALREADY):
                raise
        if refused is not None:
            raise refused

    async def _wait_pending(self, ids: list[str]) -> list[str]:
        """Wait until the requeued jobs have left their settling states; return what to release:
        every part squeue prints for them (a heterogeneous job "5" is "5+0" and "5+1", and on
        26.05 releasing the leader leaves the other parts waiting out their BeginTime)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.requeue_settle
        polls = SETTLE_POLL.delays()
        delay = next(polls)
        parts = list(ids)
        while True:
            try:
                out = await self._run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T"])
            except SlurmError as e:
                if isinstance(e, SlurmUnavailable):
                    raise
                return parts  # every job already purged: the release is refused as benign
            states = {k.strip(): v.strip() for k, v in (line.split("|", 1) for line in out.splitlines() if "|" in line)}
            mine = {k: v for k, v in states.items() if validate.het_leader(k) in ids}
            parts = sorted(mine, key=lambda k: (ids.index(validate.het_leader(k)), k)) or list(ids)
            if not any(v in _SETTLING for v in mine.values()):
                return parts
            if loop.time() + delay > deadline:
                log.warning("requeued jobs %s still settling after %.0fs", ",".join(ids), self.requeue_settle)
                return parts
            await asyncio.sleep(delay)
            delay = next(polls)

    async def cancel(self, job_ids: Sequence[str]) -> None:
        ids = validate.job_ids(job_ids)
        if not ids:
            return
        # A job already finished or purged is what we wanted; anything else is a failure.
        try:
            await self._run(["scancel", *ids])
        except SlurmError as e:
            if isinstance(e, SlurmUnavailable) or not _only(e, _CANCEL_ALREADY):
                raise

    async def ping(self) -> None:
        try:
            await self._run(["scontrol", "ping"])
        except SlurmUnavailable:
            raise
        except SlurmError as e:  # "Slurmctld(primary) at X is DOWN" (+ a banner) on stdout, exit 1
            first = e.stdout.strip().splitlines()[0] if e.stdout.strip() else str(e)
            raise SlurmUnavailable(f"slurmctld is not responding: {first}", argv=e.argv,
                                   returncode=e.returncode, stdout=e.stdout, stderr=e.stderr) from e

    async def close(self) -> None:
        close = getattr(self.runner, "close", None)  # a minimal runner may have nothing to close
        if close is not None:
            await close()


# power_requests' key for nodes it will not power down (powering up for a job).
REFUSED = "refused"


def power_requests(nodes: Sequence[tuple[str, SlurmNode | None]], down: bool, again: bool = False) -> dict[str, list[str]]:
    """Which power request each node needs ({state: [names]}), so that asking again is harmless.

    Slurm takes a repeated request as a new one (measured on 26.05): POWER_DOWN on a node already
    powered down powers it down again, through POWERING_DOWN, and drops its DRAIN; POWER_UP on a
    node already powering up leaves POWER_UP set after it registered. So a node already where it is
    asked to go, or on its way, gets nothing. Power-down: a node Slurm is powering up without a job
    (a request we made, or a declined give-back: drained, its job requeued) ignores POWER_DOWN until
    ResumeTimeout, so it gets POWER_DOWN_FORCE; one powering up for a job is REFUSED (drain it
    first: Slurm requeues the job). A node Slurm does not know is passed on, for Slurm to refuse.
    `again`: a power-down Slurm left queued (POWER_DOWN, neither powering nor powered down, no job)
    is asked again as POWER_DOWN_FORCE (moves.keep_parked: a node whose slurmd never registered)."""
    out: dict[str, list[str]] = {}
    for name, node in nodes:
        state = _power_request(node, down, again)
        if state:
            out.setdefault(state, []).append(name)
    return out


def _power_request(node: SlurmNode | None, down: bool, again: bool = False) -> str | None:
    if node is None:
        return "POWER_DOWN" if down else "POWER_UP"
    flags = node.flags
    if down and again and "POWER_DOWN" in flags and not flags & {"POWERING_DOWN", "POWERED_DOWN", "POWERING_UP"} and not node.busy:
        return "POWER_DOWN_FORCE"
    if down:
        if flags & {"POWER_DOWN", "POWERING_DOWN"} or ("POWERED_DOWN" in flags and not flags & {"POWER_UP", "POWERING_UP"}):
            return None
        if "POWERING_UP" in flags:
            return REFUSED if node.busy else "POWER_DOWN_FORCE"
        return "POWER_DOWN"
    if flags & {"POWER_UP", "POWERING_UP"} or not flags & {"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"}:
        return None
    return "POWER_UP"


def refuse_power_down(requests: dict[str, list[str]]) -> None:
    """Raise for the nodes power_requests refused, once the others were sent."""
    if requests.get(REFUSED):
        names = validate.compress(requests[REFUSED])
        raise SlurmError(f"{names}: powering up for a job; drain first (Slurm requeues the job), then power down",
                         argv=("power_down", names))


def _only(error: SlurmError, benign: tuple[str, ...]) -> bool:
    """True when every error line scontrol printed is one of the benign ones."""
    lines = [line.strip().lower() for line in error.output.splitlines() if line.strip()]
    return bool(lines) and all(any(b in line for b in benign) for line in lines)
