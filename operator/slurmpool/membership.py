"""Which pools select each node, kept current without re-sorting every node on every pass.

Matching every node against every pool's selector costs nodes x pools selector checks (10,000
at 500 nodes and 20 pools); done every half interval it held the event loop for a good part of
every pass under load. So: every node is matched again only when a selector changes, and otherwise
only the nodes whose labels changed. No I/O: the kopf layer feeds it from its watch indexes.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

from .models import LabelSelector

PoolKey = Hashable


class Membership:
    """`refresh` with every pool's selector and every node's labels; then `owners` and `members`.
    A node is matched again only when its labels are not the ones it was last matched with, and
    every node when a selector changed: exact whatever order the watches deliver changes in."""

    def __init__(self) -> None:
        self._selectors: dict[PoolKey, LabelSelector] = {}
        self._labels: dict[str, Mapping[str, str]] = {}  # node -> the labels it was matched with
        self._owners: dict[str, tuple[PoolKey, ...]] = {}
        self._members: dict[PoolKey, set[str]] = {}

    def owners(self, name: str) -> tuple[PoolKey, ...] | None:
        """The pools selecting the node (None: not sorted yet, e.g. a node just added)."""
        return self._owners.get(name)

    def members(self, pool: PoolKey) -> list[str]:
        """The nodes the pool selects (overlaps included), by name."""
        return sorted(self._members.get(pool, ()))

    def refresh(self, selectors: Mapping[PoolKey, LabelSelector] | None,
                nodes: Iterable[tuple[str, Mapping[str, str]]]) -> None:
        """`selectors`: every pool's non-empty selector (None: unchanged since the last call);
        `nodes`: (name, labels) of every node there is."""
        if selectors is not None and dict(selectors) != self._selectors:
            self._selectors = dict(selectors)
            self._labels.clear()  # every node is matched again
        seen = set()
        for name, labels in nodes:
            seen.add(name)
            last = self._labels.get(name)
            if last is not labels and last != labels:
                self._sort(name, labels)
        for name in [n for n in self._labels if n not in seen]:
            self._sort(name, None)

    def _sort(self, name: str, labels: Mapping[str, str] | None) -> None:
        for pool in self._owners.pop(name, ()):
            self._members.get(pool, set()).discard(name)
        self._labels.pop(name, None)
        if labels is None:
            return  # the node is gone
        owners = tuple(pool for pool, selector in self._selectors.items() if selector.matches(labels))
        self._labels[name], self._owners[name] = labels, owners
        for pool in owners:
            self._members.setdefault(pool, set()).add(name)
