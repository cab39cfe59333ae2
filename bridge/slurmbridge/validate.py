"""Input validation and hostlist helpers. Everything that ends up on a Slurm command line passes
through here first, so a node, partition or job id can never smuggle shell syntax or options."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence

import hostlist

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# Every form squeue prints: "42", an array task "42_3", a pending array "7_[0-3]" (ranges, lists
# and a "%N" throttle inside the brackets), a part of a heterogeneous job "5+1".
JOB_ID_RE = re.compile(r"^[0-9]+(?:_[0-9]+|_\[[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*(?:%[0-9]+)?\]|\+[0-9]+)?$")
STATE_RE = re.compile(r"^[A-Za-z_]{1,32}$")
# A signal as scancel --signal and slurmrestd's `signal` take it: a name (USR1, SIGUSR1) or a number.
SIGNAL_RE = re.compile(r"^((SIG)?[A-Z][A-Z0-9+]{0,15}|[0-9]{1,2})$")
MAX_REASON = 200
# What may go into an HTTP header or onto a command line from a Secret: a Unix/Slurm user name,
# and a JWT (base64url parts joined by dots; some sites use opaque tokens of the same alphabet).
USER_NAME_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}[$]?$")
TOKEN_RE = re.compile(r"^[A-Za-z0-9._~+/=-]{1,8192}$")


def user_name(name: str) -> str:
    """A user name read from a Secret. The error never quotes it (it sits beside a token)."""
    if not isinstance(name, str) or not USER_NAME_RE.fullmatch(name):
        raise ValueError("not a Unix user name (lowercase letters, digits, '_', '.', '-'; at most 32 characters; "
                         "no spaces, CR/LF or other control characters)")
    return name


def token(value: str) -> str:
    """A bearer token about to become a header value: no CR/LF, spaces or other characters that
    could end the header or add one. The error never quotes it."""
    if not isinstance(value, str) or not TOKEN_RE.fullmatch(value):
        raise ValueError("not a token (letters, digits and - _ . ~ + / =; no spaces, CR/LF or other control characters)")
    return value


def node_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(
            f"invalid Slurm node name {name!r}: must match {NAME_RE.pattern} "
            "(letters, digits, '.', '_', '-'; at most 63 characters)"
        )
    return name


def node_names(names: Iterable[str]) -> list[str]:
    if isinstance(names, str):  # a bare string would be iterated character by character
        raise TypeError("node names must be a sequence of strings, not a string")
    return [node_name(n) for n in names]


def partition(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(f"invalid Slurm partition name {name!r}: must match {NAME_RE.pattern}")
    return name


def job_ids(ids: Iterable[str | int]) -> list[str]:
    if isinstance(ids, str):
        raise TypeError("job ids must be a sequence, not a string")
    out = []
    for job_id in ids:
        text = str(job_id) if isinstance(job_id, int) and not isinstance(job_id, bool) else job_id
        if not isinstance(text, str) or not JOB_ID_RE.fullmatch(text):
            raise ValueError(f"invalid Slurm job id {job_id!r}: must match {JOB_ID_RE.pattern}")
        out.append(text)
    return out


def het_leader(job_id: str) -> str:
    """The job a part of a heterogeneous job belongs to ("5+1" -> "5"): Slurm requeues only a
    whole heterogeneous job, through its leader."""
    return job_id.split("+", 1)[0]


def signal(name: str) -> str:
    """A signal name or number; nothing else reaches scancel or a URL."""
    if not isinstance(name, str) or not SIGNAL_RE.fullmatch(name):
        raise ValueError(f"invalid signal {str(name)[:20]!r}: a name such as USR1 or SIGUSR1, or a number")
    return name


def declared_signal(submit_line: str, command: str = "") -> tuple[str, bool, int] | None:
    """The `--signal=[B:]SIG[@SECONDS]` of an sbatch command line (a job's `submit_line`): (signal,
    batch only, seconds before its end), or None. Only the options before the script (`command`) are
    read: the script's own arguments are not sbatch's. R: (a reservation's end) is not a warning of
    a move: None. Anything unreadable is None, never a guess."""
    try:
        tokens = shlex.split(submit_line)
    except ValueError:
        return None
    found = None
    for i, token in enumerate(tokens[1:], start=1):
        if command and token == command:
            break
        if token.startswith("--signal="):
            found = token.split("=", 1)[1]
        elif token == "--signal" and i + 1 < len(tokens):
            found = tokens[i + 1]
    match = re.fullmatch(r"(?:([BR]+):)?([A-Z0-9+]{1,19})(?:@([0-9]{1,6}))?", found or "")
    if match is None or "R" in (match.group(1) or "") or not SIGNAL_RE.fullmatch(match.group(2)):
        return None
    return match.group(2), "B" in (match.group(1) or ""), int(match.group(3) or 60)


def job_states(states: Iterable[str]) -> list[str]:
    if isinstance(states, str):
        raise TypeError("job states must be a sequence, not a string")
    out = []
    for state in states:
        if not isinstance(state, str) or not STATE_RE.fullmatch(state):
            raise ValueError(f"invalid Slurm job state {state!r}: must match {STATE_RE.pattern}")
        out.append(state.upper())
    return out


def reason(text: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"drain reason must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("drain reason must not be empty (Slurm refuses DRAIN without a reason)")
    if len(text) > MAX_REASON:
        raise ValueError(f"drain reason is {len(text)} characters long; at most {MAX_REASON} allowed")
    if not text.isprintable():  # rejects newlines, tabs and other control characters
        bad = next(c for c in text if not c.isprintable())
        raise ValueError(f"drain reason contains a non-printable character {bad!r}: {text!r}")
    return text


_TRAILING_NUMBER = re.compile(r"^(.*\D)(\d+)$")


def compress(names: Sequence[str]) -> str:
    """"gpu01,gpu02,gpu03" -> "gpu[01-03]" (names must already be validated).

    Only trailing numbers are ranged: python-hostlist would turn a1b,a2b into "a[1-3]b", which
    Slurm 22.05 rejects ("Invalid hostlist"), so names without a trailing number stay literal and
    each group shares everything but its trailing number.
    """
    unique = list(dict.fromkeys(names))
    groups: dict[str, list[str]] = {}
    parts: list[str] = []
    for name in unique:
        m = _TRAILING_NUMBER.match(name)
        if m:
            groups.setdefault(m.group(1), []).append(name)
        else:
            parts.append(name)
    parts = [hostlist.collect_hostlist(g) for g in groups.values()] + parts
    expr = ",".join(parts)
    if sorted(expand(expr)) != sorted(unique):  # cheap guard: never act on the wrong nodes
        raise ValueError(f"hostlist {expr!r} does not expand back to {unique!r}")
    return expr


def expand(expr: str) -> tuple[str, ...]:
    """"gpu[01-03]" -> ("gpu01", "gpu02", "gpu03"); "", "(null)" and "N/A" -> ()."""
    expr = expr.strip()
    if not expr or expr in ("(null)", "N/A", "None"):
        return ()
    return tuple(hostlist.expand_hostlist(expr))


_UNAVAILABLE = re.compile(r"UnavailableNodes:(\S+)")


def unavailable_nodes(reason: str) -> tuple[str, ...]:
    """The nodes a pending job's reason lists as unavailable: "ReqNodeNotAvail,
    UnavailableNodes:gpu[01-02]" (node_scheduler.c; for a job that names nodes, only those of
    its nodes) -> ("gpu01", "gpu02"). An unreadable list reads as none."""
    m = _UNAVAILABLE.search(reason or "")
    if not m:
        return ()
    try:
        return expand(m.group(1))
    except hostlist.BadHostlist:
        return ()


# Reservations the operator creates, changes and deletes carry this prefix; the bridge refuses
# any other name, so a reservation someone else made is never touched.
RESERVATION_PREFIX = "slurmpool-"
_RESERVATION_RE = re.compile(r"^slurmpool-[a-z0-9]([a-z0-9.-]{0,118}[a-z0-9])?$")
RESERVATION_FLAGS = frozenset({"MAINT", "IGNORE_JOBS", "TIME_FLOAT", "OVERLAP"})


def reservation_name(name: str) -> str:
    if not isinstance(name, str) or not _RESERVATION_RE.fullmatch(name):
        raise ValueError(f"invalid reservation name {name!r}: only the operator's own ({_RESERVATION_RE.pattern})")
    return name


def reservation_flags(flags: Iterable[str]) -> list[str]:
    out = [f.upper() for f in flags]
    if bad := [f for f in out if f not in RESERVATION_FLAGS]:
        raise ValueError(f"reservation flags {bad} are not among {sorted(RESERVATION_FLAGS)}")
    return out
