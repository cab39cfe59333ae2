"""The phases of a move and what a phase function may answer. A leaf module: the state
machine (moves.py) maps each phase to its function; nothing here imports it.

    to inference:  Draining -> StoppingSlurmd -> [PoweringDown] -> Relabeling -> settled inference:<pool>
    to Slurm:      Cordoning -> Evicting -> [PoweringUp] -> StartingSlurmd -> Registering -> Resuming -> settled slurm
    between pools: Relabeling -> EvictingMisfits -> settled inference:<other pool>

[PoweringDown] is entered only where the node is parked by power saving (`spec.slurm.parking:
PowerSave`, Slurm's power saving on); [PoweringUp] only for a node Slurm shows powered down (or
cannot be seen). Elsewhere a move goes past them, as before they existed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Phase(str, Enum):
    """str-valued, so a move record's JSON holds the plain name ("Draining")."""

    DRAINING = "Draining"
    STOPPING_SLURMD = "StoppingSlurmd"
    POWERING_DOWN = "PoweringDown"
    RELABELING = "Relabeling"
    EVICTING_MISFITS = "EvictingMisfits"
    CORDONING = "Cordoning"
    EVICTING = "Evicting"
    POWERING_UP = "PoweringUp"
    STARTING_SLURMD = "StartingSlurmd"
    REGISTERING = "Registering"
    RESUMING = "Resuming"

    def __str__(self) -> str:
        return self.value


TO_INFERENCE = (Phase.DRAINING, Phase.STOPPING_SLURMD, Phase.POWERING_DOWN, Phase.RELABELING)
TO_SLURM = (Phase.CORDONING, Phase.EVICTING, Phase.POWERING_UP, Phase.STARTING_SLURMD, Phase.REGISTERING, Phase.RESUMING)
BETWEEN_POOLS = (Phase.RELABELING, Phase.EVICTING_MISFITS)
# Phases before anything irreversible (slurmd stopped, slurmd started): a move here can be
# turned back at once when the split no longer wants it.
ABORTABLE = frozenset({Phase.DRAINING, Phase.CORDONING, Phase.EVICTING})
# Where a node with no move in flight is, as the phase column says it (the `phase` label of
# slurmpool_nodes and slurmpool_gpus, `kubectl slurmpool status`): no Phase, no move is ever in it.
SETTLED = "Settled"


def phase_label(phase: Phase | None) -> str:
    """A node's phase as the metrics and status tables show it: its move's phase, or SETTLED."""
    return SETTLED if phase is None else phase.value


# ---------------------------------------------------------------- what a phase function answers


@dataclass(frozen=True)
class Wait:
    """The phase's done test is false: its ensure-actions are in the step; look again later."""


@dataclass(frozen=True)
class Advance:
    """Done: go on to `to`, whose ensure runs at once on the same observations."""

    to: Phase


@dataclass(frozen=True)
class Finish:
    """The move is complete: the node is settled at its target."""


@dataclass(frozen=True)
class Rollback:
    """The move cannot complete: go back the way it came."""

    why: str


WAIT = Wait()
FINISH = Finish()
Outcome = Wait | Advance | Finish | Rollback
