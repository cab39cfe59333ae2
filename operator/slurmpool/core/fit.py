"""Would a pod still be scheduled on a node with these labels and taints? Pure.

Used when a node moves between two inference pools: the pods the new pool's labels and
taints would refuse are evicted (the scheduler does not remove running pods by itself).
Only what the scheduler's node-level filters check from the node's metadata: nodeSelector,
required node affinity (matchExpressions) and taints with NoSchedule or NoExecute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Toleration = tuple[str, str, str, str]  # (key, operator, value, effect)
Requirement = tuple[str, str, tuple[str, ...]]  # (key, operator, values)


@dataclass(frozen=True)
class PodNeeds:
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[tuple[Requirement, ...], ...] = ()  # ORed terms of ANDed requirements
    tolerations: tuple[Toleration, ...] = ()


def needs_of(pod_spec: dict[str, Any]) -> PodNeeds:
    tolerations = tuple(
        (t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "", t.get("effect") or "")
        for t in pod_spec.get("tolerations") or []
    )
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = tuple(
        tuple((e.get("key", ""), e.get("operator", "In"), tuple(e.get("values") or ())) for e in term.get("matchExpressions") or [])
        for term in required.get("nodeSelectorTerms") or []
    )
    return PodNeeds(tuple(sorted((pod_spec.get("nodeSelector") or {}).items())), terms, tolerations)


def tolerates(tolerations: tuple[Toleration, ...], taint: Mapping[str, str]) -> bool:
    if taint.get("effect") == "PreferNoSchedule":
        return True
    for key, op, value, effect in tolerations:
        if effect and effect != taint.get("effect"):
            continue
        if op == "Exists" and (not key or key == taint.get("key")):
            return True
        if key == taint.get("key") and op != "Exists" and value == (taint.get("value") or ""):
            return True
    return False


def _requirement_met(req: Requirement, labels: Mapping[str, str]) -> bool:
    key, op, values = req
    value = labels.get(key)
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            return int(value) > int(values[0]) if op == "Gt" else int(value) < int(values[0])
        except ValueError:
            return False
    return False


def misfit(needs: PodNeeds, labels: Mapping[str, str], taints: Iterable[Mapping[str, str]]) -> str | None:
    """Why the pod would not be scheduled on the node, or None when it would."""
    for key, value in needs.node_selector:
        if labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    if needs.affinity and not any(all(_requirement_met(r, labels) for r in term) for term in needs.affinity):
        return "required node affinity"
    for taint in taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(needs.tolerations, taint):
            return f"taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
    return None
