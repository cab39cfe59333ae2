"""slurmpool.io/adopt (core/adoption.py): a node whose slurmd runs outside Kubernetes is taken into
the Slurm side as it is. Whole passes of decide(), each on the Node as the previous pass's patch
left it: placed with no drain, eviction or job action; its slurmd pod made; done only once the pod's
own slurmd has registered; the person's drain resumed only when asked."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from slurmbridge import SlurmJob
from slurmpool.core.decide import decide
from slurmpool.core.events import Reason
from slurmpool.core.moves import Cancel, CreateSlurmdPod, Drain, Evict, Requeue, Resume, Signal
from slurmpool.core.planner import plan
from slurmpool.core.snapshot import PoolSnapshot
from slurmpool.core.view import ANN_ADOPT, ANN_MOVE_NOW, ANN_PIN, ANN_PLACEMENT, ANN_SETTLED, LABEL_SIDE, SLURM, SLURM_TAINT_KEY, NodeView, PodView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .sim import POOL, merged

JOB = SlurmJob(job_id="42", name="train", user="alice", state="RUNNING", partition="gpu", nodes=("gpu07",), gpus_per_node=8,
               num_nodes=1, start_time=NOW - timedelta(hours=1), end_time=None, reason="None")
OUTSIDE_STARTED = NOW - timedelta(days=3)  # the slurmd systemd started on the host
PERSONS_DRAIN = "moving to slurmpool"
DRAINED_AT = NOW - timedelta(hours=1)  # the person drained it, then asked for the adoption
JOB_ACTIONS = (Drain, Evict, Requeue, Cancel, Signal)


def unplaced(adopt: str = "true", **annotations: str) -> NodeView:
    web = PodView("web", "server-0", "u-web", owner_kinds=("ReplicaSet",))  # a pod on it: never evicted
    return NodeView(name="gpu07", labels={"gpu": "true"}, annotations={ANN_ADOPT: adopt, **annotations}, pods=(web,))


def slurm_of(drained: bool = True, started=OUTSIDE_STARTED, state: str = "MIXED", flags: frozenset[str] = frozenset()) -> SlurmView:
    sn = slurm_node("gpu07", state=state, flags={"DRAIN", *flags} if drained else flags, reason=PERSONS_DRAIN if drained else None)
    sn = replace(sn, slurmd_start=started, reason_user="admin" if drained else None, reason_time=DRAINED_AT if drained else None)
    return SlurmView(True, nodes={"gpu07": sn}, jobs=(JOB,))


def decided(node: NodeView, slurm: SlurmView, paused: bool = False, now=NOW):
    return decide(PoolSnapshot(pool=POOL, spec=make_spec(slurm_nodes=1, paused=paused), nodes=(node,), slurm=slurm, now=now))


def after(node: NodeView, decision, now=NOW) -> NodeView:
    """The Node as the pass's patch leaves it, with the slurmd pod it created (made at `now`)."""
    node = merged(node, decision.patches.get(node.name, {}))
    step = decision.steps.get(node.name)
    if step and any(isinstance(a, CreateSlurmdPod) for a in step.actions):
        pod = PodView("slurm", "slurmd-gpu07", "u-slurmd", slurmd=True, ready=True, created=now, node=node.name)
        node = replace(node, pods=node.pods + (pod,))
    return node


def kinds(decision) -> list[type]:
    return [type(a) for s in decision.steps.values() for a in s.actions]


@pytest.mark.parametrize("paused", [False, True])
def test_placed_in_slurm_at_once_with_nothing_drained_evicted_or_ended(paused):
    node = unplaced()
    decision = decided(node, slurm_of(), paused=paused)
    step = decision.steps["gpu07"]
    assert step.settled == SLURM and step.move is None
    assert not any(k in JOB_ACTIONS for k in kinds(decision)), kinds(decision)
    assert CreateSlurmdPod not in kinds(decision)  # the pod comes with the next pass, on the Node as written
    annotations = decision.patches["gpu07"]["metadata"]["annotations"]
    assert annotations[ANN_PLACEMENT] == SLURM and ANN_ADOPT not in annotations
    placed = after(node, decision)
    assert placed.labels[LABEL_SIDE] == "slurm" and placed.unschedulable and placed.has_taint(SLURM_TAINT_KEY, "NoSchedule")
    assert [e.reason for e in step.events] == [Reason.AdoptionStarted]
    assert "Stop the slurmd that runs outside Kubernetes" in step.events[0].message
    assert decision.starts == []  # no move: the planner has nothing to do with it
    assert kinds(decided(placed, slurm_of(), paused=paused)) == [CreateSlurmdPod]  # paused or not: no move, its upkeep


def test_the_slurmd_pod_is_made_and_the_adoption_waits_for_its_own_slurmd():
    node = after(unplaced(), decided(unplaced(), slurm_of()))
    second = decided(node, slurm_of())
    assert kinds(second) == [CreateSlurmdPod]  # no drain, no resume: the person's drain is theirs
    node = after(node, second)
    # The pod runs; Slurm still hears the slurmd started outside Kubernetes (it holds the port).
    third = decided(node, slurm_of(), now=NOW + timedelta(seconds=30))
    step = third.steps.get("gpu07")
    assert step is None or (not step.adopted and not step.actions)
    assert not any(e.reason == Reason.AdoptionCompleted for e in third.node_events)
    assert ANN_ADOPT in after(node, third).annotations


def test_done_once_the_pods_slurmd_registered_leaving_the_persons_drain():
    node = after(unplaced(), decided(unplaced(), slurm_of()))
    node = after(node, decided(node, slurm_of()))
    registered = slurm_of(started=NOW + timedelta(seconds=40))
    done = decided(node, registered, now=NOW + timedelta(seconds=41))
    step = done.steps["gpu07"]
    assert step.adopted and not any(isinstance(a, (Resume, *JOB_ACTIONS)) for a in step.actions)
    assert done.patches["gpu07"]["metadata"]["annotations"] == {ANN_ADOPT: None}
    (event,) = [e for e in step.events if e.reason == Reason.AdoptionCompleted]
    assert PERSONS_DRAIN in event.message and "stays" in event.message
    node = after(node, done)
    assert ANN_ADOPT not in node.annotations and node.placement == SLURM
    assert "gpu07" not in decided(node, registered, now=NOW + timedelta(seconds=42)).patches  # nothing more to write


def test_resume_drain_hands_the_drain_over_and_ends_only_once_slurm_shows_it_lifted():
    node = after(unplaced("resume-drain"), decided(unplaced("resume-drain"), slurm_of()))
    node = after(node, decided(node, slurm_of()))
    later = NOW + timedelta(seconds=41)
    handed = decided(node, slurm_of(started=NOW + timedelta(seconds=40)), now=later)
    assert kinds(handed) == [Resume] and not handed.steps["gpu07"].adopted  # a crash here loses nothing
    node = after(node, handed)
    lifted = decided(node, slurm_of(drained=False, started=NOW + timedelta(seconds=40)), now=later)
    assert lifted.steps["gpu07"].adopted and lifted.patches["gpu07"]["metadata"]["annotations"] == {ANN_ADOPT: None}


def test_slurms_own_verdict_is_never_resumed():
    node = after(unplaced("resume-drain"), decided(unplaced("resume-drain"), slurm_of()))
    node = after(node, decided(node, slurm_of()))
    failed = slurm_of(started=NOW + timedelta(seconds=40), flags=frozenset({"INVALID_REG"}))
    decision = decided(node, failed, now=NOW + timedelta(seconds=41))
    assert Resume not in kinds(decision)
    assert decision.steps["gpu07"].adopted and "Slurm's own verdict" in decision.steps["gpu07"].events[-1].message


def test_a_restart_decides_the_same_from_the_node_alone():
    """Crash-safe: the adoption's state is the Node's annotations; a second operator (or the same
    pass again) on the same observations decides the same, and never places the node twice."""
    node, slurm = unplaced(), slurm_of()
    first, again = decided(node, slurm), decided(node, slurm)
    assert first.patches == again.patches and kinds(first) == kinds(again)
    placed = after(node, first)
    replay = decided(placed, slurm)
    assert not any(e.reason == Reason.AdoptionStarted for s in replay.steps.values() for e in s.events)
    assert kinds(replay) == [CreateSlurmdPod]


def test_slurm_unreadable_places_nothing():
    decision = decided(unplaced(), SlurmView(False, error="down"))
    assert "gpu07" not in decision.patches and decision.starts == []


@pytest.mark.parametrize("value", ["yes", "True", "resume"])
def test_a_bad_value_is_reported_on_the_node_and_contained(value):
    other = NodeView(name="gpu08", labels={"gpu": "true"}, annotations={ANN_PLACEMENT: SLURM})  # its slurmd pod is missing
    slurm = replace(slurm_of(), nodes={**slurm_of().nodes, "gpu08": slurm_node("gpu08")})
    decision = decide(PoolSnapshot(pool=POOL, spec=make_spec(slurm_nodes=1), nodes=(unplaced(value), other), slurm=slurm, now=NOW))
    assert "gpu07" not in decision.steps and "gpu07" not in decision.patches
    (problem,) = decision.invalid["gpu07"]
    assert problem.annotation == ANN_ADOPT and repr(value) in problem.message
    assert [e.node for e in decision.node_events if e.reason == Reason.InvalidNodeRecord] == ["gpu07"]
    assert CreateSlurmdPod in [type(a) for a in decision.steps["gpu08"].actions]  # the pool goes on (and restores its cordon)


def test_adopt_on_a_node_already_serving_inference_is_refused():
    node = NodeView(name="gpu07", labels={"gpu": "true"}, annotations={ANN_ADOPT: "true", ANN_PLACEMENT: "inference:default"})
    decision = decided(node, slurm_of())
    assert "gpu07" not in decision.steps and "serves inference:default" in decision.invalid["gpu07"][0].message


def test_the_planner_never_chooses_a_node_being_adopted():
    spec = make_spec(slurm_nodes=0, max_moves=2)
    adopting = NodeView(name="gpu07", annotations={ANN_PLACEMENT: SLURM, ANN_ADOPT: "true"})
    plain = NodeView(name="gpu08", annotations={ANN_PLACEMENT: SLURM})
    slurm = SlurmView(True, nodes={n: slurm_node(n) for n in ("gpu07", "gpu08")})
    assert [s.node for s in plan(spec, [adopting, plain], slurm, NOW).starts] == ["gpu08"]


def test_resume_drain_on_a_node_long_in_slurm_never_resumes_a_drain_set_since():
    """An admin drained a node slurmpool settled in Slurm a week ago; someone then writes
    adopt=resume-drain on it: that drain was never handed over, and stays."""
    settled = NodeView(name="gpu07", labels={"gpu": "true"}, annotations={
        ANN_ADOPT: "resume-drain", ANN_PLACEMENT: SLURM, ANN_SETTLED: (NOW - timedelta(days=7)).isoformat()})
    settled = after(settled, decided(settled, slurm_of()))  # its upkeep: the slurmd pod
    decision = decided(settled, slurm_of(started=NOW + timedelta(seconds=40)), now=NOW + timedelta(seconds=41))
    assert Resume not in kinds(decision)
    step = decision.steps["gpu07"]
    assert step.adopted and "not the drain handed over" in step.events[-1].message


def test_a_pin_or_move_now_waits_for_the_adoption():
    """A move would drain the node midway through its adoption (and _flag would then freeze it)."""
    spec = make_spec(slurm_nodes=0, max_moves=2)
    pinned = NodeView(name="gpu07", annotations={ANN_PLACEMENT: SLURM, ANN_ADOPT: "true", ANN_PIN: "inference:default"})
    asked = NodeView(name="gpu08", annotations={ANN_PLACEMENT: SLURM, ANN_ADOPT: "true", ANN_MOVE_NOW: "inference"})
    slurm = SlurmView(True, nodes={n: slurm_node(n) for n in ("gpu07", "gpu08")})
    assert plan(spec, [pinned, asked], slurm, NOW).starts == []
    done = [replace(n, annotations={k: v for k, v in n.annotations.items() if k != ANN_ADOPT}) for n in (pinned, asked)]
    assert sorted(s.node for s in plan(spec, done, slurm, NOW).starts) == ["gpu07", "gpu08"]  # adopted: they move
