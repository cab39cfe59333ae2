"""Which pools select each node, kept current without re-sorting every node on every pass.

Matching every node against every pool's selector costs nodes x pools selector checks (10,000
at 500 nodes and 20 pools); done every half interval it held the event loop for a good part of
every pass under load. So: every node is matched again only when a selector changes, and otherwise
a node only when the watch brings it with other labels. No I/O: the kopf layer feeds it.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurmpool.core.models import LabelSelector
from slurmpool.core.poolpolicy import is_control_plane

PoolKey = tuple[str, str]  # (namespace, name)


class Membership:
    """Fed by the Node watch (`update` with each node's labels, `remove` when it is deleted)
    and the pools (`set_selectors`); read by each pass (`owners`, `members`). A node is matched
    again only when its labels change, every node when a selector changes."""

    def __init__(self, exclude_control_plane: bool = True) -> None:
        # Control-plane nodes belong to no pool unless the pool policy allows them (allowControlPlane).
        self.exclude_control_plane = exclude_control_plane
        # A pool's spec changed or a pool went: read the selectors again before the next sort.
        # Kept here, not in kopf's memo: resource handlers get a shallow copy of the memo, so a
        # flag set there by one handler is never seen by the others.
        self.selectors_stale = True
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

    def update(self, name: str, labels: Mapping[str, str]) -> None:
        """A node as the watch shows it now (added or changed)."""
        if self._labels.get(name) != labels or name not in self._labels:
            self._sort(name, labels)

    def remove(self, name: str) -> None:
        """A node the watch shows deleted: it leaves every pool."""
        self._sort(name, None)

    def set_selectors(self, selectors: Mapping[PoolKey, LabelSelector]) -> None:
        """Every pool's non-empty selector; every node is matched again when one changed."""
        self.selectors_stale = False
        if dict(selectors) == self._selectors:
            return
        self._selectors = dict(selectors)
        for name, labels in list(self._labels.items()):
            self._sort(name, labels)

    def _sort(self, name: str, labels: Mapping[str, str] | None) -> None:
        for pool in self._owners.pop(name, ()):
            self._members.get(pool, set()).discard(name)
        self._labels.pop(name, None)
        if labels is None:
            return  # the node is gone
        kept = dict(labels)  # a copy: the caller's mapping may change after
        if self.exclude_control_plane and is_control_plane(kept):
            owners: tuple[PoolKey, ...] = ()
        else:
            owners = tuple(pool for pool, selector in self._selectors.items() if selector.matches(kept))
        self._labels[name], self._owners[name] = kept, owners
        for pool in owners:
            self._members.setdefault(pool, set()).add(name)
