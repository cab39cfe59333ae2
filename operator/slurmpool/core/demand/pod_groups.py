"""Demand source: groups of pods that start together, all or none. Pure.

A group (pendingpod.group_of: a PodGroup the pods name, a LeaderWorkerSet group, or the gang
label slurmpool.io/gang) is one demand unit: its pods wait until all of them can start, so
moving fewer nodes than the whole group needs serves nothing and takes work from Slurm. Each
member needs the nodes its own GPUs take (gpu_pods' extended resources or dra_pods' claimed
devices, at least one node: multi-host inference puts one member on each node); members the
group's size names but that are not pending yet count as its largest member. A PodGroup's size is
its gang minCount where the PodGroup index knows it (Seen.pod_groups), else (unknown, a basic
policy, scheduling.k8s.io/v1beta1 not served) its pending pods. Every member must fit the same
inference pool (the highest-priority one the first member fits).

A group is counted whole or not at all: one that needs more nodes than the pool has, than
inference may hold (demand.inference.maxNodes, the inference pools' maxNodes), or, with
topology, than the largest block has, is reported in unstartableJobs, never chased; one that
needs more than demand's bounds let inference gain now waits whole (the message says so).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from slurmpool.core.demand import dra_pods, gpu_pods
from slurmpool.core.demand.decision import bounds
from slurmpool.core.demand.pendingpod import PODGROUP, PendingPod
from slurmpool.core.demand.want import Seen, Want
from slurmpool.core.models import DemandSpec
from slurmpool.core.placement import Side, side_of
from slurmpool.core.view import counts_at


def member_nodes(pod: PendingPod, seen: Seen, first: Mapping[str, str]) -> tuple[int, int]:
    """(GPUs, nodes) of one member: its counted resources or claimed devices (a claim members share
    counted once: dra_pods.sharers), on whole nodes."""
    counted = (seen.spec.demand or DemandSpec()).inference
    asked = pod.asks(counted.resources)
    held = dra_pods.per_node(seen, counted.drivers)
    devices = dra_pods.devices(pod, seen, counted, held, first).own if pod.claims and not asked else 0
    gpus = sum(asked.values()) + devices
    nodes = max(gpu_pods.nodes_for(asked, {r: gpu_pods.per_node(seen, r) for r in asked}), math.ceil(devices / held))
    return gpus, max(nodes, 1) if gpus else 0


def group_size(namespace: str, group: str, members: Sequence[PendingPod], seen: Seen) -> int:
    """The pods of a group: a PodGroup's gang minCount when the index knows it, else what its members
    say (an LWS or gang size; 0: its pending pods are the group)."""
    if group.startswith(PODGROUP):
        min_count = seen.pod_groups.get((namespace, group.removeprefix(PODGROUP)))
        if min_count is not None:
            return min_count
    return max(m.group_size for m in members)


def room(seen: Seen) -> tuple[int, str]:
    """The most nodes one group may get at once, and what sets it."""
    d = seen.spec.demand or DemandSpec()
    limits = [(len(seen.nodes), "the pool has")]
    if d.inference.max_nodes is not None:
        limits.append((d.inference.max_nodes, "inference may hold (demand.inference.maxNodes)"))
    if seen.spec.inference.pools and all(p.max_nodes is not None for p in seen.spec.inference.pools):
        limits.append((sum(p.max_nodes or 0 for p in seen.spec.inference.pools), "the inference pools may hold (maxNodes)"))
    topology = seen.spec.topology
    if topology.enabled:  # as topology.block_of: Slurm's blocks, else the block label
        blocks = seen.slurm.blocks(topology.slurm_level) if topology.from_slurm else {}
        sizes: dict[str, int] = defaultdict(int)
        for node in seen.nodes:
            block = blocks.get(node.name) or (node.labels.get(topology.block_label) if topology.block_label else None)
            if block:
                sizes[block] += 1
        limits.append((max(sizes.values(), default=0), "the largest topology block has"))
    return min(limits)


def free(seen: Seen) -> int:
    """Nodes inference may still gain within demand's bounds: a group that needs more waits whole."""
    lo, _ = bounds(seen.spec, len(seen.nodes))
    at_inference = sum(1 for n in seen.nodes if side_of(counts_at(n)) is Side.INFERENCE)
    return max(0, len(seen.nodes) - lo - at_inference)


def wants(seen: Seen) -> list[Want]:
    """The source (an entry of SOURCES): each group that fits an inference pool, whole."""
    groups: dict[tuple[str, str], list[PendingPod]] = defaultdict(list)
    for pod in seen.pods:
        if pod.group:
            groups[(pod.namespace, pod.group)].append(pod)
    labels, pools = gpu_pods.node_labels(seen), gpu_pods.by_priority(seen)
    most, why = room(seen)
    left = free(seen)
    waiting = gpus = held_back = 0
    pool_nodes: dict[str, int] = defaultdict(int)
    unstartable: list[str] = []
    cache: gpu_pods.FitCache = {}
    first = dra_pods.sharers(seen, (seen.spec.demand or DemandSpec()).inference)
    for (namespace, name), members in sorted(groups.items()):
        sized = [member_nodes(p, seen, first) for p in members]
        if not any(n for _, n in sized):
            continue
        pool = next((q for q in pools if gpu_pods.fits(members[0], q, labels, cache)), None)
        if pool is None or not all(gpu_pods.fits(p, pool, labels, cache) for p in members[1:]):
            continue
        missing = max(0, group_size(namespace, name, members, seen) - len(members))
        need = sum(n for _, n in sized) + missing * max(n for _, n in sized)
        if need > most:
            unstartable.append(f"group {namespace}/{name} needs {need} node(s) at once; {why} {most}")
            continue
        if need > left:  # fewer nodes would serve nothing: it waits until its whole count fits the bounds
            held_back += 1
            continue
        left -= need
        waiting += len(members)
        gpus += sum(g for g, _ in sized)
        pool_nodes[pool.name] += need
    if not waiting and not unstartable and not held_back:
        return []
    total = sum(pool_nodes.values())
    what = f"{waiting} pod(s) in groups that start together want {total} node(s)"
    if held_back:
        what += f" ({held_back} group(s) wait: inference's bound leaves room for fewer nodes than they need)"
    return [Want(Side.INFERENCE, total, waiting, gpus, what, tuple(sorted(pool_nodes.items())), tuple(unstartable))]
