"""Who decides the split: precedence between manual changes, the schedule and demand. Pure.

1. The **base** is set by a person or by the schedule:
   - outside every schedule window: `spec.slurmNodes` (source Manual);
   - inside a window: the window's count (source Schedule), clamped to the pool's floors;
   - a **manual change** (spec.slurmNodes edited: kubectl scale, patch, apply) made while a
     window is open holds until the next schedule edge (a window opens or closes, or
     another one takes over): then the schedule rules again. A manual change outside
     windows simply is the base until the next window opens.
2. **Demand** (when `spec.demand` is set and enabled) adjusts the base within its bounds
   (core/demand/: its sources, then its decision); every new base resets it and restarts its
   cooldown, so a person's or a window's count holds at least one cooldown.
3. Per-pool counts go the same way: the spec's `inference.pools[].nodes`, replaced for
   the pools a window names (`schedule[].inference`) while its count is the base, then
   raised by demand's counts for pools whose pods wait (`status.target.inference`).
4. The result is `status.target`: the count, its source (Manual, Schedule, Demand), why,
   since when, who (the manager of spec.slurmNodes in managedFields), the open window and
   the next schedule edge. Each automatic change is also an Event.

A change is detected by comparing spec.slurmNodes with the value recorded in the previous
status (status.target.specSlurmNodes), so it survives operator restarts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from slurmpool.core import schedule as sched
from slurmpool.core.demand import Base, DemandOutcome, Signals, decide_demand
from slurmpool.core.events import Event, Reason
from slurmpool.core.models import DemandStatus, SlurmNodePoolSpec, TargetStatus
from slurmpool.core.placement import Side
from slurmpool.core.view import iso, parse_time



@dataclass
class Decision:
    status: TargetStatus
    events: list[Event] = field(default_factory=list)
    named: tuple[str, ...] = ()  # nodes pending jobs name, this pass's (demand): they come to Slurm first

    @property
    def slurm_nodes(self) -> int:
        return self.status.slurm_nodes

    @property
    def pool_counts(self) -> dict[str, int]:
        return self.status.inference


def author(managed_fields: list[dict[str, Any]] | None) -> str | None:
    """The field manager that last wrote spec.slurmNodes (kubectl, kubectl-client-side-apply,
    a controller's name...), with its operation; None when unknown."""
    best: tuple[str, str] | None = None
    for entry in managed_fields or []:
        fields = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if "f:slurmNodes" not in fields:
            continue
        when = entry.get("time") or ""
        if best is None or when >= best[0]:
            manager = entry.get("manager") or "unknown"
            sub = entry.get("subresource")
            op = (entry.get("operation") or "").lower()
            best = (when, f"{manager} ({op}{' ' + sub if sub else ''})" if op else manager)
    return best[1] if best else None


def _clamp_to_floors(spec: SlurmNodePoolSpec, total: int, count: int) -> tuple[int, str]:
    lo, hi = spec.min_slurm_nodes, total - spec.min_inference_nodes
    if lo > hi:
        return count, ""  # the planner reports floors that cannot hold
    if count < lo:
        return lo, f" (raised to minSlurmNodes {lo})"
    if count > hi:
        return hi, f" (lowered to keep minInferenceNodes {spec.min_inference_nodes})"
    return count, ""


def decide_target(
    spec: SlurmNodePoolSpec,
    total: int,
    now: datetime,
    previous: TargetStatus | None,
    by: str | None = None,
    signals: Signals | None = None,
) -> Decision:
    events: list[Event] = []
    state = sched.evaluate(spec.schedule, total, now) if spec.schedule else sched.ScheduleState(None, None)
    active = state.active
    next_change = iso(state.next_change) if state.next_change else None

    # -- manual changes
    seen = previous.spec_slurm_nodes if previous else None
    manual_since = parse_time(previous.manual_since) if previous else None
    manual_until = parse_time(previous.manual_until) if previous else None
    changed = seen is not None and seen != spec.slurm_nodes
    if changed or manual_since is None:
        manual_since = now
    if changed:
        manual_until = state.next_change if active else None
        where = f" during window {active.name}; holds until {next_change or 'the window closes'}" if active else ""
        events.append(Event.normal(Reason.ManualChange, f"spec.slurmNodes {seen} -> {spec.slurm_nodes} by {by or 'unknown'}{where}"))
    if manual_until is not None and now >= manual_until:
        manual_until = None
        if active:
            events.append(Event.normal(Reason.ManualHoldEnded, f"the manual count held until the schedule edge; window {active.name} applies"))

    # -- the base: a held manual change, else the open window, else spec.slurmNodes
    pool_counts = {p.name: p.nodes for p in spec.inference.pools if p.nodes is not None}
    source: Literal["Manual", "Schedule"]
    if active and manual_until is None:
        count, note = _clamp_to_floors(spec, total, active.slurm_nodes)
        w = spec.schedule[active.index]
        pool_counts.update(w.inference or {})
        base = count
        source, since, who = "Schedule", active.start, None
        base_key = f"schedule:{state.key}"
        reason = f"window {w.name} ({f'{w.cron!r} {w.time_zone}' if w.cron else f'once at {w.at}'}, {w.duration}) open until {iso(active.end)}{note}"
    else:
        base = spec.slurm_nodes
        source, since, who = "Manual", manual_since, by
        # A change of the spec's pool counts is a new base too: demand starts over from it.
        base_key = f"manual:{iso(manual_since)}:{spec.slurm_nodes}" + "".join(f":{k}={v}" for k, v in sorted(pool_counts.items()))
        if active and manual_until is not None:  # a window is open: only a held manual change is the base
            reason = f"spec.slurmNodes set by {by or 'unknown'} during window {active.name}; holds until {iso(manual_until)}"
        elif spec.schedule:
            reason = f"spec.slurmNodes (set by {by or 'unknown'}): no schedule window open"
        else:
            reason = f"spec.slurmNodes (set by {by or 'unknown'})"

    if previous is not None and active and (previous.window != active.name or _window_key(previous) != base_key) and source == "Schedule":
        events.append(Event.normal(Reason.ScheduleWindowStarted, f"window {active.name} opened: {base} Slurm node(s) until {iso(active.end)}"))
    if previous is not None and previous.window and (not active or previous.window != active.name):
        if not active:
            events.append(Event.normal(Reason.ScheduleWindowEnded, f"window {previous.window} closed: spec.slurmNodes {spec.slurm_nodes} applies"))

    target = TargetStatus(
        slurm_nodes=base,
        source=source,
        reason=reason,
        since=iso(since),
        by=who,
        window=active.name if active else None,
        next_change=next_change,
        spec_slurm_nodes=spec.slurm_nodes,
        manual_since=iso(manual_since),
        manual_until=iso(manual_until) if manual_until else None,
        base_key=base_key,
        inference=pool_counts,
    )

    # -- demand on top (without fresh signals, e.g. Slurm unreachable, its count holds)
    named = signals.named(Side.SLURM) if signals is not None and spec.demand is not None and spec.demand.enabled else ()
    if spec.demand is not None and spec.demand.enabled:
        prev_demand = previous.demand if previous else None
        if signals is not None:
            outcome = decide_demand(spec, total, Base(base, base_key, since if source == "Schedule" else manual_since), prev_demand, signals, now)
        elif prev_demand is not None and prev_demand.base_key == base_key and prev_demand.slurm_nodes is not None:
            held = prev_demand.model_copy(update={"message": "no fresh signals (Slurm unreachable): demand's count holds"})
            outcome = DemandOutcome(prev_demand.slurm_nodes, held)
        else:
            outcome = DemandOutcome(base, DemandStatus(slurm_nodes=base, base=base, base_key=base_key, last_change=iso(now), message="no signals yet"))
        target.demand = outcome.status
        for name, n in outcome.status.pools.items():
            target.inference[name] = max(n, target.inference.get(name, 0))
        if outcome.changed:
            events.append(Event.normal(Reason.DemandChanged, outcome.message))
        reported = set(prev_demand.unstartable_jobs) if prev_demand is not None else set()
        if fresh := [why for why in outcome.status.unstartable_jobs if why not in reported]:
            events.append(Event.warning(Reason.UnstartableJobs, "no split of this pool could start: " + "; ".join(fresh) + " (not counted as demand)"))
        if outcome.slurm_nodes != base:
            target.slurm_nodes = outcome.slurm_nodes
            target.source = "Demand"
            target.since = outcome.status.last_change or iso(now)
            target.by = None
            target.reason = f"demand on top of {source.lower()} count {base}: {outcome.status.message}"
    return Decision(target, events, named)


def _window_key(previous: TargetStatus) -> str:
    return previous.base_key or ""


def with_given_back(decision: Decision, given_back: int, total: int) -> Decision:
    """Nodes Slurm asked back from power-save parking (parking.py) count on the Slurm side while
    Slurm's jobs hold them: the planner must not send other Slurm nodes to inference for them.
    Once their jobs are done they are not counted, and are surplus the planner may take back."""
    if not given_back:
        return decision
    status = decision.status
    count = min(total, status.slurm_nodes + given_back)
    update = {"slurm_nodes": count, "reason": f"{status.reason}; +{count - status.slurm_nodes} given back to Slurm's jobs (power saving)"}
    return replace(decision, status=status.model_copy(update=update))
