"""Real nodes have neighbours (issue 25, part A), on the lab:
- another controller adds and removes its own taints, labels and a cordon on every node while
  the operator moves them, round after round: none of its entries is lost or brought back;
- a settled Slurm node's slurmd pod marked Failed (as the kubelet marks an evicted pod) is
  replaced, with an Event naming the reason, and the node serves Slurm again;
- a slurmd pod the API server refuses (a PriorityClass that does not exist) ends in a rollback
  that names the refusal, not in a stranded node.
Each prints a `FAULT | ...` row (docs/faults.md)."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
import urllib3
from harness import (
    NAMESPACE,
    Operator,
    apply,
    condition,
    core,
    ensure_namespace_and_secret,
    events,
    fault_line,
    install_crd,
    node_json,
    nodes_json,
    now_rfc3339,
    pod_json,
    pool_manifest,
    reset_lab,
    settle_sides,
    slurm_states,
    split_reached,
    wait,
)
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.e2e
POOL = "neighbours"
THEIRS = "neighbour.example"  # the other controller's taint and label keys


@pytest.fixture(scope="module")
def op(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    operator = Operator(lab, "operator-neighbours.log").start()
    apply(lab, pool_manifest(lab, POOL, 8))
    wait(lambda: split_reached(lab, POOL, 8), 180, what="8 Slurm nodes")
    yield operator
    operator.stop()
    _take_theirs_off(lab)
    reset_lab(lab)


def scale(lab, n: int) -> None:
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, f"--replicas={n}")


def patch_pool(lab, spec: dict) -> None:
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", json.dumps({"spec": spec}))


def _merge_patch(lab, name: str, patch: dict) -> None:
    core(lab).patch_node(name, patch, _content_type="application/merge-patch+json", _preload_content=False)


def _take_theirs_off(lab) -> None:
    for _ in range(10):
        try:
            for node in nodes_json(lab, "slurmpool.io/lab=true"):
                meta, spec = node["metadata"], node.get("spec") or {}
                labels = {k: None for k in meta.get("labels") or {} if k.startswith(THEIRS)}
                taints = [t for t in spec.get("taints") or [] if not t["key"].startswith(THEIRS)]
                if labels or len(taints) != len(spec.get("taints") or []):
                    _merge_patch(lab, meta["name"], {"metadata": {"labels": labels, "resourceVersion": meta["resourceVersion"]},
                                                     "spec": {"taints": taints or None}})
            return
        except ApiException as err:
            if err.status != 409:
                raise


class Neighbour:
    """Another controller, as a careful one writes: read the Node, change only its own entries, write
    with the read's resourceVersion (a 409: read again). It cordons only a schedulable node (as
    `kubectl cordon` does nothing on a cordoned one) and uncordons only a node it cordoned that is
    settled in inference (on the Slurm side the cordon is the operator's, by design)."""

    def __init__(self, lab, seed: int):
        self.lab, self.rng = lab, random.Random(seed)
        self.taints: dict[str, set[str]] = {n: set() for n in lab.nodes}  # node -> our taint keys
        self.removed: dict[str, set[str]] = {n: set() for n in lab.nodes}
        self.labels: dict[str, dict[str, str]] = {n: {} for n in lab.nodes}
        self.removed_labels: dict[str, set[str]] = {n: set() for n in lab.nodes}
        self.cordoned: set[str] = set()
        self.keep_cordoned: set[str] = set()  # cordons it never lifts (they must come back from Slurm)
        self.kept_seen: set[str] = set()  # nodes seen with the operator's slurmpool.io/cordon-kept mark
        self.writes = self.conflicts = 0
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.serial = 0

    def start(self) -> Neighbour:
        self.stop.clear()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)

    def _run(self) -> None:
        while not self.stop.is_set():
            for name in self.lab.nodes:
                try:
                    self._one(name)
                except ApiException as err:
                    if err.status and (err.status >= 500 or err.status == 429):
                        time.sleep(0.5)  # a busy apiserver: next time
                    else:
                        self.errors.append(f"{name}: {err}")
                except (urllib3.exceptions.HTTPError, OSError):
                    time.sleep(0.5)  # no answer on a loaded machine: next time
                except Exception as err:  # noqa: BLE001 - reported by the test
                    self.errors.append(f"{name}: {err!r}")
            time.sleep(0.05)

    def _one(self, name: str) -> None:
        for _ in range(10):
            node = node_json(self.lab, name)
            patch, commit, forget = self._change(name, node)
            if patch is None:
                return
            version = node["metadata"]["resourceVersion"]
            patch.setdefault("metadata", {})["resourceVersion"] = version
            try:
                _merge_patch(self.lab, name, patch)
            except ApiException as err:
                if err.status == 409:
                    self.conflicts += 1
                    continue
                if err.status and (err.status >= 500 or err.status == 429):  # a busy apiserver: try again
                    time.sleep(0.5)
                    continue
                raise
            except Exception:  # noqa: BLE001 - no answer (a timeout on a loaded machine): it may have landed
                forget()  # the entry is no longer tracked either way: never a false loss in lost()
                time.sleep(0.5)
                return
            commit()
            self.writes += 1
            return

    def cordon(self, name: str) -> None:
        """Cordon a node settled in inference now (or keep its cordon, if it is ours already), and keep it cordoned.
        Call it with the writer thread halted."""
        for _ in range(10):
            node = node_json(self.lab, name)
            if node["spec"].get("unschedulable"):
                assert name in self.cordoned, f"{name} is cordoned by someone else than the neighbour"
                self.keep_cordoned.add(name)
                return
            try:
                _merge_patch(self.lab, name, {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                                              "spec": {"unschedulable": True}})
            except ApiException as err:
                if err.status == 409:
                    continue
                raise
            self.cordoned.add(name)
            self.keep_cordoned.add(name)
            return
        raise AssertionError(f"could not cordon {name}")

    def _change(self, name: str, node: dict):
        meta, spec = node["metadata"], node.get("spec") or {}
        taints = spec.get("taints") or []
        ann = meta.get("annotations") or {}
        if ann.get("slurmpool.io/cordon-kept") == "true":
            self.kept_seen.add(name)
        what = self.rng.choice(("add-taint", "add-taint", "remove-taint", "add-label", "remove-label", "cordon", "uncordon"))
        self.serial += 1
        if what == "add-taint":
            key = f"{THEIRS}/t{self.serial}"
            effect = self.rng.choice(("NoSchedule", "PreferNoSchedule"))
            new = taints + [{"key": key, "value": "x", "effect": effect}]
            return {"spec": {"taints": new}}, lambda: self.taints[name].add(key), lambda: None
        if what == "remove-taint":
            mine = [t["key"] for t in taints if t["key"].startswith(THEIRS)]
            if not mine:
                return None, None, None
            key = self.rng.choice(mine)
            new = [t for t in taints if t["key"] != key]

            def gone():
                self.taints[name].discard(key)
                self.removed[name].add(key)
            return {"spec": {"taints": new or None}}, gone, lambda: self.taints[name].discard(key)
        if what == "add-label":
            key = f"{THEIRS}/l{self.serial}"
            return {"metadata": {"labels": {key: "x"}}}, lambda: self.labels[name].update({key: "x"}), lambda: None
        if what == "remove-label":
            mine = [k for k in meta.get("labels") or {} if k.startswith(THEIRS)]
            if not mine:
                return None, None, None
            key = self.rng.choice(mine)

            def unlabelled():
                self.labels[name].pop(key, None)
                self.removed_labels[name].add(key)
            return {"metadata": {"labels": {key: None}}}, unlabelled, lambda: self.labels[name].pop(key, None)
        if what == "cordon":
            if spec.get("unschedulable"):
                return None, None, None
            return {"spec": {"unschedulable": True}}, lambda: self.cordoned.add(name), lambda: None
        settled_inference = ann.get("slurmpool.io/placement", "").startswith("inference:") and "slurmpool.io/move" not in ann
        if name not in self.cordoned or name in self.keep_cordoned or not settled_inference:
            return None, None, None
        return {"spec": {"unschedulable": None}}, lambda: self.cordoned.discard(name), lambda: self.cordoned.discard(name)

    def lost(self) -> list[str]:
        """Every entry of ours that is not as we left it: a taint or label of ours gone or brought
        back, a cordon of ours lifted."""
        bad = []
        for node in nodes_json(self.lab, "slurmpool.io/lab=true"):
            name = node["metadata"]["name"]
            keys = {t["key"] for t in node["spec"].get("taints") or []}
            labels = node["metadata"].get("labels") or {}
            bad += [f"{name}: taint {k} lost" for k in self.taints[name] - keys]
            bad += [f"{name}: taint {k} back" for k in self.removed[name] & keys]
            bad += [f"{name}: label {k} lost" for k in self.labels[name] if labels.get(k) != "x"]
            bad += [f"{name}: label {k} back" for k in self.removed_labels[name] if k in labels]
            if name in self.cordoned and not node["spec"].get("unschedulable"):
                bad.append(f"{name}: cordon lost")
        return bad

    def entries(self) -> int:
        return sum(len(v) for v in self.taints.values()) + sum(len(v) for v in self.labels.values()) + len(self.cordoned)


def test_another_writers_taints_labels_and_cordon_survive_rounds_of_moves(lab, op):
    scale(lab, 8)
    wait(lambda: split_reached(lab, POOL, 8), 120, what="8/0")
    neighbour = Neighbour(lab, seed=25).start()
    started = time.monotonic()
    rounds = (0, 8, 3, 6, 0, 5, 0)
    try:
        for i, slurm in enumerate(rounds):
            writes = neighbour.writes
            wait(lambda writes=writes: neighbour.writes >= writes + 20 or neighbour.errors, 120, what="the neighbour's writes between rounds")
            if i == 1:  # all in inference: one cordon of theirs that must come back from Slurm with the node
                neighbour.halt()
                neighbour.cordon("gpu05")
                neighbour.start()
            scale(lab, slurm)
            # a node the neighbour cordoned in inference is the planner's first victim; it is still a
            # node that serves: the split is reached with it
            wait(lambda slurm=slurm: split_reached(lab, POOL, slurm), 300, what=f"split {slurm}/{8 - slurm} under a neighbour's writes")
    finally:
        neighbour.halt()
    took = time.monotonic() - started
    assert not neighbour.errors, neighbour.errors[:5]
    assert neighbour.writes > 50, f"the neighbour wrote only {neighbour.writes} times"
    lost = neighbour.lost()
    fault_line("other writers' taints, labels and cordons during moves",
               f"{len(rounds)} rounds of moves; neighbour wrote {neighbour.writes} times ({neighbour.conflicts} conflicts), "
               f"{neighbour.entries()} entries standing; lost {len(lost)}", took, "none running", len(settle_sides(lab, POOL)))
    assert lost == [], lost[:10]
    assert "gpu05" in neighbour.kept_seen or _cordon_kept_seen_in_events(lab), "gpu05's cordon never went to Slurm"
    assert node_json(lab, "gpu05")["spec"].get("unschedulable"), "gpu05 came back from Slurm uncordoned"
    assert settle_sides(lab, POOL, 60) == []
    _take_theirs_off(lab)
    for name in neighbour.cordoned:
        _merge_patch(lab, name, {"spec": {"unschedulable": None}})


def _cordon_kept_seen_in_events(lab) -> bool:
    """gpu05 went to Slurm and back (its Events), though the neighbour never read it mid-trip."""
    return any(m.startswith("gpu05") and "-> slurm" in m for m in events(lab, "MoveStarted"))


def slurmd_start(lab, node: str) -> str:
    out = lab.slurm("scontrol", "-o", "show", "node", node).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("SlurmdStartTime=")), "")


def test_a_failed_slurmd_pod_is_replaced_and_the_node_serves_slurm_again(lab, op):
    scale(lab, 8)
    wait(lambda: split_reached(lab, POOL, 8), 180, what="8/0")
    node = "gpu03"
    name = f"slurmd-{node}"
    old = pod_json(lab, name)
    first_start = slurmd_start(lab, node)
    # SlurmdStartTime has whole seconds: the new slurmd must start in a later second than the one
    # running now (started no later than this read) to be told from it
    time.sleep(1.1)
    since = now_rfc3339()
    status = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}
    core(lab).patch_namespaced_pod_status(name, NAMESPACE, {"metadata": {"uid": old["metadata"]["uid"]}, "status": status},
                                          _content_type="application/merge-patch+json", _preload_content=False)
    marked = time.monotonic()

    def replaced_and_serving() -> bool:
        try:
            pod = pod_json(lab, name)
        except ApiException:
            return False
        state = slurm_states(lab).get(node, "")
        # served again: a new slurmd (a later SlurmdStartTime: the new pod's) registered, responding, not drained
        return (pod["metadata"]["uid"] != old["metadata"]["uid"] and (pod.get("status") or {}).get("phase") == "Running"
                and slurmd_start(lab, node) not in ("", first_start)
                and state.split("+")[0] in ("IDLE", "ALLOCATED", "MIXED") and "NOT_RESPONDING" not in state and "DRAIN" not in state)

    wait(replaced_and_serving, 120, what=f"{name} replaced and {node} serving Slurm")
    took = time.monotonic() - marked
    replaced = wait(lambda: [m for m in events(lab, "SlurmdPodReplaced", since) if m.startswith(node)], 60,
                    what="a SlurmdPodReplaced Event")
    assert replaced and "Evicted" in replaced[0] and "low on resource: memory" in replaced[0], replaced
    fault_line("slurmd pod marked Failed (Evicted)", "deleted with Warning SlurmdPodReplaced (reason named), created again",
               took, "none running", len(settle_sides(lab, POOL)))
    print(f"FIGURE | failed slurmd pod replaced, node serving Slurm again | {took:.1f} s | target 10 s")


def test_a_refused_slurmd_pod_rolls_back_and_names_the_refusal(lab, op):
    scale(lab, 0)
    wait(lambda: split_reached(lab, POOL, 0), 180, what="0/8")
    since = now_rfc3339()
    patch_pool(lab, {"maxConcurrentMoves": 1, "slurm": {"registerTimeout": "20s",
                                                        "slurmdPod": {"priorityClassName": "no-such-class"}}})
    scale(lab, 1)
    started = time.monotonic()
    degraded = {}

    def refused_reported() -> bool:
        degraded.update(condition(lab, POOL, "Degraded"))
        return degraded.get("reason") == "WriteRefused"

    wait(refused_reported, 120, what="Degraded WriteRefused while the slurmd pod is refused")
    assert "no-such-class" in degraded["message"], degraded
    wait(lambda: any("no-such-class" in m for m in events(lab, "MoveRolledBack", since)), 180,
         what="the move rolled back naming the refusal")
    took = time.monotonic() - started
    # stop further tries (the next victim would be refused the same way), then nothing is stranded
    patch_pool(lab, {"slurmNodes": 0, "maxConcurrentMoves": 8, "slurm": {"slurmdPod": {"priorityClassName": None}}})
    wait(lambda: split_reached(lab, POOL, 0), 300, what="0/8 again, every move done")
    left = settle_sides(lab, POOL, 60)
    fault_line("slurmd pod create refused (missing PriorityClass)",
               "Degraded WriteRefused; after registerTimeout MoveRolledBack naming it, back in inference", took, "none running", len(left))
    assert left == [], left
    rolled = [m for m in events(lab, "MoveRolledBack", since) if "no-such-class" in m]
    assert rolled and "slurmd pod did not start" in rolled[0], rolled
