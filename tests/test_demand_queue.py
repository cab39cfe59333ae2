"""issue 37.8: a partition's pending jobs are grouped once per poll (slurm_jobs.Queue) and each
pool reads the groups, not the queue. The pools' wants are those of the per-job reading they
replace (`reference`, the code before the change, kept here), whatever the queue and the pool."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmbridge import SlurmJob
from slurmpool.core.demand import Seen, slurm_jobs
from slurmpool.core.demand.slurm_jobs import COUNTED_REASONS, UNSTARTABLE_SHOWN, _beyond_named, _gpus, _normal, _usable_and_idle, named_stuck, never_starts, unstartable_more, want
from slurmpool.core.view import ANN_PLACEMENT, SLURM, NodeView, SlurmView, counts_at

from .factories import NOW, slurm_node
from .test_demand import spec_with

NODES = [f"gpu{i:02d}" for i in range(1, 7)]
REASONS = ["Resources", "Priority", "BadConstraints", "bad_constraints", "Dependency", "ReqNodeNotAvail, UnavailableNodes:gpu02",
           "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions"]


def reference(seen: Seen) -> list:
    """slurm_jobs.wants as it was: every pending job of the partition walked by every pool (its
    report of unstartable jobs bounded as now)."""
    gpn = seen.gpus_per_node
    pool = {n.name: n for n in seen.nodes}
    candidates = [j for j in seen.slurm.pending_in(seen.spec.slurm.partition)
                  if j.num_nodes > 0 and (j.gpus_per_node > 0 or j.exclusive or any(n in pool for n in j.required_nodes))
                  and _normal(j.reason).startswith(COUNTED_REASONS)]
    unstartable = {j.job_id: why for j in candidates if (why := never_starts(j, len(seen.nodes), gpn) or named_stuck(j, pool, seen.unhealthy))}
    jobs = [j for j in candidates if j.job_id not in unstartable]
    if not jobs and not unstartable:
        return []
    usable, idle = _usable_and_idle(seen.nodes, seen.slurm, seen.spec.slurm.parking == "PowerSave")
    named = tuple(dict.fromkeys(n for j in jobs for n in j.required_nodes if n in pool and counts_at(pool[n]) != SLURM))
    counted = [rest for j in jobs if (rest := _beyond_named(j)) is not None]
    fitting = [j for j in counted if j.num_nodes <= usable]
    packed = max([math.ceil(sum(_gpus(j, gpn) for j in fitting) / gpn)] + [j.num_nodes for j in fitting]) if fitting else 0
    gang = max((j.num_nodes - usable for j in counted if j.num_nodes > usable), default=0)
    reported = tuple(why for _, why in sorted(unstartable.items()))  # bounded since (UNSTARTABLE_SHOWN):
    reported = reported[:UNSTARTABLE_SHOWN] + unstartable_more(len(reported) - UNSTARTABLE_SHOWN)
    return [want(len(jobs), sum(_gpus(j, gpn) for j in jobs), packed - idle, gang, reported, named)]


job = st.builds(
    lambda i, nodes, gpn, exclusive, reason, named, partition: SlurmJob(
        job_id=str(100 + i), name="t", user="u", state="PENDING", partition=partition, nodes=(), gpus_per_node=gpn,
        num_nodes=nodes, start_time=None, end_time=None, reason=reason, required_nodes=tuple(named), exclusive=exclusive),
    # few values each, so that jobs share shapes (and a pool of up to 6 nodes meets jobs larger than it)
    st.integers(0, 10_000), st.sampled_from([0, 1, 2, 7]), st.sampled_from([0, 8, 16]), st.sampled_from([None, True]),
    st.sampled_from(REASONS[:3]) | st.sampled_from(REASONS), st.one_of(st.just([]), st.lists(st.sampled_from(NODES + ["other01"]), max_size=3, unique=True)),
    st.sampled_from(["gpu", "gpu,cpu", "cpu"]))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(queue=st.lists(job, max_size=60, unique_by=lambda j: j.job_id), in_slurm=st.integers(0, len(NODES)),
       busy=st.sets(st.sampled_from(NODES)), unhealthy=st.sets(st.sampled_from(NODES)), pool_size=st.integers(1, len(NODES)))
def test_the_grouped_queue_wants_what_every_job_walked_wanted(queue, in_slurm, busy, unhealthy, pool_size):
    names = NODES[:pool_size]
    nodes = [NodeView(n, annotations={ANN_PLACEMENT: SLURM if k < in_slurm else "inference:default"}) for k, n in enumerate(names)]
    states = {n: slurm_node(n, "ALLOCATED" if n in busy else "IDLE") for n in names}
    view = SlurmView(True, nodes=states, jobs=tuple(queue))
    seen = Seen(spec_with({}, slurm_nodes=in_slurm), nodes, view, [], unhealthy=frozenset(unhealthy), now=NOW)
    assert slurm_jobs.wants(seen) == reference(seen)


def test_pools_on_one_partition_share_the_grouping_made_once_per_poll():
    jobs = tuple(SlurmJob(job_id=str(j), name="t", user="u", state="PENDING", partition="gpu", nodes=(), gpus_per_node=8, num_nodes=1 + j % 2,
                          start_time=None, end_time=None, reason="Resources") for j in range(1000))
    view = SlurmView(True, nodes={}, jobs=jobs)
    first = view.of_pending(("slurm_jobs.Queue", "gpu"), lambda: slurm_jobs.Queue.of(view.pending_in("gpu")))
    assert [len(ids) for ids in first.shapes.values()] == [500, 500] and first.naming == ()
    for p in range(3):
        nodes = [NodeView(f"p{p}-{k}", annotations={ANN_PLACEMENT: SLURM}) for k in range(4)]
        [wanted] = slurm_jobs.wants(Seen(spec_with({}, slurm_nodes=4), nodes, view, [], now=NOW))
        assert (wanted.waiting, wanted.gpus) == (1000, 500 * 8 + 500 * 16)
    assert view.of_pending(("slurm_jobs.Queue", "gpu"), lambda: None) is first  # made once, read by every pool


def test_a_queue_of_jobs_no_split_could_start_is_reported_bounded_in_steps():
    """100,000 jobs larger than the pool: the status and its Event name 10, then how many more,
    in steps (10+, 100+...) so that the line changes rarely as the queue churns."""
    jobs = tuple(SlurmJob(job_id=str(j), name="t", user="u", state="PENDING", partition="gpu", nodes=(), gpus_per_node=8, num_nodes=64,
                          start_time=None, end_time=None, reason="Resources") for j in range(100_000))
    nodes = [NodeView(f"n{k}", annotations={ANN_PLACEMENT: SLURM}) for k in range(4)]
    [wanted] = slurm_jobs.wants(Seen(spec_with({}, slurm_nodes=4), nodes, SlurmView(True, nodes={}, jobs=jobs), [], now=NOW))
    assert len(wanted.unstartable) == UNSTARTABLE_SHOWN + 1 and wanted.waiting == 0
    assert wanted.unstartable[0] == "job 0: asks for 64 nodes, the pool has 4" and wanted.unstartable[1].startswith("job 1: ")
    assert wanted.unstartable[-1] == "and 10,000+ more pending job(s) no split of this pool could start"
    assert unstartable_more(9) == ("and 9 more pending job(s) no split of this pool could start",) and unstartable_more(0) == ()
