"""The planner as it was before it was made faster for issue 12 (commit 67229d0): planner.py's
plan() and topology.py's ranks(), frozen, so test_planner_same_plans can check that the faster
code chooses exactly the same moves. Do not edit; delete it once that change is long settled."""

# ruff: noqa
from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from slurmpool.core import topology
from slurmpool.core.health import NodeHealth
from slurmpool.core.models import SlurmNodePoolSpec, TopologySpec
from slurmpool.core.moves import abortable
from slurmpool.core.planner import Plan, Start, current_placement, counted_placement, desired_split, healthy_split, move_now_target, placements
from slurmpool.core.view import LABEL_SIDE, NONE, SLURM, NodeView, SlurmView, inference


NEVER = float("inf")


def usable_in_slurm(node: NodeView, placement: str, slurm: SlurmView, broken: Collection[str] = ()) -> bool:
    """Serves Slurm and Slurm can use it. A node on its way into Slurm counts (it is held
    drained only until it is resumed); one Slurm does not report cannot be proven unusable.
    An unhealthy node (`broken`) is unusable whatever Slurm says: it breaks its block."""
    if placement != SLURM or node.name in broken:
        return False
    sn = slurm.nodes.get(node.name)
    return node.move is not None or sn is None or (sn.responding and not sn.drain_set)


def ranks(
    topology: TopologySpec,
    nodes: Iterable[NodeView],
    slurm: SlurmView,
    placement_of: Callable[[NodeView], str],
    movable: Callable[[NodeView], bool],
    broken: Collection[str] = (),
) -> dict[str, tuple]:
    """node -> a rank tuple that sorts before the planner's own cost (lower moves first)."""
    if not topology.enabled:
        return {}
    # Each node's block, placement and movability once: this runs for every node of every pass.
    by_slurm = slurm.blocks(topology.slurm_level) if topology.from_slurm else {}
    label = topology.block_label
    blocks: dict[str, list[tuple[NodeView, str, bool]]] = defaultdict(list)
    for node in nodes:
        block = by_slurm.get(node.name) or (node.labels.get(label) if label else None)
        if block is not None:
            blocks[block].append((node, placement_of(node), movable(node)))
    out: dict[str, tuple] = {}
    whole_out: list[tuple[int, str]] = []  # (-movable count, block) of whole Slurm blocks
    into: list[tuple[int, str]] = []  # (missing, block) of blocks that can be completed
    broken_out: list[tuple[int, str]] = []  # (-movable count, block) of broken blocks
    for block, members in blocks.items():
        movable_count = sum(1 for _, p, m in members if m and p == SLURM)
        if all(usable_in_slurm(n, p, slurm, broken) for n, p, _ in members):
            whole_out.append((-movable_count, block))
        else:
            broken_out.append((-movable_count, block))
        missing = [m for _, p, m in members if p != SLURM]
        if missing and all(missing):
            into.append((len(missing), block))
    # Already broken: taking its nodes costs no whole block. The one with most movable nodes
    # first, taken whole before the next: a block broken only by a broken node is whole again
    # once that node is fixed, if its other nodes are still in Slurm.
    for order, (_, block) in enumerate(sorted(broken_out)):
        for n, p, _ in blocks[block]:
            if p == SLURM:
                out[n.name] = (0, order, block)
    for order, (_, block) in enumerate(sorted(whole_out)):
        for n, _, _ in blocks[block]:
            out[n.name] = (1, order, block)
    for order, (missing, block) in enumerate(sorted(into)):
        for n, p, _ in blocks[block]:
            if p != SLURM:
                out[n.name] = (0, order, block)
    return out


def _cost(node: NodeView, slurm: SlurmView, topology_rank: tuple = topology.NO_BLOCK, suspect: bool = False) -> tuple:
    """Lower is cheaper to take away from where the node is now: unadopted nodes first, then
    the topology rank (see topology.py), then drained, idle, suspect (health.py: down or
    failing within its grace: it may be broken), soonest free (Slurm side) or cordoned, fewest
    pods, suspect (inference side)."""
    placement = node.placement
    name = node.name
    if placement == NONE:
        return (0, *topology_rank, int(suspect), 0.0, name)
    if placement == SLURM:
        jobs = slurm.jobs_on(name)
        if not jobs:
            sn = slurm.nodes.get(name)
            # Already draining: nothing to lose. Then idle nodes, then those that may be broken
            # (a slurmctld restart shows every node not responding for a while).
            idle = 2 if suspect or (sn is not None and not sn.responding) else 0 if sn is None or sn.drain_set else 1
            return (1, *topology_rank, idle, 0.0, name)
        return (1, *topology_rank, 3, max(j.end_time.timestamp() if j.end_time else NEVER for j in jobs), name)
    evictable = sum(1 for p in node.pods if p.evictable)
    return (1, *topology_rank, 2 if suspect else 0 if node.unschedulable else 1, float(evictable), name)


def _movable(node: NodeView, now: datetime) -> bool:
    hold = node.hold_until()
    return node.move is None and node.pin is None and node.move_now is None and not node.problems and not (hold and hold > now)


def plan(
    spec: SlurmNodePoolSpec,
    nodes: list[NodeView],
    slurm: SlurmView,
    now: datetime,
    target_slurm: int | None = None,
    pool_counts: dict[str, int] | None = None,
    health: Mapping[str, NodeHealth] | None = None,
) -> Plan:
    desired, problems = desired_split(spec, len(nodes), target_slurm, pool_counts)
    health = health or {}
    keep = {n.name for n in nodes if n.name in health and health[n.name].unhealthy}  # never chosen
    # With replace, broken nodes count on no side: the split is of healthy nodes.
    broken = set(keep) if spec.health.replace else set()
    if broken and not problems:
        split = healthy_split(spec, len(nodes) - len(broken), target_slurm, pool_counts)
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

    def start(node: NodeView, target: str, cause: str) -> None:
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
    for node in sorted((n for n in nodes if n.pin and not n.problems), key=lambda n: n.name):
        if node.move is None and node.pin in valid and node.pin != node.placement and may_force(node) and budget:
            start(node, node.pin, "pin")
            budget -= 1
    # Then move-now requests: a one-shot pin (see move_now_target); the split is unchanged, so
    # the rebalance below sends another node the other way (a swap).
    for node in sorted((n for n in nodes if n.move_now and not n.problems), key=lambda n: n.name):
        want = move_now_target(node, spec, desired, count)
        if node.move is None and want and want != node.placement and node.pin is None and may_force(node) and budget:
            start(node, want, "move-now")
            budget -= 1

    # Then moves the split no longer wants, still in a phase that changed nothing for good, go
    # back (scale 5 -> 4 -> 5 must not keep draining a busy node).
    desired_with_none = {**desired, NONE: 0}
    for node in sorted((n for n in nodes if n.move is not None and not n.problems), key=lambda n: n.name):
        move = node.move
        source = move.source if move.source in valid else NONE
        if move.target not in valid:
            # Its inference pool was removed from the spec: whatever the phase, go back where
            # it came from rather than wait for a pool that will not return.
            if move.source in valid:
                result.aborts.append(node.name)
                count[NONE] -= 1
                count[source] += 1
            continue
        if not abortable(move) or move.rollback or move.cause in ("pin", "move-now"):
            continue
        if count[move.target] > desired[move.target] and count[source] < desired_with_none[source]:
            result.aborts.append(node.name)
            count[move.target] -= 1
            count[source] += 1

    surplus = {g: count[g] - desired_with_none[g] for g in count if count[g] > desired_with_none[g]}
    by_priority = [inference(p.name) for p in sorted(spec.inference.pools, key=lambda p: (-p.priority, p.name))]
    deficits = [g for g in [SLURM, *by_priority] if count[g] < desired[g]]
    if not budget or not surplus or not deficits:
        return result
    # One heap of candidates across all groups in surplus; a group stops giving at its surplus.
    already = {s.node for s in result.starts}
    movable = [n for n in nodes if n.name not in already and n.name not in keep and _movable(n, now)]
    movable_names = {n.name for n in movable}
    topo = ranks(spec.topology, nodes, slurm, current_placement, lambda n: n.name in movable_names, keep)
    candidates = [
        (_cost(n, slurm, topo.get(n.name, topology.NO_BLOCK), n.name in health), n.name, n)
        for n in movable
        if (n.placement if n.placement in valid else NONE) in surplus
    ]
    heapq.heapify(candidates)
    whole_only = spec.topology.whole_blocks and spec.topology.enabled
    block_sizes = topology.whole_block_sizes(spec.topology, movable, lambda n: True, slurm) if whole_only else {}
    opened: set[str] = set()
    order = itertools.chain.from_iterable(itertools.repeat(g, desired[g] - count[g]) for g in deficits)
    for target in order:
        if not budget:
            break
        node = None
        passed_over: list = []
        while candidates:
            entry = heapq.heappop(candidates)
            cand = entry[-1]
            group = cand.placement if cand.placement in valid else NONE
            if _takes_side_to_floor(spec, count, group, target):
                passed_over.append(entry)  # it may still serve a target on its own side
                continue
            if whole_only and group == SLURM and topo.get(cand.name, topology.NO_BLOCK)[0] == 1:
                block = topology.block_of(spec.topology, cand, slurm)
                if block not in opened and surplus.get(group, 0) < block_sizes.get(block, 1):
                    continue  # moving it would break a block that cannot move whole
                opened.add(block)
            if surplus.get(group, 0) > 0 and group != target:
                node = cand
                surplus[group] -= 1
                break
        for entry in passed_over:
            heapq.heappush(candidates, entry)
        if node is None:
            if candidates:
                continue
            break
        start(node, target, "rebalance")
        budget -= 1
    return result


def _takes_side_to_floor(spec: SlurmNodePoolSpec, count: dict[str, int], group: str, target: str) -> bool:
    """A rebalance never takes a side below its floor (minSlurmNodes, minInferenceNodes), nor
    further below it: the desired split honours the floors, but it may count unadopted nodes
    that cannot join yet (not Ready), and the side they would fill must not pay for them now."""
    side, to = group.split(":")[0], target.split(":")[0]
    if group == NONE or side == to:
        return False
    if side == SLURM:
        return count.get(SLURM, 0) <= spec.min_slurm_nodes
    return sum(n for g, n in count.items() if g.startswith("inference:")) <= spec.min_inference_nodes
