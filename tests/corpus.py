"""The bad-input corpus (issue 7): invalid SlurmNodePool specs and how each is refused.

`refused_by`:
- "schema": the CRD's OpenAPI schema (type, bounds, enum, list keys);
- "cel": one of the CRD's CEL rules (crd.py; patterns become CEL rules with a plain message);
- "operator": only the cluster can tell (how many nodes are selected, which pools overlap,
  a cron that never fires). The spec is accepted; the operator reports `Degraded` with
  `reason` and `message`, and moves nothing.
`message` is what the user reads: in kubectl's error for the first two, in the condition for the last.
Used by tests/test_bad_input.py (pydantic, the generated CRD, the planner) and
e2e/test_bad_input.py (the lab's real apiserver and the running operator).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    id: str
    change: dict  # merged into a valid spec; a key ending in "!" replaces instead of merging
    refused_by: str
    message: str
    reason: str = ""  # the Degraded reason, for refused_by == "operator"
    nodes: int = 2  # nodes the pool selects, for refused_by == "operator"
    extra: dict = field(default_factory=dict)


def _window(**kw) -> dict:
    return {"schedule": [{"name": "night", "cron": "0 22 * * *", "duration": "8h", "slurmNodes": 1, **kw}]}


def _pool(**kw) -> dict:
    return {"inference": {"pools!": [{"name": "llm", **kw}]}}


GE0 = "should be greater than or equal to 0"
POOL_LABEL_OVER_SELECTOR = ("an inference pool's labels must not give a label the nodeSelector reads a value it does not accept: "
                            "relabelled, the node would leave the pool mid-move")
DURATION = "must be a duration such as 90s, 10m or 1h30m"
SLURM_NAME = "must be a Slurm name: letters, digits, '.', '_' or '-'"
GRES = "must be Slurm GRES such as gpu:h100:8"
AT = "must be an RFC 3339 time with its offset in the years 2000 to 2999"
ACCESS_ONE = "set exactly one of slurm.access.ssh, slurm.access.local, slurm.access.rest"

CASES = [
    # counts
    Case("negative-slurmNodes", {"slurmNodes": -1}, "schema", f"spec.slurmNodes in body {GE0}"),
    Case("negative-minSlurmNodes", {"minSlurmNodes": -1}, "schema", f"spec.minSlurmNodes in body {GE0}"),
    Case("negative-minInferenceNodes", {"minInferenceNodes": -1}, "schema", f"spec.minInferenceNodes in body {GE0}"),
    Case("negative-pool-minNodes", _pool(minNodes=-1), "schema", f"minNodes in body {GE0}"),
    Case("zero-maxConcurrentMoves", {"maxConcurrentMoves": 0}, "schema", "should be greater than or equal to 1"),
    Case("huge-slurmNodes", {"slurmNodes": 10**9}, "schema", "spec.slurmNodes in body should be less than or equal to 100000"),
    Case("huge-maxConcurrentMoves", {"maxConcurrentMoves": 100000}, "schema", "should be less than or equal to 1000"),
    Case("huge-window-percent", _window(slurmNodes=None, slurmPercent=150), "schema", "should be less than or equal to 100"),
    # floors and splits the spec alone can judge
    Case("slurmNodes-below-minSlurmNodes", {"slurmNodes": 1, "minSlurmNodes": 3}, "cel", "slurmNodes must not be below minSlurmNodes"),
    Case("pool-min-above-max", _pool(minNodes=3, maxNodes=1), "cel", "an inference pool's minNodes must not exceed its maxNodes"),
    Case("pool-count-above-max", _pool(maxNodes=1, nodes=2), "cel", "an inference pool's nodes must lie within its minNodes and maxNodes"),
    # the selector named here too: e2e's base pool selects by another label (harness.pool_manifest)
    Case("pool-label-over-selector-key", {"nodeSelector": {"matchLabels": {"gpu": "true"}}, **_pool(labels={"gpu": "false"})}, "cel",
         POOL_LABEL_OVER_SELECTOR),
    Case("pool-label-over-selector-expression", {"nodeSelector": {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]},
                                                 **_pool(labels={"rack": "a"})}, "cel", POOL_LABEL_OVER_SELECTOR),
    Case("pool-label-over-selector-absent", {"nodeSelector": {"matchExpressions": [{"key": "rack", "operator": "DoesNotExist"}]},
                                             **_pool(labels={"rack": "a"})}, "cel", POOL_LABEL_OVER_SELECTOR),
    Case("window-names-unknown-pool", _window(inference={"nope": 1}), "cel",
         "a schedule window's inference counts must name pools of spec.inference.pools"),
    Case("whole-blocks-without-blocks", {"topology": {"wholeBlocks": True}}, "cel", "topology.wholeBlocks needs blocks: set blockLabel or fromSlurm"),
    Case("demand-min-above-max", {"demand": {"slurm": {"minNodes": 4, "maxNodes": 2}}}, "cel",
         "demand.slurm.minNodes must not exceed maxNodes"),
    Case("no-inference-pool", {"inference": {"pools!": []}}, "schema", "should have at least 1 items"),
    Case("duplicate-pool-names", {"inference": {"pools!": [{"name": "llm"}, {"name": "llm"}]}}, "schema",
         'spec.inference.pools[1]: Duplicate value: {"name":"llm"}'),
    Case("duplicate-window-names", {"schedule": [_window()["schedule"][0], _window(slurmNodes=2)["schedule"][0]]}, "schema",
         'spec.schedule[1]: Duplicate value: {"name":"night"}'),
    Case("bad-pool-name", _pool(name="LLM_pool"), "cel", "must be a DNS label"),
    # values the API server would refuse on a Node or on the slurmd pod (issue 25): refused here first
    Case("label-key-space", _pool(labels={"gpu pool": "x"}), "cel", "label key must be a qualified name"),
    Case("label-key-prefix-upper", _pool(labels={"Example.com/pool": "x"}), "cel", "label key must be a qualified name"),
    Case("label-key-long-name", _pool(labels={"example.com/" + "a" * 64: "x"}), "cel", "label key must be a qualified name"),
    Case("label-value-space", _pool(labels={"pool": "a b"}), "cel", "must be a label value"),
    Case("label-value-long", _pool(labels={"pool": "a" * 64}), "schema", "spec.inference.pools[0].labels.pool: Too long"),
    Case("taint-key-slash-end", _pool(taints=[{"key": "example.com/", "effect": "NoSchedule"}]), "cel", "must be a qualified name"),
    Case("taint-value-shell", _pool(taints=[{"key": "gpu", "value": "$(id)", "effect": "NoSchedule"}]), "cel", "must be a label value"),
    Case("taint-effect", _pool(taints=[{"key": "gpu", "effect": "NoScheduleEver"}]), "schema", 'Unsupported value: "NoScheduleEver"'),
    Case("env-name-digit", {"slurm": {"slurmdPod": {"env": [{"name": "1SLURM", "value": "x"}]}}}, "cel",
         "must be an environment variable name"),
    Case("env-name-equals", {"slurm": {"slurmdPod": {"env": [{"name": "A=B", "value": "x"}]}}}, "cel",
         "must be an environment variable name"),
    Case("volume-name-upper", {"slurm": {"slurmdPod": {"volumes": [{"name": "Munge_Key", "emptyDir": {}}]}}}, "cel",
         "every volume needs a name that is a DNS label"),
    Case("volume-no-name", {"slurm": {"slurmdPod": {"volumes": [{"emptyDir": {}}]}}}, "cel", "every volume needs a name that is a DNS label"),
    Case("volume-twice", {"slurm": {"slurmdPod": {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}]}}}, "cel",
         "volume names must be unique"),
    Case("mount-unknown-volume", {"slurm": {"slurmdPod": {"volumeMounts": [{"name": "munge", "mountPath": "/etc/munge"}]}}}, "cel",
         "every volumeMount must name one of the volumes"),
    # schedules
    Case("cron-words", _window(cron="every day"), "cel", "must be 5 cron fields (minute hour day-of-month month day-of-week"),
    Case("cron-six-fields", _window(cron="0 0 22 * * *"), "cel", "must be 5 cron fields"),
    Case("cron-shell", _window(cron="0 22 * * * ; reboot"), "cel", "must be 5 cron fields"),
    Case("unknown-time-zone", _window(timeZone="Mars/Olympus"), "cel",
         "unknown time zone Mars/Olympus evaluating rule: timeZone must be an IANA time zone such as Europe/Berlin"),
    Case("time-zone-shell", _window(timeZone="Europe/Berlin;date"), "cel", "must be an IANA time zone name such as Europe/Berlin"),
    Case("window-count-and-percent", _window(slurmPercent=50), "cel", "set exactly one of slurmNodes and slurmPercent"),
    Case("window-neither-count", _window(slurmNodes=None), "cel", "set exactly one of slurmNodes and slurmPercent"),
    Case("window-zero-duration", _window(duration="0h0m"), "cel", "duration must be positive"),
    # durations
    Case("duration-word", {"drain": {"timeout": "soon"}}, "cel", f"spec.drain.timeout: Invalid value: \"soon\": {DURATION}"),
    Case("duration-no-unit", {"drain": {"evictionTimeout": "600"}}, "cel", DURATION),
    Case("duration-negative", {"slurm": {"registerTimeout": "-5m"}}, "cel", DURATION),
    Case("duration-days", {"schedule": _window(duration="1d")["schedule"]}, "cel", DURATION),
    # issue 37: values past what a pass can compute (datetime's range) raised OverflowError every pass
    Case("duration-31-digits", {"handover": {"leadTime": "9" * 31 + "s"}}, "cel", DURATION),
    Case("window-duration-31-digits", {"schedule": _window(duration="9" * 31 + "h")["schedule"]}, "cel", DURATION),
    Case("at-year-9999", {"schedule": _window(cron=None, at="9999-12-31T23:00:00Z")["schedule"]}, "cel", AT),
    Case("at-year-0001", {"schedule": _window(cron=None, at="0001-01-01T00:00:00+01:00")["schedule"]}, "cel", AT),
    # Slurm names reach scontrol: no shell syntax
    Case("partition-shell", {"slurm": {"partition": "gpu;rm -rf /"}}, "cel", f'spec.slurm.partition: Invalid value: "gpu;rm -rf /": {SLURM_NAME}'),
    Case("partition-subshell", {"slurm": {"partition": "$(reboot)"}}, "cel", SLURM_NAME),
    Case("gres-shell", {"slurm": {"gres": "gpu:h100:8;reboot"}}, "cel", GRES),
    Case("gres-backtick", {"slurm": {"gres": "gpu:h100:`id`"}}, "cel", GRES),
    Case("feature-shell", {"slurm": {"features": ["nvlink|reboot"]}}, "cel", f"spec.slurm.features[0]: Invalid value: \"nvlink|reboot\": {SLURM_NAME}"),
    Case("feature-space", {"slurm": {"features": ["a b"]}}, "cel", SLURM_NAME),
    # selectors, access, policies
    Case("empty-selector", {"nodeSelector!": {}}, "cel", "nodeSelector must select something: set matchLabels or matchExpressions"),
    Case("ssh-and-local", {"slurm": {"access!": {"ssh": {"host": "slurm", "user": "root", "secretRef": {"name": "s"}}, "local": {}}}}, "cel", ACCESS_ONE),
    Case("ssh-and-rest", {"slurm": {"access!": {"ssh": {"host": "slurm", "user": "root", "secretRef": {"name": "s"}},
                                                "rest": {"url": "https://slurmrestd:6820", "tokenSecretRef": {"name": "t"}}}}},
         "cel", ACCESS_ONE),
    Case("no-access", {"slurm": {"access!": {}}}, "cel", ACCESS_ONE),
    Case("rest-url-query", {"slurm": {"access!": {"rest": {"url": "https://slurmrestd:6820/?x=1", "tokenSecretRef": {"name": "t"}}}}},
         "cel", "must be an http:// or https:// URL"),
    Case("rest-url-credentials", {"slurm": {"access!": {"rest": {"url": "https://user:pw@slurmrestd:6820", "tokenSecretRef": {"name": "t"}}}}},
         "cel", "must be an http:// or https:// URL"),
    Case("rest-auth-header", {"slurm": {"access!": {"rest": {"url": "http://slurmrestd:6820", "tokenSecretRef": {"name": "t"},
                                                             "authHeader": "Cookie"}}}}, "schema", 'Unsupported value: "Cookie"'),
    Case("unknown-onTimeout", {"drain": {"onTimeout": "Kill"}}, "schema", 'Unsupported value: "Kill"'),
    Case("health-condition-type", {"health": {"conditions": [{"type": "GPU error"}]}}, "cel", "must be a Node condition type"),
    Case("health-condition-status", {"health": {"conditions": [{"type": "GpuXid", "status": "Yes"}]}}, "schema", 'Unsupported value: "Yes"'),
    Case("health-grace", {"health": {"notRespondingGrace": "5 minutes"}}, "cel", DURATION),
    # only the cluster can tell: accepted, reported, nothing moves
    Case("more-slurm-than-selected", {"slurmNodes": 3}, "operator", "3 Slurm nodes wanted but only 2 nodes are selected",
         reason="InvalidSpec"),
    Case("floors-above-selected", {"slurmNodes": 2, "minSlurmNodes": 2, "minInferenceNodes": 1}, "operator",
         "minSlurmNodes (2) + minInferenceNodes (1) exceed the 2 selected nodes", reason="InvalidSpec"),
    Case("pool-floors-above-inference", {"slurmNodes": 1, **_pool(minNodes=2)}, "operator",
         "the inference pools' minNodes (2) exceed the 1 inference nodes", reason="InvalidSpec"),
    Case("cron-never-fires", _window(cron="0 0 30 2 *"), "operator", "cron '0 0 30 2 *' never matches", reason="InvalidSpec"),
    Case("cron-out-of-range", _window(cron="61 * * * *"), "operator", "invalid cron expression '61 * * * *'", reason="InvalidSpec"),
]
# Two pools over the same nodes: each is valid alone (e2e/test_bad_input.py builds the pair).
OVERLAP_MESSAGE = "selected by another SlurmNodePool too, never moved"


def by_kind(kind: str) -> list[Case]:
    return [c for c in CASES if c.refused_by == kind]


def with_change(spec: dict, change: dict) -> dict:
    """A copy of spec with change merged in (dicts merged, "key!" replaces, None removes)."""
    out = copy.deepcopy(spec)
    for key, value in change.items():
        if key.endswith("!"):
            out[key[:-1]] = copy.deepcopy(value)
        elif value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = with_change(out[key], value)
        elif isinstance(value, list):
            out[key] = [with_change({}, v) if isinstance(v, dict) else v for v in value]
        else:
            out[key] = copy.deepcopy(value)
    return out
