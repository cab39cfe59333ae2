"""Kubernetes objects, as the API serves them (plain dicts), read into the core's views. Pure: the
operator's watches and the plugin's pages both go through it."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from slurmpool.core.fit import needs_of
from slurmpool.core.view import ANN_MOVE_NOW, ANN_PIN, LABEL_COMPONENT, LABEL_POOL, NodeCondition, NodeView, PodView, extended_resources, parse_time


def node_view(body: dict[str, Any]) -> NodeView:
    meta, spec, status = body.get("metadata", {}), body.get("spec", {}) or {}, body.get("status", {}) or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return NodeView(
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        annotations={k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("slurmpool.io/")},
        taints=tuple(
            # timeAdded kept: a taint of someone else's is written back as it was (tolerationSeconds count from it)
            {k: t[k] for k in ("key", "value", "effect", "timeAdded") if t.get(k) is not None} for t in spec.get("taints") or []
        ),
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        resources=extended_resources(status.get("allocatable")),
        conditions=_conditions(status.get("conditions")),
        version=meta.get("resourceVersion") or "",
        writers=annotation_writers(meta.get("managedFields")),
    )


ASKED_BY = (ANN_PIN, ANN_MOVE_NOW)  # the annotations whose writer a move records as who asked for it


def annotation_writers(managed_fields: object) -> dict[str, str]:
    """For pin and move-now: the field manager that last wrote each (kubectl's `kubectl-annotate`,
    the plugin's `kubectl-slurmpool`, a controller's name), from the Node's managedFields."""
    found: dict[str, tuple[str, str]] = {}
    for entry in managed_fields if isinstance(managed_fields, list) else ():
        if not isinstance(entry, dict):
            continue
        annotations = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:annotations") or {}
        for key in ASKED_BY:
            when = str(entry.get("time") or "")
            if f"f:{key}" in annotations and (key not in found or when >= found[key][0]):
                found[key] = (when, str(entry.get("manager") or "unknown")[:128])
    return {key: who for key, (_, who) in found.items()}


def _time(value: object) -> datetime | None:
    return parse_time(value) if isinstance(value, str) else None


MAX_CONDITIONS = 64  # anyone with nodes/status access can add conditions: keep the view bounded


def _conditions(items: object) -> tuple[NodeCondition, ...]:
    if not isinstance(items, list):
        return ()
    return tuple(
        # Interned: the same few types and statuses on every Node, held once.
        NodeCondition(type=sys.intern(str(c.get("type"))[:316]), status=sys.intern(str(c.get("status"))[:16]),
                      since=_time(c.get("lastTransitionTime")))
        for c in items[:MAX_CONDITIONS]
        if isinstance(c, dict) and c.get("type")
    )


def pod_view(body: dict[str, Any]) -> PodView:
    meta, status = body.get("metadata", {}), body.get("status", {}) or {}
    annotations = meta.get("annotations") or {}
    return PodView(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        uid=meta.get("uid", ""),
        owner_kinds=tuple(o.get("kind", "") for o in meta.get("ownerReferences") or []),
        phase=status.get("phase") or "Pending",
        reason=str(status.get("reason") or "")[:64],  # the kubelet's: Evicted, UnexpectedAdmissionError ...
        message=str(status.get("message") or "")[:256],
        deleting=bool(meta.get("deletionTimestamp")),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []),
        slurmd=(meta.get("labels") or {}).get(LABEL_COMPONENT) == "slurmd",
        mirror="kubernetes.io/config.mirror" in annotations,
        needs=needs_of(body.get("spec") or {}),
        node=(body.get("spec") or {}).get("nodeName") or "",
        created=parse_time(meta.get("creationTimestamp")),
        pool=(meta.get("labels") or {}).get(LABEL_POOL, ""),
    )
