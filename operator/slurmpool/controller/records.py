"""Whether the Node watch has brought back the node records a pool last wrote (a pass waits until
it has: a pass on the old record would redo its step, or start a move on a node already moving)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger("slurmpool")
INDEX_LAG_RETRY = 0.05  # seconds: look again this soon when the watch has not brought our writes back
EXPECT_FOR = 10.0  # seconds: after this, a write the index has not shown makes the Node watch list again


@dataclass
class Written:
    """The node records this process wrote and the watch has not shown yet. Keyed by node, not by
    pool: a node that changes pool (a selector edit, a pool deleted and made again) is still waited
    for by whichever pool has it now."""

    expected: dict[str, tuple[dict, float]] = field(default_factory=dict)  # node -> (record we wrote, when)
    relisting: set[str] = field(default_factory=set)  # nodes whose lag asked the Node watch to list again (once per write)

    def wrote(self, records: dict[str, dict], now: float) -> None:
        for name, record in records.items():
            self.expected[name] = (record, now)
            self.relisting.discard(name)


def lags(state: Written, nodes, watch, now: float, listed: float) -> bool:
    """True while a node's record we wrote (`state.expected`: node -> (record, when)) is not yet in
    the index. A lagging watch waits, never acts: after EXPECT_FOR the watch lists again (once per
    write: `state.relisting`), and the index wins only once a full list begun after the write is in
    (someone else changed the record since).

    `listed`: the watch's `list_began` when `nodes` were read from it, not as it is now. A pass
    reads its nodes, then awaits its Slurm poll; a relist landing meanwhile shows our writes, but
    not in the views the pass holds: taken as theirs, it let the pass start every move again on the
    old views (CI, `make load`: a pool of 25 nodes adopted twice while the watch lagged)."""
    lagging = False
    for node in nodes:
        expected = state.expected.get(node.name)
        if expected is None:
            continue
        record, at = expected
        if all(node.annotations.get(k) == v for k, v in record.items()) or listed > at:
            del state.expected[node.name]  # seen, or a consistent list after our write says otherwise
            continue
        lagging = True
        if now - at > EXPECT_FOR and node.name not in state.relisting:
            state.relisting.add(node.name)
            log.warning("the Node watch has not shown %s's record written %.0f s ago: listing Nodes again", node.name, now - at)
            watch.request_relist()
    return lagging
