"""Demand: grow the side that waits for GPUs, within bounds, without flapping. Pure.

Signals, read each pass:
- Slurm: jobs PENDING in `spec.slurm.partition` that want GPUs and whose reason means "waits
  for nodes" (`waits_for_nodes`: Resources, Priority, ReqNodeNotAvail, NodeDown,
  PartitionNodeLimit and the desc "Nodes required for job are DOWN, DRAINED or reserved..." in
  every spelling squeue, scontrol and slurmrestd print; not jobs held, waiting on a dependency,
  a begin time or a limit: more nodes would not start those). A job that asks for more nodes
  than the pool's usable Slurm nodes (a gang job while nodes are parked for inference) needs
  its node count less those usable nodes, busy or not; the other jobs need
  max(ceil(their GPUs / GPUs per node), the largest one's node count) less the idle Slurm
  nodes. Slurm's need is the larger of the two, less the nodes promised to Slurm but not
  serving it yet. A job no split of the pool could start (more nodes than the pool has, more
  GPUs per node than its nodes have, BadConstraints) is reported in
  `status.target.demand.unstartableJobs` and an Event, never counted.
- Inference: pods Pending and Unschedulable that request nvidia.com/gpu and would fit one
  of the pool's inference pools (their nodeSelector and required node affinity are met by
  the pool's labels over a node's own labels, and they tolerate the pool's taints). Need: ceil(GPUs / GPUs per node)
  less the nodes promised to inference but not serving it yet. Each pod counts for the
  highest-priority pool it fits, so the need is also known per named pool.

Decision (one change at most per `cooldown`; the cooldown also restarts at every manual or
schedule change, so a person's or a window's count holds at least that long):
- a side *wants* nodes when its need reaches `hysteresis` nodes;
- only Slurm wants: grow Slurm by its need, up to its bound; only inference wants: the same
  the other way; neither: no change (nodes stay where they are);
- both want: `whenBothWant` decides: PreferSlurm or PreferInference (that side grows; once
  it is at its bound, the other side may grow), or Share: move toward `slurmShare` percent
  of the selected nodes (a fixed point: no back and forth while both sides stay hungry).
- pools by name: with the inference side wanting, every pool whose own pods wait gets a
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

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurmbridge.models import SlurmJob, gpu_count

from slurmpool.core.fit import PodNeeds, misfit, needs_of
from slurmpool.core.models import DemandSpec, DemandStatus, InferencePool, SlurmNodePoolSpec, seconds
from slurmpool.core.view import iso, parse_time
from slurmpool.core.view import SLURM, NodeView, SlurmView, counts_at, pool_of

DEFAULT_GPUS_PER_NODE = 8
# A pending job's reason, normalised (lower case, "_" as " "), that more nodes could end. Slurm
# prints a job's state_desc instead of its reason when one is set: squeue %r and slurmrestd's
# state_description as is, scontrol with "_" for " " (fixtures: tests/fixtures/pending_reasons).
# The desc "Nodes required for job are DOWN, DRAINED[, REBOOTING] or reserved for jobs in higher
# priority partitions" (job_scheduler.c) is WAIT_RESOURCES: the partition lacks undrained nodes,
# the usual state while nodes are parked for inference. PartitionNodeLimit: more nodes than the
# partition has now (dynamic nodes leave it while parked). Others (Dependency, BeginTime,
# JobHeldUser, QOS and association limits, PartitionDown...) are not demand for nodes.
WAITING_REASONS = (
    "resources",
    "priority",
    "reqnodenotavail",
    "nodes required for job are down",
    "nodedown",
    "partitionnodelimit",
)
# Reasons by which Slurm says the job can never run as configured: reported, never counted.
NEVER_REASONS = ("badconstraints",)


@dataclass(frozen=True)
class PendingPod:
    """A pod the scheduler could not place that asks for GPUs (from the operator's index)."""

    namespace: str
    name: str
    gpus: int
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    affinity: tuple = ()  # required node affinity terms, as fit.PodNeeds has them

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def needs(self) -> PodNeeds:
        return PodNeeds(self.node_selector, self.affinity, self.tolerations)


@dataclass(frozen=True)
class Signals:
    pending_jobs: int = 0
    job_gpus: int = 0
    job_nodes: int = 0  # nodes the pending jobs that fit in the usable nodes need in all
    gang_nodes: int = 0  # nodes the largest job asking for more than the usable Slurm nodes lacks
    pending_pods: int = 0
    pod_gpus: int = 0
    pod_nodes: int = 0
    slurm_idle: int = 0  # settled Slurm nodes idle in Slurm: pending jobs could use them already
    slurm_ready: int = 0  # settled on each side, no move in flight
    inference_ready: int = 0
    pool_nodes: tuple[tuple[str, int], ...] = ()  # (pool, nodes its waiting pods need)
    pool_incoming: tuple[tuple[str, int], ...] = ()  # (pool, nodes on their way to it)
    pool_here: tuple[tuple[str, int], ...] = ()  # (pool, nodes at it or on their way)
    unstartable: tuple[str, ...] = ()  # pending jobs no split of the pool could start, and why


def gpus_per_node(spec: SlurmNodePoolSpec) -> int:
    if spec.demand and spec.demand.gpus_per_node:
        return spec.demand.gpus_per_node
    return gpu_count(spec.slurm.gres or "") or DEFAULT_GPUS_PER_NODE


def _normal(reason: str) -> str:
    return " ".join(reason.replace("_", " ").split()).lower()


def job_waits_for_nodes(reason: str) -> bool:
    """Does this reason, in any of Slurm's spellings, mean that more nodes could start the job?"""
    return _normal(reason).startswith(WAITING_REASONS)


def never_starts(job: SlurmJob, pool_nodes: int, gpn: int) -> str | None:
    """Why no split of a pool of `pool_nodes` nodes with `gpn` GPUs each could start the job, or None."""
    if _normal(job.reason).startswith(NEVER_REASONS):
        return f"job {job.job_id}: Slurm says it can never run as configured ({job.reason})"
    if job.num_nodes > pool_nodes:
        return f"job {job.job_id}: asks for {job.num_nodes} nodes, the pool has {pool_nodes}"
    if job.gpus_per_node > gpn:
        return f"job {job.job_id}: asks for {job.gpus_per_node} GPUs per node, the pool's nodes have {gpn}"
    return None


def fits(pod: PendingPod, pool: InferencePool, node_labels: list[dict[str, str]], cache: dict | None = None) -> bool:
    """Would the pod run on some node of this inference pool? The node's own labels with the
    pool's on top must meet its nodeSelector and required node affinity, and it must
    tolerate the pool's taints. Nodes are judged only by the label keys the pod asks about,
    so a Deployment's many pods cost one look at the nodes (`cache`, per pass)."""
    needs = pod.needs
    keys = tuple(sorted({k for k, _ in needs.node_selector} | {r[0] for term in needs.affinity for r in term}))
    if cache is None:
        cache = {}
    if keys not in cache:
        cache[keys] = {tuple((k, labels.get(k)) for k in keys) for labels in node_labels}
    taints = [t.model_dump() for t in pool.taints]
    for seen in cache[keys]:
        labels = {k: v for k, v in seen if v is not None}
        labels.update(pool.labels)
        if misfit(needs, labels, taints) is None:
            return True
    return False


def signals(spec: SlurmNodePoolSpec, nodes: list[NodeView], slurm: SlurmView, pods: list[PendingPod]) -> Signals:
    gpn = gpus_per_node(spec)
    candidates = [
        j
        for j in slurm.jobs
        if j.state == "PENDING"
        and spec.slurm.partition in j.partition.split(",")
        and j.gpus_wanted > 0
        and (job_waits_for_nodes(j.reason) or _normal(j.reason).startswith(NEVER_REASONS))
    ]
    unstartable = {j.job_id: why for j in candidates if (why := never_starts(j, len(nodes), gpn))}
    jobs = [j for j in candidates if j.job_id not in unstartable]
    usable = _usable_slurm_nodes(nodes, slurm)
    gang = [j for j in jobs if j.num_nodes > usable]
    fitting = [j for j in jobs if j.num_nodes <= usable]
    fitting_gpus = sum(j.gpus_wanted for j in fitting)
    job_nodes = max([math.ceil(fitting_gpus / gpn)] + [j.num_nodes for j in fitting]) if fitting else 0
    idle = ready_slurm = ready_inf = 0
    incoming: dict[str, int] = {}
    here: dict[str, int] = {}
    for node in nodes:
        goes = counts_at(node)
        if pool_of(goes):
            here[pool_of(goes)] = here.get(pool_of(goes), 0) + 1
        if node.move is not None:
            if pool_of(node.move.target):
                incoming[pool_of(node.move.target)] = incoming.get(pool_of(node.move.target), 0) + 1
            continue
        if node.placement == SLURM:
            ready_slurm += 1
            sn = slurm.nodes.get(node.name) if slurm.available else None
            if sn is not None and sn.state == "IDLE" and not sn.drain_set and sn.responding and not slurm.jobs_on(node.name):
                idle += 1
        elif pool_of(node.placement):
            ready_inf += 1
    # Node labels as inference would see them: without the pool-managed ones, which fits() checks.
    managed = {k for p in spec.inference.pools for k in p.labels}
    labels = [{k: v for k, v in n.labels.items() if k not in managed} for n in nodes]
    by_priority = sorted(spec.inference.pools, key=lambda p: (-p.priority, p.name))
    fitting = []
    pool_gpus: dict[str, int] = {}
    cache: dict = {}
    for pod in pods:
        pool = next((q for q in by_priority if fits(pod, q, labels, cache)), None) if pod.gpus > 0 else None
        if pool is not None:
            fitting.append(pod)
            pool_gpus[pool.name] = pool_gpus.get(pool.name, 0) + pod.gpus
    pod_gpus = sum(p.gpus for p in fitting)
    return Signals(
        pending_jobs=len(jobs),
        job_gpus=sum(j.gpus_wanted for j in jobs),
        job_nodes=job_nodes,
        gang_nodes=max((j.num_nodes - usable for j in gang), default=0),
        pending_pods=len(fitting),
        pod_gpus=pod_gpus,
        pod_nodes=math.ceil(pod_gpus / gpn) if pod_gpus else 0,
        slurm_idle=idle,
        slurm_ready=ready_slurm,
        inference_ready=ready_inf,
        pool_nodes=tuple(sorted((name, math.ceil(g / gpn)) for name, g in pool_gpus.items())),
        pool_incoming=tuple(sorted(incoming.items())),
        pool_here=tuple(sorted(here.items())),
        unstartable=tuple(why for _, why in sorted(unstartable.items())),
    )


def _usable_slurm_nodes(nodes: list[NodeView], slurm: SlurmView) -> int:
    """Settled Slurm nodes a job could get, busy or idle: in Slurm, responding, not drained."""
    usable = 0
    for node in nodes:
        if node.move is None and node.placement == SLURM and slurm.available:
            sn = slurm.nodes.get(node.name)
            usable += sn is not None and sn.responding and not sn.drain_set
    return usable


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
    """Demand's count for this pass, from the base, the previous state and the signals."""
    d = spec.demand or DemandSpec()
    if previous is not None and previous.base_key == base.key and previous.slurm_nodes is not None:
        current, current_pools = previous.slurm_nodes, dict(previous.pools)
        last = parse_time(previous.last_change) or base.since
    else:
        current, current_pools, last = base.slurm_nodes, {}, base.since  # a new base: demand starts over, after a cooldown
    incoming_slurm = max(0, current - sig.slurm_ready)
    incoming_inf = max(0, (total - current) - sig.inference_ready)
    slurm_wants = max(0, max(sig.job_nodes - sig.slurm_idle, sig.gang_nodes) - incoming_slurm)
    inf_wants = max(0, sig.pod_nodes - incoming_inf)
    incoming_pool = dict(sig.pool_incoming)
    pool_wants = {p: w for p, need in sig.pool_nodes if (w := max(0, need - incoming_pool.get(p, 0))) > 0}
    status = DemandStatus(
        slurm_nodes=current,
        base=base.slurm_nodes,
        base_key=base.key,
        last_change=iso(last),
        pending_jobs=sig.pending_jobs,
        pending_job_gpus=sig.job_gpus,
        pending_pods=sig.pending_pods,
        pending_pod_gpus=sig.pod_gpus,
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
    gang_text = f", one asks for {sig.gang_nodes} node(s) more than Slurm has usable" if sig.gang_nodes else ""
    slurm_text = f"{sig.pending_jobs} pending job(s) want {sig.job_gpus} GPU(s){gang_text}: Slurm needs {slurm_wants} more node(s)"
    inf_text = f"{sig.pending_pods} unschedulable pod(s) want {sig.pod_gpus} GPU(s): inference needs {inf_wants} more node(s)"
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
    pools = _pool_counts(spec, total, current_pools, pool_wants, dict(sig.pool_here)) if wi else current_pools
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


# ---------------------------------------------------------------- the pending-GPU-pod index (compact views)

GPU = "nvidia.com/gpu"


def _gpus(resources: dict | None) -> int:
    resources = resources or {}
    for part in ("limits", "requests"):
        value = (resources.get(part) or {}).get(GPU)
        if value is not None:
            try:
                return int(math.ceil(float(str(value))))
            except ValueError:
                return 0
    return 0


def pod_gpus(spec: dict) -> int:
    """nvidia.com/gpu a pod asks for: the sum over containers, or the largest init container."""
    main = sum(_gpus(c.get("resources")) for c in spec.get("containers") or [])
    init = max([_gpus(c.get("resources")) for c in spec.get("initContainers") or []] or [0])
    return max(main, init)


def is_pending_gpu_pod(spec: dict, status: dict) -> bool:
    """No node, Pending, PodScheduled=False/Unschedulable, and asks for GPUs."""
    if spec.get("nodeName") or (status or {}).get("phase", "Pending") != "Pending":
        return False
    unschedulable = any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (status or {}).get("conditions") or []
    )
    return unschedulable and pod_gpus(spec) > 0


def pending_pod(body: dict) -> PendingPod:
    meta, spec = body.get("metadata", {}), body.get("spec", {}) or {}
    needs = needs_of(spec)
    return PendingPod(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        gpus=pod_gpus(spec),
        node_selector=needs.node_selector,
        tolerations=needs.tolerations,
        affinity=needs.affinity,
    )
