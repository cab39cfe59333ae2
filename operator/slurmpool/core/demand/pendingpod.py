"""An unschedulable pod asking for GPUs, as the operator's pod index keeps it (adapters/kube.py
builds it from the pod's body). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from slurmpool.core.fit import PodNeeds, Requirement, needs_of

GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class PendingPod:
    """A pod the scheduler could not place that asks for GPUs (from the operator's index)."""

    namespace: str
    name: str
    gpus: int
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    affinity: tuple[tuple[Requirement, ...], ...] = ()  # required node affinity terms, as fit.PodNeeds has them

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def needs(self) -> PodNeeds:
        return PodNeeds(self.node_selector, self.affinity, self.tolerations)


def _gpus(resources: dict[str, Any] | None) -> int:
    resources = resources or {}
    for part in ("limits", "requests"):
        value = (resources.get(part) or {}).get(GPU)
        if value is not None:
            try:
                return int(math.ceil(float(str(value))))
            except ValueError:
                return 0
    return 0


def pod_gpus(spec: dict[str, Any]) -> int:
    """nvidia.com/gpu a pod asks for: the sum over containers, or the largest init container."""
    main = sum(_gpus(c.get("resources")) for c in spec.get("containers") or [])
    init = max([_gpus(c.get("resources")) for c in spec.get("initContainers") or []] or [0])
    return max(main, init)


def is_pending_gpu_pod(spec: dict[str, Any], status: dict[str, Any]) -> bool:
    """No node, Pending, PodScheduled=False/Unschedulable, and asks for GPUs."""
    if spec.get("nodeName") or (status or {}).get("phase", "Pending") != "Pending":
        return False
    unschedulable = any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (status or {}).get("conditions") or []
    )
    return unschedulable and pod_gpus(spec) > 0


def pending_pod(body: dict[str, Any]) -> PendingPod:
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
