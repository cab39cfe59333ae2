"""Pure parsers for Slurm 22.05 command output (no I/O, easy to test against captured text).

- `scontrol -o -d show node`: one line per node of `Key=Value` pairs separated by spaces. Most values
  have no spaces, but OS= does, and the free-text fields at the end (Reason=, then Comment=, Extra=)
  can contain anything printable, including "Key=" look-alikes.
- `squeue -h -a -o FORMAT` with FORMAT from `squeue_format(sep)`: fields joined by `sep`, each record
  terminated by `sep` and a newline. The job name (user-chosen, may even contain newlines) is the last
  field, and the caller picks an unguessable `sep` per call, so a job name cannot forge a record.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo

from .models import PowerSave, SlurmJob, SlurmNode, SlurmReservation, TopologyGroup, gpu_count
from .validate import expand, unavailable_nodes

# sinfo-style one-character state suffixes (scontrol spells these as +FLAG, but accept both).
STATE_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "!": "POWER_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}
# Compound sinfo spellings mapped onto scontrol's base+flags. DRAINING stays busy (fail closed).
STATE_ALIASES = {
    "DRAINED": ("IDLE", "DRAIN"),
    "DRAIN": ("IDLE", "DRAIN"),
    "DRAINING": ("MIXED", "DRAIN"),
    "ALLOC": ("ALLOCATED", None),
    "MIX": ("MIXED", None),
    "COMPLETING": ("IDLE", "COMPLETING"),
}
NO_TIME = frozenset({"", "N/A", "UNKNOWN", "NONE", "(NULL)", "INVALID", "0"})

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")
# Free text fields scontrol prints last, in this order (22.05: Reason, Comment, Extra).
_TAIL_START = re.compile(r"(?:^|(?<=\s))(?:Reason|Comment|Extra)=")
# What scontrol may print after Reason= (26.05's node_info.c, in order; 22.05 prints the first two).
_AFTER_REASON = ("Comment", "Extra", "InstanceId", "InstanceType", "ReservationName", "TLSCertTokenSet",
                 "TLSCertLastRenewal", "Topology", "Parameters")
# Reason=<text>[ [user@time]]: the stamp is only counted when the field ends right after it.
_REASON = re.compile(
    r"^Reason=(?P<text>.*?)(?: \[(?P<user>[^\s\[\]@]*)@(?P<when>[^\]\s]*)\])?(?="
    + "".join(f" {k}=|" for k in _AFTER_REASON) + "$)"
)

# %n: the nodes the job names (-w); %h: OverSubscribe, "NO" for a job that takes whole nodes
# before Slurm 26.05 (26.05 prints "NO" for every job of an OverSubscribe=NO partition and has
# no letter for its Exclusive). The job name stays last.
SQUEUE_FIELDS = ("%i", "%T", "%P", "%u", "%D", "%N", "%b", "%S", "%e", "%r", "%n", "%h", "%j")
# Records in the format before issue 39 (without %n and %h), as older captures have them.
_SQUEUE_FIELDS_BEFORE_39 = 11
DEFAULT_SEP = "|~slurmbridge~|"


def parse_state(raw: str) -> tuple[str, frozenset[str]]:
    """"MIXED+DRAIN" -> ("MIXED", {"DRAIN"}); "IDLE*" -> ("IDLE", {"NOT_RESPONDING"})."""
    text = raw.strip().upper()
    flags: set[str] = set()
    while text and text[-1] in STATE_SUFFIX_FLAGS:
        flags.add(STATE_SUFFIX_FLAGS[text[-1]])
        text = text[:-1]
    base, *rest = text.split("+") if text else ["UNKNOWN"]
    flags.update(f for f in rest if f)
    if base in STATE_ALIASES:
        base, extra = STATE_ALIASES[base]
        if extra:
            flags.add(extra)
    return base or "UNKNOWN", frozenset(flags)


def node_fields(line: str) -> dict[str, str]:
    """Split one `scontrol -o show node` line into its fields (Reason without its stamp)."""
    line = line.rstrip("\r\n")
    tail = _TAIL_START.search(line)
    head = line[: tail.start()] if tail else line
    fields: dict[str, str] = {}
    keys = list(_KEY.finditer(head))
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(head)
        fields[m.group(1)] = head[m.end() : end].strip()
    if tail:
        reason = _REASON.match(line[tail.start() :])
        if reason:
            fields["Reason"] = reason.group("text")
            if reason.group("when") is not None:
                fields["ReasonUser"] = reason.group("user")
                fields["ReasonTime"] = reason.group("when")
    return fields


def _list(value: str | None) -> tuple[str, ...]:
    if not value or value in ("(null)", "N/A"):
        return ()
    return tuple(v for v in value.split(",") if v)


def _text(value: str | None) -> str:
    return "" if value in (None, "(null)") else value


def parse_scontrol_nodes(text: str, tz: tzinfo = timezone.utc, cache: dict[str, SlurmNode] | None = None) -> dict[str, SlurmNode]:
    """Parse `scontrol -o -d show node` output. Lines that are not node records (for example
    "Node gpu09 not found", which scontrol prints on stdout) are skipped.

    `cache`: the lines of the previous output (by their text, parsed with the same `tz`), reused,
    then replaced by this output's. Between two polls most nodes print the same line, and parsing
    every line of 500 nodes (~100 ms) held the operator's event loop at every poll. SlurmNode is
    immutable, so views may share one."""
    nodes: dict[str, SlurmNode] = {}
    lines: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        node = cache.get(line) if cache is not None else None
        if node is None:
            node = _parse_node_line(line, tz)
            if node is None:
                continue
        nodes[node.name] = lines[line] = node
    if cache is not None:
        cache.clear()
        cache.update(lines)
    return nodes


def _parse_node_line(line: str, tz: tzinfo) -> SlurmNode | None:
    """One node record (None: a line without a node name)."""
    f = node_fields(line)
    name = f.get("NodeName", "")
    if not name:
        return None
    state, flags = parse_state(f.get("State", ""))
    return SlurmNode(
        name=name,
        state=state,
        flags=flags,
        reason=f.get("Reason") or None,
        gres=_text(f.get("Gres")),
        gres_used=_text(f.get("GresUsed")),
        features=_list(f.get("AvailableFeatures")),
        partitions=_list(f.get("Partitions")),
        slurmd_start=parse_time(f.get("SlurmdStartTime", ""), tz),
        reason_user=f.get("ReasonUser") or None,
        reason_time=parse_time(f.get("ReasonTime", ""), tz),
        weight=int(w) if (w := f.get("Weight", "")).isdigit() else None,
    )


def parse_time(text: str, tz: tzinfo = timezone.utc) -> datetime | None:
    """Slurm "standard" time (2026-11-29T15:47:39, the host's local time `tz`) -> aware UTC.
    "N/A", "Unknown", "NONE" and anything unparseable -> None (a poll must not die on a date)."""
    text = text.strip()
    if text.upper() in NO_TIME:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=tz)
    return value.astimezone(timezone.utc)


def squeue_format(sep: str = DEFAULT_SEP) -> str:
    return sep.join(SQUEUE_FIELDS) + sep


def parse_squeue(text: str, sep: str = DEFAULT_SEP, tz: tzinfo = timezone.utc) -> list[SlurmJob]:
    """Parse `squeue -h -a -o squeue_format(sep)` output. Raises ValueError on a malformed record.
    %h is read as Slurm before 26.05 prints it (`oversubscribe_tells` says which squeue does)."""
    if text.endswith("\n"):
        text = text[:-1]
    if not text.strip():
        return []
    if not text.endswith(sep):
        raise ValueError(f"squeue output does not end with the record separator: {text[-80:]!r}")
    jobs = []
    for record in text[: -len(sep)].split(sep + "\n"):
        parts = record.split(sep)
        if len(parts) == _SQUEUE_FIELDS_BEFORE_39:
            parts[-1:-1] = ["", ""]
        if len(parts) != len(SQUEUE_FIELDS):
            raise ValueError(
                f"squeue record has {len(parts)} fields, expected {len(SQUEUE_FIELDS)}: {record[:200]!r}"
            )
        job_id, state, part, user, num, nodes, tres, start, end, reason, required, oversubscribe, name = parts
        jobs.append(
            SlurmJob(
                job_id=job_id.strip(),
                name=name,
                user=user.strip(),
                state=state.strip().upper(),
                partition=part.strip(),
                nodes=expand(nodes),
                gpus_per_node=gpu_count(tres.strip()),
                num_nodes=int(num) if num.strip().isdigit() else 0,
                start_time=parse_time(start, tz),
                end_time=parse_time(end, tz),
                reason=reason.strip(),
                required_nodes=expand(required),
                unavailable_nodes=unavailable_nodes(reason),
                exclusive=_exclusive(oversubscribe),
            )
        )
    return jobs


def _exclusive(oversubscribe: str) -> bool | None:
    """squeue's %h before 26.05 (job_share_string): NO for a job that takes whole nodes; OK, YES,
    USER, MCS or TOPO otherwise; empty (an older capture): not known."""
    value = oversubscribe.strip().upper()
    return value == "NO" if value else None


def oversubscribe_tells(version: str) -> bool:
    """Does this squeue's %h say whether a job takes whole nodes? `squeue --version` ("slurm
    22.05.8"): yes before 26.05; 26.05 prints its OverSubscribe there (NO for every job of an
    OverSubscribe=NO partition) and its Exclusive in no -o letter. Unreadable: no."""
    m = re.search(r"(\d+)\.(\d+)", version)
    return m is not None and (int(m.group(1)), int(m.group(2))) < (26, 5)


def parse_topology(text: str) -> list[TopologyGroup]:
    """`scontrol show topology`: `SwitchName=s Level=0 LinkSpeed=1 Nodes=gpu[01-04] Switches=...`
    (topology/tree) or `BlockName=b1 BlockIndex=0 Nodes=gpu[01-04] BlockSize=4` (topology/block,
    Slurm 23.11+). Lines without nodes (an empty switch) are skipped."""
    groups = []
    for line in text.splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        nodes = fields.get("Nodes", "")
        if not nodes or nodes in ("(null)", "(NULL)"):
            continue
        if "BlockName" in fields:
            groups.append(TopologyGroup(fields["BlockName"], 0, tuple(expand(nodes)), "block"))
        elif "SwitchName" in fields:
            try:
                level = int(fields.get("Level", "0"))
            except ValueError:
                continue
            groups.append(TopologyGroup(fields["SwitchName"], level, tuple(expand(nodes)), "switch"))
    return groups


def parse_reservations(text: str, tz: tzinfo = timezone.utc) -> list[SlurmReservation]:
    """Parse `scontrol -o show reservation` (one line each; "No reservations in the system": none)."""
    out = []
    for line in text.splitlines():
        if not line.startswith("ReservationName="):
            continue
        f = node_fields(line)  # the same key=value split as a node line
        out.append(
            SlurmReservation(
                name=f.get("ReservationName", ""),
                nodes=expand(f.get("Nodes", "") if f.get("Nodes") not in (None, "(null)") else ""),
                start=parse_time(f.get("StartTime", ""), tz),
                end=parse_time(f.get("EndTime", ""), tz),
                flags=frozenset(x for x in f.get("Flags", "").split(",") if x),
                state=f.get("State", "").upper(),
            )
        )
    return out


def parse_duration(text: str) -> timedelta | None:
    """A Slurm time limit as scontrol prints it: [days-]hours:minutes:seconds, minutes:seconds,
    or minutes; None for UNLIMITED, INFINITE, NONE or anything else."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", (text or "").strip())
    if not m:
        return None
    days, b, c = (int(x) if x else None for x in m.group(1, 3, 4))
    a = int(m.group(2))
    if c is not None:
        h, mi, sec = a, b or 0, c  # seconds are printed only after minutes
    elif b is not None:
        h, mi, sec = (a, b, 0) if days is not None else (0, a, b)
    else:
        h, mi, sec = (a, 0, 0) if days is not None else (0, a, 0)
    return timedelta(days=days or 0, hours=h, minutes=mi, seconds=sec)


def parse_partition_max_times(text: str) -> dict[str, timedelta | None]:
    """Each partition's MaxTime from `scontrol -o show partition` (None: UNLIMITED)."""
    out: dict[str, timedelta | None] = {}
    for line in text.splitlines():
        if line.startswith("PartitionName="):
            f = node_fields(line)
            out[f.get("PartitionName", "")] = parse_duration(f.get("MaxTime", ""))
    return out


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config`: `Key = Value` lines (the value may hold spaces: "300 sec"). Lines
    that are not settings (the banner, blank lines, plugin sections' headers) are skipped; a
    repeated key keeps its first value (the main section comes first)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z][A-Za-z0-9_]*)\s+=\s?(.*)$", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = m.group(2).strip()
    return out


_UNSET = frozenset({"", "(NULL)", "N/A", "NONE"})


def _seconds(text: str) -> timedelta | None:
    """"300 sec" (scontrol) or "300" -> 300 s; NONE, INFINITE or anything else -> None."""
    m = re.fullmatch(r"(\d+)(?:\s*sec)?", text.strip())
    return timedelta(seconds=int(m.group(1))) if m else None


def power_save_from_config(conf: dict[str, str]) -> PowerSave:
    """slurm.conf's power saving, from its settings as `scontrol show config` names them, judged
    as slurmctld's power_save.c judges them: automatic power save is on only with a SuspendProgram
    and a ResumeProgram (absolute paths: slurmctld also checks them executable and not group- or
    world-writable, which only its host can tell) and a SuspendTime that is not INFINITE, and with
    SlurmctldParameters' power_save_interval and power_save_min_interval at most 60 while a rate
    is set. A partition's own SuspendTime can turn it on too; slurm.conf's is what is read here."""
    why: list[str] = []
    for key in ("SuspendProgram", "ResumeProgram"):
        program = conf.get(key, "")
        if program.upper() in _UNSET:
            why.append(f"{key} is not set")
        elif not program.startswith("/"):
            why.append(f"{key}={program} is not an absolute path")
    suspend_time = conf.get("SuspendTime", "").strip()
    if suspend_time.upper() in _UNSET | {"INFINITE", "-1"} or _seconds(suspend_time) is None:
        why.append(f"SuspendTime is {suspend_time or 'not set'} (INFINITE: no node is ever powered down, so none resumed)")
    rates = any(conf.get(k, "0").split(" ")[0] not in ("0", "") for k in ("SuspendRate", "ResumeRate"))
    for param in _list(conf.get("SlurmctldParameters")):
        key, _, value = param.partition("=")
        if key in ("power_save_interval", "power_save_min_interval") and value.isdigit() and int(value) > 60 and rates:
            why.append(f"SlurmctldParameters {param} is over 60 while SuspendRate or ResumeRate is set")
    flags = conf.get("ReconfigFlags")
    return PowerSave(
        on=not why,
        why_off="; ".join(why),
        resume_timeout=_seconds(conf.get("ResumeTimeout", "")),
        suspend_exc_parts=_list(conf.get("SuspendExcParts")),
        suspend_exc_nodes="" if conf.get("SuspendExcNodes", "").upper() in _UNSET else conf.get("SuspendExcNodes", ""),
        keeps_settings=None if flags is None else "KeepPowerSaveSettings".lower() in flags.lower(),
    )
