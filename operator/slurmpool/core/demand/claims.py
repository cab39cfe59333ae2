"""Dynamic Resource Allocation objects (resource.k8s.io/v1), as the operator's DRA watches keep them
(adapters/kube.py reads their bodies through these functions). Pure.

- A ResourceClaimTemplate or ResourceClaim asks for devices: `spec.devices.requests[]`, each
  `exactly` {deviceClassName, allocationMode ExactCount (count, default 1) or All} or
  `firstAvailable` (alternatives in the order the scheduler tries them: the first is counted).
  An allocated claim asks for nothing more: it is served where it is.
- A ResourceSlice publishes a node's devices for one driver (`spec.nodeName`, `spec.driver`,
  `spec.devices`). NVIDIA's driver (gpu.nvidia.com) publishes whole GPUs with the attribute
  `type: gpu` beside MIG (`mig`) and VFIO (`vfio`) devices carved from the same GPUs, so only
  devices without a type or of type gpu are counted: a GPU is never counted twice.
"""

from __future__ import annotations

from typing import Any

ALL = -1  # allocationMode All: every matching device of one node
TEMPLATE, CLAIM = "template", "claim"
MAX_REQUESTS = 32  # the API's limit on requests of one claim

Asks = tuple[tuple[str, int], ...]  # (deviceClassName, count or ALL)


def key(kind: str, namespace: str, name: str) -> str:
    """How the index names a template or claim, and how a pod's reference finds it."""
    return f"{kind}:{namespace}/{name}"


def _count(request: dict[str, Any]) -> int:
    if request.get("allocationMode") == "All":
        return ALL
    try:
        return max(0, int(request.get("count", 1)))
    except (TypeError, ValueError):
        return 0


def device_asks(claim_spec: object) -> Asks:
    """The devices a claim's spec asks for, per request."""
    devices = claim_spec.get("devices") if isinstance(claim_spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    asks: list[tuple[str, int]] = []
    for request in (requests if isinstance(requests, list) else [])[:MAX_REQUESTS]:
        if not isinstance(request, dict):
            continue
        exactly = request.get("exactly")
        alternatives = request.get("firstAvailable")
        chosen = exactly if isinstance(exactly, dict) else (alternatives[0] if isinstance(alternatives, list) and alternatives else None)
        if isinstance(chosen, dict) and isinstance(chosen.get("deviceClassName"), str):
            asks.append((chosen["deviceClassName"], _count(chosen)))
    return tuple(asks)


def template_asks(body: dict[str, Any]) -> Asks:
    """A ResourceClaimTemplate: the claim it makes for each pod (`spec.spec`)."""
    return device_asks((body.get("spec") or {}).get("spec"))


def claim_asks(body: dict[str, Any]) -> Asks:
    """A ResourceClaim: nothing once allocated, else what its spec asks for."""
    if ((body.get("status") or {}).get("allocation")) is not None:
        return ()
    return device_asks(body.get("spec"))


def _whole_gpu(device: object, driver: str) -> bool:
    """A device that is no part of another: no `type` attribute (short, or qualified by the driver's domain), or `gpu`."""
    if not isinstance(device, dict):
        return False
    attributes = device.get("attributes")
    kind = (attributes.get("type") or attributes.get(f"{driver}/type")) if isinstance(attributes, dict) else None
    return not isinstance(kind, dict) or kind.get("string") in (None, "gpu")


def slice_devices(body: dict[str, Any]) -> tuple[str, str, int]:
    """A ResourceSlice: (its node, its driver, the whole devices it lists). A slice of no single
    node (nodeSelector, allNodes) is ('', driver, n): no node's own."""
    spec = body.get("spec") or {}
    devices, driver = spec.get("devices"), str(spec.get("driver") or "")
    count = sum(1 for d in devices if _whole_gpu(d, driver)) if isinstance(devices, list) else 0
    return str(spec.get("nodeName") or ""), driver, count
