"""The planned handover's checkpoint warning (issue 36): with `drain.onTimeout: Checkpoint`, a job
on the leaving nodes that will still run at the edge (no time limit, or one past it) gets its signal
`grace` before the edge (its own --signal and time when Slurm shows them, as expiry.py's policy), so
it checkpoints in time and its node is free at the edge. Pure: the caller gives the plan and the view.

The signal is recorded where the drain's is (checkpoint.py, `slurmpool.io/checkpoint` on each
leaving node the job runs on, with the edge in `before`), written before the signal: a restart
neither signals twice nor forgets when. At the edge the move's Draining reads the record: the jobs'
grace is over, so they are requeued without waiting for `drain.timeout` (moves.py,
CheckpointRecord.warned_for). A record whose
handover no longer takes its node (the edge moved, the plan chose others) goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from slurmpool.core.checkpoint import CheckpointRecord
from slurmpool.core.expiry import Checkpointing, Signal, checkpoint_signals
from slurmpool.core.handover import Handover, HandoverPlan, PoolView
from slurmpool.core.models import HandoverCheckpoint
from slurmpool.core.view import iso


@dataclass(frozen=True)
class JobWarning:
    """One job to warn: the leaving nodes it runs on, when (`at`: the edge less its grace), and when it was."""

    job: str
    nodes: tuple[str, ...]
    at: datetime
    signal: str
    signalled: datetime | None

    def status(self) -> HandoverCheckpoint:
        return HandoverCheckpoint(job=self.job, nodes=list(self.nodes), at=iso(self.at), signal=self.signal,
                                  signalled=iso(self.signalled) if self.signalled else None)


@dataclass
class Warnings:
    """What the pass does: the jobs and their times (status), the records to write on the leaving
    nodes, the signals to send now (each job once, on the step of the first node it runs on), and
    the nodes whose handover record goes."""

    jobs: list[JobWarning] = field(default_factory=list)
    records: dict[str, CheckpointRecord] = field(default_factory=dict)
    signals: dict[str, list[Signal]] = field(default_factory=dict)
    drop: list[str] = field(default_factory=list)


def warn(plan: HandoverPlan, view: PoolView) -> Warnings:
    """The warnings of the handover ahead (plan.ahead); nothing while the reservations are unknown."""
    if plan.outcome == "unknown":
        return Warnings()
    h = plan.ahead if plan.ahead is not None and view.now < plan.ahead.start else None
    out = Warnings(drop=_stale(plan, view, h))
    if h is None or view.spec.drain.on_timeout != "Checkpoint":
        return out
    base = {n: _base(view, n, h) for n in h.nodes}
    on: dict[str, list[str]] = {}
    settled = {n.name for n in view.nodes if n.move is None}  # a node already moving has its own drain's record
    for node in (n for n in h.nodes if n in settled):
        for running in view.slurm.jobs_on(node):
            if running.state == "RUNNING" and (running.end_time is None or running.end_time > h.start):
                on.setdefault(running.job_id, []).append(node)
    c = Checkpointing(view.spec.drain.checkpoint, None, view.now, declared={
        j.job_id: j.declared_signal for n in h.nodes for j in view.slurm.jobs_on(n) if j.declared_signal is not None})
    due: dict[str, list[str]] = {}  # first node -> jobs to signal now
    for job, nodes in sorted(on.items()):
        at = h.start - c.grace(job)
        signalled = next((t for n in nodes if (t := base[n].at(job)) is not None), None)
        own = c.declared.get(job)
        out.jobs.append(JobWarning(job, tuple(nodes), at, own.signal if own else c.spec.signal, signalled or (view.now if at <= view.now else None)))
        if signalled is None and at <= view.now:
            due.setdefault(nodes[0], []).append(job)
            for n in nodes:
                out.records[n] = out.records.get(n, base[n]).adding((job,), view.now)
    for node, jobs in due.items():
        out.signals[node] = list(checkpoint_signals(tuple(jobs), out.records[node], c.declared))
    return out


def _base(view: PoolView, node: str, h: Handover) -> CheckpointRecord:
    """The node's record for this edge: the one it has, else a new one (a record for another edge is
    replaced: its jobs are warned again for this one)."""
    record = next((n.checkpoint for n in view.nodes if n.name == node), None)
    if record is not None and record.before == h.start.replace(microsecond=0):
        return record
    spec = view.spec.drain.checkpoint
    return CheckpointRecord(spec.signal, spec.to, (), before=h.start.replace(microsecond=0))


def _stale(plan: HandoverPlan, view: PoolView, h: Handover | None) -> list[str]:
    """Settled nodes with a handover record no handover takes now: neither the one ahead nor one
    still handing over (its nodes may wait for their move)."""
    keep = set(h.nodes if h else ()) | set(plan.status.nodes if plan.status else ())
    return sorted(n.name for n in view.nodes
                  if n.checkpoint is not None and n.checkpoint.before is not None and n.move is None and n.name not in keep)

