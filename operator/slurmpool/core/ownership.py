"""Which Slurm drains are the operator's to lift. Pure.

A reason that starts with `slurmpool:` is not proof: since Slurm 23.11 a RESUME keeps the Reason
(without accounting), so our old text can sit under a drain that Slurm, an admin or a health
checker set later; and Slurm adds its own reasons to an existing one (" : gres/gpu count
reported lower than configured", " : Not responding") and restamps it.

So before it drains, the operator writes a *claim* on the Node (slurmpool.io/drain: the exact
reason and the time), in the same patch as the move record, before any Slurm command. A drain is
the operator's when all of these hold:
- the Node carries a claim (a settled Slurm node has none: the move that resumed it dropped it);
- Slurm's reason is the claim's text exactly, or that text plus Slurm's " : Not responding"
  (a parked node's slurmd is stopped on purpose; anything else Slurm appends is its own verdict);
- Slurm's stamp is not older than the claim, within `CLOCK_SKEW` (60 s) of slurmctld's clock being
  behind ours (a drain from before the claim is not this one);
- Slurm has not judged the node itself (INVALID_REG: it registered with less than configured).

One drain carries no reason at all: Slurm 22.05 drops the reason of a drained node it is asked to
power up (measured on the lab), keeping the DRAIN. No person can set a drain without a reason
(scontrol and slurmrestd refuse one), so under a claim an empty reason is the operator's drain.

Upgrade: a version before claims wrote none. A node it left parked in inference, or mid-move,
with exactly the reason it would have written, is read as claimed (no time to compare).

A Node deleted and created again under its name loses its claim with it, while Slurm keeps the
drain the operator set. Such a node is unadopted (placement `none`) with no claim: a drain whose
reason is exactly one the operator writes (`slurmpool: moving to <placement>`, `slurmpool: parked
for <placement>`) is read as its own, so the adoption lifts it rather than blaming others; one Slurm
appended to or judged, or a person's wording, is still not ours.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from slurmbridge.models import SlurmNode

from slurmpool.core import slurmstate
from slurmpool.core.view import NONE, REASON_PREFIX, DrainClaim, NodeView, pool_of

NOT_RESPONDING = " : Not responding"  # what Slurm appends when a drained node stops answering
# How far slurmctld's clock may be behind the operator's: a stamp up to this much older than the
# claim is still this drain (docs/runbook.md: clocks). The exact reason text must match as well, so a drain
# someone set in this window under our text is the only one misread (and only within it).
CLOCK_SKEW = timedelta(seconds=60)
# The reasons moves.drain_reason and moves.hold_reason write, exactly: `slurmpool: moving to slurm`, `... inference:<pool>`.
OURS = re.compile(re.escape(REASON_PREFIX) + r" (moving to|parked for) (slurm|inference:[a-z0-9]([-a-z0-9]*[a-z0-9])?)")


def claim(reason: str, now: datetime) -> DrainClaim:
    return DrainClaim(reason, now)


def legacy_claims(node: NodeView, sn_reason: str | None = None) -> tuple[DrainClaim, ...]:
    """The reasons a version without claims would have set on this node (see the module doc)."""
    texts = []
    if node.placement == NONE and node.drain_claim is None and sn_reason is not None and OURS.fullmatch(sn_reason):
        texts.append(sn_reason)  # a Node created again: its claim went with the old one
    if node.move is not None:
        texts.append(f"{REASON_PREFIX} moving to {node.move.target}")
    if pool_of(node.placement) is not None:
        texts.append(f"{REASON_PREFIX} moving to {node.placement}")
    return tuple(DrainClaim(t, None) for t in texts)


def why_not_ours(node: NodeView, sn: SlurmNode | None) -> str | None:
    """None when Slurm's drain of the node is the operator's; else why not, for people."""
    if sn is None or not slurmstate.drain_set(sn):
        return "not drained"
    if verdict := slurmstate.verdict(sn):
        return f"Slurm flagged the node {'+'.join(sorted(verdict))}"
    claims = (node.drain_claim,) if node.drain_claim else legacy_claims(node, sn.reason)
    if not claims:
        return "slurmpool set no drain on this node"
    if not sn.reason and node.drain_claim:
        return None  # Slurm dropped the claimed reason (power-up); nobody can drain without one
    for c in claims:
        if sn.reason not in (c.reason, c.reason + NOT_RESPONDING):
            continue
        if c.at is not None and sn.reason_time is not None and sn.reason_time < c.at - CLOCK_SKEW:
            return f"the drain dates from {sn.reason_time:%Y-%m-%dT%H:%M:%SZ}, before slurmpool's claim"
        return None
    return f"the reason is not the one slurmpool set ({claims[0].reason!r})"


def our_drain(node: NodeView, sn: SlurmNode | None) -> bool:
    return why_not_ours(node, sn) is None
