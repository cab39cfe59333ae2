"""Demand: signals from Slurm jobs and unschedulable pods, bounds, contention, and no flapping."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmbridge import SlurmJob
from slurmbridge.parse import parse_squeue
from slurmpool.core.demand import Base, PendingPod, Placed, Seen, Signals, Want, bounds, decide_demand, gpu_pods, signals, slurm_jobs
from slurmpool.core.demand.slurm_jobs import job_waits_for_nodes
from slurmpool.core.decide import decide
from slurmpool.core.demand.pendingpod import is_pending_gpu_pod, pending_pod
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.models import GPU, SlurmNodePoolSpec
from slurmpool.core.placement import SLURM, Side
from slurmpool.core.snapshot import PoolSnapshot
from slurmpool.core.target import decide_target
from slurmpool.core.view import ANN_PLACEMENT, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .sim import parked


def spec_with(demand: dict, slurm_nodes=4, **kw) -> SlurmNodePoolSpec:
    body = make_spec(slurm_nodes=slurm_nodes, **kw).model_dump(by_alias=True, exclude_none=True)
    body["demand"] = demand
    return SlurmNodePoolSpec.model_validate(body)


def pending(job_id, gpus=8, nodes=1, partition="gpu", reason="Resources", state="PENDING") -> SlurmJob:
    return SlurmJob(job_id=job_id, name="train", user="u", state=state, partition=partition, nodes=(), gpus_per_node=gpus,
                    num_nodes=nodes, start_time=None, end_time=None, reason=reason)


def cluster(n_slurm: int, n_inf: int, busy: int = 0):
    nodes = [NodeView(f"s{i}", annotations={ANN_PLACEMENT: SLURM}) for i in range(n_slurm)]
    nodes += [NodeView(f"i{i}", annotations={ANN_PLACEMENT: "inference:default"}, labels={"gpu": "true"}) for i in range(n_inf)]
    states = {f"s{i}": slurm_node(f"s{i}", "ALLOCATED" if i < busy else "IDLE") for i in range(n_slurm)}
    return nodes, states


def test_slurm_signal_counts_only_pending_gpu_jobs_of_the_partition_that_wait_for_resources():
    spec = spec_with({})
    nodes, states = cluster(4, 4, busy=4)
    jobs = (
        pending("1"), pending("2", gpus=4), pending("3", nodes=2), pending("4", partition="cpu"), pending("5", gpus=0),
        pending("6", reason="Dependency"), pending("7", reason="JobHeldUser"), pending("8", partition="cpu,gpu", reason="Priority"),
        pending("9", state="RUNNING"),
    )
    sig = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=jobs), [], now=NOW))
    assert sig.waiting(Side.SLURM) == 4 and sig.gpus(Side.SLURM) == 8 + 4 + 16 + 8
    assert sig.nodes(Side.SLURM) == 5  # ceil(36 / 8), no Slurm node idle
    assert sig.placed.slurm_ready == 4 and sig.placed.inference_ready == 4


def test_pod_signal_counts_pods_that_fit_an_inference_pool():
    spec = make_spec()  # pool "default": label pool=default, taint inference=default:NoSchedule
    nodes, states = cluster(2, 2)
    tol = (("inference", "Exists", "", ""),)
    pods = [
        PendingPod("ns", "fits", ((GPU, 8),), (("pool", "default"),), tol),
        PendingPod("ns", "fits-by-node-label", ((GPU, 4),), (("gpu", "true"),), tol),
        PendingPod("ns", "no-toleration", ((GPU, 8),), (("pool", "default"),), ()),
        PendingPod("ns", "other-pool", ((GPU, 8),), (("pool", "other"),), tol),
        PendingPod("ns", "unknown-label", ((GPU, 8),), (("zone", "x"),), tol),
    ]
    sig = signals(Seen(spec, nodes, SlurmView(True, nodes=states), pods, now=NOW))
    assert sig.waiting(Side.INFERENCE) == 2 and sig.gpus(Side.INFERENCE) == 12 and sig.nodes(Side.INFERENCE) == 2


def test_pod_signal_counts_the_configured_resources_by_the_nodes_allocatable():
    spec = spec_with({"inference": {"resources": ["amd.com/gpu", "nvidia.com/mig-1g.10gb"]}})
    nodes, states = cluster(2, 2)
    nodes = [replace(n, resources=(("amd.com/gpu", 4), ("nvidia.com/mig-1g.10gb", 7))) for n in nodes]
    tol = (("inference", "Exists", "", ""),)
    sel = (("pool", "default"),)
    pods = [PendingPod("ns", "amd", (("amd.com/gpu", 8),), sel, tol), PendingPod("ns", "mig", (("nvidia.com/mig-1g.10gb", 3),), sel, tol),
            PendingPod("ns", "nvidia", ((GPU, 8),), sel, tol)]  # not a counted name for this pool
    sig = signals(Seen(spec, nodes, SlurmView(True, nodes=states), pods, now=NOW))
    # amd: 8 / 4 per node = 2 nodes; mig: 3 / 7 per node = 1 node
    assert sig.waiting(Side.INFERENCE) == 2 and sig.gpus(Side.INFERENCE) == 11 and sig.nodes(Side.INFERENCE) == 3
    assert sig.pool_nodes == {"default": 3}
    # demand.gpusPerNode, when set, is what a node holds of every resource
    fixed = spec_with({"gpusPerNode": 8, "inference": {"resources": ["amd.com/gpu"]}})
    assert signals(Seen(fixed, nodes, SlurmView(True, nodes=states), pods, now=NOW)).nodes(Side.INFERENCE) == 1


def test_inference_resources_are_validated():
    for bad in (["gpu"], ["kubernetes.io/batch"], ["node.kubernetes.io/x"], ["cpu"]):
        with pytest.raises(ValueError):
            spec_with({"inference": {"resources": bad}})
    assert spec_with({}).demand.inference.resources == [GPU] and spec_with({}).demand.inference.device_classes == ["gpu.nvidia.com"]


def test_pending_pod_index_filter():
    base = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}], "nodeSelector": {"pool": "default"},
            "tolerations": [{"key": "inference", "operator": "Exists"}]}
    unsched = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    assert is_pending_gpu_pod(base, unsched)
    assert not is_pending_gpu_pod({**base, "nodeName": "n1"}, unsched)
    assert not is_pending_gpu_pod(base, {"phase": "Pending", "conditions": []})
    assert not is_pending_gpu_pod({"containers": [{}]}, unsched)
    assert is_pending_gpu_pod({"containers": [{"resources": {"requests": {"amd.com/gpu": "1"}}}]}, unsched)  # any extended resource
    assert not is_pending_gpu_pod({"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}, unsched)
    pod = pending_pod({"metadata": {"namespace": "ns", "name": "p"}, "spec": base})
    assert pod.requests == ((GPU, 8),) and pod.node_selector == (("pool", "default"),) and pod.tolerations == (("inference", "Exists", "", ""),)


def sig(jobs_nodes=0, pod_nodes=0, slurm_ready=4, inference_ready=4, idle=0) -> Signals:
    wants = (slurm_jobs.want(jobs_nodes, 8 * jobs_nodes, jobs_nodes - idle, 0), gpu_pods.want(pod_nodes, {GPU: 8 * pod_nodes}, {GPU: 8}))
    return Signals(wants, Placed(slurm_ready, inference_ready))


def test_slurm_grows_up_to_its_max_and_waits_for_the_cooldown():
    spec = spec_with({"slurm": {"maxNodes": 6}, "cooldown": "1m"})
    start = NOW - timedelta(minutes=5)
    out = decide_demand(spec, 8, Base(4, "k", start), None, sig(jobs_nodes=5), NOW)
    assert out.changed and out.slurm_nodes == 6 and "pending job" in out.message
    # the nodes are promised: the same jobs do not ask for more (and the bound holds anyway)
    again = decide_demand(spec, 8, Base(4, "k", start), out.status, sig(jobs_nodes=5), NOW + timedelta(minutes=2))
    assert not again.changed and again.slurm_nodes == 6
    # inference asks right after: the cooldown holds the count
    held = decide_demand(spec, 8, Base(4, "k", start), out.status, sig(pod_nodes=3, slurm_ready=6, inference_ready=2), NOW + timedelta(seconds=30))
    assert not held.changed and held.slurm_nodes == 6 and "cooldown until" in held.status.message
    later = decide_demand(spec, 8, Base(4, "k", start), out.status, sig(pod_nodes=3, slurm_ready=6, inference_ready=2), NOW + timedelta(minutes=1))
    assert later.changed and later.slurm_nodes == 3


def test_idle_and_incoming_slurm_nodes_are_subtracted():
    spec = spec_with({"cooldown": "0s"})
    assert not decide_demand(spec, 8, Base(4, "k", NOW), None, sig(jobs_nodes=2, idle=2), NOW).changed
    assert decide_demand(spec, 8, Base(4, "k", NOW), None, sig(jobs_nodes=3, idle=2), NOW).slurm_nodes == 5
    assert not decide_demand(spec, 8, Base(6, "k", NOW), None, sig(jobs_nodes=2, slurm_ready=4), NOW).changed  # 2 already coming


def test_hysteresis_ignores_small_needs():
    spec = spec_with({"cooldown": "0s", "hysteresis": 2})
    assert not decide_demand(spec, 8, Base(4, "k", NOW), None, sig(jobs_nodes=1), NOW).changed
    assert decide_demand(spec, 8, Base(4, "k", NOW), None, sig(jobs_nodes=2), NOW).slurm_nodes == 6


def test_bounds_combine_demand_and_pool_floors():
    spec = spec_with({"slurm": {"minNodes": 1, "maxNodes": 7}, "inference": {"minNodes": 2, "maxNodes": 5}}, min_slurm=2)
    assert bounds(spec, 8) == (3, 6)


def test_both_sides_want_nodes():
    both = sig(jobs_nodes=4, pod_nodes=4)
    for policy, expected in (("PreferSlurm", 8), ("PreferInference", 0), ("Share", 4)):
        spec = spec_with({"cooldown": "0s", "whenBothWant": policy, "slurmShare": 50})
        assert decide_demand(spec, 8, Base(4, "k", NOW), None, both, NOW).slurm_nodes == expected, policy
    spec = spec_with({"cooldown": "0s", "whenBothWant": "Share", "slurmShare": 75})
    out = decide_demand(spec, 8, Base(2, "k", NOW), None, sig(jobs_nodes=1, pod_nodes=1, slurm_ready=2, inference_ready=6), NOW)
    assert out.slurm_nodes == 3  # toward 6 (75%), by what Slurm needs
    # at the share both stay put: a fixed point, no back and forth
    at_share = decide_demand(spec, 8, Base(6, "k", NOW), None, sig(jobs_nodes=3, pod_nodes=3, slurm_ready=6, inference_ready=2), NOW)
    assert not at_share.changed


def test_a_new_base_resets_demand_and_restarts_the_cooldown():
    spec = spec_with({"cooldown": "5m"})
    first = decide_demand(spec, 8, Base(4, "manual:a", NOW - timedelta(hours=1)), None, sig(jobs_nodes=2), NOW)
    assert first.slurm_nodes == 6
    reset = decide_demand(spec, 8, Base(3, "schedule:night", NOW), first.status, sig(jobs_nodes=2, slurm_ready=3, inference_ready=5), NOW + timedelta(seconds=1))
    assert reset.slurm_nodes == 3 and not reset.changed and "cooldown" in reset.status.message


@settings(max_examples=200, deadline=None)
@given(
    cooldown=st.integers(1, 600),
    ticks=st.lists(st.tuples(st.integers(1, 120), st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=80),
)
def test_alternating_demand_never_changes_faster_than_the_cooldown(cooldown, ticks):
    """Demand that flips between the sides at arbitrary times: every change is at least one
    cooldown after the previous one (and after the base was set), counted on the clock."""
    spec = spec_with({"cooldown": f"{cooldown}s"})
    now = NOW
    base_since = NOW
    status, count = None, 4
    changes = []
    for gap, jobs, pods in ticks:
        now += timedelta(seconds=gap)
        out = decide_demand(spec, 8, Base(4, "k", base_since), status, sig(jobs_nodes=jobs, pod_nodes=pods, slurm_ready=count, inference_ready=8 - count), now)
        if out.changed:
            changes.append(now)
        status, count = out.status, out.slurm_nodes
        assert 0 <= count <= 8
    stamps = [base_since, *changes]
    assert all((b - a).total_seconds() >= cooldown for a, b in zip(stamps, stamps[1:]))
    assert len(changes) <= (now - base_since).total_seconds() // cooldown


def test_status_names_demand_as_the_source_and_an_event_explains_it():
    spec = spec_with({"cooldown": "1m", "slurm": {"maxNodes": 6}}, slurm_nodes=4)
    first = decide_target(spec, 8, NOW, None, by="kubectl", signals=sig())
    assert first.status.demand is not None
    assert first.status.source == "Manual" and first.status.demand.slurm_nodes == 4
    nodes_pending = sig(jobs_nodes=3)
    early = decide_target(spec, 8, NOW + timedelta(seconds=30), first.status, "kubectl", nodes_pending)
    assert early.slurm_nodes == 4 and early.events == []
    later = decide_target(spec, 8, NOW + timedelta(minutes=1), early.status, "kubectl", nodes_pending)
    assert later.slurm_nodes == 6 and later.status.source == "Demand"
    assert [e.reason for e in later.events] == ["DemandChanged"] and "3 pending job(s) want 24 GPU(s)" in later.events[0].message
    assert "demand on top of manual count 4" in later.status.reason
    # Slurm unreachable (no signals): demand's count holds
    held = decide_target(spec, 8, NOW + timedelta(minutes=2), later.status, "kubectl", None)
    assert held.slurm_nodes == 6 and held.status.source == "Demand"


# ---------------------------------------------------------------- gang jobs and jobs no split starts (issue 24)


def test_a_gang_job_needs_its_nodes_less_the_usable_ones_busy_or_idle():
    spec = spec_with({"cooldown": "0s"}, slurm_nodes=5)
    nodes, states = cluster(5, 3, busy=3)  # 2 idle, 3 busy: all 5 usable
    desc = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    sig_ = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=(pending("1", nodes=8, reason=desc),)), [], now=NOW))
    assert sig_.nodes(Side.SLURM) == 3 and sig_.waiting(Side.SLURM) == 1  # the gang job only: no job fits
    out = decide_demand(spec, 8, Base(5, "k", NOW), None, sig_, NOW)
    assert out.slurm_nodes == 8 and "one asks for 3 node(s) more than Slurm has usable" in out.message
    # bounded as every need is
    capped = spec_with({"cooldown": "0s", "slurm": {"maxNodes": 7}}, slurm_nodes=5)
    assert decide_demand(capped, 8, Base(5, "k", NOW), None, sig_, NOW).slurm_nodes == 7


def test_drained_and_unresponsive_slurm_nodes_do_not_serve_a_gang_job():
    spec = spec_with({"cooldown": "0s"}, slurm_nodes=5)
    nodes, states = cluster(5, 3)
    states["s0"] = slurm_node("s0", "IDLE", flags={"DRAIN"})
    states["s1"] = slurm_node("s1", "DOWN", flags={"NOT_RESPONDING"})
    sig_ = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=(pending("1", nodes=6, reason="Resources"),)), [], now=NOW))
    assert sig_.nodes(Side.SLURM) == 3 and "one asks for 3 node(s) more" in sig_.what(Side.SLURM)  # 6 asked, 3 usable


def test_small_jobs_keep_counting_by_gpus_beside_a_gang_job():
    spec = spec_with({"cooldown": "0s"}, slurm_nodes=4)
    nodes, states = cluster(4, 4, busy=4)
    jobs = (pending("1", nodes=6, reason="Resources"), *(pending(str(i), reason="Priority") for i in range(2, 7)))
    sig_ = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=jobs), [], now=NOW))
    assert "one asks for 2 node(s) more" in sig_.what(Side.SLURM) and sig_.nodes(Side.SLURM) == 5 and sig_.waiting(Side.SLURM) == 6
    assert decide_demand(spec, 8, Base(4, "k", NOW), None, sig_, NOW).status.slurm_wants == 5  # the larger need, not the sum


def test_jobs_no_split_could_start_are_reported_not_counted():
    spec = spec_with({"cooldown": "0s"}, slurm_nodes=4)
    nodes, states = cluster(4, 4, busy=4)
    jobs = (pending("1", nodes=9, reason="PartitionNodeLimit"), pending("2", gpus=16, reason="Resources"),
            pending("3", reason="BadConstraints"), pending("4", nodes=5, reason="PartitionNodeLimit"))
    sig_ = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=jobs), [], now=NOW))
    assert sig_.unstartable == (
        "job 1: asks for 9 nodes, the pool has 8",
        "job 2: asks for 16 GPUs per node, the pool's nodes have 8",
        "job 3: Slurm says it can never run as configured (BadConstraints)",
    )
    assert sig_.waiting(Side.SLURM) == 1 and sig_.nodes(Side.SLURM) == 1  # job 4: more than the partition has now, fewer than the pool
    assert "one asks for 1 node(s) more" in sig_.what(Side.SLURM)
    out = decide_demand(spec, 8, Base(4, "k", NOW), None, sig_, NOW)
    assert out.status.unstartable_jobs == list(sig_.unstartable) and out.status.slurm_wants == 1


def test_an_unstartable_job_gets_one_event_not_one_a_pass():
    spec = spec_with({"cooldown": "0s"}, slurm_nodes=4)
    reported = Signals((slurm_jobs.want(0, 0, 0, 0, ("job 1: asks for 9 nodes, the pool has 8",)),), Placed(4, 4))
    first = decide_target(spec, 8, NOW, None, "kubectl", reported)
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "UnstartableJobs")] and "job 1: asks for 9 nodes" in first.events[0].message
    again = decide_target(spec, 8, NOW + timedelta(seconds=5), first.status, "kubectl", reported)
    assert again.status.demand is not None
    assert again.events == [] and again.status.demand.unstartable_jobs == list(reported.unstartable)


@pytest.mark.parametrize(
    ("reason", "waits"),
    [
        # the desc set in job_scheduler.c, as squeue prints it and as scontrol does (with "_")
        ("Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions", True),
        ("Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions", True),
        ("Nodes required for job are DOWN, DRAINED, REBOOTING or reserved for jobs in higher priority partitions", True),
        ("ReqNodeNotAvail, UnavailableNodes:gpu[06-08]", True),
        ("ReqNodeNotAvail,_UnavailableNodes:gpu[06-08]", True),
        ("Resources", True), ("Priority", True), ("NodeDown", True), ("PartitionNodeLimit", True),
        ("Dependency", False), ("BeginTime", False), ("JobHeldUser", False), ("QOSGrpGRES", False),
        ("PartitionDown", False), ("BadConstraints", False), ("", False), ("None", False),
    ],
)
def test_reasons_are_matched_by_meaning(reason, waits):
    assert job_waits_for_nodes(reason) is waits


# ---------------------------------------------------------------- sources (issue 35)


def test_a_new_source_is_one_more_entry_and_its_wants_add_up(monkeypatch):
    """A source the decision has never heard of (here: pod groups that start on 4 nodes at once)
    is read from SOURCES, and its wants add to the other sources' for the same side and pool."""
    import slurmpool.core.demand as demand

    def pod_groups(seen):
        return [Want(Side.INFERENCE, 4, 1, 32, "1 pod group(s) want 32 GPU(s) on 4 node(s) at once", (("default", 4),))]

    monkeypatch.setattr(demand, "SOURCES", (*demand.SOURCES, pod_groups))
    spec = spec_with({"cooldown": "0s"}, slurm_nodes=4)
    nodes, states = cluster(4, 4, busy=4)
    tol = (("inference", "Exists", "", ""),)
    sig_ = signals(Seen(spec, nodes, SlurmView(True, nodes=states), [PendingPod("ns", "p", ((GPU, 8),), (("pool", "default"),), tol)], now=NOW))
    assert sig_.nodes(Side.INFERENCE) == 5 and sig_.pool_nodes == {"default": 5}
    out = decide_demand(spec, 8, Base(4, "k", NOW), None, sig_, NOW)
    assert out.status.pending_pods == 2 and out.status.pending_pod_gpus == 40 and out.status.inference_wants == 5
    assert out.slurm_nodes == 0 and out.status.pools == {"default": 8}  # its 4 nodes and 5 more, within the 8 there are
    assert "1 unschedulable pod(s) want 8 GPU(s); 1 pod group(s) want 32 GPU(s) on 4 node(s) at once: inference needs 5" in out.message


def test_a_powered_down_slurm_node_counts_as_idle_capacity_slurm_has():
    """What a node state means is core/slurmstate's: Slurm powers a lendable parked node (idle~)
    up for the job it chooses, so demand counts it as Slurm's own idle node, exactly as an IDLE
    one; a held one (drain~) is no capacity."""
    spec = spec_with({"cooldown": "0s"}, slurm_nodes=4)
    nodes, states = cluster(4, 4)
    jobs = (pending("1", nodes=4), pending("2"))
    plain = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=jobs), [], now=NOW))
    parked = signals(Seen(spec, nodes, SlurmView(True, nodes={**states, "s0": slurm_node("s0", "IDLE", flags={"POWERED_DOWN"})}, jobs=jobs), [], now=NOW))
    held = signals(Seen(spec, nodes, SlurmView(True, nodes={**states, "s0": slurm_node("s0", "IDLE", flags={"POWERED_DOWN", "DRAIN"})}, jobs=jobs), [], now=NOW))
    assert parked == plain
    assert "one asks for" not in parked.what(Side.SLURM)
    assert held.nodes(Side.SLURM) == 1 and "one asks for 1 node(s) more" in held.what(Side.SLURM)  # 3 usable


# ---------------------------------------------------------------- jobs that name their nodes, whole-node jobs (issue 39)
def named_job(job_id, *names, nodes=None, gpus=8, exclusive=None, reason="ReqNodeNotAvail, May be reserved for other job", unavailable=()):
    return replace(pending(job_id, gpus=gpus, nodes=len(names) if nodes is None else nodes, reason=reason),
                   required_nodes=names, exclusive=exclusive, unavailable_nodes=unavailable)


def test_a_job_that_names_parked_nodes_wants_those_nodes_back_by_name():
    spec = spec_with({})
    nodes, states = cluster(4, 4)  # every Slurm node idle: a count alone would want nothing
    jobs = (named_job("1", "i2", "i3", exclusive=True, reason="ReqNodeNotAvail, UnavailableNodes:i[2-3]", unavailable=("i2", "i3")),)
    sig = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=jobs), [], now=NOW))
    assert sig.named(Side.SLURM) == ("i2", "i3") and sig.nodes(Side.SLURM) == 2
    assert "2 named by their jobs (i2, i3)" in sig.what(Side.SLURM)


def test_a_job_naming_nodes_and_asking_for_more_counts_the_rest_as_any_job():
    spec = spec_with({})
    nodes, states = cluster(4, 4, busy=4)
    sig = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=(named_job("1", "i0", "s0", nodes=4),)), [], now=NOW))
    assert sig.named(Side.SLURM) == ("i0",)  # s0 is in Slurm already
    assert sig.nodes(Side.SLURM) == 1 + 2  # i0 by name, two more of any (none idle)


def test_a_cpu_job_pinned_to_a_parked_node_counts_though_it_asks_for_no_gpus():
    spec = spec_with({})
    nodes, states = cluster(4, 4)
    outside = named_job("2", "cpu07", gpus=0)  # names no node of the pool: not this pool's demand
    sig = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=(named_job("1", "i1", gpus=0), outside)), [], now=NOW))
    assert sig.named(Side.SLURM) == ("i1",) and sig.waiting(Side.SLURM) == 1


@pytest.mark.parametrize("why, world", [
    ("which is unhealthy", {"unhealthy": frozenset({"i3"})}),
    ("which is pinned to inference:default", {"pin": "i3"}),
    ("whose slurmpool records cannot be read", {"broken": "i3"}),
])
def test_a_job_naming_a_node_that_cannot_come_is_reported_and_nothing_moves_for_it(why, world):
    spec = spec_with({"cooldown": "0s"})
    nodes, states = cluster(4, 4)
    if "pin" in world:
        nodes = [replace(n, annotations={**n.annotations, "slurmpool.io/pin": "inference:default"}) if n.name == "i3" else n for n in nodes]
    if "broken" in world:
        nodes = [replace(n, annotations={**n.annotations, ANN_PLACEMENT: "nowhere"}) if n.name == "i3" else n for n in nodes]
    jobs = (named_job("1", "i2", "i3", exclusive=True),)
    sig = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=jobs), [], world.get("unhealthy", frozenset()), now=NOW))
    assert sig.nodes(Side.SLURM) == 0 and sig.named(Side.SLURM) == ()
    assert sig.unstartable == (f"job 1: names i3, {why}",)


def test_a_named_node_outside_the_pool_that_slurm_lists_as_unavailable_is_reported():
    spec = spec_with({})
    nodes, states = cluster(4, 4)
    jobs = (named_job("1", "i0", "gpu99", reason="ReqNodeNotAvail, UnavailableNodes:gpu99,i0", unavailable=("gpu99", "i0")),
            named_job("2", "i1", "cpu01"))  # cpu01 is not the pool's but Slurm has it: i1 is all job 2 lacks
    sig = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=jobs), [], now=NOW))
    assert sig.unstartable == ("job 1: names gpu99, which Slurm lists as unavailable and is not in the pool",)
    assert sig.named(Side.SLURM) == ("i1",)


def test_an_exclusive_job_without_gpus_counts_as_whole_nodes():
    spec = spec_with({})
    nodes, states = cluster(4, 4, busy=4)
    whole = replace(pending("1", gpus=0, nodes=2), exclusive=True)
    unknown = replace(pending("2", gpus=0, nodes=2), exclusive=None)  # a path that cannot tell: not counted
    shared = replace(pending("3", gpus=0, nodes=2), exclusive=False)
    sig = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=(whole, unknown, shared)), [], now=NOW))
    assert sig.waiting(Side.SLURM) == 1 and sig.gpus(Side.SLURM) == 16 and sig.nodes(Side.SLURM) == 2
    # An exclusive job asking for fewer GPUs than a node has still takes the whole node.
    part = signals(Seen(spec, nodes, SlurmView(True, nodes=states, jobs=(replace(pending("4", gpus=2, nodes=3), exclusive=True),)), [], now=NOW))
    assert part.gpus(Side.SLURM) == 24 and part.nodes(Side.SLURM) == 3


def test_demand_brings_back_the_named_nodes_in_a_whole_pass():
    """The issue's case: 5 Slurm / 3 inference, demand on, `sbatch -N2 -w gpu07,gpu08 --exclusive`
    (with and without --gres): the pass moves exactly gpu07 and gpu08, though gpu06 is cheaper."""
    for gpus in (8, 0):
        spec = spec_with({"cooldown": "0s"}, slurm_nodes=5, max_moves=4)
        names = [f"gpu0{i}" for i in range(1, 9)]
        nodes = [NodeView(n, annotations={ANN_PLACEMENT: SLURM}) for n in names[:5]]
        states = {n: slurm_node(n, "ALLOCATED") for n in names[:5]}
        for n in names[5:]:  # parked by slurmpool: its claim on the Node, its drain in Slurm
            node, states[n] = parked(NodeView(n, annotations={ANN_PLACEMENT: "inference:default"}), slurm_node(n), "default",
                                     NOW - timedelta(hours=1))
            nodes.append(node)
        busy = SlurmJob(job_id="9", name="fill", user="u", state="RUNNING", partition="gpu", nodes=tuple(names[:5]),
                        gpus_per_node=8, num_nodes=5, start_time=None, end_time=None, reason="None")
        job = named_job("10", "gpu07", "gpu08", gpus=gpus, exclusive=True, reason="ReqNodeNotAvail, UnavailableNodes:gpu[07-08]",
                        unavailable=("gpu07", "gpu08"))
        decision = decide(PoolSnapshot(pool=PoolRef("ns", "gpu", "u"), spec=spec, nodes=tuple(nodes),
                                       slurm=SlurmView(True, nodes=states, jobs=(busy, job)), now=NOW))
        assert decision.target.slurm_nodes == 7
        assert sorted(s.node for s, _ in decision.starts) == ["gpu07", "gpu08"], gpus
        unnamed = decide(PoolSnapshot(pool=PoolRef("ns", "gpu", "u"), spec=spec, nodes=tuple(nodes),
                                      slurm=SlurmView(True, nodes=states, jobs=(busy, replace(job, required_nodes=()))), now=NOW))
        assert sorted(s.node for s, _ in unnamed.starts) == ["gpu06", "gpu07"]  # by cost, as before


def test_demand_from_the_real_22_05_capture_of_pinned_and_whole_node_jobs():
    """tests/fixtures/named_jobs/22.05-local: gpu03 and gpu04 parked, gpu01-02 full (job fill)."""
    jobs = tuple(parse_squeue((Path(__file__).parent / "fixtures" / "named_jobs" / "22.05-local" / "squeue.txt").read_text()))
    names = ["gpu01", "gpu02", "gpu03", "gpu04"]
    nodes = [NodeView(n, annotations={ANN_PLACEMENT: SLURM if n < "gpu03" else "inference:default"}) for n in names]
    states = {n: slurm_node(n, "ALLOCATED") for n in names[:2]}
    sig = signals(Seen(spec_with({}, slurm_nodes=2), nodes, SlurmView(True, nodes=states, jobs=jobs), [], now=NOW))
    assert sig.named(Side.SLURM) == ("gpu03", "gpu04")
    # pinned-gres, pinned-excl, pinned-one (a CPU job on gpu04), excl (1 whole node), excluding (8 GPUs);
    # shared asks for no GPUs and takes no whole node: not counted.
    assert sig.waiting(Side.SLURM) == 5 and sig.nodes(Side.SLURM) == 2 + 2  # the named two, and ceil(16 / 8) more
