"""The plugin's text output: the status and plan tables in the terminal's width, Slurm's states
as sinfo abbreviates them. Pure: views in, text out."""

from __future__ import annotations

import shutil
from typing import Any

from slurmpool.core.placement import pool_of

OUTPUTS = ("table", "wide", "json", "yaml")


def width() -> int:
    return max(80, min(120, shutil.get_terminal_size((100, 24)).columns))


def clip(items: list[str], room: int) -> str:
    """'a,b,c' cut to about `room` characters, with '+N' for the items that do not fit."""
    if not items:
        return "-"
    shown: list[str] = []
    for i, item in enumerate(items):
        rest = len(items) - i - 1
        if len(",".join(shown + [item])) + (len(f" +{rest}") if rest else 0) > room:
            break
        shown.append(item)
    if not shown:
        return (items[0][: max(1, room - 4)] + (f" +{len(items) - 1}" if len(items) > 1 else ""))[:room]
    left = len(items) - len(shown)
    return ",".join(shown) + (f" +{left}" if left else "")


def table(headers: list[str], rows: list[list[str]], total: int) -> str:
    """Columns sized to their content; the last column takes what is left of `total`."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [headers, *rows]:
        head = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1]))
        lines.append((head + "  " + row[-1])[:total].rstrip())
    return "\n".join(lines)


def render_status(view: dict[str, Any], total: int = 100, wide: bool = False) -> str:
    """The status table in `total` columns; `wide`: no width limit, every pod or job, and each
    node's SINCE (when its phase began) and MOVE (the move's id)."""
    if wide:
        total = 10**6
    t = view.get("target") or {}
    lines = [
        f"SlurmNodePool {view['namespace']}/{view['pool']}: spec.slurmNodes {view['spec']['slurmNodes']}"
        + (", PAUSED" if view["paused"] else "")
    ]
    if t:
        lines.append(f"Target: {t.get('slurmNodes')} Slurm node(s), source {t.get('source')} since {t.get('since')}"
                     + (f" by {t['by']}" if t.get("by") else ""))
        if t.get("reason"):
            lines.append(f"  why: {t['reason']}"[:total])
        if t.get("nextChange"):
            lines.append(f"  next schedule edge: {t['nextChange']}")
        d = t.get("demand")
        if d:
            lines.append(f"  demand: {d.get('pendingJobs', 0)} pending job(s) ({d.get('pendingJobGpus', 0)} GPUs), "
                         f"{d.get('pendingPods', 0)} pending pod(s) ({d.get('pendingPodGpus', 0)} GPUs)"[:total])
            for why in d.get("unstartableJobs") or []:
                lines.append(f"  not demand, no split starts it: {why}"[:total])
    s, i = view.get("slurm") or {}, view.get("inference") or {}
    lines.append(f"Slurm {s.get('ready', 0)}/{s.get('desired', 0)} ready, inference {i.get('ready', 0)}/{i.get('desired', 0)} ready, "
                 f"{view.get('moving', 0)} moving" + (f", unhealthy: Slurm {s.get('unhealthy', 0)}, inference {i.get('unhealthy', 0)}"
                                                      if view.get("unhealthy") else ""))
    counts = t.get("inference") or {}
    pools = [f"{p['name']} {p.get('ready', 0)}/{p.get('desired', 0)}" + (f" (count {counts[p['name']]})" if p["name"] in counts else "")
             for p in i.get("pools") or []]
    if pools:
        lines.append(("Inference pools (ready/desired): " + ", ".join(pools))[:total])
    shown = [f"{k}={v}" for k, v in view.get("conditions", {}).items() if k == "Ready" or v.startswith("True")]
    if shown:
        lines.append(("Conditions: " + ", ".join(shown))[:total])
    rows = []
    for r in view["nodes"]:
        phase = r["phase"] if not r["to"] else f"{r['phase']}>{_short(r['to'])}"
        marks = "".join(m for m, on in (("P", r["pin"]), ("M", r["moveNow"]), ("C", r["cordoned"]), ("U", r.get("unhealthy"))) if on)
        extra = [r["since"] or "-", r["moveId"] or "-"] if wide else []
        rows.append([r["node"], _short(r["side"]), phase, r["age"], sinfo_state(r["slurmState"]), marks or "-", *extra, ""])
    headers = ["NODE", "SIDE", "PHASE", "AGE", "SLURM", "FLAGS", *(["SINCE", "MOVE"] if wide else []), "WORKLOAD"]
    fixed = table(headers, rows, total)
    # Fill the last column (jobs or pods) with what room is left on each line.
    header_line = fixed.splitlines()[0]
    start = header_line.index("WORKLOAD")
    room = max(12, total - start)
    out = [header_line]
    for line, r in zip(fixed.splitlines()[1:], view["nodes"]):
        work = ("jobs " + clip(r["jobs"], room - 5)) if r["jobs"] else ("pods " + clip(r["pods"], room - 5)) if r["pods"] else "-"
        out.append((line.ljust(start) + work)[:total])
    lines.append("")
    lines.extend(out)
    free = [f"  {r['node']}: " + (f"free at {r['freeAt']}" if r["freeAt"] and r["freeAt"] != view.get("now") else
                                   "free now" if r["freeAt"] else "a job has no time limit: drain.onTimeout decides")
            for r in view["nodes"] if "freeAt" in r]
    if free:
        lines.append("Draining out of Slurm, free by their jobs' time limits:")
        lines.extend(free)
    sick = [f"  {r['node']}: {r['unhealthy']}" for r in view["nodes"] if r.get("unhealthy")]
    if sick:
        lines.append("Unhealthy (never moved, never counted as ready):")
        lines.extend(sick)
    lines.append("FLAGS: P pinned, M move-now asked, C cordoned, U unhealthy. AGE: time in the phase.")
    return "\n".join(line[:total] for line in lines)


_SINFO = {"IDLE": "idle", "ALLOCATED": "alloc", "MIXED": "mix", "DOWN": "down", "UNKNOWN": "unk", "FUTURE": "futr"}


def sinfo_state(state: str | None) -> str:
    """Slurm's state as sinfo abbreviates it: idle, mix, alloc, drain, drng (draining); '*' not responding,
    and power saving's '~' powered down, '%' powering down, '#' powering up (sinfo shows one suffix)."""
    if not state:
        return "-"
    base, *flags = state.split("+")
    text = _SINFO.get(base, base.lower()[:5])
    if "DRAIN" in flags:
        text = "drng" if base in ("ALLOCATED", "MIXED") or "COMPLETING" in flags else "drain"
    elif "COMPLETING" in flags:
        text = "comp"
    power = "#" if "POWERING_UP" in flags else "%" if "POWERING_DOWN" in flags else "~" if "POWERED_DOWN" in flags else ""
    return text + (power or ("*" if "NOT_RESPONDING" in flags else ""))


def _short(placement: str) -> str:
    pool = pool_of(placement) if placement else None
    return f"inf:{pool}" if pool is not None else placement or "-"


def render_plan(view: dict[str, Any], total: int = 100) -> str:
    before, desired = view["before"], view["desired"]
    count = f"at {view['at']}: {view['slurmNodes']}" if view.get("at") else f"at {view['slurmNodes']}"
    lines = [f"Plan for {view['namespace']}/{view['pool']} {count} Slurm node(s) (dry run: nothing changes)"]
    lines.append("  now:     " + ", ".join(f"{k} {v}" for k, v in before.items()))
    lines.append("  desired: " + ", ".join(f"{k} {v}" for k, v in desired.items()))
    for p in view["problems"]:
        lines.append(f"  cannot plan: {p}"[:total])
    if view.get("unhealthy"):
        lines.append(("  never moved (unhealthy, see `kubectl slurmpool status`): " + ", ".join(view["unhealthy"]))[:total])
    if view["paused"]:
        lines.append("  the pool is paused: these moves start on `kubectl slurmpool resume`")
    for m in view["inFlight"]:
        lines.append(f"  in flight: {m['node']} {m['from']} -> {m['to']} {m['cause']}"[:total])
    lines += [line[:total] for line in handover_lines(view.get("handover"), view.get("now"))]
    if not view["moves"]:
        lines.append("No move needed." if not view["problems"] else "Nothing would move.")
        return "\n".join(lines)
    lines.append(f"{len(view['moves'])} move(s) in {view['waves']} wave(s) of at most maxConcurrentMoves:")
    rows = [[str(m["wave"]), m["node"], _short(m["from"]), _short(m["to"]), m["cause"], _free(m, view.get("now")), ""] for m in view["moves"]]
    fixed = table(["WAVE", "NODE", "FROM", "TO", "CAUSE", "FREE", "DISTURBS"], rows, total)
    header = fixed.splitlines()[0]
    start = header.index("DISTURBS")
    room = max(12, total - start)
    lines.append(header)
    for line, m in zip(fixed.splitlines()[1:], view["moves"]):
        if m["jobs"]:
            work = "jobs " + clip(m["jobs"], room - 5)
        elif m["pods"]:
            work = "pods " + clip(m["pods"], room - 5)
        else:
            work = "nothing (idle)"
        lines.append((line.ljust(start) + work)[:total])
    if view["waves"] > 1:
        lines.append("Waves after the first are a forecast: they depend on how Slurm looks then.")
    return "\n".join(line[:total] for line in lines)


def handover_lines(h: dict | None, now: str | None = None) -> list[str]:
    """The planned handover ahead of the next edge: its reservation (as in `scontrol show res`),
    nodes, and the nodes whose jobs will still run at the edge."""
    if not h:
        return []
    lines = [f"  planned handover ({h.get('state')}): reservation {h.get('reservation')} ({','.join(h.get('flags') or [])}) "
             f"from {h.get('start')} until {h.get('end') or '?'} on {', '.join(h.get('nodes') or [])}"]
    if h.get("forecast"):
        lines.append("    free by their jobs' time limits: " + ", ".join(
            f"{n} {'no limit' if t is None else 'now' if t == now else t}" for n, t in h["forecast"].items()))
    if h.get("late"):
        lines.append(f"    jobs on {', '.join(h['late'])} have no time limit or end after the edge: drain.onTimeout decides")
    for c in h.get("checkpoints") or []:  # drain.onTimeout: Checkpoint warns them grace before the edge
        sent = f", sent {c['signalled']}" if c.get("signalled") else ""
        lines.append(f"    job {c.get('job')} on {', '.join(c.get('nodes') or [])}: checkpoint at {c.get('at')} ({c.get('signal')}{sent})")
    if h.get("message"):
        lines.append(f"    {h['message']}")
    return lines


def _free(move: dict, now: str | None) -> str:
    """When the node is free by its jobs' time limits: now, a time, or `no limit`."""
    if "freeAt" not in move:
        return "-"
    if move["freeAt"] is None:
        return "no limit"
    return "now" if move["freeAt"] == now else move["freeAt"]


def _took(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


JOB_LETTERS = {"requeued": "r", "cancelled": "c", "signalled": "s", "drained": "d"}


def _jobs(move: dict) -> str:
    """A move's jobs as counts: `r2,d1` (requeued 2, drained 1); `+N` jobs its record could not name."""
    cells = [f"{JOB_LETTERS.get(g.get('how', ''), '?')}{g.get('count', 0)}" for g in move.get("jobs") or []]
    if move.get("jobsUnnamed"):
        cells.append(f"+{move['jobsUnnamed']}")
    return ",".join(cells) or "-"


def _job_ids(move: dict) -> str:
    """-o wide: the ids of each kind, `+N` for those the status does not list."""
    parts = []
    for g in move.get("jobs") or []:
        ids, count = g.get("ids") or [], g.get("count", 0)
        more = count - len(ids)
        parts.append(f"{g.get('how')} " + ",".join(ids) + (f"{' ' if ids else ''}+{more}" if more > 0 else ""))
    return "; ".join(parts) or "-"


def render_history(view: dict[str, Any], total: int = 100, wide: bool = False) -> str:
    """The moves that ended, newest first; in shadow mode, what the operator would do now.
    `wide`: no width limit, and the ids of each move's jobs."""
    if wide:
        total = 10**6
    lines = [f"SlurmNodePool {view['namespace']}/{view['pool']}" + (f" (mode {view['mode']})" if view["mode"] != "Active" else "")]
    rows = [[m.get("ended", "-"), m.get("node", "-"), f"{_short(m.get('from', '-'))} -> {_short(m.get('to', '-'))}",
             m.get("outcome", "-"), _took(m.get("seconds")), m.get("cause", "-"), m.get("moveId", "-"), _jobs(m), m.get("by") or "-",
             *([_job_ids(m)] if wide else [])]
            for m in view["moves"]]
    if rows:
        headers = ["ENDED", "NODE", "MOVE", "OUTCOME", "TOOK", "CAUSE", "MOVE ID", "JOBS", "ASKED BY", *(["JOB IDS"] if wide else [])]
        lines.append(table(headers, rows, total))
        if any(m.get("jobs") or m.get("jobsUnnamed") for m in view["moves"]):
            lines.append("JOBS of the drain: r requeued, c cancelled, s signalled to checkpoint, d drained (waited for); "
                         "-o wide: their ids."[:total])
    else:
        lines.append("No move has ended since the operator began recording them (status.recentMoves).")
    shadow = view.get("shadow")
    if shadow:
        lines.append(f"Shadow mode, nothing written; would now (same decision since {shadow.get('since')}):")
        lines += [f"  start {line}"[:total] for line in shadow.get("wouldStart") or []]
        lines += [f"  {line}"[:total] for line in shadow.get("wouldDo") or []]
        if not shadow.get("wouldStart") and not shadow.get("wouldDo"):
            lines.append("  nothing")
    return "\n".join(lines)
