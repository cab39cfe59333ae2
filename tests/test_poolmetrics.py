"""Per-pool metrics (poolmetrics.py): GPU-seconds per side, nodes and GPUs per placement, conditions
as gauges, blocked moves, drain durations; the GPU count read from the Node; and the series
following the pools and the Lease (a deleted pool's removed, a lost Lease's gauges cleared)."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import REGISTRY

from slurmpool.controller import poolmetrics
from slurmpool.adapters.kube import node_view
from slurmpool.core.models import Condition, InferenceDemand, SlurmNodePoolStatus
from slurmpool.core.view import ANN_MOVE, ANN_PLACEMENT, MoveRecord, NodeView

from .factories import NOW


def value(name: str, **labels) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def settled(name: str, placement: str, gpus: int = 8) -> NodeView:
    return NodeView(name=name, annotations={ANN_PLACEMENT: placement}, resources=(("nvidia.com/gpu", gpus),))


def moving(name: str, phase: str, move_id: str = "m1", since=NOW, gpus: int = 8) -> NodeView:
    record = MoveRecord(id=move_id, source="slurm", target="inference:llm", phase=phase, since=since, started=since)
    return NodeView(name=name, annotations={ANN_PLACEMENT: "slurm", ANN_MOVE: record.to_annotation()}, resources=(("nvidia.com/gpu", gpus),))


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
    assert node_view(body).gpus(["nvidia.com/gpu"]) == 8
    assert node_view({"metadata": {"name": "cpu01"}, "status": {"allocatable": {"cpu": "4"}}}).gpus(["nvidia.com/gpu"]) == 0
    assert node_view({"metadata": {"name": "odd"}, "status": {"allocatable": {"nvidia.com/gpu": "1k"}}}).gpus(["nvidia.com/gpu"]) == 0


def test_node_gpus_count_any_configured_resource_or_dra_devices_once():
    body = {"metadata": {"name": "amd01"}, "status": {"allocatable": {"amd.com/gpu": "8", "kubernetes.io/batch": "3",
                                                                     "hugepages-1Gi": "0", "nvidia.com/mig-1g.10gb": "7"}}}
    node = node_view(body)
    assert node.resources == (("amd.com/gpu", 8), ("nvidia.com/mig-1g.10gb", 7))  # kubernetes.io's own names are not extended
    assert node.gpus(["amd.com/gpu"]) == 8 and node.gpus(["nvidia.com/gpu"]) == 0
    assert node.gpus(["amd.com/gpu", "nvidia.com/mig-1g.10gb"]) == 15
    both = NodeView("dra01", resources=(("nvidia.com/gpu", 8),), devices=(("gpu.nvidia.com", 8),))
    assert both.gpus(["nvidia.com/gpu"], ["gpu.nvidia.com"]) == 8  # a driver's extended-resource mapping: once
    assert both.gpus([], ["gpu.nvidia.com"]) == 8 and both.gpus([], ["other.example.com"]) == 0


def test_gpus_gauge_counts_the_pools_resource():
    pool = "ns/amd"
    amd = NodeView(name="a1", annotations={ANN_PLACEMENT: "slurm"}, resources=(("amd.com/gpu", 4),))
    poolmetrics.export(pool, [amd], status(), now=1.0, wall=NOW, counted=InferenceDemand(resources=["amd.com/gpu"]))
    assert value("slurmpool_gpus", pool=pool, placement="slurm", phase="Settled") == 4


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


def test_nodes_and_gpus_per_placement_and_phase_and_stale_series_go_to_zero():
    pool = "ns/gpus"
    poolmetrics.export(pool, [settled("a", "slurm"), moving("b", "Draining"), settled("c", "slurm", gpus=0)], status(), now=1.0, wall=NOW)
    assert value("slurmpool_gpus", pool=pool, placement="slurm", phase="Settled") == 8
    assert value("slurmpool_nodes", pool=pool, placement="slurm", phase="Settled") == 2
    assert value("slurmpool_gpus", pool=pool, placement="inference:llm", phase="Draining") == 8
    assert value("slurmpool_nodes", pool=pool, placement="inference:llm", phase="Draining") == 1
    poolmetrics.export(pool, [settled("a", "slurm"), settled("b", "inference:llm")], status(), now=2.0, wall=NOW)
    assert value("slurmpool_gpus", pool=pool, placement="inference:llm", phase="Draining") == 0
    assert value("slurmpool_nodes", pool=pool, placement="inference:llm", phase="Draining") == 0
    assert value("slurmpool_gpus", pool=pool, placement="inference:llm", phase="Settled") == 8
    assert value("slurmpool_nodes", pool=pool, placement="slurm", phase="Settled") == 1


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
    poolmetrics.begin(pool)
    assert value("slurmpool_drain_duration_seconds_count", pool=pool) == 0  # from the pool's first pass
    poolmetrics.export(pool, [moving("a", "Draining", since=NOW)], status(), now=1.0, wall=NOW + timedelta(seconds=30))
    assert value("slurmpool_drain_duration_seconds_count", pool=pool) == 0
    poolmetrics.export(pool, [moving("a", "StoppingSlurmd", since=NOW + timedelta(seconds=40))], status(), now=2.0,
                       wall=NOW + timedelta(seconds=41))
    assert value("slurmpool_drain_duration_seconds_count", pool=pool) == 1
    assert value("slurmpool_drain_duration_seconds_sum", pool=pool) == 41


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


def series_of(pool: str) -> list[tuple[str, dict]]:
    """Every sample of the registry labelled with the pool."""
    return [(s.name, s.labels) for m in REGISTRY.collect() for s in m.samples if s.labels.get("pool") == pool]


def a_pass_with_everything(pool: str) -> None:
    """A pool's pass that sets each kind of its series: gauges, GPU-seconds, every per-move counter."""
    from slurmpool.adapters import metrics

    poolmetrics.begin(pool)
    st = status(blocked=1, Degraded=True, Ready=False)
    poolmetrics.export(pool, [settled("a", "slurm"), moving("b", "Draining")], st, now=1.0, wall=NOW)
    poolmetrics.export(pool, [settled("a", "slurm"), moving("b", "StoppingSlurmd")], st, now=2.0, wall=NOW)
    metrics.MOVES_STARTED.labels(pool=pool, direction="to_inference", cause="rebalance").inc()
    metrics.MOVES_FAILED.labels(pool=pool, direction="to_slurm", reason="rollback").inc()
    metrics.ACTION_ERRORS.labels(pool=pool, action="evict").inc()
    metrics.EVICTIONS_REFUSED.labels(pool=pool).inc()
    metrics.SHADOW_MOVES.labels(pool=pool, direction="to_slurm").set(1)  # as a shadow pass sets it (controller/shadow.py)


def test_a_deleted_pools_series_are_all_removed_and_no_other_pools():
    from slurmpool.adapters import metrics

    gone, kept = "ns/deleted", "ns/kept"
    a_pass_with_everything(gone)
    a_pass_with_everything(kept)
    names = {name for name, _ in series_of(gone)}
    # each labelled series the operator has (every metric with a pool label) has some of the pool's
    for metric in metrics.POOL_SERIES:
        assert any(n.startswith(metric.describe()[0].name) for n in names), metric.describe()[0].name
    assert value("slurmpool_pool_condition", pool=gone, type="Degraded") == 1
    kept_before = series_of(kept)
    poolmetrics.forget(gone)
    assert series_of(gone) == []
    assert series_of(kept) == kept_before
    # a pool of the same name made again starts afresh: counters at 0, no GPU-seconds from the old one's passes
    poolmetrics.begin(gone)
    assert value("slurmpool_moves_failed_total", pool=gone, direction="to_slurm", reason="rollback") == 0
    poolmetrics.export(gone, [settled("a", "slurm")], status(), now=50.0, wall=NOW)
    assert value("slurmpool_gpu_seconds_total", pool=gone, side="slurm") == 0


def test_a_replica_that_loses_the_lease_clears_its_gauges_and_keeps_its_counters():
    from slurmpool.adapters import metrics

    pool = "ns/lease"
    poolmetrics.leading(True)
    assert value("slurmpool_leader") == 1
    a_pass_with_everything(pool)
    seconds = value("slurmpool_gpu_seconds_total", pool=pool, side="slurm")
    assert seconds == 8
    poolmetrics.leading(False)
    assert value("slurmpool_leader") == 0
    left = {name for name, _ in series_of(pool)}
    for gauge in metrics.POOL_GAUGES:
        assert gauge.describe()[0].name not in left, gauge.describe()[0].name  # sum() over replicas counts the holder's alone
    assert value("slurmpool_moves_failed_total", pool=pool, direction="to_slurm", reason="rollback") == 1
    assert value("slurmpool_gpu_seconds_total", pool=pool, side="slurm") == seconds
    # Leading again (another replica led meanwhile): the gauges come back with the next pass, and
    # the GPU-seconds count only from it, never the time another replica led.
    poolmetrics.leading(True)
    poolmetrics.export(pool, [settled("a", "slurm")], status(Ready=True), now=500.0, wall=NOW)
    assert value("slurmpool_gpu_seconds_total", pool=pool, side="slurm") == seconds
    assert value("slurmpool_nodes", pool=pool, placement="slurm", phase="Settled") == 1
    assert value("slurmpool_pool_condition", pool=pool, type="Ready") == 1
    poolmetrics.export(pool, [settled("a", "slurm")], status(Ready=True), now=501.0, wall=NOW)
    assert value("slurmpool_gpu_seconds_total", pool=pool, side="slurm") == seconds + 8


# ---------------------------------------------------------------- the controller's calls (pools.py)


def test_a_deleted_pool_loses_its_series_at_its_deletion_and_at_a_pass_that_finds_it_gone():
    """kopf's DELETED event removes them; a pass that was under way at the deletion exports them
    again, and the pass it schedules finds the pool gone and removes them once more."""
    import asyncio

    from .test_handlers import Access, RestLike, controller_for

    controller = controller_for(access=Access(RestLike()))
    a_pass_with_everything("ns/gone")
    asyncio.run(controller.pool_changed("DELETED", ("ns", "gone"), {"spec": {}}))
    assert series_of("ns/gone") == []
    a_pass_with_everything("ns/gone")  # the pass under way at the deletion
    asyncio.run(controller.reconcile_key(("ns", "gone")))  # the next: the index no longer has it
    assert series_of("ns/gone") == []


def test_the_lead_loop_exports_slurmpool_leader_and_clears_the_gauges_when_the_lease_is_lost():
    import asyncio

    from .test_handlers import controller_for

    async def scenario():
        answers = [True, True, False]

        class Leader:
            renew_every = 0.001

            async def ensure(self):
                if not answers:
                    await asyncio.Event().wait()
                if len(answers) == 1:  # a pass while leading, before the Lease is lost
                    poolmetrics.export("ns/led", [settled("a", "slurm")], status(Ready=True), now=1.0, wall=NOW)
                    seen.append((value("slurmpool_leader"), value("slurmpool_nodes", pool="ns/led", placement="slurm", phase="Settled")))
                return answers.pop(0)

        seen: list = []
        controller = controller_for(pools={("ns", "led"): [{"uid": "u"}]})
        controller.leader = Leader()
        task = asyncio.create_task(controller.lead())
        while answers:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.01)
        task.cancel()
        return seen, controller.queue.scheduled

    seen, queued = asyncio.run(scenario())
    assert seen == [(1, 1)] and queued == [0.0]  # leading: the gauge 1, every pool queued once
    assert value("slurmpool_leader") == 0
    assert value("slurmpool_nodes", pool="ns/led", placement="slurm", phase="Settled") is None
