"""Demand source: jobs pending in Slurm that more nodes would start. Pure.

Jobs PENDING in `spec.slurm.partition` that want GPUs, whole nodes (--exclusive: every GPU of
their nodes, though they name none) or nodes of the pool by name (-w), and whose reason means "waits for
nodes" (`job_waits_for_nodes`: Resources, Priority, ReqNodeNotAvail, NodeDown,
PartitionNodeLimit and the desc "Nodes required for job are DOWN, DRAINED or reserved..." in
every spelling squeue, scontrol and slurmrestd print; not jobs held, waiting on a dependency,
a begin time or a limit: more nodes would not start those). A job that asks for more nodes
than the pool's usable Slurm nodes (a gang job while nodes are parked for inference) needs its
node count less those usable nodes, busy or not; the other jobs need max(ceil(their GPUs / GPUs
per node), the largest one's node count) less the idle Slurm nodes. Slurm's want is the larger
of the two. A job that names its nodes (-w) needs exactly those: the ones not in Slurm are
wanted by name (`Want.named`: the planner moves them before any other), on top of the above,
and only the nodes it asks for beyond them count as above. A job no split of the pool could
start (more nodes than the pool has, more GPUs per node than its nodes have, BadConstraints,
a named node that cannot come: unhealthy, pinned elsewhere, or not the pool's and unavailable)
is reported (`unstartable`), never counted: other nodes in its place would not start it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from slurmbridge.models import SlurmJob

from slurmpool.core import slurmstate
from slurmpool.core.demand.want import Seen, Want
from slurmpool.core.placement import NONE, SLURM, Side
from slurmpool.core.view import NodeView, SlurmView, counts_at

# A pending job's reason, normalised (lower case, "_" as " "), that more nodes could end. Slurm
# prints a job's state_desc instead of its reason when one is set: squeue %r and slurmrestd's
# state_description as is, scontrol with "_" for " " (fixtures: tests/fixtures/pending_reasons).
# The desc "Nodes required for job are DOWN, DRAINED[, REBOOTING] or reserved for jobs in higher
# priority partitions" (job_scheduler.c) is WAIT_RESOURCES: the partition lacks undrained nodes,
# the usual state while nodes are parked for inference. PartitionNodeLimit: more nodes than the
# partition has now (dynamic nodes leave it while parked). Others (Dependency, BeginTime,
# JobHeldUser, QOS and association limits, PartitionDown...) are not demand for nodes.
WAITING_REASONS = (
    "resources",
    "priority",
    "reqnodenotavail",
    "nodes required for job are down",
    "nodedown",
    "partitionnodelimit",
)
# Reasons by which Slurm says the job can never run as configured: reported, never counted.
NEVER_REASONS = ("badconstraints",)
# Jobs no split could start named in the status and its Event, the lowest ids; then how many more
# (a queue of 100,000 jobs larger than a small pool made a status etcd refuses and an Event of megabytes).
UNSTARTABLE_SHOWN = 10
COUNTED_REASONS = WAITING_REASONS + NEVER_REASONS


@lru_cache(maxsize=4096)
def _normal(reason: str) -> str:
    """The reason in one spelling. Cached: every pass reads every pending job's reason, and a
    queue of 100,000 jobs has a few dozen distinct ones."""
    return " ".join(reason.replace("_", " ").split()).lower()


def job_waits_for_nodes(reason: str) -> bool:
    """Does this reason, in any of Slurm's spellings, mean that more nodes could start the job?"""
    return _normal(reason).startswith(WAITING_REASONS)


def never_starts(job: SlurmJob, pool_nodes: int, gpn: int) -> str | None:
    """Why no split of a pool of `pool_nodes` nodes with `gpn` GPUs each could start the job, or None."""
    why = _never(job, pool_nodes, gpn)
    return f"job {job.job_id}: {why}" if why else None


def _never(job: SlurmJob, pool_nodes: int, gpn: int) -> str | None:
    """never_starts' reason, the same for every job of one Shape."""
    if _normal(job.reason).startswith(NEVER_REASONS):
        return f"Slurm says it can never run as configured ({job.reason})"
    if job.num_nodes > pool_nodes:
        return f"asks for {job.num_nodes} nodes, the pool has {pool_nodes}"
    if job.gpus_per_node > gpn:
        return f"asks for {job.gpus_per_node} GPUs per node, the pool's nodes have {gpn}"
    return None


def want(waiting: int, gpus: int, nodes: int, gang: int, unstartable: tuple[str, ...] = (), named: tuple[str, ...] = ()) -> Want:
    """Slurm's want: `nodes` for the jobs that fit the usable nodes (idle ones deducted), `gang`
    for the largest job that does not, and the `named` nodes jobs name that are not in Slurm."""
    gang_text = f", one asks for {gang} node(s) more than Slurm has usable" if gang else ""
    named_text = f", {len(named)} named by their jobs ({_listed(named)})" if named else ""
    return Want(Side.SLURM, max(0, nodes, gang) + len(named), waiting, gpus,
                f"{waiting} pending job(s) want {gpus} GPU(s){gang_text}{named_text}", unstartable=unstartable, named=named)


def wants(seen: Seen) -> list[Want]:
    """The source (an entry of SOURCES): what the pool's pending jobs want from Slurm. The jobs
    naming no node (most of a queue) are taken by shape, grouped once per poll (Queue): 200
    pools on one partition of 100,000 pending jobs walked every job each, 26.7 s of CPU a round."""
    gpn = seen.gpus_per_node
    pool = {n.name: n for n in seen.nodes}
    partition = seen.spec.slurm.partition
    queue = seen.slurm.of_pending(("slurm_jobs.Queue", partition), lambda: Queue.of(seen.slurm.pending_in(partition)))
    named_jobs = [j for j in queue.naming if j.gpus_per_node > 0 or j.exclusive or any(n in pool for n in j.required_nodes)]
    unstartable = {j.job_id: why for j in named_jobs if (why := never_starts(j, len(seen.nodes), gpn) or named_stuck(j, pool, seen.unhealthy))}
    never = list(unstartable.items())  # (job id, why): each shape's first UNSTARTABLE_SHOWN, enough for the lowest ids of all
    never_count = len(never)
    shapes: list[tuple[Shape, int]] = []
    for shape, ids in queue.shapes.items():
        if why := _never(shape.example, len(seen.nodes), gpn):
            never += [(i, f"job {i}: {why}") for i in ids[:UNSTARTABLE_SHOWN]]
            never_count += len(ids)
        else:
            shapes.append((shape, len(ids)))
    jobs = [j for j in named_jobs if j.job_id not in unstartable]
    if not jobs and not shapes and not never:
        return []
    usable, idle = _usable_and_idle(seen.nodes, seen.slurm, seen.spec.slurm.parking == "PowerSave")
    named = tuple(dict.fromkeys(n for j in jobs for n in j.required_nodes if n in pool and counts_at(pool[n]) != SLURM))
    counted = [(rest.num_nodes, _gpus(rest, gpn), 1) for j in jobs if (rest := _beyond_named(j)) is not None]
    counted += [(shape.example.num_nodes, _gpus(shape.example, gpn), count) for shape, count in shapes]
    fitting = [(nodes, gpus, count) for nodes, gpus, count in counted if nodes <= usable]
    packed = max([math.ceil(sum(gpus * count for _, gpus, count in fitting) / gpn)] + [nodes for nodes, _, _ in fitting]) if fitting else 0
    gang = max((nodes - usable for nodes, _, _ in counted if nodes > usable), default=0)
    reported = tuple(why for _, why in sorted(never)[:UNSTARTABLE_SHOWN]) + unstartable_more(never_count - UNSTARTABLE_SHOWN)
    waiting = len(jobs) + sum(count for _, count in shapes)
    gpus = sum(_gpus(j, gpn) for j in jobs) + sum(_gpus(shape.example, gpn) * count for shape, count in shapes)
    return [want(waiting, gpus, packed - idle, gang, reported, named)]


@dataclass(frozen=True)
class Shape:
    """What a job naming no node asks, as far as demand reads it: jobs of one shape count alike."""

    num_nodes: int
    gpus_per_node: int
    gpus_wanted: int
    exclusive: bool | None
    reason: str  # the reason when it is one of NEVER_REASONS (Slurm says it can never run as configured), else ""
    example: SlurmJob = field(compare=False, hash=False)  # the first job of the shape: what _never and _gpus read


@dataclass(frozen=True)
class Queue:
    """A partition's pending jobs that may be demand (they want GPUs or whole nodes, or name
    nodes, and wait for nodes or never start): those naming nodes as they are (each pool asks
    whether they name its nodes), the others' ids by shape, in the queue's order."""

    naming: tuple[SlurmJob, ...]
    shapes: dict[Shape, list[str]]  # job ids sorted

    @staticmethod
    def of(pending: Sequence[SlurmJob]) -> Queue:
        naming: list[SlurmJob] = []
        shapes: dict[Shape, list[str]] = {}
        for j in pending:
            if j.num_nodes <= 0 or not _normal(j.reason).startswith(COUNTED_REASONS):
                continue
            if j.required_nodes:
                naming.append(j)
            elif j.gpus_per_node > 0 or j.exclusive:
                never = j.reason if _normal(j.reason).startswith(NEVER_REASONS) else ""
                shape = Shape(j.num_nodes, j.gpus_per_node, j.gpus_wanted, j.exclusive, never, j)
                shapes.setdefault(shape, []).append(j.job_id)
        return Queue(tuple(naming), {shape: sorted(ids) for shape, ids in shapes.items()})


def unstartable_more(more: int) -> tuple[str, ...]:
    """The line after the UNSTARTABLE_SHOWN shown, if any: the count in steps (10+, 100+...),
    so that a queue's churn does not make it a new line (and a new Event) every pass."""
    if more <= 0:
        return ()
    shown = str(more) if more < 10 else f"{10 ** int(math.log10(more)):,}+"
    return (f"and {shown} more pending job(s) no split of this pool could start",)


def named_stuck(job: SlurmJob, pool: Mapping[str, NodeView], unhealthy: frozenset[str]) -> str | None:
    """Why a node the job names cannot come to Slurm, or None. Not another node in its place:
    the job could not use it. A node of the pool that is not in Slurm and unhealthy, pinned
    elsewhere or left alone for an unreadable record; or one outside the pool that Slurm lists
    as unavailable (not ours to bring back)."""
    for name in job.required_nodes:
        node = pool.get(name)
        if node is None:
            if name in job.unavailable_nodes:
                return f"job {job.job_id}: names {name}, which Slurm lists as unavailable and is not in the pool"
            continue
        if counts_at(node) == SLURM:
            continue
        if node.problems:
            return f"job {job.job_id}: names {name}, whose slurmpool records cannot be read"
        if name in unhealthy:
            return f"job {job.job_id}: names {name}, which is unhealthy"
        if node.pin is not None and node.pin != SLURM:
            return f"job {job.job_id}: names {name}, which is pinned to {node.pin}"
    return None


def _beyond_named(job: SlurmJob) -> SlurmJob | None:
    """The part of a job its named nodes do not serve (-N4 -w a,b: two nodes more, any of the
    partition's); the whole job when it names none, None when its named nodes serve it all."""
    if not job.required_nodes:
        return job
    rest = job.num_nodes - len(job.required_nodes)
    return replace(job, num_nodes=rest, required_nodes=()) if rest > 0 else None


def _gpus(job: SlurmJob, gpn: int) -> int:
    """GPUs a job takes: every GPU of its nodes when it takes whole nodes (--exclusive)."""
    return gpn * job.num_nodes if job.exclusive else job.gpus_wanted


def _listed(names: Sequence[str], at_most: int = 5) -> str:
    more = f" and {len(names) - at_most} more" if len(names) > at_most else ""
    return ", ".join(names[:at_most]) + more


def _usable_and_idle(nodes: Sequence[NodeView], slurm: SlurmView, power_save: bool = False) -> tuple[int, int]:
    """Settled Slurm nodes a job could get, busy or idle (usable), and those idle with no job.
    With power-save parking a lent parked node (`idle~`: usable) is Slurm's capacity too: Slurm
    starts jobs there itself (a give-back, parking.py); a held one (`drain~`) is not usable."""
    usable = idle = 0
    if not slurm.available:
        return 0, 0
    for node in nodes:
        counted = node.placement == SLURM or (power_save and node.placement != NONE)
        sn = slurm.nodes.get(node.name) if node.move is None and counted else None
        if sn is not None and slurmstate.usable(sn):
            usable += 1
            idle += slurmstate.idle(sn) and not slurm.jobs_on(node.name)
    return usable, idle
