"""Many pools at once (issue 7, load; e2e/load.py). Every pool settles, then every pool's split
changes at once: each pool reaches its new split with exactly the moves it needs, Slurm agrees,
and no reconcile or action failed. No timed assertions: the figures are printed (and
`make bench` records them).

- 4 pools over the lab's 8 real nodes: always.
- 20 pools over 500 simulated nodes: on a lab with LAB_SIM_NODES=500 (`make load`).
"""

from __future__ import annotations

import json

import pytest

import load

pytestmark = pytest.mark.e2e


def check(lab, pools, first: int, then) -> dict:
    try:
        result = load.run(lab, pools, first, then)
        targets = {p.key: then(i) for i, p in enumerate(pools)}
        print(json.dumps(result.figures, indent=1))
        # Slurm may flag a just-registered node NOT_RESPONDING for one ping round (a ping sent
        # before slurmd came up): wait for it to agree, within a few ping rounds.
        lab.wait_for(lambda: not load.misplaced(lab, pools, targets), timeout=60, interval=1,
                     message=f"every node where its pool wants it: {load.misplaced(lab, pools, targets)}")
        expected = {"to_slurm": sum(max(0, t - first) for t in targets.values()),
                    "to_inference": sum(max(0, first - t) for t in targets.values())}
        adopted = {d: before for d, (before, _) in result.moves_started.items()}
        assert adopted == {"to_slurm": first * len(pools), "to_inference": sum(len(p.nodes) - first for p in pools)}
        assert {d: after - before for d, (before, after) in result.moves_started.items()} == expected
        assert result.figures["reconcile_errors"] == 0 and result.figures["action_errors"] == 0, result.figures
        # Every Event of 500 adoptions and 100 moves posted; else the operator's log says why.
        assert result.figures["events_dropped"] == 0, (result.figures, dropped_event_lines(lab))
        return result.figures
    finally:
        load.cleanup(lab, pools)


def dropped_event_lines(lab, most: int = 20) -> list[str]:
    log = lab.dir / "log" / "operator-load.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [line for line in lines if "could not post event" in line or "event queue full" in line][:most]


def test_four_pools_on_the_real_nodes_change_at_once(lab):
    pools = load.gpu_pools(lab, per_pool=2, namespaces=2)
    check(lab, pools, 1, lambda i: 0 if i % 2 == 0 else 2)


def test_twenty_pools_on_500_simulated_nodes_keep_up(lab):
    if len(lab.sim_nodes) < 500:
        pytest.skip("needs a lab with LAB_SIM_NODES=500: run `make load`")
    pools = load.sim_pools(lab, count=20, namespaces=4)
    assert sum(len(p.nodes) for p in pools) == 500
    check(lab, pools, 5, lambda i: 0 if i % 2 == 0 else 10)
