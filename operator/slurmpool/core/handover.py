"""Planned handover ahead of a known edge (issue 24): which nodes a schedule edge will take
out of Slurm, when each will be free, and the Slurm reservation that keeps new jobs that would
outlast the edge off them. Pure: the caller gives the clock and the edge.

Wired into the pass: `decide` calls `reconcile` after the plan; apply.py creates and deletes the
reservation through the pool's Slurm access (scontrol over SSH or locally, or slurmrestd v0.0.43+,
i.e. Slurm 25.05+; an older slurmrestd cannot: the pool says so once and its edges drain as
before); access.py polls every reservation with the nodes (others' hold their nodes in Slurm:
reservations.py); `status.handover` and the plugin's `plan` show it.

- The leaving nodes are chosen by the same planner, wave after wave (waves.py, as the plugin's
  `plan` does), with the count the edge sets, so health, pins and topology rules hold.
- Drain forecast of a node (forecast.py): the latest end of its jobs by their time limits; None
  when a job has no end (no time limit), which is what `drain.onTimeout` is for. Idle: free now.
- The reservation: named `slurmpool-<namespace>.<pool>-<hash>` (`reservation_name`: the hash is
  of the namespace, name and uid of the pool, so no two pools, on one install or two sharing a
  Slurm, get one name, and a crash between creating it and recording it leaves nothing unfound;
  a namespace has no dot, so the readable part is unambiguous too), on the leaving nodes,
  starting at the edge, flags MAINT,IGNORE_JOBS: MAINT keeps Slurm from counting the nodes'
  reserved time as idle and shows them `maint` in sinfo; IGNORE_JOBS lets it be created on nodes
  still running jobs (the notes in shared/reference measured both on 22.05). The owner is in the
  name's hash, which every access reads back: scontrol has a reservation `Comment=`, but
  slurmrestd (v0.0.43-45) takes `comment` on create and never returns it in GET /reservations/.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

from slurmbridge.models import SlurmReservation

from slurmpool.core import schedule as sched
from slurmpool.core.events import Event, Reason
from slurmpool.core.forecast import free_at
from slurmpool.core.health import HEALTHY
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.models import HandoverStatus, SlurmNodePoolSpec, seconds
from slurmpool.core.planner import Goal
from slurmpool.core.placement import SLURM
from slurmpool.core.view import OUR_RESERVATIONS, SlurmView, iso
from slurmpool.core.waves import PoolView as PoolView  # decide makes the view it plans the handover on
from slurmpool.core.waves import starts_done, waves

RESERVATION_PREFIX = OUR_RESERVATIONS
RESERVATION_FLAGS = ("MAINT", "IGNORE_JOBS")
# A reservation whose edge opens no window (a window closing lowers the count) ends this long after
# the edge at the latest; it is deleted as soon as the moves are done anyway.
HOLD_PAST_EDGE = timedelta(hours=1)
HandoverState = Literal["Planned", "Reserved", "Handing", "Unavailable"]  # HandoverStatus.state's values
DEFAULT_LEAD = timedelta(hours=4)  # without spec.handover.leadTime or a partition MaxTime
UNAVAILABLE = ("slurmrestd access cannot create reservations (its API is older than v0.0.43, Slurm 25.05); "
               "the edge drains as before")


_READABLE = 100  # of the name's at most 128 characters (slurmbridge.validate): the prefix, this, '-' and the hash


def reservation_name(pool: PoolRef) -> str:
    """`slurmpool-<namespace>.<pool>-<10 hex of sha256(namespace/name/uid)>`, at most 121 characters
    (a long pool name is cut; the hash still tells it apart)."""
    digest = hashlib.sha256(f"{pool.namespace}/{pool.name}/{pool.uid}".encode()).hexdigest()[:10]
    readable = f"{pool.namespace}.{pool.name}"[:_READABLE].rstrip(".-")
    return f"{RESERVATION_PREFIX}{readable}-{digest}"


def legacy_name(pool: PoolRef) -> str:
    """The name versions before issue 37 gave the reservation (pool a-x of team and x of team-a
    shared it): found and replaced under the new one, never made again."""
    return f"{RESERVATION_PREFIX}{pool.namespace}-{pool.name}"


def is_ours(name: str, pool: PoolRef) -> bool:
    """Only the pool's own reservation is ever changed or deleted; every other one is left alone."""
    return name == reservation_name(pool)


def owned(pool: PoolRef, reservations: Iterable[SlurmReservation]) -> list[str]:
    """The pool's reservations, deleted with it: its own, and its old-named one with our flags."""
    found = list(reservations)
    old = _legacy(found, pool)
    return [r.name for r in found if is_ours(r.name, pool) or r is old]


def _legacy(reservations: Iterable[SlurmReservation], pool: PoolRef) -> SlurmReservation | None:
    """A reservation an older version made for this pool: its old name and our flags (a person's
    reservation under that name, without MAINT,IGNORE_JOBS, is left alone)."""
    return next((r for r in reservations if r.name == legacy_name(pool) and set(RESERVATION_FLAGS) <= r.flags), None)


@dataclass(frozen=True)
class Handover:
    """The planned handover for the next edge that takes nodes out of Slurm."""

    reservation: str
    nodes: tuple[str, ...]  # leaving Slurm at the edge, in the planner's order
    start: datetime  # the edge
    until: datetime  # when the reservation ends (the edge's `until`)
    flags: tuple[str, ...] = RESERVATION_FLAGS
    forecast: dict[str, datetime | None] = field(default_factory=dict)  # node -> free at (None: no time limit)

    @property
    def late(self) -> list[str]:
        """Nodes whose jobs will not have ended by the edge: `drain.onTimeout` decides for them."""
        return [n for n, t in self.forecast.items() if t is None or t > self.start]


def leaving_nodes(view: PoolView, goal: Goal) -> list[str]:
    """Nodes the planner would move out of Slurm to reach the goal, wave after wave. Planned
    with the whole maxConcurrentMoves a wave, whatever the moves in flight use of it now (they
    stay in flight wave after wave): else a budget used up would plan no node, and the
    reservation would be cancelled and made again later, perhaps on other nodes."""
    in_flight = sum(1 for n in view.nodes if n.move is not None)
    spec = view.spec.model_copy(update={"max_concurrent_moves": view.spec.max_concurrent_moves + in_flight})
    return [s.node for wave in waves(replace(view, spec=spec), goal, starts_done)
            for s in wave.plan.starts if s.source == SLURM]


def planned(pool: PoolRef, view: PoolView, edge: Edge | None, lead: timedelta) -> Handover | None:
    """The handover to prepare now: an edge within `lead` that takes nodes out of Slurm (to
    `edge.slurm_nodes`; the inference pools at the spec's own counts)."""
    now, slurm = view.now, view.slurm
    if edge is None or not (now < edge.at <= now + lead) or not slurm.available:
        return None
    leaving = leaving_nodes(view, Goal(edge.slurm_nodes, held=view.held))
    if not leaving:
        return None
    return Handover(
        reservation=reservation_name(pool),
        nodes=tuple(leaving),
        start=edge.at,
        until=edge.until,
        forecast={n: free_at(n, slurm, now) for n in leaving},
    )


# ---------------------------------------------------------------- the decision of a pass


def lead_time(spec: SlurmNodePoolSpec, slurm: SlurmView) -> tuple[timedelta, str]:
    """spec.handover.leadTime, else the partition's MaxTime (no job there runs longer), else 4h;
    at most maxLeadTime. With where it came from, for the status."""
    cap = timedelta(seconds=seconds(spec.handover.max_lead_time))
    if spec.handover.lead_time:
        lead, why = timedelta(seconds=seconds(spec.handover.lead_time)), "spec.handover.leadTime"
    elif (max_time := slurm.max_times.get(spec.slurm.partition)) is not None:
        lead, why = max_time, f"partition {spec.slurm.partition} MaxTime"
    else:
        lead, why = DEFAULT_LEAD, "default (partition MaxTime UNLIMITED or unknown)"
    if lead > cap:
        return cap, f"maxLeadTime (below {why} {_hours(lead)})"
    return lead, why


def _hours(d: timedelta) -> str:
    total = int(d.total_seconds())
    return f"{total // 3600}h{total % 3600 // 60:02d}m"


@dataclass(frozen=True)
class Edge:
    """The next schedule edge, the Slurm count it sets, and when a reservation for it must end."""

    at: datetime
    slurm_nodes: int
    until: datetime


def next_edge(spec: SlurmNodePoolSpec, total: int, now: datetime) -> Edge | None:
    """The next edge of the schedule and the count it sets (`edge_at`)."""
    if not spec.schedule:
        return None
    at = sched.evaluate(spec.schedule, total, now).next_change
    return None if at is None else edge_at(spec, total, at)


def edge_at(spec: SlurmNodePoolSpec, total: int, at: datetime) -> Edge:
    """The count the schedule sets at `at`: the window open then (clamped to the floors, as
    target.py does), else spec.slurmNodes (a manual hold ends at an edge too); and when a
    reservation for it ends: the window's end, else HOLD_PAST_EDGE after it."""
    window = sched.active_at(spec.schedule, total, at) if spec.schedule else None
    count = spec.slurm_nodes if window is None else window.slurm_nodes
    lo, hi = spec.min_slurm_nodes, total - spec.min_inference_nodes
    if lo <= hi:
        count = min(max(count, lo), hi)
    return Edge(at, count, window.end if window is not None else at + HOLD_PAST_EDGE)


@dataclass
class HandoverPlan:
    """What a pass does about the pool's reservation: `outcome` is one of none, create, replace,
    keep, delete, unavailable, unknown (the reservations could not be read: nothing is done)."""

    outcome: str
    create: Handover | None = None
    ahead: Handover | None = None  # the handover before its edge (planned, reserved or unavailable): warning.py warns its jobs
    until: datetime | None = None  # the reservation's end (create)
    delete: tuple[str, ...] = ()  # ours (replace, delete), under its name or its old name (legacy_name)
    status: HandoverStatus | None = None
    events: list[Event] = field(default_factory=list)  # posted once apply has done it
    reported: str = ""  # the failure the last status showed: a Warning is posted only for a new one

    @property
    def minutes(self) -> int:
        """The reservation's duration, from the edge to `until`, in whole minutes (at least 1)."""
        if self.create is None or self.until is None:
            return 0
        return max(1, int((self.until - self.create.start).total_seconds() + 59) // 60)


def reconcile(pool: PoolRef, view: PoolView, slurm_count: int, previous: HandoverStatus | None = None) -> HandoverPlan:
    """Level-triggered: the reservation wanted now against ours as Slurm reports it (its name is
    the record a fresh operator finds). `view.nodes`: the pool's nodes as this pass's steps and
    starts leave them; `slurm_count`: the count in force now. No reservation but the pool's own
    (and its old name's) is ever deleted: a deleted pool's goes with it (controller/pools.py), and
    one a crash left behind ends by itself at its edge's end (none is made without an end)."""
    spec, slurm = view.spec, view.slurm
    name = reservation_name(pool)
    if not slurm.available:
        return HandoverPlan("unknown", status=previous)
    edge = next_edge(spec, len(view.nodes), view.now) if spec.handover.enabled else None
    lowers = edge is not None and edge.slurm_nodes < slurm_count
    lead, lead_why = lead_time(spec, slurm)
    wanted = planned(pool, view, edge, lead) if lowers else None
    if not slurm.reservations_api:
        if wanted is None:
            return HandoverPlan("none")
        status = _status(wanted, wanted.until, "Unavailable", UNAVAILABLE)
        first = previous is None or previous.state != "Unavailable"
        return HandoverPlan("unavailable", ahead=wanted, status=status, events=[Event.warning(Reason.HandoverUnavailable, UNAVAILABLE)] if first else [])
    if slurm.reservations is None:  # their read failed: nothing is done until it works again
        kept = previous.model_copy(update={"message": slurm.reservations_error or ""}) if previous is not None else None
        return HandoverPlan("unknown", status=kept)
    ours = next((r for r in slurm.reservations if is_ours(r.name, pool)), None)
    old = _legacy(slurm.reservations, pool)
    plan_ = _against(name, wanted, ours, view) if ours is not None or old is None else _upgraded(name, wanted, old, view)
    if ours is not None and old is not None:  # both: a crash between the upgrade's create and delete
        plan_.delete = (*plan_.delete, old.name)
    plan_.reported = previous.message if previous is not None else ""
    if plan_.status is not None:
        plan_.status.lead_time = f"{_hours(lead)} ({lead_why})"
    return plan_


def _upgraded(name: str, wanted: Handover | None, old: SlurmReservation, view: PoolView) -> HandoverPlan:
    """The old-named reservation decided on as ours; one it would keep before its edge is made again
    under the new name, on the same nodes while they still fit, and the old one deleted."""
    plan_ = _against(old.name, wanted, old, view)
    if plan_.outcome != "keep" or plan_.status is None or plan_.status.state != "Reserved" or wanted is None:
        return plan_
    again = replace(_sticky(old, wanted, view) or wanted, reservation=name)
    return HandoverPlan("replace", create=again, until=again.until, delete=(old.name,), status=_status(again, again.until, "Planned", ""),
                        events=[Event.normal(Reason.HandoverReplanned, f"reservation {old.name} (an older version's name) made again as "
                                 f"{name} on {', '.join(again.nodes)} from {iso(again.start)}" + _late(again))])


def _against(name: str, wanted: Handover | None, ours: SlurmReservation | None, view: PoolView) -> HandoverPlan:
    nodes, now = view.nodes, view.now
    if ours is not None and ours.start is not None and ours.start <= now:
        # Past its edge: it keeps new jobs off the leaving nodes until their moves are done.
        going = sorted(n.name for n in nodes if n.name in ours.nodes and n.move is not None and n.move.source == SLURM)
        if going:
            status = HandoverStatus(reservation=name, flags=sorted(ours.flags - {"SPEC_NODES"}), nodes=sorted(ours.nodes),
                                    start=iso(ours.start), end=iso(ours.end) if ours.end else None, state="Handing",
                                    message=f"moves out of Slurm going on {', '.join(going)}")
            return HandoverPlan("keep", status=status)
        return HandoverPlan("delete", delete=(name,), events=[
            Event.normal(Reason.HandoverDone, f"deleting reservation {name}: the edge at {iso(ours.start)} has passed and no move out of Slurm "
             f"is going on its nodes")])
    if ours is None:
        if wanted is None:
            return HandoverPlan("none")
        return HandoverPlan("create", create=wanted, ahead=wanted, until=wanted.until, status=_status(wanted, wanted.until, "Planned", ""), events=[
            Event.normal(Reason.HandoverReserved, f"reservation {name} ({','.join(wanted.flags)}) on {', '.join(wanted.nodes)} from the edge at "
             f"{iso(wanted.start)}: only jobs that end by then start there" + _late(wanted))])
    if wanted is None:
        return HandoverPlan("delete", delete=(name,), events=[
            Event.normal(Reason.HandoverCancelled, f"deleting reservation {name}: no edge within the lead time takes these nodes out of Slurm now")])
    kept = _sticky(ours, wanted, view)
    if kept is not None and ours.start == wanted.start.replace(microsecond=0):
        return HandoverPlan("keep", ahead=kept, status=_status(kept, ours.end or wanted.until, "Reserved", ""))
    return HandoverPlan("replace", create=wanted, ahead=wanted, until=wanted.until, delete=(name,), status=_status(wanted, wanted.until, "Planned", ""),
                        events=[Event.normal(Reason.HandoverReplanned, f"reservation {name} made again on {', '.join(wanted.nodes)} from "
                                 f"{iso(wanted.start)} (was {', '.join(sorted(ours.nodes))} from {iso(ours.start) if ours.start else '?'})"
                                 + _late(wanted))])


def _sticky(ours: SlurmReservation, wanted: Handover, view: PoolView) -> Handover | None:
    """The reserved nodes, while they still do as the leaving ones: as many as wanted, each settled
    in Slurm, healthy and not pinned there. The planner's order changes as jobs end (idle first);
    choosing again each time would move the reservation back and forth."""
    health = view.health or {}
    by_name = {n.name: n for n in view.nodes}
    reserved = [by_name.get(n) for n in sorted(ours.nodes)]
    if len(reserved) != len(wanted.nodes) or any(
            n is None or n.move is not None or n.placement != SLURM or n.pin == SLURM or health.get(n.name, HEALTHY).unhealthy
            or n.name in view.held for n in reserved):
        return None
    names = tuple(sorted(ours.nodes))
    return replace(wanted, nodes=names, forecast={n: free_at(n, view.slurm, view.now) for n in names})


def _late(h: Handover) -> str:
    return f"; jobs on {', '.join(h.late)} have no time limit or end after it (drain.onTimeout decides)" if h.late else ""


def _status(h: Handover, until: datetime | None, state: HandoverState, message: str) -> HandoverStatus:
    return HandoverStatus(reservation=h.reservation, flags=list(h.flags), nodes=list(h.nodes), start=iso(h.start),
                          end=iso(until) if until else None, state=state, late=sorted(h.late), message=message)
