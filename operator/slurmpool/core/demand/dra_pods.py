"""Demand source: pods that wait for GPUs through Dynamic Resource Allocation claims. Pure.

An unschedulable pod whose ResourceClaims (spec.resourceClaims: from a template, or a claim by
name; claims.py reads them) ask for devices of a DeviceClass in spec.demand.inference.deviceClasses
(default gpu.nvidia.com) and that fits one of the pool's inference pools (gpu_pods.fits) is
inference demand for the nodes that would hold its devices. A node holds the whole devices the
ResourceSlices of the pool's drivers publish for it (the most any node of the pool has;
demand.gpusPerNode, when set, wins; none publishes yet: the count in slurm.gres, else 8);
allocationMode All asks for one such node. A claim several pods name (resourceClaimName) is one
allocation: its devices count once, for the first of them (sharers); a template makes a claim
per pod. A pod that asks, in one claim request, for more devices than a node holds can start on
no split of the pool: reported, not counted. A pod that also asks for a counted extended
resource is gpu_pods' (never counted twice); pods of a group are pod_groups'.

A node moved to inference serves DRA pods only once its driver publishes slices for it, and the
scheduler places them there only at its next try after that (its back-off: seconds): until a
settled node of the pool runs a pod (other than DaemonSets', static and slurmd pods), for at
most LAG_BOUND after its move ended, it counts against that pool's need, so the same need does
not move a second node while the first one's slices or the scheduler lag (measured on the lab:
a third node moved for two pods without it). Past the bound an empty node is idle for another
reason, and the pods' need counts whole again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import NamedTuple

from slurmpool.core.demand.claims import ALL, CLAIM, key
from slurmpool.core.demand.gpu_pods import FitCache, by_priority, fits, node_labels
from slurmpool.core.demand.pendingpod import PendingPod
from slurmpool.core.demand.want import Seen, Want
from slurmpool.core.models import DemandSpec, InferenceDemand
from slurmpool.core.placement import Side, pool_of
from slurmpool.core.view import NodeView, counts_at


# How long after its move ended a node serving no DRA pod yet counts against its pool's need.
# Enough for the driver's kubelet plugin to publish the node's ResourceSlices (within a minute;
# the lab's stand-in: 2 s), for the scheduler's next try at the pods (a ResourceSlice event requeues
# them; kube-scheduler's podMaxBackoffSeconds, 10 s by default, is the longest back-off) and for a
# pass to see the pod placed. A node still empty after that is idle for another reason (the pods
# do not fit it, or capacity nobody uses): counted longer, it would hold their need back for good.
LAG_BOUND = timedelta(minutes=2)


def per_node(seen: Seen, drivers: list[str]) -> int:
    """The whole devices one node holds: demand.gpusPerNode, else the slices, else gres or 8."""
    if seen.spec.demand and seen.spec.demand.gpus_per_node:
        return seen.spec.demand.gpus_per_node
    return max((node.gpus((), drivers) for node in seen.nodes), default=0) or seen.gpus_per_node


class Claimed(NamedTuple):
    """What one pod's claims ask for of the counted DeviceClasses."""

    asked: int  # devices its claims ask for (claims not indexed yet: none)
    own: int  # of those, the ones it counts: a claim several pods name counts for one of them only
    why: str  # why no node could hold them ('' when one can)


def sharers(seen: Seen, counted: InferenceDemand) -> dict[str, str]:
    """Per claim named by several pods (claims.key), the pod that counts its devices: the first by
    key. A named claim is one allocation however many pods share it; a template makes one per pod."""
    first: dict[str, str] = {}
    for pod in seen.pods:
        if pod.asks(counted.resources):
            continue
        for kind, name in pod.claims:
            if kind == CLAIM:
                k = key(kind, pod.namespace, name)
                first[k] = min(first.get(k, pod.key), pod.key)
    return first


def devices(pod: PendingPod, seen: Seen, counted: InferenceDemand, held: int, first: Mapping[str, str]) -> Claimed:
    """The counted devices the pod's claims ask for, those it counts itself (`first`: sharers), and why
    no node could hold them."""
    asked = own = 0
    why = ""
    named: set[str] = set()
    for kind, name in pod.claims:
        k = key(kind, pod.namespace, name)
        if kind == CLAIM and k in named:  # two of its entries name one claim: one allocation
            continue
        named.add(k)
        for device_class, count in seen.claims.get(k, ()):
            if device_class not in counted.device_classes:
                continue
            n = held if count == ALL else count
            asked += n
            own += n if first.get(k, pod.key) == pod.key else 0
            if n > held:
                why = f"pod {pod.key} asks for {n} {device_class} device(s) in one claim; a node holds {held}"
    return Claimed(asked, own, why)


def unused(node: NodeView) -> bool:
    """No pod placed on it yet but DaemonSets', static and slurmd pods."""
    return not any(not (p.slurmd or p.mirror or "DaemonSet" in p.owner_kinds or p.ended) for p in node.pods)


def lagging(seen: Seen, drivers: list[str]) -> dict[str, int]:
    """Per inference pool, its nodes not serving yet: settled there within LAG_BOUND, and their
    driver has published no slices or the scheduler has placed nothing on them since."""
    out: dict[str, int] = {}
    for node in seen.nodes:
        pool = pool_of(counts_at(node))
        if pool and node.move is None and recent(node, seen.now) and (node.gpus((), drivers) == 0 or unused(node)):
            out[pool] = out.get(pool, 0) + 1
    return out


def recent(node: NodeView, now: datetime) -> bool:
    """Its move ended (slurmpool.io/settled-at) within LAG_BOUND; no record of when: not recent."""
    return node.settled_at is not None and now - node.settled_at <= LAG_BOUND


def wants(seen: Seen) -> list[Want]:
    """The source (an entry of SOURCES): what the DRA pods that fit an inference pool want from inference."""
    counted = (seen.spec.demand or DemandSpec()).inference
    held = per_node(seen, counted.drivers)
    labels, pools = node_labels(seen), by_priority(seen)
    waiting, unstartable = 0, []
    pool_devices: dict[str, int] = {}
    cache: FitCache = {}
    first = sharers(seen, counted)
    for pod in seen.pods:
        if not pod.claims or pod.asks(counted.resources) or pod.group:
            continue
        claimed = devices(pod, seen, counted, held, first)
        pool = next((q for q in pools if fits(pod, q, labels, cache)), None) if claimed.asked else None
        if pool is None:
            continue
        if claimed.why:
            unstartable.append(claimed.why)
            continue
        waiting += 1
        pool_devices[pool.name] = pool_devices.get(pool.name, 0) + claimed.own
    late = lagging(seen, counted.drivers)
    needs = {p: max(0, math.ceil(n / held) - late.get(p, 0)) for p, n in sorted(pool_devices.items())}
    gpus = sum(pool_devices.values())
    if not waiting and not unstartable:
        return []
    what = f"{waiting} unschedulable pod(s) claim {gpus} GPU(s)"
    if late_nodes := sum(late.get(p, 0) for p in pool_devices):
        what += (f" ({late_nodes} node(s) of theirs not serving yet, settled there in the last {LAG_BOUND.total_seconds():.0f} s:"
                 " their driver's ResourceSlices or the scheduler lag)")
    return [Want(Side.INFERENCE, sum(needs.values()), waiting, gpus, what, tuple(needs.items()), tuple(unstartable))]
