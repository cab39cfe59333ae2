"""The SlurmNodePool resource: spec and status as pydantic models.

These models are the single source of truth for the CRD (see crd.py), the operator's
parsing of every body, and the documentation of each field (field descriptions become
the schema's descriptions, so `kubectl explain snp.spec` shows them).
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

GROUP = "slurmpool.io"
VERSION = "v1alpha1"
KIND = "SlurmNodePool"
PLURAL = "slurmnodepools"

# At most 6 digits a part (and 32 characters): the longest, 4 x 999999h, is about 456 years, so every
# time the pass computes from one stays within datetime's range (a 31-digit duration overflowed it).
DURATION_PATTERN = r"^([0-9]{1,6}(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}

# Slurm names reach scontrol; keep them to what Slurm itself accepts and no shell syntax.
SLURM_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Five cron fields (minute hour day-of-month month day-of-week) or a macro such as @daily;
# croniter checks the rest (models.ScheduleWindow) and the operator reports what it refuses.
_CRON_FIELD = r"[0-9A-Za-z*?/,#-]+"
CRON_PATTERN = rf"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|{_CRON_FIELD}( +{_CRON_FIELD}){{4}})$"
TIME_ZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+/-]{0,63}$"

SSH_HOST_PATTERN = r"^[A-Za-z0-9.:\[\]_-]+$"
SSH_USER_PATTERN = r"^[a-z_][a-z0-9_-]*[$]?$"
REST_URL_PATTERN = r"^https?://[A-Za-z0-9.:\[\]_-]+(:[0-9]+)?(/[A-Za-z0-9._~/-]*)?$"
CONDITION_TYPE_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
# As Kubernetes validates them (apimachinery validation.IsQualifiedName, IsValidLabelValue,
# IsDNS1123Label; env names as every version accepts: a C identifier with '-' and '.'), so a value
# the API server would refuse on a Node or the slurmd pod is refused here, before any move.
_DNS_PART = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
QUALIFIED_NAME_PATTERN = rf"^({_DNS_PART}(\.{_DNS_PART})*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
VOLUME_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
QUALIFIED_NAME_MESSAGE = ("must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, "
                          "'-', '_' or '.', starting and ending with a letter or digit (e.g. example.com/gpu-pool)")
CAPABILITY_PATTERN = r"^[A-Z_]{2,32}$"
# A signal as scancel --signal and slurmrestd's `signal` take it: a name (USR1, SIGUSR1) or a number.
SIGNAL_PATTERN = r"^((SIG)?[A-Z][A-Z0-9+]{0,15}|[0-9]{1,2})$"
GRES_PATTERN = r"^[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)*(,[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)*)*$"
NODE_NAME_TEMPLATE_PATTERN = r"^([A-Za-z0-9._-]|\{name\}|\{shortName\}|\{hostname\})+$"
LABEL_KEY_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
# Years 2000-2999 only: year 0001 with a positive offset, or 9999 plus a window's duration, is
# outside datetime's range; fields in their ranges (a day a month lacks is refused by the model).
RFC3339_PATTERN = (r"^2[0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?"
                   r"([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$")
# An extended resource (a device plugin's, or a DRA driver's mapping): a domain-qualified name
# (outside kubernetes.io: a CEL rule and InferenceDemand check that, RE2 has no look-ahead).
EXTENDED_RESOURCE_PATTERN = rf"^{_DNS_PART}(\.{_DNS_PART})*/[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = rf"^{_DNS_PART}(\.{_DNS_PART})*$"
GPU = "nvidia.com/gpu"  # what inference demand counts unless spec.demand.inference.resources says otherwise
NATIVE_RESOURCE_MESSAGE = "resources must be extended resources: kubernetes.io names are Kubernetes' own"
# What the API server says when a pattern does not match: crd.py turns these patterns into CEL
# rules with these messages (a bare pattern error shows the regular expression instead).
PATTERN_MESSAGES = {
    DURATION_PATTERN: "must be a duration such as 90s, 10m or 1h30m (units ms, s, m, h; at most 6 digits a number)",
    SLURM_NAME_PATTERN: "must be a Slurm name: letters, digits, '.', '_' or '-', starting with a letter or digit, at most 63 characters",
    NODE_NAME_TEMPLATE_PATTERN: "must be a Slurm node name template: letters, digits, '.', '_', '-' and {name}, {shortName}, {hostname}",
    LABEL_KEY_PATTERN: "must be a label key such as example.com/slurm-name",
    GRES_PATTERN: "must be Slurm GRES such as gpu:h100:8 (name[:type][:count], comma-separated; no spaces or shell characters)",
    DNS_LABEL_PATTERN: "must be a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit",
    CRON_PATTERN: "must be 5 cron fields (minute hour day-of-month month day-of-week, e.g. '0 22 * * *') or a macro such as @daily",
    TIME_ZONE_PATTERN: "must be an IANA time zone name such as Europe/Berlin",
    RFC3339_PATTERN: "must be an RFC 3339 time with its offset in the years 2000 to 2999, such as 2026-12-24T18:00:00+01:00 or 2026-12-24T17:00:00Z",
    SSH_HOST_PATTERN: "must be a host name or IP address",
    SSH_USER_PATTERN: "must be a Unix user name",
    REST_URL_PATTERN: "must be an http:// or https:// URL such as https://slurmrestd.slurm:6820 (no query or credentials)",
    CONDITION_TYPE_PATTERN: "must be a Node condition type such as GpuXidError (letters, digits, '-', '_', '.')",
    QUALIFIED_NAME_PATTERN: QUALIFIED_NAME_MESSAGE,
    LABEL_VALUE_PATTERN: "must be a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
    ENV_NAME_PATTERN: "must be an environment variable name: letters, digits, '_', '-' or '.', not starting with a digit",
    SIGNAL_PATTERN: "must be a signal name such as USR1 or SIGUSR1, or its number",
    CAPABILITY_PATTERN: "must be a Linux capability such as SYS_ADMIN (capital letters and '_', no CAP_ prefix)",
    EXTENDED_RESOURCE_PATTERN: "must be an extended resource name such as nvidia.com/gpu or amd.com/gpu (domain/name)",
    DNS_SUBDOMAIN_PATTERN: "must be a DNS subdomain such as gpu.nvidia.com: lowercase letters, digits, '-' and '.'",
}

Duration = Annotated[str, Field(pattern=DURATION_PATTERN, max_length=32)]
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=63)]
QualifiedName = Annotated[str, Field(pattern=QUALIFIED_NAME_PATTERN, max_length=317)]
ExtendedResource = Annotated[str, Field(pattern=EXTENDED_RESOURCE_PATTERN, max_length=317)]
DnsSubdomain = Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)]


def qualified_name_problem(key: str) -> str | None:
    """Why Kubernetes would refuse `key` as a label or taint key (its prefix at most 253 too)."""
    if not re.match(QUALIFIED_NAME_PATTERN, key) or len(key.split("/", 1)[0]) > 253:
        return f"{key[:80]!r} {QUALIFIED_NAME_MESSAGE}"
    return None
SlurmName = Annotated[str, Field(pattern=SLURM_NAME_PATTERN, max_length=63)]
# int-or-string, as Kubernetes quantities are written (`cpu: 2`, `memory: 4Gi`).
Quantity = Annotated[int | str, WithJsonSchema({"x-kubernetes-int-or-string": True})]


def seconds(duration: str) -> float:
    """'1h30m' -> 5400.0. The schema has already checked the pattern."""
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(duration))


class Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


# ---------------------------------------------------------------- building blocks


class LabelSelectorRequirement(Model):
    key: str = Field(max_length=317)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list, max_length=64)


class LabelSelector(Model):
    """A Kubernetes label selector over Nodes."""

    match_labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, max_length=16)

    def matches(self, labels: dict[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and (not present or labels[req.key] not in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True

    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def unmatched_by(self, labels: dict[str, str]) -> list[str]:
        """The keys of `labels` whose value alone would make a Node fail this selector."""
        return [k for k, v in labels.items() if not LabelSelector(
            match_labels={x: y for x, y in self.match_labels.items() if x == k},
            match_expressions=[e for e in self.match_expressions if e.key == k]).matches({k: v})]


class Taint(Model):
    key: QualifiedName
    value: LabelValue = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Toleration(Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class EnvVar(Model):
    name: str = Field(max_length=253, pattern=ENV_NAME_PATTERN)
    value: str = ""


class Resources(Model):
    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=32)
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=32)


class SecretRef(Model):
    name: str = Field(max_length=253, description="Secret in the pool's namespace.")
    private_key_key: str = Field(default="ssh-privatekey", description="Key of the client private key in the Secret.")
    known_hosts_key: str = Field(default="known_hosts", description="Key of the known_hosts text in the Secret.")


# ---------------------------------------------------------------- spec


class SshAccess(Model):
    """Reach scontrol/squeue on a controller or login host over SSH (strict host-key checking)."""

    host: str = Field(max_length=253, pattern=SSH_HOST_PATTERN)
    port: int = Field(default=22, ge=1, le=65535)
    user: str = Field(
        max_length=32, pattern=SSH_USER_PATTERN,
        description="The login; no default. A Slurm operator account (SlurmUser's operators, `sacctmgr ... "
        "adminlevel=operator`) is enough for scontrol update, scancel and requeue: not root (docs/rbac.md).",
    )
    secret_ref: SecretRef = Field(description="Secret with the client private key and known_hosts; no host key is ever auto-accepted.")


class LocalAccess(Model):
    """Run scontrol/squeue where the operator runs (a sidecar or a host with the Slurm client)."""

    slurm_conf: str | None = Field(default=None, description="SLURM_CONF for the commands; unset uses the client default.")


class TokenSecretRef(Model):
    name: str = Field(max_length=253, description="Secret in the pool's namespace holding the JWT.")
    key: str = Field(default="token", max_length=253, description="Key of the JWT in the Secret.")
    user_key: str | None = Field(
        default=None, max_length=253,
        description="Key of a user name in the Secret, sent as X-SLURM-USER-NAME (unset: the token's own user).",
    )


class CaSecretRef(Model):
    name: str = Field(max_length=253, description="Secret in the pool's namespace holding the CA bundle.")
    key: str = Field(default="ca.crt", max_length=253, description="Key of the PEM CA bundle in the Secret.")


class RestAccess(Model):
    """Reach slurmrestd (Slurm's REST API, v0.0.40 to v0.0.45) with a JWT (auth/jwt)."""

    url: str = Field(max_length=512, pattern=REST_URL_PATTERN, description="slurmrestd's base URL, e.g. https://slurmrestd.slurm:6820.")
    token_secret_ref: TokenSecretRef = Field(
        description="Secret with the JWT (e.g. from `scontrol token lifespan=...`). Read again every 30 s and "
        "after a refusal, so a renewed token is picked up without a restart."
    )
    auth_header: Literal["X-SLURM-USER-TOKEN", "Bearer"] = Field(
        default="X-SLURM-USER-TOKEN", description="How the token is sent: X-SLURM-USER-TOKEN, or Authorization: Bearer."
    )
    ca_secret_ref: CaSecretRef | None = Field(
        default=None, description="CA bundle to trust for an https url (unset: the system's CAs)."
    )


class SlurmAccess(Model):
    ssh: SshAccess | None = None
    local: LocalAccess | None = None
    rest: RestAccess | None = None

    @model_validator(mode="after")
    def _one(self) -> "SlurmAccess":
        if sum(getattr(self, kind) is not None for kind in ACCESS_KINDS) != 1:
            raise ValueError(ACCESS_ONE)
        return self


ACCESS_KINDS = tuple(SlurmAccess.model_fields)  # ssh, local, rest: crd.py makes the CEL rule from these
ACCESS_ONE = "set exactly one of " + ", ".join(f"slurm.access.{k}" for k in ACCESS_KINDS)


VOLUME_NAME_MESSAGE = "every volume needs a name that is a DNS label (lowercase letters, digits and '-', at most 63)"
VOLUME_UNIQUE_MESSAGE = "volume names must be unique"
VOLUME_MOUNT_MESSAGE = "every volumeMount must name one of the volumes"


class Capabilities(Model):
    add: list[Annotated[str, Field(pattern=CAPABILITY_PATTERN, max_length=32)]] = Field(
        default_factory=list, max_length=32, description="Capabilities to add, e.g. SYS_ADMIN (within the operator's pool policy).")
    drop: list[Annotated[str, Field(pattern=CAPABILITY_PATTERN, max_length=32)]] = Field(
        default_factory=list, max_length=32, description="Capabilities to drop, e.g. ALL.")


class SlurmdSecurityContext(Model):
    """The slurmd container's securityContext: only what the operator's pool policy judges
    (privileged, capabilities, privilege escalation); everything else is the image's."""

    privileged: bool = Field(default=False, description="A privileged container: only where the pool policy allows it.")
    allow_privilege_escalation: bool | None = None
    capabilities: Capabilities | None = None


class SlurmdPodTemplate(Model):
    """The pod that runs slurmd on a node while the node serves Slurm."""

    image: str = Field(max_length=512)
    command: list[str] = Field(min_length=1, max_length=64)
    args: list[str] = Field(default_factory=list, max_length=64)
    env: list[EnvVar] = Field(default_factory=list, max_length=64)
    resources: Resources = Field(default_factory=Resources, json_schema_extra={"default": {}})
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    service_account_name: str | None = Field(
        default=None, description="Its ServiceAccount (its token is never mounted); only one the pool policy lists.")
    security_context: SlurmdSecurityContext | None = Field(
        default=None, description="The slurmd container's securityContext, within the operator's pool policy (docs/rbac.md).")
    priority_class_name: str | None = None
    termination_grace_period_seconds: int = Field(default=30, ge=0, le=3600)
    volumes: list[dict[str, Any]] = Field(
        default_factory=list, max_length=32,
        description="Pod volumes (Kubernetes Volume objects), e.g. the Secret with munge.key and a ConfigMap with slurm.conf.",
    )
    volume_mounts: list[dict[str, Any]] = Field(
        default_factory=list, max_length=32, description="Mounts of those volumes in the slurmd container (VolumeMount objects)."
    )

    @model_validator(mode="after")
    def _volumes(self) -> "SlurmdPodTemplate":
        names = [v.get("name") for v in self.volumes]
        for name in names:
            if not isinstance(name, str) or not re.match(VOLUME_NAME_PATTERN, name):
                raise ValueError(VOLUME_NAME_MESSAGE)
        if len(set(names)) != len(names):
            raise ValueError(VOLUME_UNIQUE_MESSAGE)
        if any(m.get("name") not in names for m in self.volume_mounts):
            raise ValueError(VOLUME_MOUNT_MESSAGE)
        return self


class SlurmSpec(Model):
    partition: SlurmName = Field(description="Slurm partition whose pending GPU jobs count as Slurm demand.")
    gres: str | None = Field(
        default=None, pattern=GRES_PATTERN, max_length=256, description="GRES a node must report before it is resumed, e.g. gpu:h100:8."
    )
    features: list[SlurmName] = Field(default_factory=list, max_length=32, description="Slurm features the node must report.")
    node_name: str = Field(
        default="{name}", pattern=NODE_NAME_TEMPLATE_PATTERN, max_length=128,
        description="The Slurm NodeName of a Node: a template over {name} (the Node's name), {shortName} (its name up to the "
        "first dot) and {hostname} (its kubernetes.io/hostname label), e.g. '{shortName}' or 'gpu-{shortName}'.",
    )
    node_name_label: str | None = Field(
        default=None, max_length=317, pattern=LABEL_KEY_PATTERN,
        description="A Node label whose value is the node's Slurm NodeName (instead of nodeName). A Node without it is never drained nor resumed.",
    )
    slurmd_pod: SlurmdPodTemplate
    access: SlurmAccess
    register_timeout: Duration = Field(
        default="5m", description="How long a started slurmd may take to register and report the GRES; then the move rolls back."
    )
    parking: Literal["Drain", "PowerSave"] = Field(
        default="Drain",
        description="How a node serving inference is parked in Slurm: Drain (drained with a slurmpool: reason, shown as drain) or "
        "PowerSave (powered down: lendable nodes show idle~ and Slurm may ask for them back by starting a job on them, held "
        "nodes drain~). PowerSave needs Slurm's power saving configured (docs/slurm-admin.md).",
    )


class InferencePool(Model):
    """A named Kubernetes inference pool: the labels and taints that make a node serve it."""

    name: str = Field(max_length=40, pattern=DNS_LABEL_PATTERN)
    labels: dict[str, LabelValue] = Field(default_factory=dict, max_length=64)
    taints: list[Taint] = Field(default_factory=list, max_length=16)
    priority: int = Field(default=0, ge=-1000, le=1000, description="Higher keeps its nodes longer when Slurm grows.")
    min_nodes: int = Field(default=0, ge=0, le=100000)
    max_nodes: int | None = Field(default=None, ge=0, le=100000)
    nodes: int | None = Field(
        default=None,
        ge=0,
        le=100000,
        description="An explicit count for this pool: served (highest priority first) before pools without one get the rest. "
        "Unset: the pool gets what its priority and bounds give it. A schedule window or demand may set it for a while.",
    )

    @model_validator(mode="after")
    def _label_keys(self) -> "InferencePool":
        for key in self.labels:
            if why := qualified_name_problem(key):
                raise ValueError(f"label key {why}")
        return self

    @model_validator(mode="after")
    def _bounds(self) -> "InferencePool":
        if self.max_nodes is not None and self.min_nodes > self.max_nodes:
            raise ValueError("an inference pool's minNodes must not exceed its maxNodes")
        if self.nodes is not None and not (self.min_nodes <= self.nodes <= (self.max_nodes if self.max_nodes is not None else self.nodes)):
            raise ValueError("an inference pool's nodes must lie within its minNodes and maxNodes")
        return self


PoolCountMap = Annotated[dict[str, Annotated[int, Field(ge=0, le=100000)]], Field(max_length=16)]


class InferenceSpec(Model):
    pools: list[InferencePool] = Field(min_length=1, max_length=16)

    @model_validator(mode="after")
    def _unique(self) -> "InferenceSpec":
        _no_duplicates("inference.pools", [p.name for p in self.pools])
        return self


def _no_duplicates(what: str, names: list[str]) -> None:
    seen = {n for n in names if names.count(n) > 1}
    if seen:
        raise ValueError(f"{what} has duplicate names: {', '.join(sorted(seen))}")


class CheckpointSpec(Model):
    """drain.onTimeout: Checkpoint: warn each job with a signal, give it `grace` to checkpoint, then requeue it
    (docs/pools.md: Checkpoint before preemption)."""

    signal: str = Field(
        default="USR1", max_length=19, pattern=SIGNAL_PATTERN,
        description="The signal sent to each job still running when the drain times out (a name such as USR1, or a number). "
        "A job whose own --signal Slurm shows (slurmrestd v0.0.44+, when it was on sbatch's command line) gets its own, "
        "with at least its own time as its grace.",
    )
    to: Literal["Batch", "All"] = Field(
        default="Batch", description="Who gets it: the batch shell (scancel --batch), or every step of the job (scancel --full)."
    )
    grace: Duration = Field(default="5m", description="How long a signalled job may run on before it is requeued.")
    not_requeueable: Literal["Wait", "Cancel"] = Field(
        default="Wait",
        description="A job that cannot be requeued (sbatch --no-requeue, or not a batch job) once its grace is over: "
        "wait for it (the move says so) or cancel it.",
    )


class DrainSpec(Model):
    timeout: Duration = Field(default="1h", description="How long a Slurm drain may wait for running jobs.")
    on_timeout: Literal["Wait", "Requeue", "Cancel", "Rollback", "Checkpoint"] = Field(
        default="Wait",
        description="When the drain times out: keep waiting (and report DrainBlocked), requeue or cancel the node's jobs, "
        "give the node back to Slurm, or signal each job, wait checkpoint.grace and requeue it (Checkpoint).",
    )
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec, json_schema_extra={"default": {}})
    min_runtime: Duration | None = Field(
        default=None,
        description="A node running a job younger than this is taken out of Slurm last, only when no other node would do "
        "(among busy nodes the planner takes those whose jobs would lose the least work since they started).",
    )
    eviction_timeout: Duration = Field(default="10m", description="How long pod evictions may be refused (PDBs) before onEvictionTimeout.")
    on_eviction_timeout: Literal["Wait", "Rollback"] = Field(
        default="Wait", description="When evictions time out: keep waiting (never forced) or give the node back to its inference pool."
    )


class TopologySpec(Model):
    """Where nodes sit (NVLink domains as Slurm blocks): victim choice keeps whole blocks."""

    block_label: str | None = Field(
        default=None, max_length=317, description="Node label whose value names the node's topology block; unset: no topology."
    )
    from_slurm: bool = Field(
        default=False,
        description="Read blocks from Slurm (`scontrol show topology`, every minute): the switches of slurmLevel "
        "(topology/tree) or the blocks (topology/block). A node Slurm puts in no block falls back to blockLabel.",
    )
    slurm_level: int = Field(default=0, ge=0, le=16, description="With fromSlurm and topology/tree: the switch level whose switches are blocks (0: leaf switches).")
    whole_blocks: bool = Field(default=False, description="Move whole blocks only.")

    @property
    def enabled(self) -> bool:
        return self.from_slurm or bool(self.block_label)


class ScheduleWindow(Model):
    """A window that sets the split while it is open, recurring (`cron`) or once (`at`) (see docs/cadence.md: Schedules)."""

    name: str = Field(max_length=63, pattern=DNS_LABEL_PATTERN, description="Names the window in status and Events.")
    cron: str | None = Field(
        default=None,
        max_length=128,
        pattern=CRON_PATTERN,
        description="When the window opens: 5 cron fields (minute hour day-of-month month day-of-week) or @daily etc., "
        "in timeZone's wall-clock time. A start in the hour skipped by a daylight-saving change opens the window at the "
        "change; a start in a repeated hour opens it once, at the first occurrence. Set exactly one of cron and at.",
    )
    at: str | None = Field(
        default=None,
        max_length=64,
        pattern=RFC3339_PATTERN,
        description="Or: a one-off window opening once at this RFC 3339 time with its offset (e.g. 2026-12-24T18:00:00+01:00); "
        "timeZone is not used. It gets the same planned handover as a recurring window.",
    )
    duration: Duration = Field(description="How long the window stays open, in elapsed time (e.g. 8h).")
    time_zone: str = Field(default="UTC", max_length=64, pattern=TIME_ZONE_PATTERN, description="IANA time zone of cron, e.g. Europe/Berlin.")
    slurm_nodes: int | None = Field(default=None, ge=0, le=100000, description="Slurm nodes while the window is open.")
    slurm_percent: int | None = Field(
        default=None, ge=0, le=100, description="Or: this percentage of the selected nodes (rounded half up) serve Slurm."
    )
    inference: PoolCountMap | None = Field(
        default=None,
        description="Explicit counts of named inference pools while the window is open, e.g. {llm: 4, batch: 2}; "
        "pools not named keep their spec count (if any) or share the rest by priority.",
    )
    priority: int = Field(
        default=0, ge=-1000, le=1000, description="Among overlapping open windows the highest wins; then the latest started; then list order."
    )

    @model_validator(mode="after")
    def _check(self) -> "ScheduleWindow":
        if (self.slurm_nodes is None) == (self.slurm_percent is None):
            raise ValueError("set exactly one of slurmNodes and slurmPercent")
        if seconds(self.duration) <= 0:
            raise ValueError("duration must be positive")
        if (self.cron is None) == (self.at is None):
            raise ValueError("set exactly one of cron and at")
        cron, at = self.cron, self.at
        problem = schedule_problem(cron, self.time_zone) if cron is not None else at_problem(at) if at is not None else None
        if problem:
            raise ValueError(problem)
        return self

    @property
    def opens_at(self) -> datetime | None:
        """A one-off window's start (aware), or None for a recurring one."""
        return parse_at(self.at) if self.at is not None else None


def parse_at(text: str) -> datetime:
    """An RFC 3339 time with its offset (Z or +HH:MM), as an aware datetime; ValueError otherwise."""
    value = datetime.fromisoformat(text.strip().replace("z", "Z").replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no offset: write it as RFC 3339, e.g. 2026-12-24T18:00:00Z")
    return value


def at_problem(text: str) -> str | None:
    """Why a one-off window's `at` cannot be used, or None."""
    try:
        parse_at(text)
    except ValueError as err:
        return f"at: {err}" if "offset" in str(err) else f"at: {text!r} is not an RFC 3339 time (e.g. 2026-12-24T18:00:00Z)"
    return None


def schedule_problem(cron: str, time_zone: str) -> str | None:
    """Why a window's cron expression or time zone cannot be used, or None."""
    from datetime import datetime
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from croniter import croniter

    try:
        ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {time_zone!r}"
    if not cron.startswith("@") and len(cron.split()) != 5:
        return f"cron {cron!r} must have 5 fields (minute hour day-of-month month day-of-week)"
    if not croniter.is_valid(cron):
        return f"invalid cron expression {cron!r}"
    try:
        croniter(cron, datetime(2000, 1, 1)).get_next(datetime)
    except Exception:  # noqa: BLE001 - croniter's CroniterBadDateError: e.g. 30 February
        return f"cron {cron!r} never matches"
    return None


class HandoverSpec(Model):
    """The planned handover ahead of a schedule edge that takes nodes out of Slurm (docs/cadence.md: Planned handover ahead of an edge)."""

    enabled: bool = Field(
        default=True,
        description="Before a schedule window's edge that lowers the Slurm count, reserve the leaving nodes in Slurm "
        "(reservation slurmpool-<namespace>.<pool>-<hash>, flags MAINT,IGNORE_JOBS, starting at the edge) so that only jobs that "
        "end by the edge start there. Only pools with schedule windows have edges.",
    )
    lead_time: Duration | None = Field(
        default=None,
        description="How long before the edge the reservation is made. Unset: the partition's MaxTime when Slurm reports one "
        "(not UNLIMITED), else 4h. A job longer than the lead time that starts just before the reservation exists still runs "
        "at the edge (drain.onTimeout decides for it).",
    )
    max_lead_time: Duration = Field(default="24h", description="The most the lead time may be, whatever the partition's MaxTime.")


class DemandBounds(Model):
    min_nodes: int = Field(default=0, ge=0, le=100000, description="Demand never takes this side below this many nodes.")
    max_nodes: int | None = Field(default=None, ge=0, le=100000, description="Demand never grows this side above this many nodes.")

    @model_validator(mode="after")
    def _bounds(self) -> "DemandBounds":
        if self.max_nodes is not None and self.min_nodes > self.max_nodes:
            raise ValueError("minNodes must not exceed maxNodes")
        return self


class InferenceDemand(DemandBounds):
    """Inference's bounds, and what of a pod's asks counts as GPUs (docs/cadence.md: Demand)."""

    resources: list[ExtendedResource] = Field(
        default_factory=lambda: [GPU], max_length=16,
        description="Extended resources that count as GPUs in pods' requests (nvidia.com/gpu, amd.com/gpu, MIG and shared "
        "GPU names); a node's capacity of each is read from its allocatable.",
    )
    device_classes: list[DnsSubdomain] = Field(
        default_factory=lambda: ["gpu.nvidia.com"], max_length=16,
        description="DeviceClasses whose devices count as GPUs in pods' ResourceClaims (Dynamic Resource Allocation).",
    )
    drivers: list[DnsSubdomain] = Field(
        default_factory=lambda: ["gpu.nvidia.com"], max_length=16,
        description="DRA drivers whose ResourceSlices serve those DeviceClasses: a node's devices are counted from them.",
    )

    @model_validator(mode="after")
    def _extended(self) -> "InferenceDemand":
        native = [r for r in self.resources if r.split("/")[0] == "kubernetes.io" or r.split("/")[0].endswith(".kubernetes.io")]
        if native:
            raise ValueError(f"{NATIVE_RESOURCE_MESSAGE} ({', '.join(native)})")
        return self


class DemandSpec(Model):
    """Follow demand (opt-in): pending GPU jobs in slurm.partition grow Slurm, pending unschedulable
    GPU pods that fit an inference pool grow inference (see docs/cadence.md: Demand)."""

    enabled: bool = Field(default=True, description="Set false to stop demand changes and keep the settings.")
    slurm: DemandBounds = Field(default_factory=DemandBounds, json_schema_extra={"default": {}})
    inference: InferenceDemand = Field(default_factory=InferenceDemand, json_schema_extra={"default": {}})
    cooldown: Duration = Field(
        default="5m", description="Least time between two demand changes, and after any manual or schedule change."
    )
    hysteresis: int = Field(
        default=1, ge=1, le=100000, description="A side's unmet need (in nodes) must reach this before demand acts for it."
    )
    when_both_want: Literal["PreferSlurm", "PreferInference", "Share"] = Field(
        default="Share",
        description="When both sides want nodes: grow Slurm, grow inference, or move toward slurmShare of the nodes.",
    )
    slurm_share: int = Field(default=50, ge=0, le=100, description="With Share: percent of the selected nodes for Slurm.")
    gpus_per_node: int | None = Field(
        default=None, ge=1, le=1024, description="GPUs of one node; default: the count in slurm.gres, else 8."
    )


class HealthCondition(Model):
    """A Node condition that makes a node unhealthy (node-problem-detector, DCGM, NVSentinel...)."""

    type: str = Field(max_length=63, pattern=CONDITION_TYPE_PATTERN, description="The condition's type, e.g. GpuXidError.")
    status: Literal["True", "False", "Unknown"] = Field(default="True", description="The status that means unhealthy.")
    min_age: Duration | None = Field(
        default=None, description="How long the condition must have held (from its lastTransitionTime) before it counts."
    )


class HealthSpec(Model):
    """When a node is unhealthy: never chosen for a move, never resumed (docs/pools.md: Node health)."""

    not_responding_grace: Duration = Field(
        default="5m",
        description="How long Slurm may report a node that should run slurmd DOWN, FAIL or NOT_RESPONDING before it is unhealthy "
        "(a slurmd restart is not a failure). Drains by others and Kubernetes NotReady count at once.",
    )
    conditions: list[HealthCondition] = Field(
        default_factory=list, max_length=32,
        description="Node conditions that make a node unhealthy. On the Slurm side such a node is also drained "
        "(reason `slurmpool: health: <type>`) and resumed once the condition clears.",
    )
    replace: bool = Field(
        default=False,
        description="false: the split counts nodes on a side. true: it counts healthy nodes, so a healthy node moves from "
        "the other side (within floors and maxConcurrentMoves) to make up for a broken one.",
    )


class SlurmNodePoolSpec(Model):
    node_selector: LabelSelector = Field(description="Nodes that belong to this pool; a node may belong to one pool only.")
    slurm_nodes: int = Field(ge=0, le=100000, description="Desired nodes on the Slurm side; the rest serve inference (scale subresource).")
    min_slurm_nodes: int = Field(default=0, ge=0, le=100000)
    min_inference_nodes: int = Field(default=0, ge=0, le=100000)
    max_concurrent_moves: int = Field(default=1, ge=1, le=1000, description="Moves in flight at once (a disruption budget).")
    paused: bool = Field(default=False, description="No new moves start; moves in flight finish.")
    mode: Literal["Active", "Shadow"] = Field(
        default="Active",
        description="Shadow: the operator reads and decides as usual but writes nothing to Nodes, pods or Slurm; what it "
        "would do is in status.shadow, Events (ShadowDecision) and slurmpool_shadow_moves (docs/runbook.md: Shadow mode).",
    )
    slurm: SlurmSpec
    inference: InferenceSpec
    drain: DrainSpec = Field(default_factory=DrainSpec, json_schema_extra={"default": {}})
    topology: TopologySpec = Field(default_factory=TopologySpec, json_schema_extra={"default": {}})
    schedule: list[ScheduleWindow] = Field(
        default_factory=list, max_length=64, description="Windows that set the split while open; outside them slurmNodes holds."
    )
    demand: DemandSpec | None = Field(default=None, description="Follow demand within bounds (opt-in).")
    health: HealthSpec = Field(default_factory=HealthSpec, json_schema_extra={"default": {}})
    handover: HandoverSpec = Field(default_factory=HandoverSpec, json_schema_extra={"default": {}})

    @model_validator(mode="after")
    def _check(self) -> "SlurmNodePoolSpec":
        # The same rules as the CRD's (crd.CEL_RULES), for a pool stored under an older CRD.
        if self.node_selector.is_empty():
            raise ValueError(NODE_SELECTOR_EMPTY)
        if self.slurm_nodes < self.min_slurm_nodes:
            raise ValueError("slurmNodes must not be below minSlurmNodes")
        _no_duplicates("schedule", [w.name for w in self.schedule])
        names = {p.name for p in self.inference.pools}
        if any(set(w.inference or {}) - names for w in self.schedule):
            raise ValueError("a schedule window's inference counts must name pools of spec.inference.pools")
        if self.topology.whole_blocks and not self.topology.enabled:
            raise ValueError("topology.wholeBlocks needs blocks: set blockLabel or fromSlurm")
        if any(self.node_selector.unmatched_by(p.labels) for p in self.inference.pools):
            raise ValueError(POOL_LABEL_OVER_SELECTOR)
        return self


# A pool's labels are written on the node as it moves: one the selector does not accept would take
# the node out of the pool mid-move (decide.py's strays end such a move, but the node is lost to the
# pool). One the selector accepts (its own value, a key it only needs to exist) is harmless.
POOL_LABEL_OVER_SELECTOR = ("an inference pool's labels must not give a label the nodeSelector reads a value it does not accept: "
                            "relabelled, the node would leave the pool mid-move")
NODE_SELECTOR_EMPTY = "nodeSelector must select something: set matchLabels or matchExpressions (empty, it would take every node)"


# ---------------------------------------------------------------- status


class Condition(Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str
    observed_generation: int | None = None


class SideCounts(Model):
    desired: int = 0
    ready: int = 0
    moving: int = 0
    unhealthy: int = Field(default=0, description="Nodes on this side (settled or moving to it) that are unhealthy.")


class PoolCounts(SideCounts):
    name: str


class InferenceStatus(SideCounts):
    pools: list[PoolCounts] = Field(default_factory=list)
    by_pool: str = Field(default="", description="Ready/desired per pool, e.g. 'llm 4/4, batch 1/2' (a printer column).")


class MoveStatus(Model):
    node: str
    move_id: str
    from_: str = Field(alias="from")
    to: str
    phase: str
    since: str
    blocked_by: list[str] = Field(default_factory=list)
    message: str = ""
    free_at: str | None = Field(
        default=None,
        description="A move out of Slurm while Draining: when the node's jobs end by their time limits (RFC 3339), or "
        "'unlimited' when one has none (drain.onTimeout decides for it); unset when no job runs there.",
    )


Outcome = Literal["Completed", "RolledBack", "Stopped"]  # how a move ended (status.recentMoves)
JobFate = Literal["drained", "requeued", "cancelled", "signalled"]  # how a job left a move's drain (core/movejobs.py)


class MoveJobGroup(Model):
    """The Slurm jobs of a move's drain that left one way (status.recentMoves[].jobs)."""

    how: JobFate = Field(description="drained: waited for (ended on its own, or still ran when the move turned back); "
                         "requeued or cancelled when the drain timed out (drain.onTimeout); signalled: sent the checkpoint "
                         "signal (each also drained, requeued or cancelled).")
    count: int = Field(ge=0, description="How many (ids lists the first of them).")
    ids: list[str] = Field(default_factory=list, max_length=10, description="Slurm job ids: at most 10 per move in all.")


class RecentMove(Model):
    """A move that ended: completed, rolled back or stopped on an unhealthy node (status.recentMoves)."""

    node: str
    move_id: str
    from_: str = Field(alias="from")
    to: str
    cause: str
    by: str | None = Field(default=None, description="Who asked: the writer of the pin or move-now, or what set the split.")
    started: str
    ended: str
    outcome: Outcome
    jobs: list[MoveJobGroup] = Field(
        default_factory=list, max_length=4,
        description="The Slurm jobs its drain waited for, requeued, cancelled or signalled (a move out of Slurm).",
    )
    jobs_unnamed: int = Field(default=0, ge=0, description="Jobs beyond the 64 a move's record names: counted, not in jobs.")


class ShadowStatus(Model):
    """A pool in shadow mode (spec.mode Shadow, or `slurmpool run --dry-run`): what this pass would have done."""

    would_start: list[str] = Field(default_factory=list, description="Moves it would start: 'node: from -> to (cause)'.")
    would_do: list[str] = Field(default_factory=list, description="Other writes it would make: node patches, Slurm commands, pods.")
    since: str = Field(description="When this decision was first made (unchanged while the same decision repeats).")


class InvalidRecord(Model):
    """An annotation of a node the operator cannot act on; the node is left alone until it is fixed."""

    node: str
    annotation: str
    message: str


# What a health finding is (core/health.py): the `kind` of status.unhealthyNodes and the `kind`
# label of slurmpool_unhealthy_nodes. No docstring: pydantic would put it in the CRD.
class HealthKind(StrEnum):
    SLURM_DOWN = "SlurmDown"  # Slurm reports it down, failed or not responding while its slurmd should run
    DRAINED_BY_OTHERS = "DrainedByOthers"  # drained in Slurm by anyone but slurmpool
    SLURM_UNLISTED = "SlurmUnlisted"  # Slurm does not list it while its slurmd should run
    NOT_READY = "NotReady"  # Kubernetes: Ready False or Unknown
    CONDITION = "Condition"  # a Node condition listed in health.conditions


class UnhealthyNode(Model):
    """A node found unhealthy (or, with graceUntil, seen failing and not yet counted)."""

    node: str
    side: str = Field(description="slurm, inference, or none (not adopted).")
    kind: HealthKind
    reason: str
    since: str = Field(description="When it was first seen (the grace period counts from it).")
    grace_until: str | None = Field(default=None, description="Set while within notRespondingGrace: not counted as unhealthy yet.")
    held: bool = Field(default=False, description="Its pin or move-now waits: set slurmpool.io/force=true to move it anyway.")


class DemandStatus(Model):
    slurm_nodes: int | None = Field(default=None, description="The Slurm count demand has set on top of the base (manual or schedule).")
    base: int | None = Field(default=None, description="The base count demand adjusts.")
    base_key: str = Field(default="", description="Identifies the base; a new base (manual change, window edge) resets demand.")
    last_change: str | None = Field(default=None, description="Last demand change or base change: the cooldown counts from it.")
    pending_jobs: int = Field(default=0, description="Pending Slurm jobs in the partition that want GPUs and wait for resources.")
    pending_job_gpus: int = 0
    pending_pods: int = Field(default=0, description="Pending unschedulable pods asking for GPUs (a counted resource or DRA claim) that fit an inference pool.")
    pending_pod_gpus: int = 0
    slurm_wants: int = Field(default=0, description="Nodes Slurm still needs (pending need minus idle and incoming nodes).")
    inference_wants: int = Field(default=0, description="Nodes inference still needs.")
    pool_wants: dict[str, int] = Field(default_factory=dict, description="Nodes each inference pool still needs for its pending pods.")
    pools: dict[str, int] = Field(
        default_factory=dict, description="Counts demand has asked for named inference pools (they hold until the base changes)."
    )
    unstartable_jobs: list[str] = Field(
        default_factory=list,
        description="Pending jobs waiting for nodes that no split of this pool could start (too many nodes or GPUs per node, "
        "BadConstraints), and why: reported, not counted. At most 10 Slurm jobs by name (the lowest ids), then a line of how many more.",
    )
    message: str = ""


class TargetStatus(Model):
    """The Slurm count the operator works toward, and who or what set it."""

    slurm_nodes: int = Field(description="The Slurm node count in force.")
    source: Literal["Manual", "Schedule", "Demand"] = Field(description="What set it: spec.slurmNodes, a schedule window, or demand.")
    reason: str = Field(default="", description="Why, in words: the window, the author of a manual change, demand's signals.")
    since: str = Field(description="When this source set this count.")
    by: str | None = Field(default=None, description="Author of the last manual change of spec.slurmNodes (from managedFields).")
    window: str | None = Field(default=None, description="The open schedule window, if any.")
    next_change: str | None = Field(default=None, description="The next schedule edge (a window opens or closes).")
    spec_slurm_nodes: int | None = Field(default=None, description="spec.slurmNodes last seen: a different value is a manual change.")
    manual_since: str | None = Field(default=None, description="When the operator saw spec.slurmNodes change last.")
    manual_until: str | None = Field(default=None, description="A manual change made during a window holds until this edge.")
    base_key: str | None = Field(default=None, description="Identifies the current manual or schedule base (demand resets when it changes).")
    inference: dict[str, int] = Field(
        default_factory=dict, description="Explicit counts of named inference pools in force (from the spec, the open window or demand)."
    )
    demand: DemandStatus | None = None


class HandoverCheckpoint(Model):
    """A job on the leaving nodes that will still run at the edge, warned `grace` before it (drain.onTimeout: Checkpoint)."""

    job: str = Field(description="The Slurm job id.")
    nodes: list[str] = Field(default_factory=list, description="The leaving nodes it runs on (Node names).")
    at: str = Field(description="Checkpoint at: when it gets its signal (the edge less its grace).")
    signal: str = Field(description="The signal it gets: the pool's drain.checkpoint.signal, or the job's own --signal.")
    signalled: str | None = Field(default=None, description="When it was sent (the node's slurmpool.io/checkpoint record); None: not yet.")


class HandoverStatus(Model):
    """The planned handover ahead of the next edge, or one whose moves are still going (docs/cadence.md: Planned handover ahead of an edge)."""

    reservation: str = Field(description="The Slurm reservation (scontrol show reservation <name>).")
    flags: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list, description="The nodes leaving Slurm at the edge (Node names).")
    start: str = Field(description="The edge: the reservation starts then.")
    end: str | None = Field(default=None, description="When the reservation ends at the latest (it goes once the moves are done).")
    lead_time: str = Field(default="", description="The lead time in force, and where it comes from (spec, partition MaxTime, default).")
    state: Literal["Planned", "Reserved", "Handing", "Unavailable"] = Field(
        description="Planned: wanted, not in Slurm yet; Reserved: in Slurm before the edge; Handing: past the edge, moves "
        "going; Unavailable: this access cannot create reservations (the edge drains as without a handover).",
    )
    late: list[str] = Field(
        default_factory=list,
        description="Leaving nodes whose jobs have no time limit or end after the edge: drain.onTimeout decides for them.",
    )
    checkpoints: list[HandoverCheckpoint] = Field(
        default_factory=list,
        description="With drain.onTimeout: Checkpoint, each job of the late nodes and when it is warned to checkpoint; "
        "at the edge, those whose grace is over are requeued without waiting for drain.timeout.",
    )
    message: str = ""


class ReservedNode(Model):
    """A node of the pool serving Slurm that someone else's Slurm reservation holds, now or within the lead time."""

    node: str
    reservation: str = Field(description="The reservation (scontrol show reservation <name>): any that is not this pool's own.")
    start: str | None = None
    end: str | None = None
    flags: list[str] = Field(default_factory=list)
    leaving: bool = Field(
        default=False, description="A pin or move-now takes it out of Slurm anyway (else the planner never chooses it to leave Slurm)."
    )


class SlurmNodePoolStatus(Model):
    observed_generation: int | None = None
    selected_nodes: int = 0
    replicas: int = Field(default=0, description="Nodes serving Slurm (scale subresource).")
    selector: str = Field(default="", description="Selects the pool's slurmd pods (scale subresource).")
    slurm: SideCounts = Field(default_factory=SideCounts)
    inference: InferenceStatus = Field(default_factory=InferenceStatus)
    moving: int = 0
    blocked: int = 0
    moves: list[MoveStatus] = Field(default_factory=list)
    invalid_records: list[InvalidRecord] = Field(
        default_factory=list, description="Nodes left alone because an annotation of theirs cannot be read (see Events)."
    )
    unhealthy: int = Field(default=0, description="Unhealthy nodes of the pool (both sides).")
    unhealthy_nodes: list[UnhealthyNode] = Field(
        default_factory=list, description="Why each unhealthy node is unhealthy (docs/pools.md: Node health); never chosen for a move."
    )
    conditions: list[Condition] = Field(default_factory=list)
    last_error: str | None = None
    target: TargetStatus | None = Field(default=None, description="The current target and its source (an audit).")
    handover: HandoverStatus | None = Field(default=None, description="The planned handover ahead of the next schedule edge, if any.")
    reserved_nodes: list[ReservedNode] = Field(
        default_factory=list,
        description="Nodes serving Slurm in someone else's Slurm reservation, active or starting within the lead time "
        "(docs/cadence.md: Others' reservations): never chosen to leave Slurm; a pin or move-now moves one anyway.",
    )
    recent_moves: list[RecentMove] = Field(
        default_factory=list, max_length=50,
        description="The last moves that ended, newest first (at most 20; `kubectl slurmpool history`).",
    )
    shadow: ShadowStatus | None = Field(default=None, description="Shadow mode: what the operator would have done (writes nothing).")
