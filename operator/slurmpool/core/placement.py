"""Where a node serves, and which way a move goes: the one parser and printer of placements.

A placement is written on the Node (`slurmpool.io/placement`, a move record's source and
target, a pin, `status.desired`'s keys) as text: "slurm", "inference:<pool>", or "none" for a
node not adopted yet. `Placement.parse` reads that text (a ValueError with a message for
people: anyone with Node patch rights can write it) and `str()` gives it back byte for byte.
A leaf module: nothing of the core is imported here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache


class Side(StrEnum):
    SLURM = "slurm"
    INFERENCE = "inference"
    NONE = "none"  # not adopted yet


SLURM = str(Side.SLURM)
NONE = str(Side.NONE)
_PREFIX = f"{Side.INFERENCE}:"
_POOL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_CHARS = 50


@dataclass(frozen=True, slots=True)
class Placement:
    side: Side
    pool: str | None = None  # the inference pool's name (inference only)

    def __post_init__(self) -> None:
        if (self.side == Side.INFERENCE) != (self.pool is not None):
            raise ValueError(f"an inference placement names its pool, no other does ({self.side}, {self.pool!r})")

    @classmethod
    def inference(cls, pool: str) -> Placement:
        return cls(Side.INFERENCE, pool)

    @classmethod
    def parse(cls, text: str, *, none_ok: bool = True) -> Placement:
        """`slurm`, `inference:<pool>` (a DNS label) or, with `none_ok`, `none`. Raises ValueError."""
        return _parse(text, none_ok)

    @property
    def is_slurm(self) -> bool:
        return self.side == Side.SLURM

    @property
    def is_inference(self) -> bool:
        return self.side == Side.INFERENCE

    @property
    def is_none(self) -> bool:
        return self.side == Side.NONE

    def __str__(self) -> str:
        return f"{_PREFIX}{self.pool}" if self.pool is not None else str(self.side)


@lru_cache(maxsize=4096)  # the planner asks for every node of every pass; values are few
def _parse(text: str, none_ok: bool) -> Placement:
    if text == SLURM:
        return SLURM_PLACEMENT
    if text == NONE and none_ok:
        return NONE_PLACEMENT
    if isinstance(text, str) and len(text) <= MAX_CHARS and text.startswith(_PREFIX) and _POOL.fullmatch(text[len(_PREFIX):]):
        return Placement.inference(text[len(_PREFIX):])
    raise ValueError(problem_text(str(text)))


SLURM_PLACEMENT = Placement(Side.SLURM)
NONE_PLACEMENT = Placement(Side.NONE)


def problem_text(value: str, allow: tuple[str, ...] = ()) -> str:
    shown = value if len(value) <= 60 else value[:57] + "..."
    return f"{shown!r} is no placement: expected 'slurm' or 'inference:<pool>'" + (f" (or {', '.join(map(repr, allow))})" if allow else "")


def placement_problem(value: str, allow: tuple[str, ...] = ()) -> str | None:
    """Why `value` is no placement (`slurm` or `inference:<pool>`, or one of `allow`), or None."""
    if value in allow:
        return None
    try:
        Placement.parse(value, none_ok=False)
    except ValueError:
        return problem_text(value, allow)
    return None


def names_a_side(text: str) -> bool:
    """`slurm`, `inference` or `inference:<anything>`: what `kubectl slurmpool move --to` sends on,
    leaving the pool name to the admission policy, whose refusal names the pools allowed."""
    return text in (SLURM, str(Side.INFERENCE)) or text.startswith(_PREFIX)


def _read(text: str) -> Placement | None:
    try:
        return Placement.parse(text)
    except ValueError:
        return None


def inference(pool: str) -> str:
    """The placement text of an inference pool."""
    return str(Placement.inference(pool))


def pool_of(placement: str) -> str | None:
    """The inference pool a placement text names, or None (Slurm, none, or no placement)."""
    p = _read(placement)
    return p.pool if p is not None else None


def side_of(placement: str) -> str:
    """"slurm", "inference" or "none" for a placement text (the text itself when it is none)."""
    p = _read(placement)
    return str(p.side) if p is not None else placement


class Direction(StrEnum):
    """Which way a move goes. The values are the metrics' `direction` label (slurmpool_moves_*):
    the alerts and the dashboard select on them."""

    TO_SLURM = "to_slurm"
    TO_INFERENCE = "to_inference"
    BETWEEN_POOLS = "between_pools"

    @classmethod
    def of(cls, source: str, target: str) -> Direction:
        if pool_of(source) is not None and pool_of(target) is not None:
            return cls.BETWEEN_POOLS
        return cls.TO_SLURM if target == SLURM else cls.TO_INFERENCE
