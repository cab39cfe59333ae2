"""The planner: given the pool's nodes, Slurm's state, the spec and the clock, which moves
to start now. Pure and O(n log n) in the number of nodes.

1. The desired split: the Goal's `slurm_nodes` serve Slurm; the rest go to the inference pools,
   each first up to its minNodes, then to explicit per-pool counts, then by priority
   (highest first) up to its maxNodes (desired_split). So when Slurm grows, the
   lowest-priority pool is the first to give nodes back.
2. Pinned nodes that are elsewhere move to their pin.
3. Groups above their desired count give nodes to groups below it (unadopted nodes first),
   cheapest node first, within the budget `maxConcurrentMoves - moves in flight`; Slurm
   takes the nodes pending jobs name (`Goal.named`, demand) before any other.
Nodes in someone else's Slurm reservation (`Goal.held`) never leave Slurm but on a pin or move-now.
Unhealthy nodes (health.py) are never chosen, in either direction: their side keeps them;
a pin or move-now moves one only with slurmpool.io/force=true. Suspect ones (a finding within
its grace) come after the healthy idle ones. With `health.replace` the split counts healthy
nodes only (healthy_split).
Nothing moves while the spec cannot be met (more desired than selected, floors that
cannot hold): that is reported instead.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from slurmbridge.models import SlurmJob

from slurmpool.core import topology
from slurmpool.core.health import NodeHealth
from slurmpool.core.models import DrainSpec, InferencePool, SlurmNodePoolSpec, seconds
from slurmpool.core.moves import abortable
from slurmpool.core.view import LABEL_SIDE, NONE, SLURM, Cause, NodeView, SlurmView, counts_at, inference, pool_of, side_of

NEVER = float("inf")


@dataclass(frozen=True)
class Start:
    node: str
    source: str
    target: str
    cause: Cause


@dataclass(frozen=True)
class Goal:
    """The split a plan works toward: Slurm's count (None: spec.slurmNodes) and the per-pool
    counts (None: the spec's own, `inference.pools[].nodes`). decide passes the target's
    (target.py); the plugin and the handover pass the count an edge sets."""

    slurm_nodes: int | None = None
    pool_counts: dict[str, int] | None = None
    named: tuple[str, ...] = ()  # nodes pending jobs name (demand): Slurm takes these before any other
    # Nodes someone else's Slurm reservation holds (reservations.py): as a busy node that must
    # stay, never chosen to leave Slurm, and a move out of Slurm not yet past Draining turns back;
    # a pin or move-now moves one anyway.
    held: frozenset[str] = frozenset()


@dataclass
class Plan:
    desired: dict[str, int]
    problems: list[str] = field(default_factory=list)
    starts: list[Start] = field(default_factory=list)
    aborts: list[str] = field(default_factory=list)  # moves to turn back: the split changed under them
    forced: list[str] = field(default_factory=list)  # unhealthy nodes moved by a pin or move-now with slurmpool.io/force
    refused: list[str] = field(default_factory=list)  # unhealthy nodes whose pin or move-now waits for health or force


def placements(spec: SlurmNodePoolSpec) -> list[str]:
    return [SLURM] + [inference(p.name) for p in spec.inference.pools]


def explicit_counts(spec: SlurmNodePoolSpec) -> dict[str, int]:
    """The spec's own per-pool counts (`inference.pools[].nodes`)."""
    return {p.name: p.nodes for p in spec.inference.pools if p.nodes is not None}


def desired_split(
    spec: SlurmNodePoolSpec, total: int, target_slurm: int | None = None, pool_counts: dict[str, int] | None = None
) -> tuple[dict[str, int], list[str]]:
    """How many nodes each placement should have, and why that cannot be met (if so).

    Inference nodes go: every pool to its minNodes; then pools with an explicit count
    (`pool_counts`, default the spec's) up to it, highest priority first; then pools without
    one by priority up to their maxNodes; what is left, to any pool by priority up to its
    maxNodes. So an explicit count is a request the higher-priority pools are served first."""
    slurm = spec.slurm_nodes if target_slurm is None else target_slurm
    requests = explicit_counts(spec) if pool_counts is None else pool_counts
    problems = []
    if slurm > total:
        problems.append(f"{slurm} Slurm nodes wanted but only {total} nodes are selected")
    if spec.min_slurm_nodes + spec.min_inference_nodes > total:
        problems.append(
            f"minSlurmNodes ({spec.min_slurm_nodes}) + minInferenceNodes ({spec.min_inference_nodes}) exceed the {total} selected nodes"
        )
    rest = max(0, total - slurm)
    if slurm <= total and rest < spec.min_inference_nodes:
        problems.append(f"{slurm} Slurm nodes leave {rest} for inference, below minInferenceNodes ({spec.min_inference_nodes})")
    pools = sorted(spec.inference.pools, key=lambda p: (-p.priority, p.name))
    counts = {p.name: 0 for p in pools}
    floor_sum = sum(p.min_nodes for p in pools)
    if floor_sum > rest:
        problems.append(f"the inference pools' minNodes ({floor_sum}) exceed the {rest} inference nodes")
    left = rest

    def fill(pool: InferencePool, up_to: int) -> None:
        nonlocal left
        cap = pool.max_nodes if pool.max_nodes is not None else total
        give = max(0, min(min(up_to, cap) - counts[pool.name], left))
        counts[pool.name] += give
        left -= give

    for p in pools:
        fill(p, p.min_nodes)
    for p in pools:
        if p.name in requests:
            fill(p, requests[p.name])
    for p in pools:
        if p.name not in requests:
            fill(p, total)
    for p in pools:
        fill(p, total)
    if left > 0:
        problems.append(f"the inference pools' maxNodes leave {left} node(s) without a pool")
    desired = {SLURM: slurm}
    desired.update({inference(name): n for name, n in counts.items()})
    return desired, problems


def healthy_split(
    spec: SlurmNodePoolSpec, healthy: int, target_slurm: int | None = None, pool_counts: dict[str, int] | None = None
) -> dict[str, int] | None:
    """With `health.replace`: the split of the healthy nodes. Slurm's count is served first, down
    to what the inference floors leave; the inference pools share the healthy rest as in
    desired_split. So a broken Slurm node is made up from inference above its floors, and a
    broken inference node below them from Slurm. None when the healthy nodes cannot hold both
    sides' floors: then the split counts all nodes (as without replace), and no side gives
    below its floor."""
    slurm = spec.slurm_nodes if target_slurm is None else target_slurm
    floor = max(spec.min_inference_nodes, sum(p.min_nodes for p in spec.inference.pools))
    if healthy < spec.min_slurm_nodes + floor:
        return None
    return desired_split(spec, healthy, min(slurm, healthy - floor), pool_counts)[0]


def current_placement(node: NodeView) -> str:
    """Where a node counts: the target of its move in flight, else where it is settled."""
    return counts_at(node)


def counted_placement(node: NodeView, valid: set[str]) -> str:
    """Where a node counts in the split. A node left alone for an unreadable placement counts on
    the side its slurmpool.io/side label shows when that is Slurm (so the rest of the pool
    reaches the split around it), else as unadopted (nothing moves to make up for it)."""
    here = current_placement(node)
    if here in valid:
        return here
    if node.problems and node.labels.get(LABEL_SIDE) == SLURM:
        return SLURM
    return NONE


# A node's cost of being moved (see _cost): compared as a whole, lowest first.
Cost = tuple[int, int, int, str, int, float, float, str]


def _cost(node: NodeView, slurm: SlurmView, topology_rank: topology.Rank = topology.NO_BLOCK, suspect: bool = False,
          drain: DrainSpec | None = None, now: datetime | None = None) -> Cost:
    """Lower is cheaper to take away from where the node is now: unadopted nodes first, then
    the topology rank (see topology.py), then in our planned handover's reservation once its edge
    came (handover.py: busy or not), drained or reserved, idle, suspect (health.py: down or failing within its grace: it may be
    broken); then busy nodes, reserved first, those running a job younger than `drain.minRuntime` last, each by
    the work its jobs would lose (work_lost), then soonest free; on the inference side cordoned,
    fewest pods, suspect. Ends with the node's name: costs are unique."""
    placement = node.placement
    name = node.name
    tier, order, block = topology_rank  # flat tuples: one allocation per node (see topology.ranks)
    if placement == NONE:
        return (0, tier, order, block, int(suspect), 0.0, 0.0, name)
    if placement == SLURM:
        reserved = name in slurm.reserved  # our handover's: the nodes planned for its edge, their jobs warned
        if reserved and now is not None and _edge_came(slurm.reserved_from[name], now):
            # At the edge the plan's nodes go first, busy or not: another node in their place would
            # end a job nobody warned (seen on the lab over REST: a node taken, a warned one kept).
            return (1, tier, order, block, 0, 0.0, 0.0, name)
        jobs = slurm.jobs_on(name)
        if not jobs:
            # Already draining (or unknown to Slurm): nothing to lose. Then idle nodes, then those
            # that may be broken (a slurmctld restart shows every node not responding for a while).
            if suspect or name in slurm.not_responding:
                idle = 2
            elif name in slurm.drain_flagged or name not in slurm.nodes or reserved:
                idle = 0
            else:
                idle = 1
            return (1, tier, order, block, idle, 0.0, 0.0, name)
        free = max(j.end_time.timestamp() if j.end_time else NEVER for j in jobs)
        if drain is None or now is None:
            return (1, tier, order, block, 2 if reserved else 3, 0.0, free, name)
        young = 2 if reserved else 4 if any(_younger(j, drain, now) for j in jobs) else 3
        return (1, tier, order, block, young, sum(work_lost(j, drain, now) for j in jobs), free, name)
    evictable = sum(1 for p in node.pods if p.evictable)
    return (1, tier, order, block, 2 if suspect else 0 if node.unschedulable else 1, float(evictable), 0.0, name)


def _edge_came(start: datetime | None, now: datetime) -> bool:
    return start is None or start <= now


def _younger(job: SlurmJob, drain: DrainSpec, now: datetime) -> bool:
    """Has the job run less than drain.minRuntime? (A job Slurm gives no start time is not.)"""
    limit = seconds(drain.min_runtime) if drain.min_runtime else 0.0
    return bool(limit) and job.start_time is not None and (now - job.start_time).total_seconds() < limit


# The drain policies that end jobs still running at the timeout (expiry.ON_TIMEOUT): only then is work lost.
ENDS_JOBS = frozenset({"Requeue", "Cancel", "Checkpoint"})


def work_lost(job: SlurmJob, drain: DrainSpec, now: datetime) -> float:
    """Node-seconds a move would cost the job: none when the drain waits for it (Wait, Rollback) or
    it ends by its time limit before the drain ends it (it leaves by itself), else what it ran since
    it started, on all its nodes (its own checkpoints are not known to Slurm: since its start is the
    proxy; with Checkpoint, what it saves in the grace is kept)."""
    if drain.on_timeout not in ENDS_JOBS or job.start_time is None:
        return 0.0
    ends_it = seconds(drain.timeout) + (seconds(drain.checkpoint.grace) if drain.on_timeout == "Checkpoint" else 0.0)
    if job.end_time is not None and job.end_time <= now + timedelta(seconds=ends_it):
        return 0.0
    return max(0.0, (now - job.start_time).total_seconds()) * max(1, job.num_nodes)


def _movable(node: NodeView, now: datetime) -> bool:
    hold = node.held_until
    return (node.move is None and node.pin is None and node.move_now is None and node.adopt is None and not node.problems
            and not (hold and hold > now))


def _candidates(spec: SlurmNodePoolSpec, nodes: list[NodeView], slurm: SlurmView, now: datetime, keep: set[str],
                chosen: Collection[str] = ()) -> tuple[list[NodeView], dict[str, topology.Rank]]:
    """The nodes a rebalance may choose (not unhealthy, `keep`; not `chosen` already), and their topology ranks."""
    movable = [n for n in nodes if n.name not in keep and n.name not in chosen and _movable(n, now)]
    names = {n.name for n in movable}
    return movable, topology.ranks(spec.topology, nodes, slurm, current_placement, lambda n: n.name in names, keep)


def victim_order(spec: SlurmNodePoolSpec, nodes: list[NodeView], slurm: SlurmView, now: datetime,
                 health: Mapping[str, NodeHealth]) -> list[NodeView]:
    """The inference nodes a rebalance toward Slurm may choose, in the order it would: the
    lowest-priority pool first (the split gives its nodes first), then by cost. Nodes it never
    chooses (unhealthy, pinned, move-now, held after a rollback, moving, unreadable) are left out.
    Power-save parking lends parked nodes in this order (parking.py)."""
    keep = {n.name for n in nodes if n.name in health and health[n.name].unhealthy}
    movable, topo = _candidates(spec, nodes, slurm, now, keep)
    priority = {inference(p.name): p.priority for p in spec.inference.pools}
    chosen = [n for n in movable if n.placement in priority]
    return sorted(chosen, key=lambda n: (priority[n.placement], _cost(n, slurm, topo.get(n.name, topology.NO_BLOCK), n.name in health)))


def move_now_target(node: NodeView, spec: SlurmNodePoolSpec, desired: dict[str, int], count: dict[str, int]) -> str | None:
    """Where a slurmpool.io/move-now annotation asks the node to go: `slurm`, `inference:<pool>`,
    or `inference` (the highest-priority pool short of its desired count, else the highest
    priority pool). None when unset or naming no placement of this pool.

    Semantics: a one-shot pin. The node moves at once (within maxConcurrentMoves, not while
    paused, even if held after a rollback; never against a pin), is never chosen as a victim
    while the annotation is on it, and its move is never turned back. The split is unchanged,
    so the planner moves another node the other way. The operator removes the annotation
    when the node is there and the split is whole again (`move_now_done`)."""
    value = node.move_now
    if not value:
        return None
    pools = sorted(spec.inference.pools, key=lambda p: (-p.priority, p.name))
    if value == "inference":
        if pool_of(node.placement) is not None:
            return node.placement
        short = [inference(p.name) for p in pools if count.get(inference(p.name), 0) < desired.get(inference(p.name), 0)]
        return (short or [inference(pools[0].name)])[0] if pools else None
    return value if value in placements(spec) else None


def move_now_done(
    spec: SlurmNodePoolSpec, nodes: list[NodeView], target_slurm: int | None = None, pool_counts: dict[str, int] | None = None
) -> list[str]:
    """Nodes whose move-now request is fulfilled (settled where asked) once the split is whole
    again (every placement at its desired count, counting moves in flight), or that ask for
    a placement the pool does not have, or against the node's pin: their annotation can go."""
    desired, problems = desired_split(spec, len(nodes), target_slurm, pool_counts)
    count: dict[str, int] = {}
    for node in nodes:
        here = current_placement(node)
        count[here] = count.get(here, 0) + 1
    whole = not problems and all(count.get(g, 0) == n for g, n in desired.items())
    done = []
    for node in nodes:
        if node.move_now is None or node.move is not None:
            continue
        want = move_now_target(node, spec, desired, count)
        if want is None or (node.pin is not None and node.pin != want) or (want == node.placement and whole):
            done.append(node.name)
    return done


def plan(
    spec: SlurmNodePoolSpec,
    nodes: list[NodeView],
    slurm: SlurmView,
    now: datetime,
    goal: Goal | None = None,
    health: Mapping[str, NodeHealth] | None = None,
) -> Plan:
    goal = goal or Goal()
    desired, problems = desired_split(spec, len(nodes), goal.slurm_nodes, goal.pool_counts)
    health = health or {}
    keep = {n.name for n in nodes if n.name in health and health[n.name].unhealthy}  # never chosen
    # With replace, broken nodes count on no side: the split is of healthy nodes.
    broken = set(keep) if spec.health.replace else set()
    if broken and not problems:
        split = healthy_split(spec, len(nodes) - len(broken), goal.slurm_nodes, goal.pool_counts)
        if split is None:
            broken = set()
        else:
            desired = split
    result = Plan(desired=desired, problems=problems)
    if problems:
        return result
    valid = set(placements(spec))
    in_flight = sum(1 for n in nodes if n.move is not None)
    # No new move while Slurm cannot be seen: the victim choice needs its jobs and states.
    budget = 0 if spec.paused or not slurm.available else max(0, spec.max_concurrent_moves - in_flight)
    count = dict.fromkeys(valid, 0)
    count[NONE] = 0
    for node in nodes:
        if node.name not in broken:
            count[counted_placement(node, valid)] += 1

    def start(node: NodeView, target: str, cause: Cause) -> None:
        source = node.placement if node.placement in valid else NONE
        result.starts.append(Start(node.name, source, target, cause))
        if node.name in keep:
            result.forced.append(node.name)
        if node.name not in broken:
            count[current_placement(node) if current_placement(node) in count else NONE] -= 1
            count[target] += 1

    def may_force(node: NodeView) -> bool:
        """An unhealthy node moves on the on-call's word only with slurmpool.io/force=true."""
        if node.name in keep and not node.force:
            result.refused.append(node.name)
            return False
        return True

    # Pins first: the on-call's word beats the planner's arithmetic.
    # A node with an unreadable record is left alone (decide.py reports it), even when pinned.
    # A node being adopted (slurmpool.io/adopt) waits for its adoption: a move would drain it midway.
    for node in sorted((n for n in nodes if n.pin and not n.problems and n.adopt is None), key=lambda n: n.name):
        if node.move is None and node.pin in valid and node.pin != node.placement and may_force(node) and budget:
            start(node, node.pin, Cause.PIN)
            budget -= 1
    # Then move-now requests: a one-shot pin (see move_now_target); the split is unchanged, so
    # the rebalance below sends another node the other way (a swap).
    for node in sorted((n for n in nodes if n.move_now and not n.problems and n.adopt is None), key=lambda n: n.name):
        want = move_now_target(node, spec, desired, count)
        if node.move is None and want and want != node.placement and node.pin is None and may_force(node) and budget:
            start(node, want, Cause.MOVE_NOW)
            budget -= 1

    # Then moves the split no longer wants, still in a phase that changed nothing for good, go
    # back (scale 5 -> 4 -> 5 must not keep draining a busy node).
    desired_with_none = {**desired, NONE: 0}
    under_way = sorted(((n, n.move) for n in nodes if n.move is not None and not n.problems), key=lambda nm: nm[0].name)
    for node, move in under_way:
        source = move.source if move.source in valid else NONE
        if move.target not in valid:
            # Its inference pool was removed from the spec: whatever the phase, go back where
            # it came from rather than wait for a pool that will not return.
            if move.source in valid:
                result.aborts.append(node.name)
                count[NONE] -= 1
                count[source] += 1
            continue
        # A give-back is Slurm's own request: only parking.py declines it, for the bounds it keeps.
        if not abortable(move) or move.rollback or move.cause in (Cause.PIN, Cause.MOVE_NOW, Cause.GIVEBACK):
            continue
        reserved = source == SLURM and node.name in goal.held  # reserved since it started: another node goes instead
        if reserved or (count[move.target] > desired[move.target] and count[source] < desired_with_none[source]):
            result.aborts.append(node.name)
            count[move.target] -= 1
            count[source] += 1

    surplus = {g: count[g] - desired_with_none[g] for g in count if count[g] > desired_with_none[g]}
    by_priority = [inference(p.name) for p in sorted(spec.inference.pools, key=lambda p: (-p.priority, p.name))]
    deficits = [g for g in [SLURM, *by_priority] if count[g] < desired[g]]
    if not budget or not surplus or not deficits:
        return result
    # One heap of candidates across all groups in surplus; a group stops giving at its surplus.
    already = {s.node for s in result.starts} | {n.name for n in nodes if n.name in goal.held and n.placement == SLURM}
    movable, topo = _candidates(spec, nodes, slurm, now, keep, already)
    by_name = {n.name: n for n in movable}
    whole_only = spec.topology.whole_blocks and spec.topology.enabled
    # The nodes jobs name come to Slurm first, whatever their cost or block: no other node would
    # start those jobs. They serve no other target (a move between pools would take them away).
    named = [by_name[name] for name in dict.fromkeys(goal.named) if name in by_name and side_of(by_name[name].placement) != SLURM]
    named_names = {n.name for n in named}
    by_group: dict[str, list[NodeView]] = {g: [] for g in surplus}
    for n in movable:
        group = n.placement if n.placement in valid else NONE
        if group in by_group and n.name not in named_names:
            by_group[group].append(n)
    candidates: list[Cost] = []  # costs end with the node's name: unique, so the heap never compares further
    for group, members in by_group.items():
        costs = (_cost(n, slurm, topo.get(n.name, topology.NO_BLOCK), n.name in health, spec.drain, now) for n in members)
        # A group gives at most its surplus, and no pass starts more than the budget: only its
        # cheapest that many can be chosen, the same ones in the same order as from all of its
        # nodes (a cost per node held at 50k nodes set off full garbage collections). wholeBlocks
        # may pass over any number of them (a block that cannot move whole): all are kept then.
        candidates += costs if whole_only else heapq.nsmallest(min(budget, surplus[group]), costs)
    heapq.heapify(candidates)
    block_sizes = topology.whole_block_sizes(spec.topology, movable, lambda n: True, slurm) if whole_only else {}
    opened: set[str | None] = set()
    order = itertools.chain.from_iterable(itertools.repeat(g, desired[g] - count[g]) for g in deficits)
    for target in order:
        if not budget:
            break
        chosen: NodeView | None = _named_for(spec, target, named, count, surplus, valid)
        passed_over: list[Cost] = []
        while candidates and chosen is None:
            entry = heapq.heappop(candidates)
            cand = by_name[entry[-1]]
            group = cand.placement if cand.placement in valid else NONE
            if _takes_side_to_floor(spec, count, group, target):
                passed_over.append(entry)  # it may still serve a target on its own side
                continue
            if whole_only and group == SLURM and topo.get(cand.name, topology.NO_BLOCK)[0] == 1:
                block = topology.block_of(spec.topology, cand, slurm)
                if block not in opened and surplus.get(group, 0) < (1 if block is None else block_sizes.get(block, 1)):
                    continue  # moving it would break a block that cannot move whole
                opened.add(block)
            if surplus.get(group, 0) > 0 and group != target:
                chosen = cand
                surplus[group] -= 1
                break
        for entry in passed_over:
            heapq.heappush(candidates, entry)
        if chosen is None:
            if candidates:
                continue
            break
        start(chosen, target, Cause.REBALANCE)
        budget -= 1
    return result


def _named_for(spec: SlurmNodePoolSpec, target: str, named: list[NodeView], count: dict[str, int], surplus: dict[str, int],
               valid: set[str]) -> NodeView | None:
    """The next node jobs name that may go to `target` now (Slurm only), taken off `named`."""
    if target != SLURM:
        return None
    for i, node in enumerate(named):
        group = node.placement if node.placement in valid else NONE
        if surplus.get(group, 0) > 0 and not _takes_side_to_floor(spec, count, group, target):
            surplus[group] -= 1
            return named.pop(i)
    return None


def _takes_side_to_floor(spec: SlurmNodePoolSpec, count: dict[str, int], group: str, target: str) -> bool:
    """A rebalance never takes a side below its floor (minSlurmNodes, minInferenceNodes), nor
    further below it: the desired split honours the floors, but it may count unadopted nodes
    that cannot join yet (not Ready), and the side they would fill must not pay for them now."""
    side, to = side_of(group), side_of(target)
    if group == NONE or side == to:
        return False
    if side == SLURM:
        return count.get(SLURM, 0) <= spec.min_slurm_nodes
    return sum(n for g, n in count.items() if pool_of(g) is not None) <= spec.min_inference_nodes
