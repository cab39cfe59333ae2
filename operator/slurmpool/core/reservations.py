"""Others' Slurm reservations on the pool's nodes (issue 37): a customer's reserved node must not be
drained and handed to inference. Our handover's reservation is MAINT, which skips Slurm's overlap
check, so Slurm itself would not stop it either. Pure: decide gives the pool, its view and the clock.

A node serving Slurm is *held* while a reservation that is not provably this pool's own
(handover.owned: its exact name, whose hash is of the pool's namespace, name and uid) lists it and
is active now or starts within the lead time (handover.lead_time: spec.handover.leadTime, else the
partition's MaxTime, else 4h). Not drain.timeout: a node that leaves stays out of Slurm until the
split changes, so a reservation starting an hour after the drain would find it gone just the same;
the lead time is the horizon the operator already plans Slurm's future on (no job there runs
longer). A held node is as a busy node that must stay: never chosen to leave Slurm (planner.py,
`Goal.held`), also not for a planned handover; a pin or move-now moves it anyway, with a Warning
and `status.reservedNodes[].leaving`.

Every flag that reserves nodes holds them: MAINT (an admin's maintenance), OVERLAP, FLEX (jobs may
also run outside it, yet others may not run inside), MAGNETIC, REPLACE, PURGE_COMP, a reservation
with Users or Accounts (held for them), of some cores only. Not held: ANY_NODES and LICENSE_ONLY
(burst buffers or licenses, no compute node) and TIME_FLOAT (Slurm rejects jobs that ask for a
floating reservation: it only keeps long jobs off, no one's work needs the node). Ended ones are
ignored, as are nodes outside the pool (the view lists only the pool's, by Node name).

A read that failed holds what the pool's last status held, until each reservation's end: it
neither frees nodes it held nor stops other moves. Every access lists them (slurmrestd from
v0.0.40, though only v0.0.43+ makes them).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from slurmbridge.models import SlurmReservation

from slurmpool.core.handover import lead_time, owned
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.models import ReservedNode, SlurmNodePoolSpec
from slurmpool.core.placement import SLURM
from slurmpool.core.view import NodeView, SlurmView, iso, parse_time

# Flags of reservations that hold no compute node for anyone's jobs (scontrol(1), reservations.html).
NOT_HOLDING = frozenset({"ANY_NODES", "LICENSE_ONLY", "TIME_FLOAT"})


def holds(pool: PoolRef, spec: SlurmNodePoolSpec, nodes: Iterable[NodeView], slurm: SlurmView, now: datetime,
          previous: Iterable[ReservedNode] = ()) -> dict[str, ReservedNode]:
    """node -> the reservation that keeps it in Slurm, for each node of the pool on the Slurm side
    (settled there, or leaving it) that someone else's reservation holds. `previous`: the last
    status's, held again while the reservations cannot be read."""
    serving = {n.name for n in nodes if n.placement == SLURM}
    if slurm.reservations is None:
        if not slurm.available or slurm.reservations_error is not None:
            return {r.node: r.model_copy(update={"leaving": False}) for r in previous if r.node in serving and not _ended(r.end, now)}
        return {}  # not read, and nothing said why: nothing known to hold
    horizon = now + lead_time(spec, slurm)[0]
    mine = set(owned(pool, slurm.reservations))
    out: dict[str, ReservedNode] = {}
    for r in sorted(slurm.reservations, key=lambda r: (r.start or now, r.name)):
        if r.name in mine or not _holding(r, now, horizon):
            continue
        for node in serving.intersection(r.nodes):
            out.setdefault(node, ReservedNode(node=node, reservation=r.name, start=iso(r.start) if r.start else None,
                                              end=iso(r.end) if r.end else None, flags=sorted(r.flags - {"SPEC_NODES"})))
    return out


def _holding(r: SlurmReservation, now: datetime, horizon: datetime) -> bool:
    """Active now or starting by `horizon`, not ended, and reserving nodes for someone's jobs."""
    return not (r.flags & NOT_HOLDING) and (r.start is None or r.start <= horizon) and (r.end is None or r.end > now)


def _ended(end: str | None, now: datetime) -> bool:
    at = parse_time(end)
    return at is not None and at <= now


def describe(r: ReservedNode) -> str:
    """`maint-friday (MAINT) from 2026-12-04T12:00:00Z until 2026-12-04T14:00:00Z`, for Events and conditions."""
    flags = f" ({','.join(r.flags)})" if r.flags else ""
    return f"{r.reservation}{flags} from {r.start or '?'} until {r.end or '?'}"
