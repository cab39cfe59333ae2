"""The operator's Node writes own only what is the operator's: another writer's taints, labels
and cordon survive them (patch.shape_write, apply._write_node), whatever happened between the
pass's read and its write."""

from __future__ import annotations

from dataclasses import replace

from slurmpool.controller.apply import ApplyContext, apply
from slurmpool.core.patch import node_patch, rebuilt, shape_of, shape_write
from slurmpool.core.decide import decide
from slurmpool.core.interfaces import Conflict, PoolRef
from slurmpool.core.moves import Pass, PatchNode, Step, advance, inference_shape, slurm_shape
from slurmpool.core.phases import Phase
from slurmpool.core.snapshot import PoolSnapshot
from slurmpool.core.view import ANN_CORDON_KEPT, ANN_MOVE, ANN_PLACEMENT, SLURM, SLURM_TAINT_KEY, MoveRecord, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .slurmfake import Refusing

POOL = PoolRef("ns", "gpu", "uid-1", 3)
OURS = {"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
NPD = {"key": "npd.example/kernel-deadlock", "value": "true", "effect": "NoSchedule", "timeAdded": "2026-11-29T11:00:00Z"}
GPU_OP = {"key": "nvidia.com/gpu-driver-upgrade", "effect": "NoExecute"}
INF = "inference:default"
POOL_TAINT = {"key": "inference", "value": "default", "effect": "NoSchedule"}  # factories.make_spec's pool


def _move(source, target, phase, rollback=False) -> str:
    return MoveRecord(id="m1", source=source, target=target, phase=phase, since=NOW, started=NOW, rollback=rollback).to_annotation()


def _step_with(shape: PatchNode) -> Step:
    return Step(move=None, actions=[shape])


def test_a_taint_added_by_someone_else_after_the_read_is_kept():
    before = NodeView("a", unschedulable=True, taints=(OURS,), version="10")
    shape = inference_shape(make_spec(), before, make_spec().inference.pools[0])
    now = replace(before, taints=(OURS, NPD), version="11")
    patch = shape_write(before, now, shape)
    assert patch["spec"]["taints"] == [NPD, POOL_TAINT], "ours lifted, theirs kept with its timeAdded"
    assert patch["metadata"]["resourceVersion"] == "11"


def test_a_taint_removed_by_someone_else_after_the_read_is_not_put_back():
    before = NodeView("a", taints=(NPD, GPU_OP), version="10")
    shape = slurm_shape(make_spec(), before, keep_pool_labels=True, claims_cordon=True)
    now = replace(before, taints=(GPU_OP,), version="12")
    patch = shape_write(before, now, shape)
    assert patch["spec"]["taints"] == [GPU_OP, OURS]
    assert patch["spec"]["unschedulable"] is True and "annotations" not in patch["metadata"]


def test_labels_are_written_key_by_key_never_as_a_whole_map():
    before = NodeView("a", labels={"team": "ml", "slurmpool.io/side": "slurm"}, unschedulable=True, taints=(OURS,))
    patch = node_patch(POOL, before, _step_with(inference_shape(make_spec(), before, make_spec().inference.pools[0])), NOW)
    assert "team" not in patch["metadata"]["labels"] and patch["metadata"]["labels"]["slurmpool.io/side"] == "inference"
    assert "resourceVersion" not in patch["metadata"], "a view with no version (a test's) has no precondition"


def test_a_cordon_found_when_a_move_takes_the_node_to_slurm_is_kept_for_its_owner():
    spec = make_spec()
    node = NodeView("a", annotations={ANN_PLACEMENT: INF, ANN_MOVE: _move(INF, SLURM, Phase.CORDONING)}, unschedulable=True, version="5")
    step = advance(node.move, node, Pass(SlurmView(True, nodes={"a": slurm_node("a", "IDLE", {"DRAIN"})}), spec, NOW))
    patch = node_patch(POOL, node, step, NOW)
    assert patch["metadata"]["annotations"][ANN_CORDON_KEPT] == "true"
    assert "unschedulable" not in patch["spec"] and OURS in patch["spec"]["taints"]

    # back to inference later: the cordon stays, the mark goes once the node settles
    back = NodeView("a", annotations={ANN_PLACEMENT: SLURM, ANN_CORDON_KEPT: "true", ANN_MOVE: _move(SLURM, INF, Phase.RELABELING)},
                    unschedulable=True, taints=(OURS, NPD), labels={"slurmpool.io/side": "slurm"})
    step = advance(back.move, back, Pass(SlurmView(True), spec, NOW))
    shape = next(a for a in step.actions if isinstance(a, PatchNode))
    assert shape.unschedulable is None
    patch = node_patch(POOL, back, step, NOW)
    assert "unschedulable" not in patch["spec"] and patch["spec"]["taints"] == [NPD, POOL_TAINT]
    shaped_node = replace(back, taints=(NPD, POOL_TAINT), labels={"slurmpool.io/side": "inference", "pool": "default"})
    step = advance(shaped_node.move, shaped_node, Pass(SlurmView(True), spec, NOW))
    assert step.settled == INF
    assert node_patch(POOL, shaped_node, step, NOW)["metadata"]["annotations"][ANN_CORDON_KEPT] is None


def test_our_own_cordon_is_lifted_when_the_node_returns_to_inference():
    spec = make_spec()
    node = NodeView("a", annotations={ANN_PLACEMENT: SLURM, ANN_MOVE: _move(SLURM, INF, Phase.RELABELING)},
                    unschedulable=True, taints=(OURS,), labels={"slurmpool.io/side": "slurm"})
    patch = node_patch(POOL, node, advance(node.move, node, Pass(SlurmView(True), spec, NOW)), NOW)
    assert patch["spec"]["unschedulable"] is False


def test_a_cordon_set_after_our_uncordon_and_before_the_move_ends_is_theirs():
    """Found by e2e/test_neighbours.py in CI: Relabeling lifted our cordon and taint; another writer
    cordoned the node before the pass that records the move's end. That pass, and a write of the
    shape rebuilt after a conflict, must not lift their cordon: ours never stands without our taint."""
    spec = make_spec()
    labels = {"slurmpool.io/side": "inference", "pool": "default"}
    node = NodeView("a", annotations={ANN_PLACEMENT: SLURM, ANN_MOVE: _move(SLURM, INF, Phase.RELABELING)},
                    unschedulable=True, taints=(POOL_TAINT,), labels=labels, version="4")
    step = advance(node.move, node, Pass(SlurmView(True), spec, NOW))
    assert step.settled == INF and not any(isinstance(a, PatchNode) for a in step.actions)
    assert "unschedulable" not in node_patch(POOL, node, step, NOW).get("spec", {})
    # the uncordon written on a Node they cordoned since the pass read it (a conflict, rebuilt)
    before = NodeView("a", annotations=node.annotations, unschedulable=True, taints=(OURS,), labels={"slurmpool.io/side": "slurm"}, version="3")
    shape = inference_shape(spec, before, spec.inference.pools[0])
    assert shape.unschedulable is False
    theirs = replace(before, unschedulable=True, taints=(POOL_TAINT,), labels=labels, version="5")
    assert "unschedulable" not in shape_write(before, theirs, shape)["spec"]


def test_a_cordon_someone_set_between_our_read_and_our_cordon_is_theirs():
    before = NodeView("a", version="7")  # schedulable when the pass read it
    shape = slurm_shape(make_spec(), before, keep_pool_labels=True, claims_cordon=True)
    now = replace(before, unschedulable=True, version="8")  # kubectl cordon won the race
    patch = shape_write(before, now, shape)
    assert patch["metadata"]["annotations"] == {ANN_CORDON_KEPT: "true"} and "unschedulable" not in patch["spec"]
    # but our own cordon, read back late with our taint beside it, is not mistaken for theirs
    ours = replace(before, unschedulable=True, taints=(OURS,), version="9")
    assert "annotations" not in shape_write(before, ours, shape)["metadata"]


def test_a_restored_cordon_after_their_uncordon_is_ours_again():
    before = NodeView("a", annotations={ANN_CORDON_KEPT: "true"}, taints=(OURS,), version="3")
    patch = shape_write(before, before, slurm_shape(make_spec(), before, keep_pool_labels=True))
    assert patch["spec"]["unschedulable"] is True and patch["metadata"]["annotations"] == {ANN_CORDON_KEPT: None}


def test_between_pools_the_cordon_is_never_written():
    spec = make_spec(pools=[("default", 0, 0, None), ("llm", 0, 0, None)])
    for cordoned in (False, True):
        node = NodeView("a", annotations={ANN_PLACEMENT: INF, ANN_MOVE: _move(INF, "inference:llm", Phase.RELABELING)},
                        unschedulable=cordoned, labels={"slurmpool.io/side": "inference"})
        patch = node_patch(POOL, node, advance(node.move, node, Pass(SlurmView(True), spec, NOW)), NOW)
        assert "unschedulable" not in patch["spec"] and patch["metadata"]["labels"]["pool"] == "llm"


def test_a_cordon_lifted_before_a_conflict_is_ours_on_the_rebuilt_write():
    """Found in review: the pass read an admin's cordon and marked it kept; they uncordoned before
    the write met a conflict. The rebuilt write cordons the node itself: that cordon is ours, not
    kept for them (else the node would stay cordoned once back in inference)."""
    spec = make_spec(slurm_nodes=1)
    before = NodeView("a", annotations={ANN_PLACEMENT: INF, ANN_MOVE: _move(INF, SLURM, Phase.CORDONING)}, unschedulable=True,
                      labels={"slurmpool.io/side": "inference"}, version="1")
    step = advance(before.move, before, Pass(SlurmView(True), spec, NOW))
    first = node_patch(POOL, before, step, NOW)
    assert first["metadata"]["annotations"][ANN_CORDON_KEPT] == "true"  # theirs, as the pass saw it
    current = replace(before, unschedulable=False, version="2")
    again = rebuilt(before, current, step, shape_of(step), first)
    assert again["spec"]["unschedulable"] is True and ANN_CORDON_KEPT not in again["metadata"]["annotations"]
    assert again["metadata"]["resourceVersion"] == "2"
    assert {k: v for k, v in again["metadata"]["annotations"].items()} == {
        k: v for k, v in first["metadata"]["annotations"].items() if k != ANN_CORDON_KEPT}  # the record is the step's


class ConflictingKube:
    """A Node someone else writes between every read and write, `conflicts` times."""

    def __init__(self, node: NodeView, conflicts: int, theirs: dict):
        self.node, self.conflicts, self.theirs = node, conflicts, theirs
        self.written: list[dict] = []
        self.reads = 0

    async def patch_node(self, name, patch):
        if patch.get("metadata", {}).get("resourceVersion") not in (None, self.node.version):
            raise Conflict(name)
        if self.conflicts:
            self.conflicts -= 1
            self.node = replace(self.node, taints=self.node.taints + (dict(self.theirs, key=f"{self.theirs['key']}-{self.conflicts}"),),
                                version=str(int(self.node.version) + 1))
            raise Conflict(name)
        self.written.append(patch)

    async def read_node(self, name):
        self.reads += 1
        return self.node

    async def patch_node_later(self, name, patch): ...
    async def create_slurmd_pod(self, pool, spec, node, slurm_name=None, boot=False): ...
    async def delete_pod(self, namespace, name, uid): ...
    async def evict(self, namespace, name): ...
    async def event(self, obj, type_, reason, message): ...


class NoSlurm(Refusing):
    async def drain(self, nodes, reason): ...
    async def resume(self, nodes): ...


async def _pass(node: NodeView, kube) -> object:
    spec = make_spec(slurm_nodes=0)
    snap = PoolSnapshot(pool=POOL, spec=spec, nodes=(node,), slurm=SlurmView(True), now=NOW)
    return await apply(ApplyContext(POOL, spec, [node], kube, NoSlurm()), decide(snap))


async def test_a_conflict_rebuilds_the_write_on_the_node_as_it_is_now():
    node = NodeView("a", annotations={ANN_PLACEMENT: SLURM, ANN_MOVE: _move(SLURM, INF, Phase.RELABELING)},
                    unschedulable=True, taints=(OURS,), labels={"slurmpool.io/side": "slurm"}, version="1")
    kube = ConflictingKube(node, conflicts=2, theirs=NPD)
    result = await _pass(node, kube)
    assert kube.reads == 2 and len(kube.written) == 1 and not result.unwritten
    written = kube.written[0]
    assert {t["key"] for t in written["spec"]["taints"]} == {NPD["key"] + "-1", NPD["key"] + "-0", "inference"}
    assert written["metadata"]["resourceVersion"] == "3" and written["spec"]["unschedulable"] is False


async def test_a_node_that_keeps_changing_is_left_for_the_next_pass():
    node = NodeView("a", annotations={ANN_PLACEMENT: SLURM, ANN_MOVE: _move(SLURM, INF, Phase.RELABELING)},
                    unschedulable=True, taints=(OURS,), labels={"slurmpool.io/side": "slurm"}, version="1")
    kube = ConflictingKube(node, conflicts=100, theirs=NPD)
    result = await _pass(node, kube)
    assert result.unwritten == {"a"} and kube.written == []
    assert any("changed meanwhile" in e or "patch node a" in e for e in result.errors)


# ---------------------------------------------------------------- the adapter: which answer is which


def _adapter(status: int | None, body: str = ""):
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes.client.exceptions import ApiException

    from slurmpool.adapters import kube

    class Core:
        def patch_node(self, name, patch, **_):
            if status is not None:
                err = ApiException(status=status, reason="test")
                err.body = body
                raise err

        create_namespaced_pod = patch_node

    adapter = kube.KubeAdapter.__new__(kube.KubeAdapter)  # no API client: a fake core
    adapter.requests, adapter.core, adapter._pool = 0, Core(), ThreadPoolExecutor(1)
    return adapter


async def test_a_failed_precondition_is_a_conflict_and_a_4xx_a_refusal():
    import pytest

    with pytest.raises(Conflict):
        await _adapter(409).patch_node("a", {})
    refusal = '{"message": "pods \\"slurmd-a\\" is forbidden: no PriorityClass with name gold was found"}'
    with pytest.raises(Exception) as caught:
        await _adapter(403, refusal).create_slurmd_pod(POOL, make_spec(), "a")
    assert type(caught.value).__name__ == "Refused" and "(403)" in str(caught.value) and "PriorityClass" in str(caught.value)
    with pytest.raises(Exception) as caught:  # "not now": retried, never a refusal
        await _adapter(429).patch_node("a", {})
    assert type(caught.value).__name__ == "ApiException"
    await _adapter(409).create_slurmd_pod(POOL, make_spec(), "a")  # already there: success
