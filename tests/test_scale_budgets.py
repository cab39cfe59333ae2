"""Scale and hostile-input budgets on fakes (issue 37, fault-suite addition 5): counts and memory
limits, never timings (time figures are `make bench`'s)."""

from __future__ import annotations

from slurmbridge import SlurmJob
from slurmpool.core.demand import signals
from slurmpool.core.placement import SLURM, Side
from slurmpool.core.view import ANN_PLACEMENT, NodeView, SlurmView

from .factories import make_spec, slurm_node

POOLS, NODES, PENDING = 200, 50, 100_000


class CountedJobs(tuple):
    """A view's jobs that count how often the whole queue is walked."""

    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()


def _pool(i: int):
    body = make_spec(slurm_nodes=NODES).model_dump(by_alias=True, exclude_none=True)
    body["slurm"]["partition"] = f"p{i}"
    body["demand"] = {}
    nodes = [NodeView(f"n{i}-{k}", annotations={ANN_PLACEMENT: SLURM}) for k in range(NODES)]
    return type(make_spec()).model_validate(body), nodes


def test_demand_walks_the_queue_once_per_poll_for_200_pools_with_100000_pending():
    pools = [_pool(i) for i in range(POOLS)]
    states = {n.name: slurm_node(n.name, "ALLOCATED") for _, nodes in pools for n in nodes}
    jobs = CountedJobs(
        SlurmJob(job_id=str(j), name="t", user="u", state="PENDING", partition=f"p{j % POOLS}", nodes=(), gpus_per_node=8,
                 num_nodes=1, start_time=None, end_time=None, reason="Resources")
        for j in range(PENDING))
    view = SlurmView(True, nodes=states, jobs=jobs)
    CountedJobs.walks = 0
    wanted = [signals(spec, nodes, view, []) for spec, nodes in pools]
    assert all(s.waiting(Side.SLURM) == PENDING // POOLS for s in wanted)
    assert all(s.nodes(Side.SLURM) == PENDING // POOLS for s in wanted)
    assert CountedJobs.walks <= 2  # once for the pending index, once for the node index: not once per pool
