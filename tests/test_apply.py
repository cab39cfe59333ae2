"""A whole pass, decide then apply, with recording fakes: what reaches Kubernetes and Slurm, in
what order, and how many calls a pass makes."""

from __future__ import annotations

import json
from datetime import timedelta

from slurmpool.controller.apply import ApplyContext, apply
from slurmpool.core.decide import decide
from slurmpool.core.published import slurm_annotation
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.snapshot import PoolSnapshot
from slurmpool.core.status import build_status
from slurmpool.core.models import MoveStatus, SlurmNodePoolStatus
from dataclasses import replace

from slurmpool.core.view import ANN_DRAIN, ANN_MOVE, ANN_POOL, DrainClaim, ANN_PLACEMENT, ANN_SLURM, SLURM, SLURM_TAINT_KEY, NodeView, PodView, SlurmView
from slurmpool.core.checkpoint import CheckpointRecord
from slurmpool.core.phases import Phase
from slurmpool.core.view import ANN_CHECKPOINT, MoveRecord

from .factories import NOW, make_spec, slurm_node
from .slurmfake import Refusing
from .test_planner import job


class FakeKube:
    def __init__(self, fail_patch: set[str] = frozenset()):
        self.calls: list[tuple] = []
        self.fail_patch = fail_patch

    async def patch_node(self, name, patch):
        if name in self.fail_patch:
            raise RuntimeError("apiserver unavailable")
        self.calls.append(("patch_node", name, json.dumps(patch, sort_keys=True)))

    async def patch_node_later(self, name, patch):
        await self.patch_node(name, patch)

    async def create_slurmd_pod(self, pool, spec, node, slurm_name=None, boot=False):
        self.calls.append(("create_slurmd_pod", node))

    async def delete_pod(self, namespace, name, uid):
        self.calls.append(("delete_pod", f"{namespace}/{name}"))

    async def evict(self, namespace, name):
        self.calls.append(("evict", f"{namespace}/{name}"))
        return "Cannot evict pod as it would violate the pod's disruption budget." if name.startswith("protected") else None

    async def event(self, obj, type_, reason, message):
        self.calls.append(("event", obj["kind"], reason))


class FakeSlurm(Refusing):
    def __init__(self):
        self.calls: list[tuple] = []

    async def drain(self, nodes, reason):
        self.calls.append(("drain", tuple(nodes), reason))

    async def resume(self, nodes):
        self.calls.append(("resume", tuple(nodes)))

    async def requeue(self, ids):
        self.calls.append(("requeue", tuple(ids)))

    async def cancel(self, ids):
        self.calls.append(("cancel", tuple(ids)))

    async def signal(self, ids, signal, batch_only):
        self.calls.append(("signal", tuple(ids), signal, batch_only))


POOL = PoolRef("ns", "gpu", "uid-1", 3)
SLURM_TAINT = {"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"}


def slurm_nodes(n):
    """n settled Slurm nodes, each with Slurm's state already published on it (steady state)."""
    view = SlurmView(True, nodes={f"gpu{i:02d}": slurm_node(f"gpu{i:02d}") for i in range(n)})
    nodes = [
        NodeView(name=f"gpu{i:02d}", annotations={ANN_PLACEMENT: SLURM, ANN_SLURM: slurm_annotation(f"gpu{i:02d}", view)},
                 unschedulable=True, taints=(SLURM_TAINT,), pods=(PodView("ns", f"slurmd-gpu{i:02d}", f"u{i}", slurmd=True),))
        for i in range(n)
    ]
    return nodes, view


async def run(spec, nodes, view, kube=None, slurm=None, previous=None, orphans=()):
    kube, slurm = kube or FakeKube(), slurm or FakeSlurm()
    snap = PoolSnapshot(pool=POOL, spec=spec, nodes=tuple(nodes), slurm=view, now=NOW, previous=previous, orphans=tuple(orphans))
    decision = decide(snap)
    result = await apply(ApplyContext(POOL, spec, nodes, kube, slurm), decision)
    return build_status(snap, decision, result), kube, slurm


async def test_starting_moves_records_them_before_draining_in_one_batched_command():
    nodes, view = slurm_nodes(6)
    status, kube, slurm = await run(make_spec(slurm_nodes=3, max_moves=3), nodes, view)
    patched = [c[1] for c in kube.calls if c[0] == "patch_node"]
    assert len(patched) == 3
    for call in kube.calls:
        if call[0] == "patch_node":
            body = json.loads(call[2])
            move = json.loads(body["metadata"]["annotations"][ANN_MOVE])
            assert move["phase"] == "Draining" and move["target"] == "inference:default"
    assert slurm.calls == [("drain", tuple(sorted(patched)), "slurmpool: moving to inference:default")]
    assert status.moving == 3 and status.slurm.desired == 3
    reasons = [c[2] for c in kube.calls if c[0] == "event"]
    assert reasons.count("MoveStarted") == 6  # on the pool and on each node


async def test_a_node_whose_record_cannot_be_written_takes_no_slurm_step():
    nodes, view = slurm_nodes(2)
    kube = FakeKube(fail_patch={"gpu00"})
    status, kube, slurm = await run(make_spec(slurm_nodes=1), nodes, view, kube=kube)
    assert slurm.calls == []
    assert status.last_error and "apiserver unavailable" in status.last_error
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert degraded.status == "True" and degraded.reason == "ActionFailed"


async def test_steady_state_makes_no_calls_whatever_the_size():
    for n in (50, 500):
        nodes, view = slurm_nodes(n)
        status, kube, slurm = await run(make_spec(slurm_nodes=n), nodes, view)
        assert kube.calls == [] and slurm.calls == []
        ready = next(c for c in status.conditions if c.type == "Ready")
        assert ready.status == "True", ready


async def test_unavailable_slurm_is_degraded_and_nothing_drains():
    nodes, _ = slurm_nodes(3)
    view = SlurmView(False, error="cannot connect to 127.0.0.1:2222 over SSH")
    status, kube, slurm = await run(make_spec(slurm_nodes=2), nodes, view)
    assert slurm.calls == []
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert degraded.reason == "SlurmUnavailable" and "SSH" in degraded.message


async def test_refused_eviction_is_reported_with_the_pod():
    web = PodView("web", "protected-1", "u9", owner_kinds=("ReplicaSet",))
    move = '{"id":"m","source":"inference:default","target":"slurm","phase":"Evicting","since":"2026-11-29T12:00:00Z","started":"2026-11-29T12:00:00Z"}'
    node = NodeView(name="gpu09", annotations={ANN_PLACEMENT: "inference:default", ANN_MOVE: move}, unschedulable=True,
                    taints=({"key": "slurmpool.io/slurm", "value": "true", "effect": "NoSchedule"},), pods=(web,))
    status, kube, _ = await run(make_spec(slurm_nodes=1), [node], SlurmView(True, nodes={"gpu09": slurm_node("gpu09", "DOWN", {"DRAIN"}, reason="slurmpool: moving to inference:default")}))
    assert ("evict", "web/protected-1") in kube.calls
    blocked = next(c for c in status.conditions if c.type == "DrainBlocked")
    assert blocked.status == "True" and blocked.reason == "EvictionRefused" and "pod/web/protected-1" in blocked.message
    assert "disruption budget" in status.moves[0].message


async def test_settled_slurm_node_gets_its_slurmd_back_and_stray_drain_of_ours_resumed():
    nodes, view = slurm_nodes(2)
    nodes[0] = NodeView(name="gpu00", annotations={ANN_PLACEMENT: SLURM}, unschedulable=True)
    reason = "slurmpool: moving to inference:default"
    claimed = {**nodes[1].annotations, ANN_DRAIN: DrainClaim(reason, NOW).to_annotation()}
    nodes[1] = replace(nodes[1], annotations=claimed)
    view.nodes["gpu01"] = replace(slurm_node("gpu01", "IDLE", {"DRAIN"}, reason=reason), reason_time=NOW)
    _, kube, slurm = await run(make_spec(slurm_nodes=2), nodes, view)
    assert ("create_slurmd_pod", "gpu00") in kube.calls
    assert slurm.calls == [("resume", ("gpu01",))]


async def test_a_settled_slurm_node_drained_under_our_old_text_is_not_resumed_and_a_stale_claim_goes():
    """Slurm 23.11+ keeps the Reason on RESUME; a drain Slurm sets later keeps our old text."""
    reason = "slurmpool: moving to slurm"
    nodes, view = slurm_nodes(2)
    view.nodes["gpu00"] = replace(slurm_node("gpu00", "IDLE", {"DRAIN"}, reason=reason), reason_time=NOW)  # no claim
    stale = DrainClaim(reason, NOW)
    nodes[1] = replace(nodes[1], annotations={**nodes[1].annotations, ANN_DRAIN: stale.to_annotation()})
    view.nodes["gpu01"] = slurm_node("gpu01", "IDLE", {"DRAIN", "INVALID_REG"}, reason=reason + " : gres/gpu count reported lower than configured (7 < 8)")
    _, kube, slurm = await run(make_spec(slurm_nodes=2), nodes, view)
    assert slurm.calls == []
    patches = [json.loads(c[2]) for c in kube.calls if c[0] == "patch_node" and c[1] == "gpu01"]
    # the stale claim goes (Slurm's state published on the node rides in the same patch)
    assert [{k: v for k, v in p["metadata"]["annotations"].items() if k != ANN_SLURM} for p in patches] == [{ANN_DRAIN: None}]



async def test_a_hand_uncordon_of_a_settled_slurm_node_is_restored_and_reported():
    nodes, view = slurm_nodes(2)
    nodes[0] = NodeView(name="gpu00", annotations={ANN_PLACEMENT: SLURM}, unschedulable=False, taints=(),
                        pods=nodes[0].pods)
    _, kube, _ = await run(make_spec(slurm_nodes=2), nodes, view)
    patch = json.loads(next(c[2] for c in kube.calls if c[0] == "patch_node" and c[1] == "gpu00"))
    assert patch["spec"]["unschedulable"] is True and patch["spec"]["taints"] == [SLURM_TAINT]
    assert ("event", "SlurmNodePool", "CordonRestored") in kube.calls
    assert not [c for c in kube.calls if c[0] == "patch_node" and c[1] == "gpu01"]  # untouched


async def test_a_node_deleted_mid_move_is_reported_once_and_the_rest_go_on():
    nodes, view = slurm_nodes(3)
    previous = SlurmNodePoolStatus(moves=[MoveStatus(node="gpu09", move_id="m1", from_="slurm", to="inference:default",
                                                     phase="Draining", since="2026-11-29T12:00:00Z")])
    status, kube, _ = await run(make_spec(slurm_nodes=3), nodes, view, previous=previous)
    assert [c for c in kube.calls if c[0] == "event"] == [("event", "SlurmNodePool", "NodeDeleted")]
    assert status.moving == 0 and status.slurm.ready == 3
    status, kube, _ = await run(make_spec(slurm_nodes=3), nodes, view, previous=status)
    assert kube.calls == []  # once


async def test_an_orphan_slurmd_pod_is_deleted_only_once_slurm_no_longer_uses_the_node():
    nodes, view = slurm_nodes(2)
    orphan = PodView("ns", "slurmd-gpu09", "u9", slurmd=True, node="gpu09", pool="gpu")
    view.nodes["gpu09"] = slurm_node("gpu09", "ALLOCATED")  # a job runs there: keep its slurmd
    status, kube, _ = await run(make_spec(slurm_nodes=2), nodes, view, orphans=[orphan])
    assert not [c for c in kube.calls if c[0] == "delete_pod"]
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert degraded.status == "True" and degraded.reason == "NodeMissing" and "slurmd-gpu09" in degraded.message
    view.nodes["gpu09"] = slurm_node("gpu09", "IDLE", {"DRAIN"}, reason="slurmpool: moving to inference:default")
    status, kube, _ = await run(make_spec(slurm_nodes=2), nodes, view, orphans=[orphan])
    assert ("delete_pod", "ns/slurmd-gpu09") in kube.calls and ("event", "SlurmNodePool", "OrphanSlurmdDeleted") in kube.calls
    assert next(c for c in status.conditions if c.type == "Degraded").status == "False"
    status, kube, _ = await run(make_spec(slurm_nodes=2), nodes, SlurmView(False, error="munge"), orphans=[orphan])
    assert not [c for c in kube.calls if c[0] == "delete_pod"]  # fail closed


def test_the_slurmd_pod_carries_the_templates_volumes_and_mounts():
    """The shipped slurmd image reads its auth Secret (and slurm.conf) from volumes the pool names."""
    from slurmpool.adapters.kube import slurmd_pod

    spec = make_spec()
    assert "volumes" not in slurmd_pod(PoolRef("ns", "p"), spec, "n1")["spec"]  # none named: none added
    data = spec.model_dump(by_alias=True)
    data["slurm"]["slurmdPod"]["volumes"] = [{"name": "auth", "secret": {"secretName": "slurm-auth", "defaultMode": 256}}]
    data["slurm"]["slurmdPod"]["volumeMounts"] = [{"name": "auth", "mountPath": "/etc/slurm-auth", "readOnly": True}]
    pod = slurmd_pod(PoolRef("ns", "p"), type(spec).model_validate(data), "n1")
    assert pod["spec"]["volumes"] == data["slurm"]["slurmdPod"]["volumes"]
    assert pod["spec"]["containers"][0]["volumeMounts"] == data["slurm"]["slurmdPod"]["volumeMounts"]


async def test_a_phase_step_is_the_nodes_event_a_moves_start_is_the_pools_too():
    nodes, view = slurm_nodes(2)
    _, kube, _ = await run(make_spec(slurm_nodes=1), nodes, view)
    name, patch = next((c[1], json.loads(c[2])) for c in kube.calls if c[0] == "patch_node")
    assert sorted(c[1] for c in kube.calls if c[0] == "event" and c[2] == "MoveStarted") == ["Node", "SlurmNodePool"]
    # The next pass sees its record back and Slurm's drain taken on the idle node: Draining is done.
    moving = [replace(n, annotations={**n.annotations, **patch["metadata"]["annotations"]}) if n.name == name else n
              for n in nodes]
    view.nodes[name] = slurm_node(name, "IDLE", flags=("DRAIN",), reason="slurmpool: moving to inference:default")
    _, kube, _ = await run(make_spec(slurm_nodes=1), moving, view)
    phases = [c[1] for c in kube.calls if c[0] == "event" and c[2] == "MovePhase"]
    assert phases == ["Node"], kube.calls


async def test_slurms_state_rides_in_a_patch_the_node_gets_anyway_and_is_not_written_again():
    nodes, view = slurm_nodes(3)
    nodes = [replace(n, annotations={**n.annotations, ANN_SLURM: "{}"}) for n in nodes]  # stale: all to publish
    spec, published = make_spec(slurm_nodes=2), {}
    decision = decide(PoolSnapshot(pool=POOL, spec=spec, nodes=tuple(nodes), slurm=view, now=NOW))
    assert sorted(decision.publish) == ["gpu00", "gpu01", "gpu02"]
    kube = FakeKube()
    await apply(ApplyContext(POOL, spec, nodes, kube, FakeSlurm(), published), decision)
    [moved] = [s.node for s, _ in decision.starts]
    writes = [(c[1], sorted(json.loads(c[2])["metadata"]["annotations"])) for c in kube.calls if c[0] == "patch_node"]
    # one write per node: the moving node's record and Slurm's state together, the others' state alone
    assert sorted(writes) == sorted([(moved, sorted([ANN_DRAIN, ANN_MOVE, ANN_POOL, ANN_SLURM]))] +
                                    [(n, [ANN_SLURM]) for n in decision.publish if n != moved]), writes
    assert {n: v for n, (v, _) in published.items()} == decision.publish


# ---------------------------------------------------------------- the planned handover's reservation


class ReservingSlurm(FakeSlurm):
    def __init__(self, fail: str | None = None):
        super().__init__()
        self.fail = fail

    async def create_reservation(self, name, nodes, start, minutes, flags):
        if self.fail:
            raise RuntimeError(self.fail)
        self.calls.append(("create_reservation", name, tuple(nodes), start, minutes, tuple(flags)))

    async def delete_reservation(self, name):
        self.calls.append(("delete_reservation", name))


def _windowed(spec):
    body = spec.model_dump(by_alias=True)
    body["schedule"] = [{"name": "day", "cron": "30 12 * * *", "duration": "1h", "slurmNodes": 2}]
    return type(spec).model_validate(body)


async def test_a_pass_before_an_edge_reserves_the_leaving_nodes_and_shows_it_in_status():
    from datetime import timedelta

    from slurmpool.core.handover import reservation_name
    nodes, view = slurm_nodes(5)
    view = replace(view, reservations=())
    status, kube, slurm = await run(_windowed(make_spec(slurm_nodes=5, max_moves=5)), nodes, view, slurm=ReservingSlurm())
    created = [c for c in slurm.calls if c[0] == "create_reservation"]
    assert len(created) == 1 and created[0][1] == reservation_name(POOL) and len(created[0][2]) == 3
    assert created[0][3] == NOW + timedelta(minutes=30) and created[0][4] == 60 and created[0][5] == ("MAINT", "IGNORE_JOBS")
    assert not any(c[0] == "drain" for c in slurm.calls)  # nothing moves before the edge
    assert status.handover.state == "Reserved" and status.handover.reservation == reservation_name(POOL)
    assert ("event", "SlurmNodePool", "HandoverReserved") in kube.calls


async def test_a_reservation_that_cannot_be_made_is_reported_and_holds_no_move_back():
    nodes, view = slurm_nodes(6)
    view = replace(view, reservations=())
    spec = _windowed(make_spec(slurm_nodes=5, max_moves=5))  # 6 nodes, 5 wanted in Slurm: one moves now
    status, kube, slurm = await run(spec, nodes, view, slurm=ReservingSlurm(fail="scontrol: error: Duplicate reservation name"))
    assert [c[0] for c in slurm.calls] == ["drain"]
    assert status.handover.state == "Planned" and "Duplicate reservation name" in status.handover.message
    assert status.last_error is None
    assert ("event", "SlurmNodePool", "HandoverFailed") in kube.calls


async def test_moves_draining_out_of_slurm_show_when_their_jobs_end_by_their_limits():
    from datetime import timedelta

    from slurmbridge import SlurmJob

    def job(job_id, node, minutes):
        return SlurmJob(job_id=job_id, name="train", user="u", state="RUNNING", partition="gpu", nodes=(node,), gpus_per_node=8,
                        num_nodes=1, start_time=NOW, end_time=None if minutes is None else NOW + timedelta(minutes=minutes),
                        reason="None")

    nodes, _ = slurm_nodes(3)
    jobs = (job("1", "gpu00", 10), job("2", "gpu00", 20), job("3", "gpu01", None))
    view = SlurmView(True, nodes={n.name: slurm_node(n.name, "ALLOCATED" if n.name != "gpu02" else "IDLE") for n in nodes}, jobs=jobs)
    status, _, _ = await run(make_spec(slurm_nodes=0, max_moves=3), nodes, view)
    moves = {m.node: m for m in status.moves}
    assert {m.phase for m in moves.values()} == {"Draining"}
    assert moves["gpu00"].free_at == "2026-11-29T12:20:00Z"  # the latest end of its jobs
    assert moves["gpu01"].free_at == "unlimited"  # drain.onTimeout decides for it
    assert moves["gpu02"].free_at is None  # idle: nothing to wait for (and no status change every pass)
    dumped = status.model_dump(by_alias=True, exclude_none=True)["moves"]
    assert {m["node"]: m.get("freeAt") for m in dumped} == {"gpu00": "2026-11-29T12:20:00Z", "gpu01": "unlimited", "gpu02": None}


async def test_the_draining_forecast_reads_slurm_by_the_nodes_slurm_names():
    from datetime import timedelta

    from slurmbridge import SlurmJob

    nodes, _ = slurm_nodes(2)
    spec = make_spec(slurm_nodes=0, max_moves=2)
    spec = spec.model_copy(update={"slurm": spec.slurm.model_copy(update={"node_name": "s{name}"})})
    jobs = (SlurmJob(job_id="1", name="t", user="u", state="RUNNING", partition="gpu", nodes=("sgpu00",), gpus_per_node=8, num_nodes=1,
                     start_time=NOW, end_time=NOW + timedelta(minutes=15), reason="None"),)
    view = SlurmView(True, nodes={"sgpu00": slurm_node("sgpu00", "ALLOCATED"), "sgpu01": slurm_node("sgpu01", "IDLE")}, jobs=jobs)
    status, _, _ = await run(spec, nodes, view)
    assert {m.node: m.free_at for m in status.moves} == {"gpu00": "2026-11-29T12:15:00Z", "gpu01": None}


async def test_a_start_waits_when_the_move_whose_slot_it_takes_cannot_be_written_ending():
    """gpu00's move to Slurm ends this pass and the planner gives its slot (maxConcurrentMoves 1)
    to a move of gpu01 to inference. gpu00's patch is refused, so its move stays in flight: the
    start is not written (it would make two moves), nothing drains, and the next pass decides again."""
    from slurmpool.core.phases import Phase
    from slurmpool.core.view import ANN_PIN, MoveRecord

    nodes, view = slurm_nodes(3)
    move = MoveRecord(id="m0", source="inference:default", target=SLURM, phase=Phase.RESUMING, since=NOW, started=NOW, cause="pin")
    nodes[0] = replace(nodes[0], annotations={**nodes[0].annotations, ANN_MOVE: move.to_annotation(), ANN_PIN: SLURM})
    spec = make_spec(slurm_nodes=2, max_moves=1)
    decision = decide(PoolSnapshot(pool=POOL, spec=spec, nodes=tuple(nodes), slurm=view, now=NOW))
    assert decision.ending == {"gpu00"} and len(decision.starting) == 1  # the case: an ending frees the slot a start takes
    started = next(iter(decision.starting))

    status, kube, slurm = await run(spec, nodes, view, kube=FakeKube(fail_patch={"gpu00"}))
    assert not [c for c in kube.calls if c[0] == "patch_node" and c[1] == started]
    assert slurm.calls == []  # no drain of the start's node
    assert "MoveStarted" not in [c[2] for c in kube.calls if c[0] == "event"]

    status, kube, slurm = await run(spec, nodes, view)  # the ending written: the start follows
    assert [c[1] for c in kube.calls if c[0] == "patch_node"] == ["gpu00", started]
    assert slurm.calls == [("drain", (started,), "slurmpool: moving to inference:default")]


async def test_checkpoint_writes_each_record_then_signals_in_one_call_per_kind_before_any_requeue():
    """Two nodes draining past drain.timeout: gpu00's job is new to the signal, gpu01's was signalled
    past its grace. The record goes with gpu00's patch (before the signal); one scancel per signal
    kind; the signal before the requeue."""
    spec = make_spec(slurm_nodes=0, max_moves=2, drain={"timeout": "1m", "onTimeout": "Checkpoint", "checkpoint": {"grace": "5m"}})
    since = NOW - timedelta(minutes=10)
    move = MoveRecord(id="m", source=SLURM, target="inference:default", phase=Phase.DRAINING, since=since, started=since)
    reason = "slurmpool: moving to inference:default"
    signalled = CheckpointRecord("USR1", "Batch", (("8", NOW - timedelta(minutes=6)),))
    nodes = [NodeView(name=f"gpu0{i}", annotations={ANN_PLACEMENT: SLURM, ANN_MOVE: move.model_copy(update={"id": f"m{i}"}).to_annotation(),
                                                     ANN_DRAIN: DrainClaim(reason, since).to_annotation(),
                                                     **({ANN_CHECKPOINT: json.dumps(signalled.body())} if i else {})},
                      unschedulable=True, taints=(SLURM_TAINT,), pods=(PodView("ns", f"slurmd-gpu0{i}", f"u{i}", slurmd=True),))
             for i in range(2)]
    view = SlurmView(True, nodes={n.name: slurm_node(n.name, "MIXED", {"DRAIN"}, reason=reason) for n in nodes},
                     jobs=(job("7", ["gpu00"], end_in=36000), job("8", ["gpu01"], end_in=36000)))
    status, kube, slurm = await run(spec, nodes, view)
    written = {c[1]: json.loads(c[2])["metadata"].get("annotations", {}) for c in kube.calls if c[0] == "patch_node"}
    assert json.loads(written["gpu00"][ANN_CHECKPOINT])["jobs"] == {"7": NOW.strftime("%Y-%m-%dT%H:%M:%SZ")}
    assert slurm.calls == [("signal", ("7",), "USR1", True), ("requeue", ("8",))]
    assert [c[2] for c in kube.calls if c[0] == "event"].count("JobsSignalled") == 2  # on the pool and the node
