"""Demand: grow the side that waits for GPUs, within bounds, without flapping. Pure.

The sources, read each pass (`SOURCES`: one module each, in this order):
- `slurm_jobs`: jobs pending in the pool's Slurm partition that more nodes would start (waiting
  reasons, gang jobs larger than the usable nodes, idle nodes deducted, whole nodes for
  --exclusive); a job that names nodes (-w) wants those nodes back, by name; jobs no split of
  the pool could start are reported, never counted.
- `gpu_pods`: unschedulable pods asking for a counted extended resource (spec.demand.inference.
  resources, default nvidia.com/gpu) that fit an inference pool, each for the highest-priority
  pool it fits.
- `dra_pods`: unschedulable pods whose ResourceClaims ask for devices of a counted DeviceClass
  (default gpu.nvidia.com), counted against the devices the drivers' ResourceSlices publish.
- `pod_groups`: groups of pods that start together (a PodGroup, a LeaderWorkerSet group, the
  gang label slurmpool.io/gang): one unit of N nodes, whole or not at all.
Each yields `Want`s (want.py): what its waiting work wants from one side, and from which named
pools. A new source is one more module and one more entry here;
the decision (decision.py: hysteresis, cooldown, bounds, whenBothWant, per-pool counts) adds
up the wants of every source and reads nothing else of them.
"""

from __future__ import annotations

from slurmpool.core.demand import dra_pods, gpu_pods, pod_groups, slurm_jobs
from slurmpool.core.demand.decision import Base, DemandOutcome, Placed, Signals, bounds, decide_demand, placed
from slurmpool.core.demand.pendingpod import PendingPod
from slurmpool.core.demand.want import Seen, Source, Want

__all__ = [
    "SOURCES", "Base", "DemandOutcome", "PendingPod", "Placed", "Seen", "Signals", "Want", "bounds", "decide_demand", "signals",
]

SOURCES: tuple[Source, ...] = (slurm_jobs.wants, gpu_pods.wants, dra_pods.wants, pod_groups.wants)


def signals(seen: Seen) -> Signals:
    """Every source's wants this pass, and where the pool's nodes are."""
    return Signals(tuple(w for source in SOURCES for w in source(seen)), placed(seen.nodes))
