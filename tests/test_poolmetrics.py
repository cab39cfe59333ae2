"""Per-pool metrics (poolmetrics.py): GPU-seconds per side, GPUs per placement, conditions as
gauges, blocked moves, drain durations; and the GPU count read from the Node."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import REGISTRY

from slurmpool.controller import poolmetrics
from slurmpool.adapters.kube import node_view
from slurmpool.core.models import Condition, SlurmNodePoolStatus
from slurmpool.core.view import ANN_MOVE, ANN_PLACEMENT, MoveRecord, NodeView

from .factories import NOW


def value(name: str, **labels) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def settled(name: str, placement: str, gpus: int = 8) -> NodeView:
    return NodeView(name=name, annotations={ANN_PLACEMENT: placement}, gpus=gpus)


def moving(name: str, phase: str, move_id: str = "m1", since=NOW, gpus: int = 8) -> NodeView:
    record = MoveRecord(id=move_id, source="slurm", target="inference:llm", phase=phase, since=since, started=since)
    return NodeView(name=name, annotations={ANN_PLACEMENT: "slurm", ANN_MOVE: record.to_annotation()}, gpus=gpus)


def status(blocked: int = 0, **conditions: bool) -> SlurmNodePoolStatus:
    return SlurmNodePoolStatus(
        blocked=blocked,
        conditions=[
            Condition(type=t, status="True" if v else "False", reason="R", last_transition_time="2026-11-29T12:00:00Z")
            for t, v in conditions.items()
        ],
    )


def test_node_view_reads_allocatable_gpus():
    body = {"metadata": {"name": "gpu01"}, "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "16"}}}
    assert node_view(body).gpus == 8
    assert node_view({"metadata": {"name": "cpu01"}, "status": {"allocatable": {"cpu": "4"}}}).gpus == 0
    assert node_view({"metadata": {"name": "odd"}, "status": {"allocatable": {"nvidia.com/gpu": "1k"}}}).gpus == 0


def test_gpu_seconds_count_settled_nodes_on_the_same_side_across_a_pass():
    pool = "ns/gpu-seconds"
    nodes = [settled("a", "slurm"), settled("b", "slurm", gpus=4), settled("c", "inference:llm"), moving("d", "Draining")]
    poolmetrics.export(pool, nodes, status(), now=100.0, wall=NOW)
    # first pass: no interval yet, but both sides exist at 0 (so increase() counts the next pass)
    assert value("slurmpool_gpu_seconds_total", pool=pool, side="slurm") == value("slurmpool_gpu_seconds_total", pool=pool, side="inference") == 0
    poolmetrics.export(pool, nodes, status(), now=110.0, wall=NOW)
    assert value("slurmpool_gpu_seconds_total", pool=pool, side="slurm") == (8 + 4) * 10
    assert value("slurmpool_gpu_seconds_total", pool=pool, side="inference") == 8 * 10
    # b changes side between passes: it counts for neither during that interval.
    nodes[1] = settled("b", "inference:llm", gpus=4)
    poolmetrics.export(pool, nodes, status(), now=115.0, wall=NOW)
    assert value("slurmpool_gpu_seconds_total", pool=pool, side="slurm") == 12 * 10 + 8 * 5
    assert value("slurmpool_gpu_seconds_total", pool=pool, side="inference") == 8 * 10 + 8 * 5


def test_gpus_per_placement_and_phase_and_stale_series_go_to_zero():
    pool = "ns/gpus"
    poolmetrics.export(pool, [settled("a", "slurm"), moving("b", "Draining")], status(), now=1.0, wall=NOW)
    assert value("slurmpool_gpus", pool=pool, placement="slurm", phase="Settled") == 8
    assert value("slurmpool_gpus", pool=pool, placement="inference:llm", phase="Draining") == 8
    poolmetrics.export(pool, [settled("a", "slurm"), settled("b", "inference:llm")], status(), now=2.0, wall=NOW)
    assert value("slurmpool_gpus", pool=pool, placement="inference:llm", phase="Draining") == 0
    assert value("slurmpool_gpus", pool=pool, placement="inference:llm", phase="Settled") == 8


def test_conditions_and_blocked_moves_are_gauges():
    pool = "ns/conditions"
    poolmetrics.export(pool, [], status(blocked=2, Ready=False, DrainBlocked=True, Degraded=False), now=1.0, wall=NOW)
    assert value("slurmpool_pool_condition", pool=pool, type="DrainBlocked") == 1
    assert value("slurmpool_pool_condition", pool=pool, type="Ready") == 0
    assert value("slurmpool_moves_blocked", pool=pool) == 2
    poolmetrics.export(pool, [], status(Ready=True), now=2.0, wall=NOW)
    assert value("slurmpool_pool_condition", pool=pool, type="Ready") == 1
    assert value("slurmpool_pool_condition", pool=pool, type="DrainBlocked") is None  # gone from status, gone here
    assert value("slurmpool_moves_blocked", pool=pool) == 0


def test_drain_duration_is_observed_when_draining_ends():
    pool = "ns/drain"
    before = value("slurmpool_drain_duration_seconds_count") or 0
    total = value("slurmpool_drain_duration_seconds_sum") or 0
    poolmetrics.export(pool, [moving("a", "Draining", since=NOW)], status(), now=1.0, wall=NOW + timedelta(seconds=30))
    assert (value("slurmpool_drain_duration_seconds_count") or 0) == before
    poolmetrics.export(pool, [moving("a", "StoppingSlurmd", since=NOW + timedelta(seconds=40))], status(), now=2.0,
                       wall=NOW + timedelta(seconds=41))
    assert value("slurmpool_drain_duration_seconds_count") == before + 1
    assert value("slurmpool_drain_duration_seconds_sum") == total + 41


def test_unhealthy_nodes_per_side_and_kind_with_zeros():
    from slurmpool.core.models import UnhealthyNode

    pool = "ns/health"
    st = status()
    st.unhealthy_nodes = [
        UnhealthyNode(node="a", side="slurm", kind="DrainedByOthers", reason="drained in Slurm by others: admin", since="2026-11-29T12:00:00Z"),
        UnhealthyNode(node="b", side="inference", kind="NotReady", reason="Kubernetes: NotReady", since="2026-11-29T12:00:00Z"),
        UnhealthyNode(node="c", side="slurm", kind="SlurmDown", reason="Slurm reports DOWN", since="2026-11-29T12:00:00Z",
                      grace_until="2026-11-29T12:05:00Z"),  # within its grace: not counted yet
    ]
    poolmetrics.export(pool, [], st, now=1.0, wall=NOW)
    assert value("slurmpool_unhealthy_nodes", pool=pool, side="slurm", kind="DrainedByOthers") == 1
    assert value("slurmpool_unhealthy_nodes", pool=pool, side="inference", kind="NotReady") == 1
    assert value("slurmpool_unhealthy_nodes", pool=pool, side="slurm", kind="SlurmDown") == 0
    assert value("slurmpool_unhealthy_nodes", pool=pool, side="none", kind="Condition") == 0
    poolmetrics.export(pool, [], status(), now=2.0, wall=NOW)
    assert value("slurmpool_unhealthy_nodes", pool=pool, side="slurm", kind="DrainedByOthers") == 0


def test_the_health_kind_label_values_are_those_alerts_and_dashboards_know():
    """HEALTH_KINDS is read from models.HealthKind (one list); its values are the metric's labels."""
    from slurmpool.adapters import metrics

    assert metrics.HEALTH_KINDS == ("SlurmDown", "DrainedByOthers", "SlurmUnlisted", "NotReady", "Condition")
