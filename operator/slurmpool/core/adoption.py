"""Adoption: a node whose slurmd runs outside Kubernetes today (systemd on the host), taken into the
pool's Slurm side as it is. A person asks for it with `slurmpool.io/adopt` on a node the pool has
not placed (`true`, or `resume-drain` to hand their own drain over). It is no move: nothing is
drained, evicted, requeued or signalled, and the node's jobs run on.

1. `place`: one patch settles the node in Slurm (its record, side label, taint and cordon; a
   cordon found on it stays theirs). Pods on it stay (reported as stray pods, never evicted).
2. The settled node's upkeep creates its slurmd pod at once (decide.py). Its slurmd must not start
   while the outside one holds the node's port: the slurmd image's entrypoint waits until the port
   is free, and a slurmd started anyway cannot bind it and exits. The person stops the outside
   slurmd (the AdoptionStarted Event says so); the jobs' slurmstepd processes outlive it, and the
   pod's slurmd finds them in the spool directory it shares with the host (docs/adopting.md).
3. `follow`: done once Slurm shows the node responding with a slurmd started no earlier than the
   pod. A drain of someone else's is resumed only with `resume-drain`, and the annotation stays
   until Slurm shows it lifted (a crash between the two loses nothing); with `true` it is left,
   reported. Then the annotation is removed (AdoptionCompleted).

Its state is the Node's: the placement and the annotation. Each pass decides again from them.
"""

from __future__ import annotations

from slurmbridge.models import SlurmNode

from slurmpool.core import slurmstate
from slurmpool.core.events import Event, Reason
from slurmpool.core.moves import Pass, Resume, Step, slurm_shape, stale_slurmd
from slurmpool.core.ownership import CLOCK_SKEW, why_not_ours
from slurmpool.core.view import NONE, SLURM, Adopt, NodeView


def wanted(node: NodeView) -> bool:
    """Asked for, and the node is still unplaced with no move: the only nodes `place` takes."""
    return node.adopt is not None and node.placement == NONE and node.move is None


def place(node: NodeView, at: Pass) -> Step | None:
    """Settle the unplaced node in Slurm in one patch; None while Slurm cannot be read (fail closed:
    nothing is known then of the slurmd that serves it)."""
    if not at.slurm.available:
        return None
    step = Step(move=None, settled=SLURM)
    step.actions.append(slurm_shape(at.spec, node, claims_cordon=True))
    step.events.append(Event.normal(Reason.AdoptionStarted, (
        f"{node.name}: taken into Slurm as it is (slurmpool.io/adopt={node.adopt}): nothing drained, evicted or requeued. "
        "Stop the slurmd that runs outside Kubernetes on the host now (systemctl disable --now slurmd): its jobs keep running, "
        "and the node's slurmd pod starts slurmd once the node's slurmd port is free")))
    return step


def follow(node: NodeView, sn: SlurmNode | None, step: Step) -> None:
    """The adoption of a node settled in Slurm, after its upkeep ensured the slurmd pod: done (the
    annotation removed) once the pod's slurmd has registered and the drain is as asked."""
    if node.adopt is None:
        return
    if waiting := _waiting(node, sn):
        step.message = f"adopting: {waiting}"
        return
    assert sn is not None, "_waiting answers while Slurm does not list the node"
    foreign = slurmstate.drain_set(sn) and why_not_ours(node, sn) is not None
    handed_over = _set_before_adoption(node, sn)
    if foreign and node.adopt == Adopt.RESUME_DRAIN and not slurmstate.verdict(sn) and handed_over:
        step.actions.append(Resume(node.name))  # the annotation goes once Slurm shows the drain lifted
        step.message = f"adopting: resuming the drain handed over ({sn.reason})"
        return
    step.adopted = True
    left = ""
    if foreign:
        why = ("Slurm's own verdict" if slurmstate.verdict(sn) else "slurmpool.io/adopt=true keeps it" if node.adopt != Adopt.RESUME_DRAIN
               else "set after the adoption placed the node, or when is not known: not the drain handed over")
        left = f"; its drain ({sn.reason}) is someone else's and stays ({why}): resume it in Slurm when it should take jobs"
    step.events.append(Event.normal(Reason.AdoptionCompleted, f"{node.name}: adopted; its slurmd pod's slurmd serves it in Slurm{left}"))


def _set_before_adoption(node: NodeView, sn: SlurmNode) -> bool:
    """The drain dates from before `place` settled the node: the one the person handed over. A
    drain set later (an admin's, on a node long in Slurm that someone annotated) is never resumed."""
    return sn.reason_time is not None and node.settled_at is not None and sn.reason_time < node.settled_at + CLOCK_SKEW


def _waiting(node: NodeView, sn: SlurmNode | None) -> str | None:
    """What the adoption waits for, or None: the pod's own slurmd has registered."""
    pod = node.slurmd_pod
    if pod is None or pod.ended or pod.deleting:
        return "its slurmd pod is being started"
    if sn is None:
        return "Slurm does not list the node"
    if not slurmstate.responding(sn):
        return f"Slurm shows it {slurmstate.text(sn)}; waiting for the slurmd pod's slurmd to register"
    if sn.slurmd_start is None or pod.created is None:
        return "Slurm gives no slurmd start time: cannot tell the pod's slurmd from the one outside Kubernetes"
    if stale := stale_slurmd(sn, pod):
        return f"{stale}: stop the slurmd that runs outside Kubernetes on the host"
    if sn.slurmd_start <= pod.created:  # stale_slurmd allows clock skew; an outside slurmd started just before the pod passes it
        return "Slurm's slurmd started no later than the pod: stop the slurmd that runs outside Kubernetes on the host"
    return None
