"""The slurmd pod's life: an ended pod is replaced with an Event naming the kubelet's reason; a
step whose writes the API server refuses is bounded and rolls back, naming the refusal."""

from __future__ import annotations

from datetime import timedelta

from slurmpool.controller.apply import ApplyContext, apply
from slurmpool.core.decide import decide
from slurmpool.core.interfaces import PoolRef, Refused
from slurmpool.core.models import MoveStatus, SlurmNodePoolStatus
from slurmpool.core.moves import CreateSlurmdPod, Refusal, DeleteSlurmdPod, Pass, advance
from slurmpool.core.phases import Phase
from slurmpool.core.snapshot import PoolSnapshot
from slurmpool.core.status import build_status
from slurmpool.core.view import ANN_MOVE, ANN_PLACEMENT, LABEL_SIDE, SLURM, SLURM_TAINT_KEY, MoveRecord, NodeView, PodView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .slurmfake import Refusing

POOL = PoolRef("ns", "gpu", "uid-1", 3)
OURS = {"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
INF = "inference:default"


def _settled(pod: PodView | None) -> NodeView:
    return NodeView("gpu01", annotations={ANN_PLACEMENT: SLURM}, labels={LABEL_SIDE: "slurm"}, taints=(OURS,), unschedulable=True,
                    pods=(pod,) if pod else ())


def _decide(nodes, slurm=None, previous=None, spec=None):
    spec = spec or make_spec(slurm_nodes=len(nodes))
    snap = PoolSnapshot(pool=POOL, spec=spec, nodes=tuple(nodes), slurm=slurm or SlurmView(True, nodes={"gpu01": slurm_node("gpu01")}),
                        now=NOW, previous=previous)
    return snap, decide(snap)


def test_an_evicted_slurmd_pod_is_deleted_with_the_kubelets_reason_then_created_again():
    evicted = PodView("slurm", "slurmd-gpu01", "u1", slurmd=True, phase="Failed", reason="Evicted",
                      message="The node was low on resource: memory.")
    _, decision = _decide([_settled(evicted)])
    step = decision.steps["gpu01"]
    assert [type(a) for a in step.actions] == [DeleteSlurmdPod]
    (event,) = [e for e in step.events if e.reason == "SlurmdPodReplaced"]
    assert event.type == "Warning" and "Evicted" in event.message and "low on resource: memory" in event.message
    # while it goes: nothing more, no second Event
    _, decision = _decide([_settled(PodView("slurm", "slurmd-gpu01", "u1", slurmd=True, phase="Failed", reason="Evicted", deleting=True))])
    assert "gpu01" not in decision.steps or not decision.steps["gpu01"].events
    # once gone: a new one
    _, decision = _decide([_settled(None)])
    assert [type(a) for a in decision.steps["gpu01"].actions] == [CreateSlurmdPod]


def test_a_running_slurmd_pod_is_left_alone():
    _, decision = _decide([_settled(PodView("slurm", "slurmd-gpu01", "u1", slurmd=True, ready=True))])
    assert "gpu01" not in decision.steps or not decision.steps["gpu01"].actions


def _starting(since, pods=(), rollback=False) -> NodeView:
    move = MoveRecord(id="m1", source=INF, target=SLURM, phase=Phase.STARTING_SLURMD, since=since, started=since, rollback=rollback)
    return NodeView("gpu01", annotations={ANN_PLACEMENT: INF, ANN_MOVE: move.to_annotation()}, labels={LABEL_SIDE: "slurm"},
                    taints=(OURS,), unschedulable=True, pods=tuple(pods))


DRAINED = SlurmView(True, nodes={"gpu01": slurm_node("gpu01", "IDLE", {"DRAIN"}, reason="slurmpool: moving to slurm")})
REFUSAL = Refusal.of("create slurmd pod on gpu01", '(403) pods "slurmd-gpu01" is forbidden: no PriorityClass with name gold was found')


def test_starting_slurmd_waits_within_its_bound_and_says_why():
    node = _starting(NOW - timedelta(minutes=1))
    step = advance(node.move, node, Pass(DRAINED, make_spec(), NOW), refusal=REFUSAL)
    assert step.move.phase == Phase.STARTING_SLURMD and step.message == str(REFUSAL)
    assert any(isinstance(a, CreateSlurmdPod) for a in step.actions)


def test_starting_slurmd_past_its_bound_rolls_back_naming_the_refusal():
    node = _starting(NOW - timedelta(minutes=6))  # registerTimeout 5m
    step = advance(node.move, node, Pass(DRAINED, make_spec(), NOW), refusal=REFUSAL)
    assert step.rolled_back is not None and step.move.rollback and step.move.target == INF
    (event,) = [e for e in step.events if e.reason == "MoveRolledBack"]
    assert "no PriorityClass with name gold" in event.message
    assert not any(isinstance(a, CreateSlurmdPod) for a in step.actions)


def test_a_rollback_that_cannot_start_slurmd_waits_rather_than_rolling_back_again():
    node = _starting(NOW - timedelta(hours=2), rollback=True)
    step = advance(node.move, node, Pass(DRAINED, make_spec(), NOW), refusal=REFUSAL)
    assert step.rolled_back is None and step.move.phase == Phase.STARTING_SLURMD and step.message == str(REFUSAL)


def test_a_failed_pod_in_starting_slurmd_is_replaced_not_taken_for_running():
    failed = PodView("slurm", "slurmd-gpu01", "u1", slurmd=True, phase="Failed", reason="UnexpectedAdmissionError")
    node = _starting(NOW - timedelta(minutes=1), pods=(failed,))
    step = advance(node.move, node, Pass(DRAINED, make_spec(), NOW))
    assert step.move.phase == Phase.STARTING_SLURMD
    assert any(isinstance(a, DeleteSlurmdPod) for a in step.actions)
    assert any(e.reason == "SlurmdPodReplaced" and "UnexpectedAdmissionError" in e.message for e in step.events)


def test_relabeling_refused_past_its_bound_rolls_back_to_slurm():
    since = NOW - timedelta(minutes=6)
    move = MoveRecord(id="m2", source=SLURM, target=INF, phase=Phase.RELABELING, since=since, started=since)
    node = NodeView("gpu01", annotations={ANN_PLACEMENT: SLURM, ANN_MOVE: move.to_annotation()}, labels={LABEL_SIDE: "slurm"},
                    taints=(OURS,), unschedulable=True)
    refusal = Refusal.of("patch node gpu01", "(422) metadata.labels: Invalid value")
    step = advance(node.move, node, Pass(DRAINED, make_spec(), NOW), refusal=refusal)
    assert step.rolled_back is not None and step.move.target == SLURM and step.move.rollback
    assert any(e.reason == "MoveRolledBack" and "(422)" in e.message for e in step.events)


class RefusingKube:
    def __init__(self):
        self.events = []

    async def patch_node(self, name, patch): ...
    async def patch_node_later(self, name, patch): ...
    async def delete_pod(self, namespace, name, uid): ...
    async def evict(self, namespace, name): ...

    async def create_slurmd_pod(self, pool, spec, node, slurm_name=None, boot=False):
        raise Refused('(403) pods "slurmd-gpu01" is forbidden: no PriorityClass with name gold was found')

    async def event(self, obj, type_, reason, message):
        self.events.append((reason, message))


class DrainOnly(Refusing):
    async def drain(self, nodes, reason): ...


async def test_a_refused_create_is_the_moves_message_and_a_degraded_condition_then_names_the_rollback():
    node = _starting(NOW - timedelta(minutes=1))
    spec = make_spec(slurm_nodes=1)
    snap, decision = _decide([node], slurm=DRAINED, spec=spec)
    result = await apply(ApplyContext(POOL, spec, [node], RefusingKube(), DrainOnly()), decision)
    status = build_status(snap, decision, result)
    (move,) = status.moves
    assert Refusal.read(move.message) is not None and "PriorityClass" in move.message
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert degraded.status == "True" and degraded.reason == "WriteRefused" and "gpu01" in degraded.message

    # the next pass, past the bound, reads that message from the status and names it in the rollback
    late = _starting(NOW - timedelta(minutes=6))
    previous = SlurmNodePoolStatus(moves=[MoveStatus.model_validate(move.model_dump(by_alias=True))])
    _, decision = _decide([late], slurm=DRAINED, previous=previous, spec=spec)
    (event,) = [e for e in decision.steps["gpu01"].events if e.reason == "MoveRolledBack"]
    assert "no PriorityClass with name gold" in event.message
