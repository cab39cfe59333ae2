"""What a pass adds to the pool's history, and what a shadow pass would have done. Pure.

- `recent_moves`: status.recentMoves, the moves that ended (completed, rolled back, stopped on an
  unhealthy node), newest first and bounded, carried from status to status. Only the moves whose
  end was written on their Node count: an end refused stays in flight and ends in a later pass.
  Each names the Slurm jobs its drain waited for, requeued, cancelled or signalled, from the
  move's record on the Node (movejobs.py: at most SHOWN ids a move, so the status stays small).
- `shadow`: status.shadow of a pool in shadow mode (spec.mode Shadow, or `slurmpool run --dry-run`):
  the moves it would start and the other writes it would make; `since` holds while it repeats."""

from __future__ import annotations

from datetime import datetime

from slurmpool.core.models import Outcome, RecentMove, ShadowStatus
from slurmpool.core.movejobs import MoveJobs
from slurmpool.core.moves import Step
from slurmpool.core.snapshot import ApplyResult, PoolDecision, PoolSnapshot
from slurmpool.core.view import MoveRecord, NodeView, iso

RECENT_MOVES = 20  # kept in the status: `kubectl slurmpool history` shows them; Events and logs keep the rest
SHADOW_LINES = 50  # of each list of status.shadow


def ended(node: NodeView, step: Step) -> tuple[MoveRecord, Outcome] | None:
    """The move this step ended, and how; None when none did."""
    if step.stopped is not None:
        return step.stopped, "Stopped"
    if step.rolled_back is not None:
        return step.rolled_back, "RolledBack"
    move = step.finished or (node.move if step.settled else None)
    return (move, "Completed") if move is not None else None


def recent_moves(snap: PoolSnapshot, decision: PoolDecision, result: ApplyResult) -> list[RecentMove]:
    """The moves this pass ended (written), then the previous status's, newest first, at most RECENT_MOVES."""
    before = {n.name: n for n in snap.nodes}
    new = []
    for name, step in sorted(decision.steps.items()):
        node = before.get(name)
        if node is None or name in result.unwritten or result.shadow or (end := ended(node, step)) is None:
            continue
        move, outcome = end
        jobs = move.jobs or MoveJobs()
        new.append(RecentMove(node=name, move_id=move.id, from_=move.source, to=move.target,  # type: ignore[call-arg]
                              cause=str(move.cause), by=move.by, started=iso(move.started), ended=iso(snap.now), outcome=outcome,
                              jobs=jobs.groups(), jobs_unnamed=jobs.unnamed))
    old = snap.previous.recent_moves if snap.previous else []
    seen = {(m.move_id, m.outcome) for m in new}
    return (new + [m for m in old if (m.move_id, m.outcome) not in seen])[:RECENT_MOVES]


def would_start(decision: PoolDecision) -> list[str]:
    return [f"{start.node}: {move.source} -> {move.target} ({start.cause}" + (f", asked by {move.by})" if move.by else ")")
            for start, move in decision.starts]


def would_do(decision: PoolDecision) -> list[str]:
    """Every write of the decision but its starts, in words: node patches, Slurm commands, pods, reservations."""
    starting = decision.starting
    lines = []
    for name, step in sorted(decision.steps.items()):
        if name in starting:
            continue
        what = [type(a).__name__ for a in step.actions]
        if name in decision.patches:
            what.insert(0, f"record {step.move.phase if step.move else 'settled ' + str(step.settled or '')}".rstrip())
        if what:
            lines.append(f"{name}: {', '.join(what)}")
    lines += [f"delete orphan pod {pod.key}" for pod in decision.orphans_to_delete]
    lines += [f"{ev.node}: clear move-now" for ev in decision.clear_move_now]
    plan = decision.handover
    if plan is not None and plan.create is not None:
        lines.append(f"create reservation {plan.create.reservation}")
    lines += [f"delete reservation {name}" for name in (plan.delete if plan is not None else ())]
    return lines


def shadow(decision: PoolDecision, previous: ShadowStatus | None, now: datetime) -> ShadowStatus:
    starts, rest = would_start(decision)[:SHADOW_LINES], would_do(decision)[:SHADOW_LINES]
    same = previous is not None and previous.would_start == starts and previous.would_do == rest
    return ShadowStatus(would_start=starts, would_do=rest, since=previous.since if same and previous else iso(now))
