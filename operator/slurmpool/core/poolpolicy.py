"""What a SlurmNodePool may ask of the nodes it selects: the same rules as the chart's admission
policy `<release>-pool-policy` (deploy/helm/slurmpool/templates/admission.yaml), from the same
values (`poolPolicy`, passed as SLURMPOOL_POOL_POLICY). Whoever writes a pool controls what runs
as root on every node it selects, so a cluster without the admission policies, or with them on
Warn, still refuses such a pool: it is `Degraded` `PolicyViolation` and nothing moves. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from slurmpool.core.models import LabelSelector, SlurmNodePoolSpec

# Labels that mark control-plane nodes (kubeadm and most distributions; `master` before 1.24;
# RKE1's `controlplane` and `etcd`, set to "true" on its control-plane and etcd nodes).
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master",
                        "node-role.kubernetes.io/controlplane", "node-role.kubernetes.io/etcd")


# What slurmd and slurmstepd use of root, explicit instead of the runtime's default set: start each
# step as the job's user (SETUID, SETGID), own its spool and the job's files (CHOWN, FOWNER,
# DAC_OVERRIDE, FSETID), signal the job's processes (KILL), drop what it holds itself (SETPCAP); a
# container job's enroot maps root in its user namespace (SETFCAP) and pivots into the image
# (SYS_CHROOT): without them `srun --container-image` failed "failed to create user namespace".
# Not kept from the default set: MKNOD, NET_RAW, NET_BIND_SERVICE (slurmd's port is above 1024),
# AUDIT_WRITE. The slurmd pod gets these unless its pool sets a securityContext, which replaces
# them whole: a pool may add these again without the policy (the chart's admission policy lists
# the same), and beyond them only what poolPolicy.capabilities allows.
SLURMD_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "SETFCAP",
                       "SYS_CHROOT")


@dataclass(frozen=True)
class PoolPolicy:
    # slurmd images must start with one of these (a registry or a repository prefix). None by
    # default: the project controls no registry, and slurmd runs as root on every selected node.
    image_prefixes: tuple[str, ...] = ()
    # hostPath volumes allowed in the slurmd pod, by exact path (none by default).
    host_paths: tuple[str, ...] = ()
    # ServiceAccounts the slurmd pod may name (none by default: the namespace's default one).
    service_accounts: tuple[str, ...] = ()
    allow_privileged: bool = False
    # Capabilities the slurmd container may add.
    capabilities: tuple[str, ...] = ()
    # slurmrestd over plain http (a token in clear text): only where allowed.
    allow_http_rest: bool = False
    # A pool may select control-plane nodes only where allowed.
    allow_control_plane: bool = False

    @classmethod
    def from_json(cls, text: str | None) -> PoolPolicy:
        """The chart's `poolPolicy` values as JSON (camelCase keys); unset: the chart's defaults."""
        if not text:
            return cls()
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("SLURMPOOL_POOL_POLICY must be a JSON object")
        names = {_camel(f.name): f for f in fields(cls)}
        unknown = set(raw) - set(names)
        if unknown:
            raise ValueError(f"SLURMPOOL_POOL_POLICY: unknown keys {sorted(unknown)}; known: {sorted(names)}")
        values: dict[str, Any] = {}  # each value checked against its field's type below
        for key, value in raw.items():
            f = names[key]
            if f.type.startswith("tuple"):
                # "" would be a prefix of every image
                if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                    raise ValueError(f"SLURMPOOL_POOL_POLICY: {key} must be a list of non-empty strings")
                values[f.name] = tuple(value)
            else:
                if not isinstance(value, bool):
                    raise ValueError(f"SLURMPOOL_POOL_POLICY: {key} must be true or false")
                values[f.name] = value
        return cls(**values)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def violations(spec: SlurmNodePoolSpec, policy: PoolPolicy) -> list[str]:
    """Every way the spec goes beyond the policy, each naming the field and what is allowed."""
    out: list[str] = []
    pod = spec.slurm.slurmd_pod
    if not any(pod.image.startswith(p) for p in policy.image_prefixes):
        out.append(f"slurm.slurmdPod.image {pod.image} is not from an allowed registry "
                   f"({', '.join(policy.image_prefixes) or 'none allowed: poolPolicy.imagePrefixes is empty'})")
    for volume in pod.volumes:
        host = volume.get("hostPath")
        if host is not None:
            path = host.get("path") if isinstance(host, dict) else None
            if path not in policy.host_paths:
                out.append(f"slurm.slurmdPod.volumes {volume.get('name')}: hostPath {path} is not allowed "
                           f"({', '.join(policy.host_paths) or 'no hostPath volumes allowed'})")
    if pod.service_account_name and pod.service_account_name not in policy.service_accounts:
        out.append(f"slurm.slurmdPod.serviceAccountName {pod.service_account_name} is not allowed "
                   f"({', '.join(policy.service_accounts) or 'none allowed: leave it unset'})")
    sc = pod.security_context
    if sc is not None:
        if sc.privileged and not policy.allow_privileged:
            out.append("slurm.slurmdPod.securityContext.privileged is not allowed")
        added = sc.capabilities.add if sc.capabilities else []
        extra = [c for c in added if c not in policy.capabilities and c not in SLURMD_CAPABILITIES]
        if extra:
            out.append(f"slurm.slurmdPod.securityContext.capabilities.add {', '.join(extra)} not allowed "
                       f"({', '.join(policy.capabilities) or 'none allowed'})")
    rest = spec.slurm.access.rest
    if rest is not None and not rest.url.startswith("https://") and not policy.allow_http_rest:
        out.append(f"slurm.access.rest.url {rest.url} is not https (the token would travel in clear text)")
    if not policy.allow_control_plane:
        named = selects_control_plane(spec.node_selector)
        if named:
            out.append(f"nodeSelector selects control-plane nodes by {named}")
    return out


def selects_control_plane(selector: LabelSelector) -> str | None:
    """The control-plane label a selector picks nodes by (matchLabels, In or Exists), if any.
    Control-plane nodes are left out of every pool anyway (is_control_plane)."""
    for key in CONTROL_PLANE_LABELS:
        if key in selector.match_labels:
            return key
        for req in selector.match_expressions:
            if req.key == key and req.operator in ("In", "Exists"):
                return key
    return None


def is_control_plane(labels: Mapping[str, str]) -> bool:
    return any(key in labels for key in CONTROL_PLANE_LABELS)
