"""What a pass reports besides its decision: the status of a pool whose spec cannot be used, the
Event of a change of its overlaps, and where its time went (its nodes' gauges: poolmetrics.py)."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from slurmpool.adapters import metrics
from slurmpool.core.membership import Membership
from slurmpool.core.models import SlurmNodePoolStatus
from slurmpool.core.status import Observed, StatusBasis, status_from
from slurmpool.core.interfaces import PoolRef

log = logging.getLogger("slurmpool")
SLOW_PASS = 2.0  # seconds: a pass slower than this is logged with where its time went


def invalid_status(basis: StatusBasis, previous: SlurmNodePoolStatus | None, message: str, policy: bool,
                   now: datetime) -> SlurmNodePoolStatus:
    """`Degraded` `InvalidSpec` (the spec does not validate) or `PolicyViolation` (`policy`): no
    node is counted, nothing moves; the target's audit is kept across a bad edit."""
    seen = Observed(desired={}, policy=[message]) if policy else Observed(desired={}, problems=[f"invalid spec: {message}"])
    status = status_from(basis, [], seen, previous.conditions if previous else [], now)
    status.target = previous.target if previous else None
    return status


def invalid_basis(name: str, generation: int | None, raw) -> StatusBasis:
    """What a status of a spec that cannot be used is built on: no inference pool, its paused flag."""
    return StatusBasis(name, generation, paused=bool((raw.get("spec") or {}).get("paused")))


def overlap_message(key: tuple[str, str], overlaps: set[str], membership: Membership) -> str:
    others = sorted({f"{ns}/{n}" for name in overlaps for ns, n in membership.owners(name) or () if (ns, n) != key})
    return f"nodes {', '.join(sorted(overlaps)[:10])} are also selected by {', '.join(others)}"


def log_pass(pool: PoolRef, decision, stages: dict[str, float], took: float) -> None:
    for stage, seconds in stages.items():
        metrics.RECONCILE_STAGE_SECONDS.labels(stage=stage).observe(seconds)
    if took > SLOW_PASS or (decision.steps and log.isEnabledFor(logging.DEBUG)):
        log.log(logging.WARNING if took > SLOW_PASS else logging.DEBUG, "%s: pass took %.2f s (%s); %d step(s): %s",
                pool.key, took, ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in stages.items()), len(decision.steps),
                ", ".join(f"{n}:{s.move.phase if s.move else s.settled}" for n, s in sorted(decision.steps.items())[:8]))


async def loop_lag(period: float = 0.25) -> None:
    """Samples how late the event loop runs a timer: the CPU work every pass waits behind."""
    loop = asyncio.get_running_loop()
    while True:
        asked = loop.time()
        await asyncio.sleep(period)
        metrics.EVENT_LOOP_LAG.observe(max(0.0, loop.time() - asked - period))
