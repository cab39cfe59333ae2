"""An unschedulable pod that may wait for GPUs, as the operator's pod index keeps it (adapters/kube.py
builds it from the pod's body). Pure.

The index cannot know which names each pool counts as GPUs (spec.demand.inference.resources,
deviceClasses), so it keeps every unschedulable pod that asks for an extended resource or has
ResourceClaims, with what it asks; the sources pick what their pool counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurmpool.core.demand.claims import CLAIM, TEMPLATE
from slurmpool.core.fit import PodNeeds, Requirement, needs_of
from slurmpool.core.view import extended_resources

MAX_CLAIMS = 16


@dataclass(frozen=True)
class PendingPod:
    """A pod the scheduler could not place that asks for extended resources or DRA claims."""

    namespace: str
    name: str
    requests: tuple[tuple[str, int], ...] = ()  # extended resources it asks for (nvidia.com/gpu: 8)
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    affinity: tuple[tuple[Requirement, ...], ...] = ()  # required node affinity terms, as fit.PodNeeds has them
    claims: tuple[tuple[str, str], ...] = ()  # (TEMPLATE or CLAIM, name) of spec.resourceClaims, in its namespace
    group: str = ""  # the group it starts with, all or none (group_of); "": alone
    group_size: int = 0  # the pods of that group, where the pod says (0: the group's pending pods)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def needs(self) -> PodNeeds:
        return PodNeeds(self.node_selector, self.affinity, self.tolerations)

    def asks(self, resources: Iterable[str]) -> dict[str, int]:
        """The resources of these names it asks for, by name."""
        names = set(resources)
        return {r: n for r, n in self.requests if r in names}


def _extended(container: Any) -> dict[str, int]:
    """A container's extended resources: its limits, else its requests (equal when both are set)."""
    resources = (container.get("resources") if isinstance(container, dict) else None) or {}
    return dict(extended_resources(resources.get("requests"))) | dict(extended_resources(resources.get("limits")))


def pod_requests(spec: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """Extended resources a pod asks for: per name, the sum over containers or the largest init container."""
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for name, n in _extended(c).items():
            total[name] = total.get(name, 0) + n
    for c in spec.get("initContainers") or []:
        for name, n in _extended(c).items():
            total[name] = max(total.get(name, 0), n)
    return tuple(sorted(total.items()))


def pod_claims(spec: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The ResourceClaims a pod names: from a template (one made per pod) or a shared claim."""
    found: list[tuple[str, str]] = []
    for ref in (spec.get("resourceClaims") or [])[:MAX_CLAIMS]:
        if not isinstance(ref, dict):
            continue
        if name := ref.get("resourceClaimTemplateName"):
            found.append((TEMPLATE, str(name)))
        elif name := ref.get("resourceClaimName"):
            found.append((CLAIM, str(name)))
    return tuple(found)


# Groups of pods that start together (docs/cadence.md, Demand: groups).
LWS_NAME, LWS_GROUP, LWS_SIZE = ("leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/group-index",
                                 "leaderworkerset.sigs.k8s.io/size")
GANG, GANG_SIZE = "slurmpool.io/gang", "slurmpool.io/gang-size"
PODGROUP = "podgroup:"  # how group_of names the group of a PodGroup's pods
INT32_MAX = 2**31 - 1  # minCount is an int32
# The PodGroup index's view, by (namespace, PodGroup name): its gang minCount, None for a basic policy.
PodGroupSizes = Mapping[tuple[str, str], int | None]


def _size(value: object) -> int:
    try:
        return max(0, min(int(str(value)), 100000))
    except ValueError:
        return 0


def group_of(meta: dict[str, Any], spec: dict[str, Any]) -> tuple[str, int]:
    """(group, size): a PodGroup the pod names (spec.schedulingGroup.podGroupName, gang scheduling
    of Kubernetes 1.36+: its size is the PodGroup's gang minCount, which the PodGroup index reads,
    so 0 here); a LeaderWorkerSet group (its name and group-index labels, its size annotation); or
    the gang label slurmpool.io/gang with the annotation slurmpool.io/gang-size."""
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    scheduling = spec.get("schedulingGroup")
    if isinstance(scheduling, dict) and scheduling.get("podGroupName"):
        return f"{PODGROUP}{scheduling['podGroupName']}", 0
    if labels.get(LWS_NAME) and labels.get(LWS_GROUP) is not None:
        return f"lws:{labels[LWS_NAME]}/{labels[LWS_GROUP]}", _size(annotations.get(LWS_SIZE))
    if labels.get(GANG):
        return f"gang:{labels[GANG]}", _size(annotations.get(GANG_SIZE))
    return "", 0


@dataclass(frozen=True)
class GroupPolicy:
    """A PodGroup's scheduling policy (scheduling.k8s.io/v1beta1, spec.schedulingPolicy) as the
    operator's PodGroup index keeps it."""

    min_count: int | None  # gang.minCount: the pods that must start together; None: basic (no gang)


def pod_group_policy(body: dict[str, Any]) -> GroupPolicy | None:
    """A PodGroup's policy: gang with its minCount, or basic. None when it does not read (people
    write PodGroups: no policy or both, a minCount missing, not an integer or not positive): that
    object alone is ignored, and its pods' group is sized by its pending pods, as for one unknown.
    A gang the scheduler has placed once (PodGroupInitiallyScheduled) reads as basic: its pods
    that wait now are replacements, each counted alone, not a whole gang again."""
    spec = body.get("spec")
    policy = spec.get("schedulingPolicy") if isinstance(spec, dict) else None
    if not isinstance(policy, dict):
        return None
    gang, basic = policy.get("gang"), policy.get("basic")
    is_gang, is_basic = isinstance(gang, dict) and basic is None, isinstance(basic, dict) and gang is None
    if is_basic or (is_gang and _placed_once(body)):
        return GroupPolicy(None)
    count = gang.get("minCount") if is_gang and isinstance(gang, dict) else None
    if isinstance(count, int) and not isinstance(count, bool) and 0 < count <= INT32_MAX:
        return GroupPolicy(count)
    return None


def _placed_once(body: dict[str, Any]) -> bool:
    status = body.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return isinstance(conditions, list) and any(
        isinstance(c, dict) and c.get("type") == "PodGroupInitiallyScheduled" and c.get("status") == "True" for c in conditions)


def is_pending_gpu_pod(spec: dict[str, Any], status: dict[str, Any]) -> bool:
    """No node, Pending, PodScheduled=False/Unschedulable, and asks for an extended resource or a claim."""
    if spec.get("nodeName") or (status or {}).get("phase", "Pending") != "Pending":
        return False
    unschedulable = any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (status or {}).get("conditions") or []
    )
    return unschedulable and bool(pod_requests(spec) or pod_claims(spec))


def pending_pod(body: dict[str, Any]) -> PendingPod:
    meta, spec = body.get("metadata", {}), body.get("spec", {}) or {}
    needs = needs_of(spec)
    group, size = group_of(meta, spec)
    return PendingPod(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        requests=pod_requests(spec),
        node_selector=needs.node_selector,
        tolerations=needs.tolerations,
        affinity=needs.affinity,
        claims=pod_claims(spec),
        group=group,
        group_size=size,
    )
