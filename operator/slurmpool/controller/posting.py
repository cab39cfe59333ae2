"""The Events of a pass, each also one log line with `pool`, `node`, `moveId` and `reason` as
fields of its own (in `--log-format json`, keys of the line), so a move's history outlives the
Events' hour in the cluster's log store. The Events themselves are aggregated by kube.py."""

from __future__ import annotations

import logging

from slurmpool.core.events import Event, Reason
from slurmpool.core.interfaces import Kube, PoolRef, node_object, pool_object
from slurmpool.core.moves import Step

log = logging.getLogger("slurmpool.moves")

# Events of a node's move that only its Node shows: a phase step is detail for `kubectl describe
# node`; the pool's own list keeps each move's start, end and every warning. (Half the Events of
# a large adoption: 500 nodes posted ~6,000, and the queue of Events overflowed.)
NODE_ONLY_REASONS = frozenset({Reason.MovePhase})


def move_id(step: Step | None) -> str | None:
    """The move a step's Events are about: the one going on, or the one it ended."""
    if step is None:
        return None
    move = step.move or step.finished or step.rolled_back or step.stopped
    return move.id if move is not None else None


async def post(kube: Kube, pool: PoolRef, ev: Event, move: str | None = None) -> None:
    """An Event about a node goes on the node and (but a phase step) on the pool; else on the pool.
    Logged first, with its keys."""
    log.log(logging.WARNING if ev.type == "Warning" else logging.INFO, "%s %s: %s", pool.key, ev.reason, ev.message,
            extra={"pool": pool.key, "node": ev.node, "moveId": move, "reason": str(ev.reason)})
    if ev.node is None or ev.reason not in NODE_ONLY_REASONS:
        await kube.event(pool_object(pool), ev.type, ev.reason, ev.message)
    if ev.node is not None:
        await kube.event(node_object(ev.node), ev.type, ev.reason, ev.message)
