"""Prometheus metrics (prometheus-client), all prefixed slurmpool_.

kopf has no metrics of its own, so reconcile counts and durations follow
controller-runtime's names; the rest are the domain's.
"""

from __future__ import annotations

import platform
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import Counter, Gauge, Histogram

from slurmbridge.backend import slurm_commands

from slurmpool import __version__
from slurmpool.core.models import HealthKind
from slurmpool.core.placement import Direction

RECONCILE_TOTAL = Counter("slurmpool_reconcile_total", "Pool reconciles", ["result"])
RECONCILE_SECONDS = Histogram(
    "slurmpool_reconcile_duration_seconds", "Time of one pool reconcile",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 5, 10),  # fine around the 1 s target
)
# Where a pass's time goes (controller/pools.py, PoolController.reconcile): the Slurm poll it waits for is in `snapshot`.
RECONCILE_STAGE_SECONDS = Histogram(
    "slurmpool_reconcile_stage_duration_seconds", "Time of one stage of a pool reconcile", ["stage"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 5, 10),
)
RECONCILE_STAGES = ("snapshot", "decide", "apply", "status")
# The status is written beside the passes (statuswriter.py): its own latency and failures.
STATUS_WRITE_SECONDS = Histogram(
    "slurmpool_status_write_duration_seconds", "Time of one write of a pool's status",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 5, 10),
)
# Each Kubernetes API call of the adapter (kube.py), and how long it waited for a thread of its lane.
KUBE_REQUEST_SECONDS = Histogram(
    "slurmpool_kube_request_duration_seconds", "Time of one Kubernetes API call", ["call"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 5, 10),
)
KUBE_THREAD_WAIT_SECONDS = Histogram(
    "slurmpool_kube_thread_wait_seconds", "Time a Kubernetes API call waited for a thread", ["lane"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
STATUS_WRITES = Counter("slurmpool_status_writes_total", "Writes of a pool's status", ["result"])
# How late the event loop wakes a sleeper: CPU work on the loop delays every pool's pass.
EVENT_LOOP_LAG = Histogram(
    "slurmpool_event_loop_lag_seconds", "How late the event loop ran a timer (sampled every 0.25 s)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
QUEUE_DEPTH = Gauge("slurmpool_workqueue_depth", "Pools waiting for a worker (due or scheduled)")
LEADER = Gauge("slurmpool_leader", "1 on the replica that holds the Lease (and reconciles), 0 on the others")
LEADER.set(0)
NODES = Gauge("slurmpool_nodes", "Nodes per pool, placement and phase", ["pool", "placement", "phase"])
# Per move, by pool (bounded by the number of pools: a deleted pool's series go with it, forget()).
MOVES_STARTED = Counter("slurmpool_moves_started_total", "Moves started", ["pool", "direction", "cause"])  # cause: core/view.Cause
MOVES_COMPLETED = Counter("slurmpool_moves_completed_total", "Moves completed", ["pool", "direction"])
MOVES_FAILED = Counter("slurmpool_moves_failed_total", "Moves that failed or rolled back", ["pool", "direction", "reason"])
MOVE_SECONDS = Histogram(
    "slurmpool_move_duration_seconds", "Time from a move's start to its end", ["pool", "direction"],
    buckets=(1, 2, 5, 10, 30, 60, 300, 900, 3600, 14400),
)
DRAIN_SECONDS = Histogram(
    "slurmpool_drain_duration_seconds", "Time a node spent draining in Slurm", ["pool"],
    buckets=(1, 5, 30, 60, 300, 900, 3600, 14400, 86400),
)
EVICTIONS_REFUSED = Counter("slurmpool_evictions_refused_total", "Evictions refused (PodDisruptionBudgets)", ["pool"])
ACTION_ERRORS = Counter("slurmpool_action_errors_total", "Actions of a pool's pass that failed", ["pool", "action"])
SLURM_COMMAND_SECONDS = Histogram(
    "slurmpool_slurm_command_duration_seconds", "Latency of Slurm commands", ["command"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30)
)
SLURM_COMMAND_ERRORS = Counter("slurmpool_slurm_command_errors_total", "Slurm commands that failed", ["command"])
# Events are best effort (kube.py): one not posted is counted, not silently lost.
EVENTS_DROPPED = Counter("slurmpool_events_dropped_total", "Kubernetes Events not posted", ["why"])
EVENT_DROP_REASONS = ("queue_full", "refused", "gave_up", "shutdown")  # kube.KubeAdapter.event / _post_events / flush_events
# Per pool, from each reconcile pass (poolmetrics.py): for the dashboard and the alerts.
GPUS = Gauge("slurmpool_gpus", "GPUs (allocatable of the counted resources, or DRA devices in ResourceSlices) per pool, placement and phase", ["pool", "placement", "phase"])
GPU_SECONDS = Counter(
    "slurmpool_gpu_seconds_total", "GPU-seconds served by nodes settled on a side (slurm or inference)", ["pool", "side"]
)
POOL_CONDITION = Gauge("slurmpool_pool_condition", "A pool's status condition: 1 when True, 0 otherwise", ["pool", "type"])
MOVES_BLOCKED = Gauge("slurmpool_moves_blocked", "Moves in flight that are blocked (jobs, PDBs)", ["pool"])
UNHEALTHY_NODES = Gauge(
    "slurmpool_unhealthy_nodes", "Unhealthy nodes per pool, side and kind of finding (docs/pools.md: Node health)", ["pool", "side", "kind"]
)
# Shadow mode (controller/shadow.py): the moves a pass would start now; every direction, 0 included, while the pool is in it.
SHADOW_MOVES = Gauge("slurmpool_shadow_moves", "Moves a pool in shadow mode would start now (it writes nothing)", ["pool", "direction"])
HEALTH_SIDES = ("slurm", "inference", "none")
HEALTH_KINDS = tuple(k.value for k in HealthKind)  # models.UnhealthyNode.kind

# Counters start at 0 for every label value the code can set (Prometheus' advice). A series born
# at 1 has no increase() or rate() in Prometheus: without this, SlurmPoolMovesFailing would miss
# the first rollback of a direction since the operator started, SlurmPoolReconcileErrors its first
# error, and the dashboard's failure and error panels would show "No data" on a healthy cluster.
# The per-pool ones start at a pool's first pass (count_from_zero). tests/test_metrics_init.py
# keeps these lists equal to the values the code uses.
DIRECTIONS = tuple(d.value for d in Direction)  # to_slurm, to_inference, between_pools (core/placement.py)
FAILURE_REASONS = ("rollback", "unhealthy")  # apply: MOVES_FAILED reasons


class Action(StrEnum):
    """What failed, as slurmpool_action_errors_total's `action` label (apply._guard's argument)."""

    PATCH = "patch"
    CREATE = "create"
    DELETE = "delete"
    EVICT = "evict"
    SCONTROL = "scontrol"
    SCANCEL = "scancel"


ACTIONS = tuple(a.value for a in Action)
SLURM_COMMANDS = slurm_commands()  # the SlurmCommands Protocol's calls (slurmbridge/backend.py), as access.Instrumented times them
for _command in SLURM_COMMANDS:
    SLURM_COMMAND_ERRORS.labels(command=_command)
for _why in EVENT_DROP_REASONS:
    EVENTS_DROPPED.labels(why=_why)
for _stage in RECONCILE_STAGES:
    RECONCILE_STAGE_SECONDS.labels(stage=_stage)
for _result in ("ok", "error"):
    RECONCILE_TOTAL.labels(result=_result)
    STATUS_WRITES.labels(result=_result)

# Every series labelled with a pool; the gauges among them are the state of the pool now, which
# only the Lease holder exports (a replica that loses it clears them: sum() counts one replica).
POOL_GAUGES = (NODES, GPUS, POOL_CONDITION, MOVES_BLOCKED, UNHEALTHY_NODES, SHADOW_MOVES)
POOL_SERIES = (*POOL_GAUGES, GPU_SECONDS, MOVES_STARTED, MOVES_COMPLETED, MOVES_FAILED, MOVE_SECONDS, DRAIN_SECONDS,
               EVICTIONS_REFUSED, ACTION_ERRORS)


def count_from_zero(pool: str) -> None:
    """A pool's counters at 0 for every label value the code sets (above: why)."""
    for direction in DIRECTIONS:
        MOVES_COMPLETED.labels(pool=pool, direction=direction)
        MOVE_SECONDS.labels(pool=pool, direction=direction)  # its buckets too: the dashboard's Move duration
        for reason in FAILURE_REASONS:
            MOVES_FAILED.labels(pool=pool, direction=direction, reason=reason)
    for action in ACTIONS:
        ACTION_ERRORS.labels(pool=pool, action=action)
    EVICTIONS_REFUSED.labels(pool=pool)
    DRAIN_SECONDS.labels(pool=pool)


def forget(pool: str) -> None:
    """Every series of a deleted pool."""
    for metric in POOL_SERIES:
        metric.remove_by_labels({"pool": pool})


def clear_pool_gauges() -> None:
    for gauge in POOL_GAUGES:
        gauge.clear()


def _kopf_version() -> str:
    try:
        return version("kopf")
    except PackageNotFoundError:
        return "unknown"


# Always 1; the labels say what runs (join on it to see a rollout's versions side by side).
BUILD_INFO = Gauge("slurmpool_build_info", "The running operator's version, Python and kopf", ["version", "python", "kopf"])
BUILD_INFO.labels(version=__version__, python=platform.python_version(), kopf=_kopf_version()).set(1)
