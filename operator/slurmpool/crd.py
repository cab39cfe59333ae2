"""Generate the SlurmNodePool CRD from the pydantic models.

`python -m slurmpool.crd > crds/slurmpool.io_slurmnodepools.yaml`; a test fails when the
committed file drifts from this output. pydantic's JSON schema is not a structural schema
as is, so it is rewritten here: $refs inlined, titles dropped, Optional -> nullable.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from slurmpool.core.models import (
    ACCESS_KINDS,
    ACCESS_ONE,
    GROUP,
    KIND,
    NODE_SELECTOR_EMPTY,
    POOL_LABEL_OVER_SELECTOR,
    NATIVE_RESOURCE_MESSAGE,
    PATTERN_MESSAGES,
    PLURAL,
    QUALIFIED_NAME_MESSAGE,
    QUALIFIED_NAME_PATTERN,
    VERSION,
    VOLUME_MOUNT_MESSAGE,
    VOLUME_NAME_MESSAGE,
    VOLUME_NAME_PATTERN,
    VOLUME_UNIQUE_MESSAGE,
    SlurmNodePoolSpec,
    SlurmNodePoolStatus,
)

# Cross-field rules the schema alone cannot say. Keyed by the JSON path of the object they sit on.
CEL_RULES: dict[str, list[dict[str, str]]] = {
    "spec": [
        {
            "rule": "self.slurmNodes >= self.minSlurmNodes",
            "message": "slurmNodes must not be below minSlurmNodes",
            "reason": "FieldValueInvalid",
            "fieldPath": ".slurmNodes",
        },
        {
            # LabelSelector.unmatched_by: a pool label the selector would not accept on its own key.
            "rule": "self.inference.pools.all(p, !has(p.labels) || p.labels.all(k, "
            "!(has(self.nodeSelector.matchLabels) && k in self.nodeSelector.matchLabels && self.nodeSelector.matchLabels[k] != p.labels[k]) && "
            "!(has(self.nodeSelector.matchExpressions) && self.nodeSelector.matchExpressions.exists(e, e.key == k && ("
            "e.operator == 'DoesNotExist' || (e.operator == 'In' && !(has(e.values) && p.labels[k] in e.values)) || "
            "(e.operator == 'NotIn' && has(e.values) && p.labels[k] in e.values))))))",
            "message": POOL_LABEL_OVER_SELECTOR,
            "fieldPath": ".inference.pools",
        },
        {
            "rule": "!has(self.schedule) || self.schedule.all(w, !has(w.inference) || "
            "w.inference.all(k, self.inference.pools.exists(p, p.name == k)))",
            "message": "a schedule window's inference counts must name pools of spec.inference.pools",
            "fieldPath": ".schedule",
        },
    ],
    "spec.nodeSelector": [
        {
            "rule": "(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",
            "message": NODE_SELECTOR_EMPTY,
        }
    ],
    "spec.slurm.access": [
        {
            # One term per kind of access in the model (ssh, local, rest): a new kind is counted too.
            "rule": " + ".join(f"(has(self.{kind}) ? 1 : 0)" for kind in ACCESS_KINDS) + " == 1",
            "message": ACCESS_ONE,
        }
    ],
    "spec.schedule[]": [
        {"rule": "has(self.slurmNodes) != has(self.slurmPercent)", "message": "set exactly one of slurmNodes and slurmPercent"},
        {"rule": "has(self.cron) != has(self.at)", "message": "set exactly one of cron and at"},
        {"rule": "self.duration.matches('[1-9]')", "message": "duration must be positive", "fieldPath": ".duration"},
        {
            "rule": "timestamp('2000-01-01T00:00:00Z').getHours(self.timeZone) >= 0",
            "message": "timeZone must be an IANA time zone such as Europe/Berlin",
            "fieldPath": ".timeZone",
        },
    ],
    "spec.topology": [
        {
            "rule": "!has(self.wholeBlocks) || !self.wholeBlocks || has(self.blockLabel) || (has(self.fromSlurm) && self.fromSlurm)",
            "message": "topology.wholeBlocks needs blocks: set blockLabel or fromSlurm",
            "fieldPath": ".wholeBlocks",
        }
    ],
    "spec.demand.slurm": [
        {"rule": "!has(self.maxNodes) || self.minNodes <= self.maxNodes", "message": "demand.slurm.minNodes must not exceed maxNodes"}
    ],
    "spec.demand.inference": [
        {"rule": "!has(self.maxNodes) || self.minNodes <= self.maxNodes", "message": "demand.inference.minNodes must not exceed maxNodes"},
        {"rule": '!has(self.resources) || self.resources.all(r, !r.matches(r"^([a-z0-9.-]*\\.)?kubernetes\\.io/"))',
         "message": NATIVE_RESOURCE_MESSAGE, "fieldPath": ".resources"},
    ],
    "spec.slurm.slurmdPod": [
        {"rule": f'!has(self.volumes) || self.volumes.all(v, has(v.name) && v.name.matches(r"{VOLUME_NAME_PATTERN}"))',
         "message": VOLUME_NAME_MESSAGE, "fieldPath": ".volumes"},
        {"rule": "!has(self.volumes) || self.volumes.all(v, self.volumes.exists_one(w, w.name == v.name))",
         "message": VOLUME_UNIQUE_MESSAGE, "fieldPath": ".volumes"},
        {"rule": "!has(self.volumeMounts) || self.volumeMounts.all(m, has(m.name) && has(self.volumes) && "
                 "self.volumes.exists(v, v.name == m.name))",
         "message": VOLUME_MOUNT_MESSAGE, "fieldPath": ".volumeMounts"},
    ],
    "spec.inference.pools[]": [
        {
            # Map keys have no schema of their own: the label key rule is CEL (the prefix's 253 too).
            "rule": f'!has(self.labels) || self.labels.all(k, k.matches(r"{QUALIFIED_NAME_PATTERN}") && '
                    "(!k.contains('/') || k.split('/')[0].size() <= 253))",
            "message": "label key " + QUALIFIED_NAME_MESSAGE,
            "fieldPath": ".labels",
        },
        {
            "rule": "!has(self.maxNodes) || self.minNodes <= self.maxNodes",
            "message": "an inference pool's minNodes must not exceed its maxNodes",
        },
        {
            "rule": "!has(self.nodes) || (self.nodes >= self.minNodes && (!has(self.maxNodes) || self.nodes <= self.maxNodes))",
            "message": "an inference pool's nodes must lie within its minNodes and maxNodes",
            "fieldPath": ".nodes",
        },
    ],
}
PRINTER_COLUMNS = [
    # TARGET is the count in force (a schedule or demand may differ from spec.slurmNodes, wide's SPEC).
    {"name": "Slurm", "type": "integer", "jsonPath": ".status.slurm.ready", "description": "Nodes serving Slurm"},
    {"name": "Inference", "type": "integer", "jsonPath": ".status.inference.ready", "description": "Nodes serving inference"},
    {"name": "Target", "type": "integer", "jsonPath": ".status.target.slurmNodes", "description": "Slurm nodes in force"},
    {"name": "Source", "type": "string", "jsonPath": ".status.target.source", "description": "Manual, Schedule or Demand"},
    {"name": "Moving", "type": "integer", "jsonPath": ".status.moving", "description": "Moves in flight"},
    {"name": "Unhealthy", "type": "integer", "jsonPath": ".status.unhealthy", "description": "Unhealthy nodes, never moved (status.unhealthyNodes)"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Blocked", "type": "integer", "jsonPath": ".status.blocked", "priority": 1, "description": "Moves blocked by jobs or PDBs"},
    {"name": "Paused", "type": "boolean", "jsonPath": ".spec.paused", "priority": 1},
    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status", "priority": 1},
    {"name": "Spec", "type": "integer", "jsonPath": ".spec.slurmNodes", "priority": 1, "description": "spec.slurmNodes: the manual count"},
    {"name": "Pools", "type": "string", "jsonPath": ".status.inference.byPool", "priority": 1, "description": "Ready/desired per inference pool"},
]


def structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Rewrite one pydantic JSON schema node into an OpenAPI v3 structural schema node."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural(merged, defs)
    out: dict[str, Any] = {}
    any_of = schema.get("anyOf")
    if any_of:
        non_null = [s for s in any_of if s.get("type") != "null"]
        if len(non_null) == 1:
            inner = structural(non_null[0], defs)
            if len(non_null) < len(any_of):
                inner["nullable"] = True
            for key in ("description", "default"):
                if key in schema and schema[key] is not None:
                    inner[key] = schema[key]
            return inner
        raise ValueError(f"cannot express anyOf {any_of} structurally")
    for key, value in schema.items():
        if key in ("title", "$defs", "anyOf"):
            continue
        if key == "properties":
            out["properties"] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = structural(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out["additionalProperties"] = structural(value, defs)
        elif key == "default" and value is None:
            continue
        else:
            out[key] = value
    if out.get("pattern") in PATTERN_MESSAGES:
        # The same check as a CEL rule, so the refusal says what is wanted instead of the regex.
        pattern = out.pop("pattern")
        assert '"' not in pattern, pattern  # it sits in a CEL raw string below
        out["x-kubernetes-validations"] = [{"rule": f'self.matches(r"{pattern}")', "message": PATTERN_MESSAGES[pattern]}]
    if "x-kubernetes-int-or-string" in out:
        out.pop("type", None)
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        if part.endswith("[]"):
            node = node["properties"][part[:-2]]["items"]
        else:
            node = node["properties"][part]
    return node


def openapi_schema() -> dict[str, Any]:
    spec = SlurmNodePoolSpec.model_json_schema(by_alias=True)
    status = SlurmNodePoolStatus.model_json_schema(by_alias=True)
    root: dict[str, Any] = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": structural(spec, spec.get("$defs", {})),
            "status": structural(status, status.get("$defs", {})),
        },
    }
    for path, rules in CEL_RULES.items():
        _at(root, path).setdefault("x-kubernetes-validations", []).extend(rules)
    # Named lists, merged by key (API conventions); kubectl apply then patches entries, not the list.
    pools = _at(root, "spec.inference.pools")
    pools.update({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    conditions = _at(root, "status.conditions")
    conditions.update({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})
    schedule = _at(root, "spec.schedule")
    schedule.update({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    # Volumes and their mounts are Kubernetes objects kept whole, but their names are typed, so
    # the rules above can check them (CEL cannot read a field of an untyped object).
    for field in ("volumes", "volumeMounts"):
        _at(root, f"spec.slurm.slurmdPod.{field}")["items"]["properties"] = {"name": {"type": "string", "maxLength": 253}}
    moves = _at(root, "status.moves")
    moves.update({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["node"]})
    return root


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": "slurmnodepool",
                "shortNames": ["snp"],
                "categories": ["slurmpool"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.slurmNodes",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


def render() -> str:
    header = "# Generated by `python -m slurmpool.crd` from operator/slurmpool/core/models.py. Do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=120)


if __name__ == "__main__":
    sys.stdout.write(render())
