"""Issue 38 on the real lab: `kubectl slurmpool history` lists the moves of a scale and a move-now
with who asked, and a pool in shadow mode writes nothing and reports the moves it would make:
the same nodes its acting pass then moves. Real kubectl, the plugin found on PATH."""

from __future__ import annotations

import json
import time

import pytest

from harness import (
    NAMESPACE,
    Operator,
    apply,
    ensure_namespace_and_secret,
    install_crd,
    node_placements,
    nodes_json,
    pool_manifest,
    pool_status,
    reset_lab,
    slurm_states,
    slurmd_pods,
    split_reached,
    wait,
)
from test_oncall import plugin

pytestmark = pytest.mark.e2e
POOL = "history"


@pytest.fixture(scope="module")
def op(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    operator = Operator(lab, "operator-history.log").start()
    yield operator
    operator.stop()
    print(operator.log_tail(30))
    reset_lab(lab)


def history(lab) -> dict:
    return json.loads(plugin(lab, "history", POOL, "-n", NAMESPACE, "-o", "json").stdout)


def nodes_as_written(lab, published: bool = True) -> dict[str, tuple]:
    """What the operator would write on each lab Node: annotations, labels, taints, cordon
    (without `published`: all but Slurm's state it publishes, slurmpool.io/slurm)."""
    def annotations(n):
        return {k: v for k, v in (n["metadata"].get("annotations") or {}).items() if published or k != "slurmpool.io/slurm"}
    return {n["metadata"]["name"]: (json.dumps(annotations(n), sort_keys=True),
                                    json.dumps(n["metadata"].get("labels") or {}, sort_keys=True),
                                    json.dumps(n["spec"].get("taints") or [], sort_keys=True), bool(n["spec"].get("unschedulable")))
            for n in nodes_json(lab) if n["metadata"]["name"] in lab.nodes}


def test_history_lists_the_moves_of_a_scale_and_a_move_now_with_who_asked(lab, op):
    apply(lab, pool_manifest(lab, POOL, 6, maxConcurrentMoves=8))
    wait(lambda: split_reached(lab, POOL, 6), 120, what="6/2")
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=5")
    wait(lambda: split_reached(lab, POOL, 5), 120, what="5/3")
    node = sorted(n for n, p in node_placements(lab).items() if p == "slurm" and n in lab.nodes)[0]
    plugin(lab, "move", node, "--to", "inference")
    wait(lambda: any(m["node"] == node and m["cause"] == "move-now" for m in history(lab)["moves"]), 90, what="the move-now in history")
    moves = history(lab)["moves"]
    asked = next(m for m in moves if m["node"] == node and m["cause"] == "move-now")
    assert asked["by"] == "kubectl-slurmpool" and asked["outcome"] == "Completed" and asked["to"] == "inference:llm"
    scaled = [m for m in moves if m["cause"] == "rebalance" and m["from"] == "slurm"]
    assert scaled and all(m["by"].startswith("Manual") for m in scaled), moves
    assert [m["ended"] for m in moves] == sorted((m["ended"] for m in moves), reverse=True)
    text = plugin(lab, "history", POOL, "-n", NAMESPACE).stdout
    assert "ASKED BY" in text and node in text


def test_a_shadow_pool_writes_nothing_and_then_makes_the_moves_it_reported(lab, op):
    wait(lambda: split_reached(lab, POOL, 5) and not pool_status(lab, POOL).get("moving"), 120, what="settled")
    # The plugin plans from what the operator published (slurmpool.io/slurm), which a shadow pass
    # does not write. A node just back in Slurm may show not responding for a moment (slurmctld's
    # ping of the slurmd it replaced): start once every Slurm node has answered for 3 s, as published.
    wait(lambda: _steady(lab) and (time.sleep(3) or _steady(lab)), 60, what="Slurm's nodes responding, published as they are")
    before_nodes, before_pods, before_slurm = nodes_as_written(lab, False), sorted(p["metadata"]["uid"] for p in slurmd_pods(lab)), slurm_states(lab)
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"mode":"Shadow","slurmNodes":3}}')
    wait(lambda: len((pool_status(lab, POOL).get("shadow") or {}).get("wouldStart") or []) == 2, 30, what="two moves reported")
    # Slurm's state as published by the last acting pass: it may land after the patch (the later
    # lane) and carry a NOT_RESPONDING that came and went on a loaded lab. From here, nothing moves.
    in_shadow = nodes_as_written(lab)
    time.sleep(5)  # passes go on, in shadow
    assert nodes_as_written(lab) == in_shadow
    assert nodes_as_written(lab, False) == before_nodes  # no move began
    assert sorted(p["metadata"]["uid"] for p in slurmd_pods(lab)) == before_pods
    assert _ours(slurm_states(lab)) == _ours(before_slurm)  # no drain, resume or power request sent
    # Every node seen not responding from before the patch to the first active pass: what the
    # operator published (the plan reads it), and Slurm sampled around the switch. A node
    # slurmctld shows not responding (its pings flap on a loaded lab) is a suspect the planner
    # takes last, so the victims may change with it.
    flapping = _not_responding(before_slurm) | _not_responding(_published(in_shadow)) | _not_responding(slurm_states(lab))
    would = sorted(line.split(":")[0] for line in pool_status(lab, POOL)["shadow"]["wouldStart"])
    planned = sorted(m["node"] for m in json.loads(plugin(lab, "plan", POOL, "-n", NAMESPACE, "-o", "json").stdout)["moves"])
    assert would == planned or (set(would) | set(planned)) & flapping, (would, planned, sorted(flapping))
    would = sorted(line.split(":")[0] for line in pool_status(lab, POOL)["shadow"]["wouldStart"])
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"mode":"Active"}}')
    flapping |= _not_responding(slurm_states(lab))
    wait(lambda: split_reached(lab, POOL, 3), 120, what="3/5")
    moved = sorted(m["node"] for m in history(lab)["moves"][:2])
    # The same observations give the same moves (a difference only where a node involved flapped).
    assert moved == would or (set(moved) | set(would)) & flapping, (moved, would, sorted(flapping))


def _not_responding(states: dict[str, str]) -> set[str]:
    return {n for n, st in states.items() if "NOT_RESPONDING" in st.split("+")}


def _published(written: dict[str, tuple]) -> dict[str, str]:
    """node -> its Slurm state as the operator published it (slurmpool.io/slurm, as nodes_as_written has it)."""
    return {n: json.loads(json.loads(annotations).get("slurmpool.io/slurm") or "{}").get("state", "") for n, (annotations, *_) in written.items()}


def _steady(lab) -> bool:
    """Every node of the Slurm side responding, and Slurm's state published as it is."""
    published, live = _published(nodes_as_written(lab)), slurm_states(lab)
    in_slurm = {n for n, p in node_placements(lab).items() if p == "slurm" and n in lab.nodes}
    return not _not_responding({n: live.get(n, "") for n in in_slurm}) and \
        all(set(published.get(n, "").split("+")) == set(live.get(n, "").split("+")) for n in lab.nodes)


def _ours(states: dict[str, str]) -> dict[str, str]:
    """Slurm's states without NOT_RESPONDING: slurmctld's pings on a loaded lab come and go."""
    return {n: "+".join(f for f in s.split("+") if f != "NOT_RESPONDING") for n, s in states.items()}
