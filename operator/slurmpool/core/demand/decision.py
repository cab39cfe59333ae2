"""Demand's decision: grow the side that waits for GPUs, within bounds, without flapping. Pure.
It reads the sources' combined wants (`Signals.wants`) and where the nodes are (`Placed`),
never a source's own figures.

Decision (one change at most per `cooldown`; the cooldown also restarts at every manual or
schedule change, so a person's or a window's count holds at least that long):
- a side's need is what its sources want less the nodes promised to it but not serving it yet;
  a side *wants* nodes when its need reaches `hysteresis` nodes;
- only Slurm wants: grow Slurm by its need, up to its bound; only inference wants: the same
  the other way; neither: no change (nodes stay where they are);
- both want: `whenBothWant` decides: PreferSlurm or PreferInference (that side grows; once
  it is at its bound, the other side may grow), or Share: move toward `slurmShare` percent
  of the selected nodes (a fixed point: no back and forth while both sides stay hungry).
- pools by name: with the inference side wanting, every pool whose own work waits gets a
  count (its nodes now plus its need, within its maxNodes) in `status.target.demand.pools`;
  the planner serves such counts before pools without one. So the nodes inference gains go
  to the pool whose pods wait, and with Slurm at its bound that pool takes nodes from
  pools without waiting pods (a move between pools). These counts hold until the base changes.
Bounds: Slurm in [slurm.minNodes, slurm.maxNodes], inference in [inference.minNodes,
inference.maxNodes], and the pool's own floors (minSlurmNodes, minInferenceNodes, the
inference pools' maxNodes). Demand's count starts from the base (the manual or schedule
count) and is reset to it whenever the base changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurmpool.core.demand.want import Want
from slurmpool.core.models import DemandSpec, DemandStatus, SlurmNodePoolSpec, seconds
from slurmpool.core.placement import SLURM, Side, pool_of
from slurmpool.core.view import NodeView, counts_at, iso, parse_time


@dataclass(frozen=True)
class Placed:
    """Where the pool's nodes are: settled on each side (no move in flight), and per named pool."""

    slurm_ready: int = 0
    inference_ready: int = 0
    pool_incoming: tuple[tuple[str, int], ...] = ()  # (pool, nodes on their way to it)
    pool_here: tuple[tuple[str, int], ...] = ()  # (pool, nodes at it or on their way)


@dataclass(frozen=True)
class Signals:
    """One pass's demand: every source's wants, and where the nodes are."""

    wants: tuple[Want, ...] = ()
    placed: Placed = Placed()

    def nodes(self, side: Side) -> int:
        return sum(w.nodes for w in self.wants if w.side is side)

    def waiting(self, side: Side) -> int:
        return sum(w.waiting for w in self.wants if w.side is side)

    def gpus(self, side: Side) -> int:
        return sum(w.gpus for w in self.wants if w.side is side)

    def named(self, side: Side) -> tuple[str, ...]:
        """The nodes the side's waiting work names, once each, in the order the sources name them."""
        return tuple(dict.fromkeys(n for w in self.wants if w.side is side for n in w.named))

    def what(self, side: Side) -> str:
        return "; ".join(w.what for w in self.wants if w.side is side)

    @property
    def pool_nodes(self) -> dict[str, int]:
        """Nodes the waiting work of each named pool needs, over every source."""
        needs: dict[str, int] = {}
        for w in self.wants:
            for pool, n in w.pools:
                needs[pool] = needs.get(pool, 0) + n
        return needs

    @property
    def unstartable(self) -> tuple[str, ...]:
        return tuple(why for w in self.wants for why in w.unstartable)


def placed(nodes: Sequence[NodeView]) -> Placed:
    ready_slurm = ready_inf = 0
    incoming: dict[str, int] = {}
    here: dict[str, int] = {}
    for node in nodes:
        if goes := pool_of(counts_at(node)):
            here[goes] = here.get(goes, 0) + 1
        if node.move is not None:
            if to := pool_of(node.move.target):
                incoming[to] = incoming.get(to, 0) + 1
        elif node.placement == SLURM:
            ready_slurm += 1
        elif pool_of(node.placement):
            ready_inf += 1
    return Placed(ready_slurm, ready_inf, tuple(sorted(incoming.items())), tuple(sorted(here.items())))


def bounds(spec: SlurmNodePoolSpec, total: int) -> tuple[int, int]:
    """The Slurm counts demand may set: [lo, hi] (lo > hi: no room)."""
    d = spec.demand or DemandSpec()
    lo = max(d.slurm.min_nodes, spec.min_slurm_nodes)
    hi = min(d.slurm.max_nodes if d.slurm.max_nodes is not None else total, total - spec.min_inference_nodes, total - d.inference.min_nodes)
    if d.inference.max_nodes is not None:
        lo = max(lo, total - d.inference.max_nodes)
    if all(p.max_nodes is not None for p in spec.inference.pools):
        lo = max(lo, total - sum(p.max_nodes or 0 for p in spec.inference.pools))
    return lo, hi


@dataclass(frozen=True)
class Base:
    """The count demand works on top of (the manual or schedule count, target.py): its Slurm
    nodes, the key naming it (a new key: demand starts over) and since when it holds."""

    slurm_nodes: int
    key: str
    since: datetime


@dataclass
class DemandOutcome:
    slurm_nodes: int
    status: DemandStatus
    changed: bool = False  # demand changed its count this pass (an Event says why)
    message: str = ""
def decide_demand(
    spec: SlurmNodePoolSpec,
    total: int,
    base: Base,
    previous: DemandStatus | None,
    sig: Signals,
    now: datetime,
) -> DemandOutcome:
    """Demand's count for this pass, from the base, the previous state and the sources' wants."""
    d = spec.demand or DemandSpec()
    if previous is not None and previous.base_key == base.key and previous.slurm_nodes is not None:
        current, current_pools = previous.slurm_nodes, dict(previous.pools)
        last = parse_time(previous.last_change) or base.since
    else:
        current, current_pools, last = base.slurm_nodes, {}, base.since  # a new base: demand starts over, after a cooldown
    incoming_slurm = max(0, current - sig.placed.slurm_ready)
    incoming_inf = max(0, (total - current) - sig.placed.inference_ready)
    slurm_wants = max(0, sig.nodes(Side.SLURM) - incoming_slurm)
    inf_wants = max(0, sig.nodes(Side.INFERENCE) - incoming_inf)
    incoming_pool = dict(sig.placed.pool_incoming)
    pool_wants = {p: w for p, need in sorted(sig.pool_nodes.items()) if (w := max(0, need - incoming_pool.get(p, 0))) > 0}
    status = DemandStatus(
        slurm_nodes=current,
        base=base.slurm_nodes,
        base_key=base.key,
        last_change=iso(last),
        pending_jobs=sig.waiting(Side.SLURM),
        pending_job_gpus=sig.gpus(Side.SLURM),
        pending_pods=sig.waiting(Side.INFERENCE),
        pending_pod_gpus=sig.gpus(Side.INFERENCE),
        slurm_wants=slurm_wants,
        inference_wants=inf_wants,
        pool_wants=pool_wants,
        pools=current_pools,
        unstartable_jobs=list(sig.unstartable),
    )
    lo, hi = bounds(spec, total)
    if lo > hi:
        status.message = f"bounds leave no room: Slurm would need at least {lo} and at most {hi} nodes"
        return DemandOutcome(current, status)
    ws, wi = slurm_wants >= d.hysteresis, inf_wants >= d.hysteresis
    proposal, why = current, ""
    slurm_text = f"{sig.what(Side.SLURM)}: Slurm needs {slurm_wants} more node(s)"
    inf_text = f"{sig.what(Side.INFERENCE)}: inference needs {inf_wants} more node(s)"
    if ws and wi:
        # The preferred side gets nodes while it can grow; at its bound, the other side may.
        if d.when_both_want == "PreferSlurm" and current < hi:
            proposal, why = min(hi, current + slurm_wants), f"both sides want nodes, Slurm preferred; {slurm_text}; {inf_text}"
        elif d.when_both_want == "PreferSlurm":
            proposal, why = max(lo, current - inf_wants), f"both sides want nodes, Slurm preferred but at its bound ({hi}); {inf_text}"
        elif d.when_both_want == "PreferInference" and current > lo:
            proposal, why = max(lo, current - inf_wants), f"both sides want nodes, inference preferred; {inf_text}; {slurm_text}"
        elif d.when_both_want == "PreferInference":
            proposal, why = min(hi, current + slurm_wants), f"both sides want nodes, inference preferred but at its bound ({total - lo}); {slurm_text}"
        else:
            share = min(hi, max(lo, (d.slurm_share * total + 50) // 100))
            if current < share:
                proposal = min(share, current + slurm_wants)
            elif current > share:
                proposal = max(share, current - inf_wants)
            why = f"both sides want nodes, sharing {d.slurm_share}% for Slurm ({share} node(s)); {slurm_text}; {inf_text}"
    elif ws:
        proposal, why = (min(hi, current + slurm_wants) if current < hi else current), slurm_text
        if current >= hi:
            why += f" but Slurm is at its bound ({hi})"
    elif wi:
        proposal, why = (max(lo, current - inf_wants) if current > lo else current), inf_text
        if current <= lo:
            why += f" but inference is at its bound ({total - lo})"
    pools = _pool_counts(spec, total, current_pools, pool_wants, dict(sig.placed.pool_here)) if wi else current_pools
    if proposal == current and pools == current_pools:
        status.message = why or "no unmet demand"
        return DemandOutcome(current, status)
    change = "; ".join(
        ([f"{current} -> {proposal} Slurm node(s)"] if proposal != current else [])
        + [f"pool {p} {current_pools.get(p, '-')} -> {n}" for p, n in sorted(pools.items()) if current_pools.get(p) != n]
    )
    ready_at = last + timedelta(seconds=seconds(d.cooldown))
    if now < ready_at:
        status.message = f"cooldown until {iso(ready_at)}: then {change} ({why})"
        return DemandOutcome(current, status)
    status.slurm_nodes, status.pools = proposal, pools
    status.last_change = iso(now)
    status.message = f"{change}: {why}"
    return DemandOutcome(proposal, status, changed=True, message=status.message)


def _pool_counts(spec: SlurmNodePoolSpec, total: int, current: dict[str, int], wants: dict[str, int], here: dict[str, int]) -> dict[str, int]:
    """Each pool whose pods wait asks for its nodes now plus its need, within its maxNodes."""
    counts = dict(current)
    for pool in spec.inference.pools:
        if pool.name in wants:
            cap = pool.max_nodes if pool.max_nodes is not None else total
            counts[pool.name] = min(cap, max(current.get(pool.name, 0), here.get(pool.name, 0)) + wants[pool.name])
    return counts
