"""Node health: is a node broken, and why. Pure: no I/O, no clock but the caller's. What a Slurm
state means is read from slurmstate.py; the kinds of finding are models.HealthKind.

A node is *unhealthy* when
- Slurm reports it DOWN, FAIL or NOT_RESPONDING (slurmstate.down: power saving is no failure) for
  longer than `health.notRespondingGrace`, while its slurmd should run: settled in Slurm, draining out of Slurm, or resuming into it.
  A node parked in inference (its slurmd stopped by slurmpool) or moving in before its slurmd
  registered is expected to look down to Slurm: that is no failure;
- Slurm does not list it while its slurmd should run (its Slurm NodeName is wrong, or a REST
  answer lost it): `SlurmUnlisted`, at once: such a node is never drained as "nothing to drain";
- Slurm reports it drained by anyone but slurmpool (an admin, a health checker, Slurm itself:
  `gres/gpu count reported lower than configured`), whatever its side;
- Kubernetes reports it NotReady or unreachable (Ready False or Unknown);
- a Node condition listed in `health.conditions` holds (with its status, for its minAge).

A finding still within its grace (or minAge) makes the node *suspect*: still counted as
capacity, chosen for a move only after the healthy idle nodes (a slurmctld restart shows every
node not responding for a while: a busy node must not go first). Unhealthy nodes are never
chosen, their moves stop where it is safe (moves.py), and the split counts them honestly
(planner.py, status.py). The time a finding was first seen lives in the pool's status (`status.unhealthyNodes[].since`), so the grace survives
a restart of the operator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from slurmbridge.models import SlurmNode

from slurmpool.core import ownership, slurmstate
from slurmpool.core.models import HealthCondition, HealthKind, HealthSpec, UnhealthyNode, seconds
from slurmpool.core.phases import Phase
from slurmpool.core.view import NONE, REASON_PREFIX, SLURM, Direction, NodeView, SlurmView, iso, parse_time

# Findings read from Slurm: kept from the last status while Slurm cannot be seen.
SLURM_KINDS = (HealthKind.SLURM_DOWN, HealthKind.DRAINED_BY_OTHERS, HealthKind.SLURM_UNLISTED)
HEALTH_REASON = f"{REASON_PREFIX} health:"  # the drain slurmpool sets for a listed condition


@dataclass(frozen=True)
class Finding:
    kind: HealthKind
    reason: str  # for people
    since: datetime  # first seen (or the condition's lastTransitionTime)
    grace_until: datetime | None = None  # still within the grace or minAge: not counted yet
    condition: str = ""  # kind Condition: the listed condition's type


# When a finding of this kind was first seen: the last pass' record, `at` (a condition's
# lastTransitionTime), or now, whichever is earliest.
FirstSeen = Callable[[HealthKind, datetime | None], datetime]


@dataclass(frozen=True)
class NodeHealth:
    findings: tuple[Finding, ...] = ()

    @property
    def unhealthy(self) -> bool:
        """Broken: counted as such, its moves stop, never resumed."""
        return any(f.grace_until is None for f in self.findings)

    @property
    def suspect(self) -> bool:
        """Something is wrong or may be: chosen after the healthy idle nodes, never resumed."""
        return bool(self.findings)

    @property
    def reason(self) -> str:
        counted = [f for f in self.findings if f.grace_until is None] or list(self.findings)
        return "; ".join(f.reason for f in counted)

    @property
    def drain_condition(self) -> str | None:
        """The listed condition a Slurm-side node is drained for, if one holds."""
        return next((f.condition for f in self.findings if f.kind == HealthKind.CONDITION and f.grace_until is None), None)


HEALTHY = NodeHealth()


def drained_by_others(node: NodeView, sn: SlurmNode | None) -> bool:
    """Drained in Slurm by someone else (an admin, a health checker, Slurm itself). Every
    ownership question of health and its upkeep is asked here (ownership.py decides), with one
    exception for health: a node slurmpool has no record of (its Node was deleted and registered
    again) may carry slurmpool's own earlier drain, its exact text and no verdict of Slurm's.
    That is no failure, though it is not provably slurmpool's to lift either."""
    if sn is None or not slurmstate.drain_set(sn) or ownership.our_drain(node, sn):
        return False
    return not _our_leftover(node, sn)


def _our_leftover(node: NodeView, sn: SlurmNode) -> bool:
    unrecorded = node.placement == NONE and node.move is None and node.drain_claim is None
    return unrecorded and not slurmstate.verdict(sn) and (sn.reason or "").startswith(f"{REASON_PREFIX} moving to ")


def health_drain_reason(condition: str) -> str:
    return f"{HEALTH_REASON} {condition}"


def slurmd_expected(node: NodeView) -> bool:
    """Should the node's slurmd run and answer now? Only then is Slurm's DOWN a failure."""
    move = node.move
    if move is None:
        return node.placement == SLURM
    if move.direction == Direction.TO_INFERENCE:  # its slurmd is stopped after Draining
        return move.phase == Phase.DRAINING and move.source == SLURM and not move.rollback
    if move.direction == Direction.TO_SLURM:  # registered once it reached Resuming
        return move.phase == Phase.RESUMING
    return False  # between inference pools: parked


def _drained_reason(node: NodeView, sn: SlurmNode) -> str:
    """Slurm's reason, and why the drain is not slurmpool's when the reason looks like its own."""
    reason = sn.reason or "no reason given"
    if reason.startswith(REASON_PREFIX) or slurmstate.verdict(sn):
        return f"drained in Slurm by others: {reason} ({ownership.why_not_ours(node, sn)})"
    return f"drained in Slurm by others: {reason}"


def assess(
    spec: HealthSpec,
    node: NodeView,
    slurm: SlurmView,
    now: datetime,
    seen: Mapping[tuple[str, HealthKind], Finding] | None = None,
) -> NodeHealth:
    """The node's findings. `seen`: (node, kind) -> the finding of the last pass (its since)."""
    findings: list[Finding] = []
    seen = seen or {}

    def first_seen(kind: HealthKind, at: datetime | None = None) -> datetime:
        before = seen.get((node.name, kind))
        return min(t for t in (before.since if before else None, at, now) if t is not None)

    if slurm.available:
        sn = slurm.nodes.get(node.name)
        if sn is not None and drained_by_others(node, sn):
            findings.append(Finding(HealthKind.DRAINED_BY_OTHERS, _drained_reason(node, sn), first_seen(HealthKind.DRAINED_BY_OTHERS)))
        if sn is None and slurmd_expected(node):  # fail closed: never "nothing to drain" (slurmnames.py)
            findings.append(Finding(HealthKind.SLURM_UNLISTED, "Slurm does not list the node under its Slurm NodeName "
                                    "(check spec.slurm.nodeName / nodeNameLabel)", first_seen(HealthKind.SLURM_UNLISTED)))
        if sn is not None and slurmd_expected(node) and slurmstate.down(sn):
            since = first_seen(HealthKind.SLURM_DOWN)
            until = since + timedelta(seconds=seconds(spec.not_responding_grace))
            findings.append(Finding(HealthKind.SLURM_DOWN, f"Slurm reports {slurmstate.text(sn)}" + (f" ({sn.reason})" if sn.reason else ""),
                                    since, until if now < until else None))
    else:
        findings += [f for kind in SLURM_KINDS if (f := seen.get((node.name, kind)))]
    if not node.ready:
        ready = node.condition("Ready")
        status = ready.status if ready else "absent"
        what = "unreachable (Ready=Unknown)" if status == "Unknown" else f"NotReady (Ready={status})"
        findings.append(Finding(HealthKind.NOT_READY, f"Kubernetes: {what}", first_seen(HealthKind.NOT_READY, ready.since if ready else None)))
    for wanted in spec.conditions:
        if finding := _condition(wanted, node, now, first_seen):
            findings.append(finding)
            break  # one listed condition is reason enough (and one health drain reason)
    return NodeHealth(tuple(findings))


def _condition(wanted: HealthCondition, node: NodeView, now: datetime, first_seen: FirstSeen) -> Finding | None:
    have = node.condition(wanted.type)
    if have is None or have.status != wanted.status:
        return None
    since = first_seen(HealthKind.CONDITION, have.since)
    until = since + timedelta(seconds=seconds(wanted.min_age)) if wanted.min_age else None
    return Finding(HealthKind.CONDITION, f"condition {wanted.type}={wanted.status}", since, until if until and now < until else None, wanted.type)


def assess_all(
    spec: HealthSpec, nodes: Iterable[NodeView], slurm: SlurmView, now: datetime, previous: Iterable[UnhealthyNode] = ()
) -> dict[str, NodeHealth]:
    """node -> its health, for the nodes with findings (HEALTHY for the rest)."""
    seen = {(r.node, r.kind): f for r in previous if (f := _finding(r)) is not None}
    out = {}
    for node in nodes:
        health = assess(spec, node, slurm, now, seen)
        if health.findings:
            out[node.name] = health
    return out


def _finding(record: UnhealthyNode) -> Finding | None:
    since = parse_time(record.since)
    if since is None:
        return None
    return Finding(record.kind, record.reason, since, parse_time(record.grace_until))


def from_status(records: Iterable[dict[str, Any]]) -> dict[str, NodeHealth]:
    """The health the operator published (status.unhealthyNodes, as JSON): `kubectl slurmpool plan`
    plans with it, as the operator does. Unreadable entries are skipped."""
    out: dict[str, list[Finding]] = {}
    for body in records:
        try:
            record = UnhealthyNode.model_validate(body)
        except ValueError:
            continue
        if finding := _finding(record):
            out.setdefault(record.node, []).append(finding)
    return {name: NodeHealth(tuple(found)) for name, found in out.items()}


def records(
    health: Mapping[str, NodeHealth], side_of_node: Mapping[str, str], held: Iterable[str] = (), limit: int = 100
) -> list[UnhealthyNode]:
    """The status' `unhealthyNodes`: one entry per node and finding, sorted by node. `held`: nodes
    whose pin or move-now waits for health or slurmpool.io/force."""
    held = set(held)
    out = [
        UnhealthyNode(node=name, side=side_of_node.get(name, "none"), kind=f.kind, reason=f.reason[:512], since=iso(f.since),
                      grace_until=iso(f.grace_until) if f.grace_until else None, held=name in held)
        for name in sorted(health)
        for f in health[name].findings
    ]
    return out[:limit]
