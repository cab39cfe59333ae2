"""How fresh the Slurm view of one pool's pass must be: what the pool asks for. (The access pool,
adapters/access.py, decides how to answer: it may hand out a view up to STALE_WHILE_POLLING times
older rather than wait for a poll in progress.)

Pools on one Slurm share a poll begun within SLURM_MAX_AGE (within the pass interval for a pool with
demand on); a pool that changed Slurm sees only a poll begun after its change; a pool whose move
waits on Slurm (a slurmd registering) asks for a poll begun after the one it last saw; and a pass
that would start a move, resume a drain, requeue or cancel decides again on a poll begun after the
pass began (an admin's drain just before a scale counts). Pure: no I/O, times are the access
pool's clock (adapters/access.py polls and backs off, and answers a `Freshness`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.expiry import Cancel, Requeue, Signal
from slurmpool.core.moves import Blocker, BlockerKind, PowerDown, PowerUp, Resume
from slurmpool.core.phases import Phase
from slurmpool.core.view import SlurmView

# A Slurm view this old still does for a pass: what must be fresher asks for it (a pool's own
# changes, a move waiting on Slurm, a move to start or a drain to resume), and a poll costs a
# round trip of scontrol and squeue (a few hundred ms) that most passes of a move do not need.
SLURM_MAX_AGE = 2.0
# Phases that wait on Slurm or the node agent rather than on a watch event: polled faster.
QUICK_PHASES = frozenset({Phase.STARTING_SLURMD, Phase.REGISTERING, Phase.RESUMING, Phase.DRAINING, Phase.POWERING_DOWN, Phase.POWERING_UP})
# What a move blocked only by these waits for is Slurm's to report soon (moves.py: Registering).
SLURM_SOON = frozenset({Blocker(BlockerKind.SLURMD_REGISTRATION)})


class Freshness(NamedTuple):
    """The poll a pass may use."""

    max_age: float  # begun at most this long ago
    newer_than: float | None = None  # begun after this (a newer poll than one already used)
    since: float | None = None  # begun at or after this (the pool's own last change of Slurm)


def max_age(spec: SlurmNodePoolSpec, interval: float) -> float:
    """How old a shared Slurm poll may be for this pool's pass. With demand on, no older than the
    pass interval: a job submitted just after a poll waited for the next one SLURM_MAX_AGE later,
    up to 2 s of a gang job's submit-to-running (bench: gang_job_submit_to_nodes_resumed). So with
    power-save parking: Slurm may ask a lent node back at any moment, and its job waits in
    CONFIGURING until the give-back is seen (bench: parked_gang_job_asked_to_registered)."""
    if (spec.demand is not None and spec.demand.enabled) or spec.slurm.parking == "PowerSave":
        return min(SLURM_MAX_AGE, interval)
    return SLURM_MAX_AGE


def waiting_on_slurm(decision) -> bool:
    """A move waits on what Slurm will report within a second or so (a drain taking, a slurmd
    registering): its pool looks again soon, on a fresh poll. Not a move blocked by jobs, pods or
    an outage: those wait minutes, and the interval does."""
    return any(step.move is not None and step.move.phase in QUICK_PHASES and set(step.blocked_by) <= SLURM_SOON
               for step in decision.steps.values())


def needs_fresh_slurm(decision) -> bool:
    """Which node to move, whether a drain is still ours to resume, which jobs still run (to
    signal, requeue or cancel), and whether a node is still powered down (or up), are read from a
    fresh poll."""
    return bool(decision.starts) or any(isinstance(a, (Resume, Signal, Requeue, Cancel, PowerDown, PowerUp))
                                        for s in decision.steps.values() for a in s.actions)


@dataclass
class SlurmFreshness:
    """One pool's side of the rule: what it did to Slurm and which poll it last used."""

    changed_at: float | None = None  # when this pool last changed Slurm
    last_poll: float | None = None  # when the poll its last look used began
    waiting: bool = False  # its last pass waits on Slurm: the next look wants a newer poll

    def want(self, spec: SlurmNodePoolSpec, interval: float, newer_than: float | None = None) -> Freshness:
        """The poll this look may use; `newer_than`: the pass's second look (a poll begun after the
        pass began). A wait on Slurm is answered by this one look."""
        if newer_than is None and self.waiting:
            newer_than = self.last_poll
        self.waiting = False
        return Freshness(max_age(spec, interval), newer_than, self.changed_at)

    def used(self, view: SlurmView) -> None:
        self.last_poll = view.polled_at

    def changed(self, now: float) -> None:
        """The pool changed Slurm: only a poll begun from now on shows it."""
        self.changed_at = now

    def decide_again(self, view: SlurmView, began: float, decision) -> bool:
        """Decide again on a poll begun after the pass `began`? Only for a decision that needs it."""
        return view.available and view.polled_at < began and needs_fresh_slurm(decision)

    def passed(self, decision) -> bool:
        """After a pass that did not act: True when it waits on Slurm (the next look comes soon, on
        a newer poll)."""
        self.waiting = waiting_on_slurm(decision)
        return self.waiting
