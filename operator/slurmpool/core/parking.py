"""Power-save parking (`spec.slurm.parking: PowerSave`): which parked nodes Slurm may ask back. Pure.

A node serving inference stays in Slurm's node list, powered down (the move's PoweringDown phase). Each
settled parked node is either
- *lendable*: our drain lifted (`idle~`): Slurm may choose it for a job by its own rules
  (nodelists, features, topology, weights); it then powers it up (POWERING_UP, the job
  CONFIGURING) and calls ResumeProgram. That is its request to have the node back, naming it;
- *held*: drained with our `slurmpool:` reason (`drain~`): shown as capacity, never scheduled.

A node is held when lending it would break a bound: the inference floor (minInferenceNodes,
demand.inference.minNodes, each inference pool's minNodes), a schedule window open (it keeps the
window's split), a pin or move-now toward inference, a hold after a rollback; or when it is
unhealthy, drained by someone else (not ours to lift), or the pool is paused. The rest are lent
in the planner's victim order for moves to Slurm (planner.victim_order), as far as the floors
allow, lowest node Weight first (by_weight: the ones Slurm would pick); nodes Slurm already asked
for come first (it chose them). With Drain parking every parked
node is held (today's behaviour: a powered-down node left lent by an earlier PowerSave is held).

Give-back: a lendable node Slurm asked back starts a move to Slurm at once (Cause.GIVEBACK): no
demand, no cooldown, no count, not bounded by maxConcurrentMoves (Slurm's ResumeTimeout runs;
the lending itself was bounded). It is marked `slurmpool.io/given-back` with its move, and while
Slurm's jobs hold it the target counts it on the Slurm side (target.with_given_back); once they
are done the mark goes and it is ordinary surplus the planner may take back.

Decline: a request on a node that must stay (held now: its drain requeues the job, Slurm's own
way), or a give-back in flight that a bound no longer allows (its move rolls back: the rollback's
Draining drains the node, Slurm requeues the job, then it is powered down again). Evictions
refused past evictionTimeout, an unhealthy node and a slurmd that does not register decline in
moves.py. Each is an Event, GiveBackDeclined, saying why.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from slurmbridge.models import SlurmNode

from slurmpool.core import slurmstate
from slurmpool.core.events import Event, Reason
from slurmpool.core.health import NodeHealth
from slurmpool.core.models import SlurmNodePoolSpec, seconds
from slurmpool.core.moves import Pass, Resume, Step, abortable, advance, drain, hold_reason, reverse
from slurmpool.core.ownership import why_not_ours
from slurmpool.core.planner import Start, victim_order
from slurmpool.core.view import SLURM, Cause, MoveRecord, NodeView, SlurmView, counts_at, inference, pool_of


@dataclass
class Parking:
    """One pass's parking of a PowerSave pool (empty for Drain, but for holds and marks)."""

    lendable: list[str] = field(default_factory=list)  # in lending order
    held: dict[str, str] = field(default_factory=dict)  # node -> why it is held
    steps: dict[str, Step] = field(default_factory=dict)  # settled parked nodes: lend, hold, decline
    givebacks: list[Start] = field(default_factory=list)  # moves to Slurm that start now
    declines: dict[str, str] = field(default_factory=dict)  # give-backs in flight to turn back -> why
    unmark: list[str] = field(default_factory=list)  # given-back nodes Slurm's jobs no longer hold
    given_back: int = 0  # nodes given back (starting now, in flight) or that Slurm's jobs hold after one: on the Slurm side
    waiting: list[str] = field(default_factory=list)  # pending jobs that wait only on held nodes (waiting_on_held)


@dataclass(frozen=True)
class Bounds:
    """What the inference side keeps: a floor for all of it and one per pool (by placement)."""

    total: int
    pools: dict[str, int]

    @classmethod
    def of(cls, spec: SlurmNodePoolSpec, window: Mapping[str, int] | None) -> Bounds:
        """`window`: the desired split while a schedule window is open (it keeps its inference counts)."""
        demand = spec.demand.inference.min_nodes if spec.demand is not None and spec.demand.enabled else 0
        pools = {inference(p.name): p.min_nodes for p in spec.inference.pools}
        total = max(spec.min_inference_nodes, demand)
        if window is not None:
            pools = {g: max(n, window.get(g, 0)) for g, n in pools.items()}
            total = max(total, sum(window.get(g, 0) for g in pools))
        return cls(total, pools)

    def why(self, placement: str, room: Mapping[str, int], window: bool) -> str:
        """Which floor lending one more node of `placement` would cross."""
        if window:
            return "a schedule window is open: its split keeps the node"
        if room.get(placement, 0) <= 0:
            return f"lending it would take {placement} below its minNodes ({self.pools.get(placement, 0)})"
        return f"lending it would take inference below {self.total} (minInferenceNodes, demand.inference.minNodes)"


def by_weight(order: Sequence[str], slurm: SlurmView) -> list[str]:
    """The planner's victim order, stably sorted by Slurm's node Weight: the nodes lent while the
    floors allow only some are the ones Slurm would pick first among powered-down nodes (lowest
    Weight; powered ones all come before: 26.05's node_scheduler.c), so a job it starts on lent
    nodes is the one the site's weights choose. Equal weights (Slurm's default 1 on every node;
    a weight Slurm does not show counts as that default) keep the planner's order."""
    def weight(name: str) -> int:
        sn = slurm.nodes.get(name)
        return sn.weight if sn is not None and sn.weight is not None else 1
    return sorted(order, key=weight)


def settle(spec: SlurmNodePoolSpec, nodes: Sequence[NodeView], slurm: SlurmView, health: Mapping[str, NodeHealth], now: datetime,
           window: Mapping[str, int] | None) -> Parking:
    """Lendable or held, for each settled parked node; give-backs to start and to decline."""
    out = Parking()
    _marks(nodes, slurm, out)
    if not slurm.available:
        return out
    parked = [(n, sn) for n in nodes if (sn := _parked(n, slurm)) is not None]
    if spec.slurm.parking != "PowerSave" or (slurm.power_save is not None and not slurm.power_save.on):
        # Slurm's power saving off: it could not power a lent node up for a job (22.05, 24.11)
        reason = "Drain parking holds every parked node" if spec.slurm.parking != "PowerSave" else \
            "Slurm's power saving is off (PowerSaveReady): parked by Drain meanwhile"
        for node, sn in parked:
            _hold(node, sn, reason, now, out)
        return out
    bounds = Bounds.of(spec, window)
    room = _room(nodes, bounds)
    _decline_in_flight(spec, nodes, room, out)
    by_name = {n.name: (n, sn) for n, sn in parked}
    held = {n.name: why for n, sn in parked if (why := _must_hold(spec, n, sn, health, now))}
    asked = [n.name for n, sn in parked if slurmstate.asked_back(sn)]
    order = by_weight([n.name for n in victim_order(spec, list(nodes), slurm, now, health)], slurm)
    for name in dict.fromkeys([*asked, *order]):  # Slurm's choices first: it named them
        if name not in by_name or name in held:
            continue
        node = by_name[name][0]
        if room.get(node.placement, 0) > 0 and room[""] > 0:
            room[node.placement] -= 1
            room[""] -= 1
            out.lendable.append(node.name)
        else:
            held[node.name] = bounds.why(node.placement, room, window is not None)
    for name in out.lendable:
        _lend(*by_name[name], out)
    for name, why in held.items():
        _hold(*by_name[name], why, now, out)
    return out


def _parked(node: NodeView, slurm: SlurmView) -> SlurmNode | None:
    """Slurm's view of a settled parked node: powered down, or asked back by Slurm; else None."""
    if node.move is not None or node.problems or pool_of(node.placement) is None:
        return None
    sn = slurm.nodes.get(node.name)
    return sn if sn is not None and (slurmstate.powered_down(sn) or slurmstate.asked_back(sn)) else None


def _marks(nodes: Sequence[NodeView], slurm: SlurmView, out: Parking) -> None:
    """Given-back nodes: counted on the Slurm side while on their way there or while Slurm's jobs
    hold them; unmarked once settled and free (or back in inference after a decline)."""
    for node in nodes:
        if node.given_back is None or node.problems:
            continue
        move = node.move
        if move is not None:
            out.given_back += move.target == SLURM
        elif node.placement == SLURM and (not slurm.available or slurm.jobs_on(node.name)):
            out.given_back += 1  # Slurm unseen: its jobs may still hold it
        else:
            out.unmark.append(node.name)


def _room(nodes: Sequence[NodeView], bounds: Bounds) -> dict[str, int]:
    """How many nodes each inference pool ("" : the whole side) may lend before its floor."""
    room = {g: -floor for g, floor in bounds.pools.items()}
    room[""] = -bounds.total
    for node in nodes:
        here = counts_at(node)
        if here in room:
            room[here] += 1
            room[""] += 1
    return room


def _must_hold(spec: SlurmNodePoolSpec, node: NodeView, sn: SlurmNode, health: Mapping[str, NodeHealth], now: datetime) -> str | None:
    """Why this node is held whatever the floors allow, or None."""
    h = health.get(node.name)
    if spec.paused:
        return "the pool is paused: nothing moves, so nothing is lent"
    if h is not None and h.unhealthy:
        return f"unhealthy ({h.reason})"
    if slurmstate.drain_set(sn) and (foreign := why_not_ours(node, sn)):
        return f"drained by someone else ({sn.reason}: {foreign}); not ours to lift"
    if node.pin is not None:
        return f"pinned (slurmpool.io/pin={node.pin})"
    if node.move_now is not None:
        return f"slurmpool.io/move-now={node.move_now} is pending"
    if node.held_until is not None and node.held_until > now:
        return f"held after a rollback until {node.held_until:%Y-%m-%dT%H:%M:%SZ}"
    return None


def _lend(node: NodeView, sn: SlurmNode, out: Parking) -> None:
    if slurmstate.asked_back(sn):
        out.givebacks.append(Start(node.name, node.placement, SLURM, Cause.GIVEBACK))
        out.given_back += 1  # counted from this pass on: its mark is written only with it
    elif slurmstate.drain_set(sn) and slurmstate.resumable(sn):  # ours: _must_hold holds a foreign one
        out.steps[node.name] = Step(move=None, actions=[Resume(node.name)])


def _hold(node: NodeView, sn: SlurmNode, why: str, now: datetime, out: Parking) -> None:
    """Drain the node again under a fresh claim (ownership.py), as Draining does. Drained by
    Slurm's power-up request, the job is requeued: the decline."""
    out.held[node.name] = why
    if slurmstate.drain_set(sn):
        return
    step = Step(move=None)
    drain(step, node, hold_reason(node.placement), now)
    if slurmstate.asked_back(sn):
        step.events.append(Event.warning(Reason.GiveBackDeclined, f"{node.name}: Slurm asked for it back, declined: {why}; "
                                         "drained in Slurm, which requeues the job waiting for it"))
    out.steps[node.name] = step


def _decline_in_flight(spec: SlurmNodePoolSpec, nodes: Sequence[NodeView], room: dict[str, int], out: Parking) -> None:
    """Give-backs still in a phase that changed nothing for good, which a bound no longer allows
    (a floor raised, a window opened, a pin toward inference): the latest started first."""
    flying = sorted(((n, n.move) for n in nodes if n.move is not None and _undeclined_giveback(n.move)),
                    key=lambda nm: (nm[1].started, nm[0].name), reverse=True)
    for node, move in flying:
        if node.pin is not None and node.pin != SLURM:
            out.declines[node.name] = f"pinned (slurmpool.io/pin={node.pin})"
        elif room.get(move.source, 0) < 0 or room[""] < 0:
            out.declines[node.name] = f"lending it would take {move.source} or inference below its minimum now"
        else:
            continue
        room[move.source] = room.get(move.source, 0) + 1
        room[""] += 1


def _undeclined_giveback(move: MoveRecord) -> bool:
    """A give-back that has changed nothing for good yet (Cordoning, Evicting): still declinable here."""
    return move.cause == Cause.GIVEBACK and not move.rollback and abortable(move)


def decline(move: MoveRecord, node: NodeView, at: Pass, why: str) -> Step:
    """Turn a give-back in flight back: its rollback drains the node (Slurm requeues the job)."""
    back = reverse(move, at.spec, at.now, cause=Cause.GIVEBACK)
    step = advance(back, node, at)
    step.entered.insert(0, back.phase)
    step.rolled_back = move
    step.hold_until = at.now + timedelta(seconds=seconds(at.spec.drain.timeout))
    step.events.insert(0, Event.warning(Reason.GiveBackDeclined, f"{node.name}: give-back declined: {why}; returning to {back.target} "
                                        f"(move {move.id}); Slurm requeues the job waiting for it"))
    return step


def waiting_on_held(spec: SlurmNodePoolSpec, slurm: SlurmView, held: Collection[str]) -> list[str]:
    """Pending jobs of the pool's partition whose nodes Slurm lists as unavailable
    (`UnavailableNodes:`, SlurmJob.unavailable_nodes) are all held parked nodes: said in the
    status, as they wait on the bounds that hold them."""
    out, held = [], set(held)
    partition = spec.slurm.partition
    # the few that list unavailable nodes, found once per poll for every pool on the partition
    listing = slurm.of_pending(("parking.unavailable", partition), lambda: [j for j in slurm.pending_in(partition) if j.unavailable_nodes])
    for job in listing:
        if (names := set(job.unavailable_nodes)) <= held:
            out.append(f"job {job.job_id} waits on held node(s) {', '.join(sorted(names))}")
    return out
