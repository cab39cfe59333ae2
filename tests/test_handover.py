"""Planned handover (issue 24), the pure part: leaving nodes by the planner, drain forecast,
the reservation wanted ahead of an edge."""

from __future__ import annotations

from datetime import timedelta

from slurmbridge import SlurmJob
from slurmpool.handover import free_at, is_ours, leaving_nodes, planned, reservation_name
from slurmpool.view import ANN_PLACEMENT, SLURM, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node


def running(job_id, node, minutes):
    end = None if minutes is None else NOW + timedelta(minutes=minutes)
    return SlurmJob(job_id=job_id, name="train", user="u", state="RUNNING", partition="gpu", nodes=(node,), gpus_per_node=8,
                    num_nodes=1, start_time=NOW - timedelta(minutes=1), end_time=end, reason="None")


def lab(jobs=()):
    nodes = [NodeView(f"gpu0{i}", annotations={ANN_PLACEMENT: SLURM}) for i in range(1, 6)]
    nodes += [NodeView(f"gpu0{i}", annotations={ANN_PLACEMENT: "inference:default"}) for i in range(6, 9)]
    busy = {n for j in jobs for n in j.nodes}
    states = {n.name: slurm_node(n.name, "ALLOCATED" if n.name in busy else "IDLE") for n in nodes[:5]}
    return nodes, SlurmView(True, nodes=states, jobs=tuple(jobs))


def test_the_forecast_is_the_latest_end_of_a_nodes_jobs_and_none_without_a_limit():
    _, slurm = lab([running("1", "gpu01", 10), running("2", "gpu01", 30), running("3", "gpu02", None)])
    assert free_at("gpu01", slurm, NOW) == NOW + timedelta(minutes=30)
    assert free_at("gpu02", slurm, NOW) is None
    assert free_at("gpu03", slurm, NOW) == NOW


def test_the_planner_chooses_the_leaving_nodes_idle_ones_first_then_soonest_free():
    nodes, slurm = lab([running("1", "gpu01", 50), running("2", "gpu02", 5), running("3", "gpu03", 20), running("4", "gpu04", 40)])
    spec = make_spec(slurm_nodes=5, max_moves=1)  # one move a wave: the waves still reach the split
    assert leaving_nodes(spec, nodes, slurm, NOW, 2) == ["gpu05", "gpu02", "gpu03"]


def test_a_handover_is_planned_only_for_an_edge_within_the_lead_time_that_takes_nodes_from_slurm():
    nodes, slurm = lab([running("1", "gpu01", 50), running("2", "gpu02", 5), running("3", "gpu03", None)])
    spec = make_spec(slurm_nodes=5, max_moves=8)
    edge = NOW + timedelta(minutes=30)
    h = planned("ns", "gpu", spec, nodes, slurm, NOW, edge, 2, timedelta(hours=1))
    assert h is not None and h.reservation == "slurmpool-ns-gpu" and h.start == edge and h.flags == ("MAINT", "IGNORE_JOBS")
    assert h.nodes == ("gpu04", "gpu05", "gpu02")
    assert h.forecast == {"gpu04": NOW, "gpu05": NOW, "gpu02": NOW + timedelta(minutes=5)} and h.late == []
    assert planned("ns", "gpu", spec, nodes, slurm, NOW, edge, 2, timedelta(minutes=10)) is None  # too far ahead
    assert planned("ns", "gpu", spec, nodes, slurm, NOW, edge, 6, timedelta(hours=1)) is None  # Slurm grows
    assert planned("ns", "gpu", spec, nodes, SlurmView(False), NOW, edge, 2, timedelta(hours=1)) is None
    # jobs without a limit or past the edge are named ahead of it
    late = planned("ns", "gpu", spec, nodes, slurm, NOW, edge, 0, timedelta(hours=1))
    assert set(late.late) == {"gpu01", "gpu03"}


def test_only_the_pools_own_reservation_is_ours():
    assert reservation_name("ns", "gpu") == "slurmpool-ns-gpu"
    assert is_ours("slurmpool-ns-gpu", "ns", "gpu")
    assert not is_ours("slurmpool-ns-gpu2", "ns", "gpu") and not is_ours("maint-friday", "ns", "gpu")
