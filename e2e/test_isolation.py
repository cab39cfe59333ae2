"""One bad node, one bad pool: contained (issue 12).

- A node whose slurmpool.io annotation someone broke (not JSON, an unknown phase, an unknown
  placement or pool, a bad time) is reported on the pool (Degraded InvalidNodeRecord, a
  Warning naming node and annotation) and left alone; the other nodes reach the new split.
- A pool whose Slurm access hangs (a TCP listener that accepts and never answers, as a hung
  sshd would) does not slow another pool's moves.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from harness import (
    NAMESPACE,
    Operator,
    apply,
    condition,
    ensure_namespace_and_secret,
    events,
    get_json,
    install_crd,
    now_rfc3339,
    pool_manifest,
    pool_status,
    reset_lab,
    wait,
)

pytestmark = pytest.mark.e2e
BAD = "gpu01"
MOVE = {"id": "x1", "source": "slurm", "target": "inference:llm", "since": "2026-11-30T00:00:00Z", "started": "2026-11-30T00:00:00Z"}
CORRUPT = [  # (kind, annotation, bad value, value that fixes it: None removes the annotation)
    ("not JSON", "slurmpool.io/move", "{phase: Draining", None),
    ("unknown phase", "slurmpool.io/move", json.dumps({**MOVE, "phase": "Drainin"}), None),
    ("unknown placement", "slurmpool.io/placement", "gpu-side", "slurm"),
    ("unknown pool", "slurmpool.io/placement", "inference:nope", "slurm"),
    ("bad time", "slurmpool.io/hold-until", "tomorrow", None),
]


def annotations(lab) -> dict[str, dict]:
    return {n["metadata"]["name"]: n["metadata"].get("annotations") or {} for n in get_json(lab, "nodes", "-l", "slurmpool.io/lab=true")["items"]}


def others_at(lab, slurm: int, inference: int):
    def check():
        rows = [a for name, a in annotations(lab).items() if name != BAD]
        here = [a.get("slurmpool.io/placement") for a in rows]
        settled = not any("slurmpool.io/move" in a for a in rows)
        return settled and here.count("slurm") == slurm and here.count("inference:llm") == inference

    return check


def test_a_corrupt_record_on_one_node_leaves_the_rest_of_the_pool_moving(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    op = Operator(lab, "operator-records.log").start()
    try:
        apply(lab, pool_manifest(lab, "records", 8))
        wait(lambda: pool_status(lab, "records").get("slurm", {}).get("ready") == 8, 120, what="8 Slurm nodes")
        slurm = 8
        for kind, annotation, value, fix in CORRUPT:
            since = now_rfc3339()
            lab.kubectl("annotate", "node", BAD, "--overwrite", f"{annotation}={value}")
            slurm -= 1  # 8 -> 7 -> ... -> 3: each time one more node must leave Slurm
            lab.kubectl("scale", "snp", "records", "-n", NAMESPACE, f"--replicas={slurm}")
            # the other seven reach the split; the bad node counts on Slurm (its side label) and stays
            wait(others_at(lab, slurm - 1, 8 - slurm), 60, what=f"{kind}: the others at {slurm - 1} Slurm + {8 - slurm} inference")
            assert annotations(lab)[BAD].get(annotation) == value and "slurmpool.io/move" not in annotations(lab)[BAD] or annotation == "slurmpool.io/move"
            degraded = condition(lab, "records", "Degraded")
            assert degraded.get("status") == "True" and degraded.get("reason") == "InvalidNodeRecord", degraded
            assert BAD in degraded["message"] and annotation in degraded["message"], degraded
            invalid = pool_status(lab, "records").get("invalidRecords")
            assert [(r["node"], r["annotation"]) for r in invalid] == [(BAD, annotation)], invalid
            warnings = wait(lambda since=since: events(lab, "InvalidNodeRecord", since), 10, what=f"{kind}: the InvalidNodeRecord Event")
            assert any(BAD in m and annotation in m for m in warnings), warnings
            # fixed by hand: the pool is whole again and says so
            lab.kubectl("annotate", "node", BAD, "--overwrite", f"{annotation}={fix}" if fix else f"{annotation}-")
            wait(lambda: condition(lab, "records", "Degraded").get("status") == "False", 30, what=f"{kind}: Degraded to clear")
            assert wait(lambda since=since: events(lab, "NodeRecordFixed", since), 10, what="NodeRecordFixed")
            assert annotations(lab)[BAD].get("slurmpool.io/placement") == "slurm"
    finally:
        op.stop()
        reset_lab(lab)


class HungSshd:
    """Accepts TCP connections on 127.0.0.1 and never says a word (a hung sshd)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self):
        self.sock.close()
        for conn in self.accepted:
            conn.close()


def test_a_pool_whose_slurm_hangs_does_not_slow_another_pool(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    hung = HungSshd()
    op = Operator(lab, "operator-isolation.log").start()
    block = "topology.slurmpool.io/block"
    healthy = pool_manifest(lab, "healthy", 4, nodeSelector={"matchLabels": {block: "block-2"}})

    def timed_scale(to: int) -> float:
        t0 = time.monotonic()
        lab.kubectl("scale", "snp", "healthy", "-n", NAMESPACE, f"--replicas={to}")
        wait(lambda: (s := pool_status(lab, "healthy")).get("slurm", {}).get("ready") == to and s.get("moving") == 0
             and s.get("inference", {}).get("ready") == 4 - to, 120, interval=0.05, what=f"healthy at {to} Slurm")
        return time.monotonic() - t0

    try:
        apply(lab, healthy)
        wait(lambda: pool_status(lab, "healthy").get("slurm", {}).get("ready") == 4, 120, what="healthy: 4 Slurm nodes")
        alone = timed_scale(2)
        timed_scale(4)
        stuck = pool_manifest(lab, "stuck", 4, nodeSelector={"matchLabels": {block: "block-1"}})
        stuck["spec"]["slurm"]["access"]["ssh"]["port"] = hung.port
        apply(lab, stuck)
        wait(lambda: hung.accepted, 30, what="the stuck pool to connect to the hung sshd")
        beside = timed_scale(2)
        print(f"ISOLATION | healthy pool 4 -> 2 Slurm: alone {alone:.2f} s, beside a pool whose sshd hangs {beside:.2f} s")
        # A pass that waited for the hung pool would wait out the SSH connect timeout (10 s) at least.
        assert beside < alone + 5, (alone, beside)
        # and the stuck pool says why it does nothing, without moving a node
        wait(lambda: condition(lab, "stuck", "Degraded").get("reason") == "SlurmUnavailable", 60, what="stuck: SlurmUnavailable")
        assert pool_status(lab, "stuck").get("moving", 0) == 0
    finally:
        op.stop()
        hung.close()
        reset_lab(lab)
