"""Immutable views of Slurm nodes and jobs, as the operator sees them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

BUSY_STATES = frozenset({"ALLOCATED", "MIXED"})
UNREACHABLE_STATES = frozenset({"DOWN", "UNKNOWN", "FUTURE"})

# One GRES/TRES entry naming GPUs: "gpu", "gpu:8", "gpu:h100", "gpu:h100:8", "gres:gpu:8",
# "gres/gpu:h100:4", "gres/gpu=8", each optionally followed by "(IDX:0-3)" or "(S:0-1)".
_GPU_ENTRY = re.compile(r"^(?:gres[:/])?gpu(?P<rest>(?:[:=][^:=(]*)*)(?:\(.*\))?$")


def gpu_count(gres: str) -> int:
    """Sum of the GPU counts in a GRES/TRES string such as "gpu:h100:8", "gres:gpu:8",
    "gres/gpu:h100:4", "gpu:2,nic:1" or "gpu:h100:8(S:0-1)". Non-GPU entries are ignored."""
    total = 0
    for entry in _split_gres(gres):
        m = _GPU_ENTRY.match(entry)
        if not m:
            continue
        rest = m.group("rest")
        if "=" in rest:  # TRES form: gres/gpu[:type]=N
            count = rest.rsplit("=", 1)[1]
        else:  # GRES form: gpu[:type][:N]; a missing count means one
            parts = rest.split(":")[1:]
            count = parts[-1] if parts and parts[-1].isdigit() else "1"
        total += int(count) if count.isdigit() else 0
    return total


def _split_gres(gres: str) -> list[str]:
    """Split on commas that are not inside parentheses ("gpu:h100:8(IDX:0,2-3)" has inner commas)."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in gres:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return [p for p in parts if p and p not in ("(null)", "N/A")]


# One GRES entry as slurmd reports it: name[:type][:count][(S:0-1)|(IDX:0-3)|(CNT:8)...], counts
# possibly with a K/M/G suffix ("gpu:h100:8(S:0-1)", "gpu:8(S:0)", "gpu:a100:2,gpu:h100:6", "nic:2").
_GRES_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9_]+)(?P<rest>(?::[^:(]*)*)(?P<affinity>\(.*\))?$")
_COUNT = re.compile(r"^(?P<n>\d+)(?P<unit>[KMGTP]?)$")
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def parse_gres(gres: str) -> dict[tuple[str, str | None], int]:
    """(name, type or None) -> count, summed over entries; socket/core affinity and IDX lists are
    dropped (slurmd adds them: a spec's "gpu:h100:8" is met by "gpu:h100:8(S:0-1)"). An entry
    without a count counts one, as Slurm reads it. Unreadable entries are skipped."""
    out: dict[tuple[str, str | None], int] = {}
    for entry in _split_gres(gres):
        m = _GRES_ENTRY.match(entry.replace(":(null)", ""))  # 22.05's GresUsed names no type so
        if not m:
            continue
        parts = m.group("rest").split(":")[1:]
        count = 1
        if parts and (c := _COUNT.match(parts[-1])):
            count = int(c.group("n")) * _UNITS[c.group("unit")]
            parts = parts[:-1]
        kind = parts[0] if parts and parts[0] else None
        key = (m.group("name"), kind)
        out[key] = out.get(key, 0) + count
    return out


def gres_shortfall(wanted: str, reported: str) -> str | None:
    """Why the reported GRES do not meet the wanted ones, or None. By meaning: each wanted typed
    entry (gpu:h100:8) needs that name and type with at least that count; an untyped one (gpu:8)
    needs that many of the name over all types. Affinity, order and other GRES do not matter."""
    have = parse_gres(reported)
    for (name, kind), count in parse_gres(wanted).items():
        if kind is None:
            got = sum(n for (nm, _), n in have.items() if nm == name)
        else:
            got = have.get((name, kind), 0)
        if got < count:
            label = f"{name}:{kind}" if kind else name
            return f"{label}:{got} reported, {count} wanted"
    return None


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, UNKNOWN, FUTURE, ...
    flags: frozenset[str]  # DRAIN, NOT_RESPONDING, COMPLETING, PLANNED, MAINTENANCE, ...
    reason: str | None  # Reason= without the trailing " [user@time]"
    gres: str
    gres_used: str
    features: tuple[str, ...]
    partitions: tuple[str, ...]
    slurmd_start: datetime | None = None  # SlurmdStartTime: when the slurmd Slurm heard from last started
    # The Reason's stamp `[user@time]`: who set or last extended the reason, and when. Slurm
    # appends its own reasons (" : Not responding", " : gres/gpu count ...") and restamps.
    reason_user: str | None = None
    reason_time: datetime | None = None
    # Weight= (slurm.conf): among nodes that fit a job Slurm picks the lowest first; a powered-down
    # one after every powered one (26.05's node_scheduler.c: boot required), then by weight too.
    weight: int | None = None

    @property
    def drain_set(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def busy(self) -> bool:
        return self.state in BUSY_STATES or "COMPLETING" in self.flags

    @property
    def responding(self) -> bool:
        return "NOT_RESPONDING" not in self.flags and self.state not in UNREACHABLE_STATES

    @property
    def drained(self) -> bool:
        # The caller must also check that no job lists the node (sinfo/scontrol can lag squeue).
        return self.drain_set and not self.busy

    @property
    def gpus(self) -> int:
        return gpu_count(self.gres)


@dataclass(frozen=True)
class TopologyGroup:
    """One switch of topology/tree (with its level, 0 = leaf) or one block of topology/block."""

    name: str
    level: int
    nodes: tuple[str, ...]
    kind: str = "switch"  # switch | block


@dataclass(frozen=True)
class DeclaredSignal:
    """A job's own `--signal=[B:]SIG[@SECONDS]` (sbatch): which signal, to the batch shell only (B:)
    or to every step, and how long before its end it wants it (Slurm's default 60 s)."""

    signal: str
    batch_only: bool
    seconds: int


@dataclass(frozen=True)
class SlurmJob:
    job_id: str  # as squeue prints it: "42", "42_3" (array task), "7_[0-3]" (pending array), "5+1" (het job part)
    name: str
    user: str
    state: str  # PENDING, RUNNING, COMPLETING, ...
    partition: str
    nodes: tuple[str, ...]
    gpus_per_node: int
    num_nodes: int
    start_time: datetime | None  # tz-aware; None for N/A, Unknown, NONE
    end_time: datetime | None
    reason: str
    # What the job asks of nodes: the nodes it names (-w: squeue %n, REST required_nodes), the
    # nodes its reason lists as unavailable ("ReqNodeNotAvail, UnavailableNodes:gpu[01-02]"), and
    # whether it takes whole nodes (--exclusive; None where this Slurm and path cannot tell).
    required_nodes: tuple[str, ...] = ()
    unavailable_nodes: tuple[str, ...] = ()
    exclusive: bool | None = None
    # Can Slurm requeue it (a batch job without --no-requeue)? slurmrestd says (`requeue`, `batch_flag`);
    # squeue -o cannot print it (only -O Requeue): None, not known (a requeue Slurm refuses then fails loudly).
    requeue: bool | None = None
    # Its own --signal, where Slurm shows it: only slurmrestd v0.0.44+ (`submit_line`), and only when
    # given on sbatch's command line (an #SBATCH line is in no output); None: not known.
    declared_signal: DeclaredSignal | None = None

    @property
    def gpus_wanted(self) -> int:
        return self.gpus_per_node * self.num_nodes


@dataclass(frozen=True)
class PowerSave:
    """Slurm's power saving as slurm.conf sets it (power_save.shtml): whether a job can make
    Slurm resume a powered-down node, which needs both programs and a SuspendTime; what it
    excludes; and how long a resumed node may take to register before Slurm marks it DOWN."""

    on: bool  # automatic power save: valid ResumeProgram and SuspendProgram, a SuspendTime not INFINITE
    why_off: str  # "" when on: what is missing, in slurm.conf's words
    resume_timeout: timedelta | None  # ResumeTimeout (Slurm's default: 60 s)
    suspend_exc_parts: tuple[str, ...] = ()
    suspend_exc_nodes: str = ""  # a hostlist expression, as slurm.conf has it
    keeps_settings: bool | None = None  # ReconfigFlags=KeepPowerSaveSettings (23.02+); None: not known


@dataclass(frozen=True)
class SlurmReservation:
    name: str
    nodes: tuple[str, ...]
    start: datetime | None
    end: datetime | None
    flags: frozenset[str]  # MAINT, IGNORE_JOBS, SPEC_NODES (Slurm adds it), ...
    state: str  # ACTIVE or INACTIVE
