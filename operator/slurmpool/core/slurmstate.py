"""What a Slurm node's state means to the operator: the one place that reads `SlurmNode.state`
and `.flags`. Pure. Health, ownership, demand, the planner and topology ask here, never the
flags themselves.

Slurm prints a base state and flags (`scontrol`: `IDLE+DRAIN+POWERED_DOWN`; slurmrestd: a list;
`sinfo`: `idle~`, `drain%`, `mix#`). The parsers (slurmbridge/parse.py, rest.py) give both in
upper case, the same on every version and path; the meaning below is read from them only.
"""

from __future__ import annotations

from slurmbridge.models import BUSY_STATES, UNREACHABLE_STATES, SlurmNode

# Power saving (power_save.shtml): a node powered down, on its way down, or asked back by Slurm
# (POWERING_UP: a job is allocated on it and waits for its slurmd). None of them runs a slurmd
# that could take work now.
POWER_FLAGS = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "POWER_DOWN"})
# Slurm's own judgement of the node: it registered with less than configured (INVALID_REG).
VERDICT_FLAGS = frozenset({"INVALID_REG", "INVALID"})
FAILED = "FAIL"


def drain_set(sn: SlurmNode) -> bool:
    """A drain is set (DRAIN flag; `drng`/`drain` in sinfo): no new job starts there."""
    return "DRAIN" in sn.flags


def busy(sn: SlurmNode) -> bool:
    """Jobs hold the node (ALLOCATED, MIXED) or are still completing on it."""
    return sn.state in BUSY_STATES or "COMPLETING" in sn.flags


def powered(sn: SlurmNode) -> bool:
    """Not powered down, nor on the way down or up (power saving)."""
    return not POWER_FLAGS & sn.flags


def responding(sn: SlurmNode) -> bool:
    """A slurmd answers for the node: not NOT_RESPONDING, not DOWN, UNKNOWN or FUTURE, and not
    powered down or powering up or down (Slurm keeps a powered-down node IDLE without
    NOT_RESPONDING, but no slurmd runs there: power_save.shtml)."""
    return "NOT_RESPONDING" not in sn.flags and sn.state not in UNREACHABLE_STATES and powered(sn)


def parked(sn: SlurmNode) -> bool:
    """Powered down in Slurm (lendable `idle~`, or held `drain~`), or on its way down; not asked
    back (26.05 keeps POWERED_DOWN beside POWERING_UP when a power-up is asked again)."""
    return bool({"POWERED_DOWN", "POWERING_DOWN"} & sn.flags) and "POWERING_UP" not in sn.flags


def powering_up(sn: SlurmNode | None) -> bool:
    """Slurm is powering the node up (POWERING_UP: for a job it placed there, or asked to): it
    counts as booted only once a slurmd reports a boot after the request (`slurmd -b`), else it
    goes DOWN at ResumeTimeout."""
    return sn is not None and "POWERING_UP" in sn.flags


def power_down_asked(sn: SlurmNode) -> bool:
    """Powered down, on its way down, or a power-down queued (POWER_DOWN): nothing to ask again."""
    return parked(sn) or "POWER_DOWN" in sn.flags


def up_or_coming_up(sn: SlurmNode) -> bool:
    """Powered, or Slurm is powering it up: a slurmd started now serves it (no power-up to ask)."""
    return powered(sn) or powering_up(sn)


def powered_down(sn: SlurmNode) -> bool:
    """Powered down and settled there (`idle~`, `drain~`): not on its way down, not asked back
    (POWERING_UP, or a POWER_UP request queued): a power-up request would be taken now."""
    return "POWERED_DOWN" in sn.flags and not {"POWERING_DOWN", "POWERING_UP", "POWER_UP"} & sn.flags


def asked_back(sn: SlurmNode) -> bool:
    """Slurm chose the powered-down node for a job and waits for its slurmd: POWERING_UP with the
    job allocated (`mix#`, `alloc#`; the job is CONFIGURING). Power saving's own request to resume."""
    return "POWERING_UP" in sn.flags and busy(sn)


def usable(sn: SlurmNode) -> bool:
    """Slurm may give the node to a job, busy or idle: not drained, not DOWN, UNKNOWN, FUTURE or
    NOT_RESPONDING. A node powered down without a drain (`idle~`) is usable: Slurm powers it up
    for the job it chose (power_save.shtml), so it is capacity Slurm already has; NOT_RESPONDING
    does not count there (24.11 and 26.05 add it to a lent node whose slurmd has been gone for
    SlurmdTimeout, and still power it up for a job: tests/fixtures/power_states)."""
    if drain_set(sn) or sn.state in UNREACHABLE_STATES:
        return False
    return "NOT_RESPONDING" not in sn.flags or "POWERED_DOWN" in sn.flags


def idle(sn: SlurmNode) -> bool:
    """Usable and holding no job, `idle~` included (the caller also checks squeue: scontrol can lag it)."""
    return sn.state == "IDLE" and usable(sn) and not busy(sn)


def drained(sn: SlurmNode) -> bool:
    """Drained and no longer busy (the caller also checks that no job lists the node)."""
    return drain_set(sn) and not busy(sn)


def down(sn: SlurmNode) -> bool:
    """Slurm cannot reach or will not use the node: DOWN, UNKNOWN or FUTURE, not responding, or
    FAIL. Power saving is no failure: a node powered down, or on its way down or up, has no slurmd
    to answer (Slurm itself marks it DOWN if it does not come back within ResumeTimeout)."""
    return sn.state in UNREACHABLE_STATES or (powered(sn) and not responding(sn)) or FAILED in sn.flags or sn.state == FAILED


def resumable(sn: SlurmNode) -> bool:
    """A drain on the node may be lifted without sending jobs to a dead node: a slurmd answers,
    or Slurm parked it (power saving powers it up when a job wants it)."""
    return responding(sn) or parked(sn)


def verdict(sn: SlurmNode) -> frozenset[str]:
    """Slurm's own verdict flags on the node (empty: none)."""
    return VERDICT_FLAGS & sn.flags


def text(sn: SlurmNode) -> str:
    """The state as scontrol prints it, flags sorted: `IDLE+DRAIN+NOT_RESPONDING`."""
    return sn.state + "".join("+" + f for f in sorted(sn.flags))
