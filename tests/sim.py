"""A tiny pure simulation of one node's world (Kubernetes side and Slurm side) that
applies the state machine's actions, so moves can be walked, crashed and resumed in
unit tests without a cluster. It is deliberately simple: the lab tests the real thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from slurmbridge import SlurmJob, SlurmNode
from slurmpool.moves import Cancel, CreateSlurmdPod, DeleteSlurmdPod, Drain, Evict, PatchNode, Requeue, Resume, advance
from slurmpool.view import ANN_MOVE, ANN_PLACEMENT, MoveRecord, NodeView, PodView, SlurmView


@dataclass
class World:
    node: NodeView
    slurm_node: SlurmNode | None
    jobs: list[SlurmJob] = field(default_factory=list)
    protected: set[str] = field(default_factory=set)  # pods a PDB protects
    slurm_up: bool = True
    slurmd_registers: bool = True
    requeued: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def view(self) -> SlurmView:
        if not self.slurm_up:
            return SlurmView(False, error="down")
        nodes = {self.slurm_node.name: self.slurm_node} if self.slurm_node else {}
        return SlurmView(True, nodes=nodes, jobs=tuple(self.jobs))

    # -- world dynamics between reconciles
    def tick(self) -> None:
        sn = self.slurm_node
        if sn is None:  # Slurm does not know the node: only the pods move on
            self.node = replace(self.node, pods=tuple(p for p in self.node.pods if not p.deleting))
            return
        has_slurmd = self.node.slurmd_pod is not None
        busy = any(self.node.name in j.nodes for j in self.jobs)
        if has_slurmd and self.slurmd_registers:
            state = "MIXED" if busy else "IDLE"
            self.slurm_node = replace(sn, state=state, flags=sn.flags - {"NOT_RESPONDING"})
        elif not has_slurmd:
            self.slurm_node = replace(sn, state="DOWN", flags=sn.flags | {"NOT_RESPONDING"})
        # a deleting pod finishes its graceful stop
        pods = tuple(p for p in self.node.pods if not p.deleting)
        self.node = replace(self.node, pods=pods)

    def finish_jobs(self) -> None:
        self.jobs = []

    # -- actions
    def apply(self, action) -> None:
        self.log.append(type(action).__name__)
        sn = self.slurm_node
        if isinstance(action, Drain) and sn:
            # The machine drains only a node not drained yet: it never overwrites anyone's reason.
            assert not sn.drain_set, f"drained {sn.name} again over reason {sn.reason!r}"
            self.slurm_node = replace(sn, flags=sn.flags | {"DRAIN"}, reason=action.reason)
        elif isinstance(action, Resume) and sn:
            assert sn.reason and sn.reason.startswith("slurmpool:"), "resumed a drain that is not ours"
            self.slurm_node = replace(sn, flags=sn.flags - {"DRAIN"}, reason=None)
        elif isinstance(action, Requeue):
            self.requeued += action.job_ids
            self.jobs = [j for j in self.jobs if j.job_id not in action.job_ids]
        elif isinstance(action, Cancel):
            self.cancelled += action.job_ids
            self.jobs = [j for j in self.jobs if j.job_id not in action.job_ids]
        elif isinstance(action, Evict):
            if action.pod.key not in self.protected:
                self.node = replace(self.node, pods=tuple(p if p.key != action.pod.key else replace(p, deleting=True) for p in self.node.pods))
        elif isinstance(action, CreateSlurmdPod):
            if self.node.slurmd_pod is None:
                pod = PodView("slurm", f"slurmd-{self.node.name}", "uid", slurmd=True)
                self.node = replace(self.node, pods=self.node.pods + (pod,))
        elif isinstance(action, DeleteSlurmdPod):
            self.node = replace(self.node, pods=tuple(replace(p, deleting=True) if p.slurmd else p for p in self.node.pods))
        elif isinstance(action, PatchNode):
            labels = dict(self.node.labels)
            for k, v in action.labels.items():
                if v is None:
                    labels.pop(k, None)
                else:
                    labels[k] = v
            self.node = replace(self.node, labels=labels, taints=action.taints, unschedulable=action.unschedulable)

    def record(self, move: MoveRecord | None, settled: str | None) -> None:
        ann = dict(self.node.annotations)
        ann.pop(ANN_MOVE, None)
        if move:
            ann[ANN_MOVE] = move.to_annotation()
        if settled:
            ann[ANN_PLACEMENT] = settled
        self.node = replace(self.node, annotations=ann)


SLURM_ACTIONS = (Drain, Resume, Requeue, Cancel)


def run_move(world: World, spec, now: datetime, rounds=40, crash_at: int | None = None, crash_keeps_slurm=False, step_seconds=1.0):
    """Reconcile until the move settles, in the executor's order: the node patch (record and
    shape, one atomic request), then Slurm actions, then pod actions. `crash_at`: on that
    round the operator dies after the node patch (and, with `crash_keeps_slurm`, after the
    Slurm actions too); the next round is what a restarted operator does."""
    for i in range(rounds):
        move = world.node.move
        if move is None:
            return world
        step = advance(move, world.node, world.view(), spec, now)
        world.record(step.move, step.settled)
        groups = [
            [a for a in step.actions if isinstance(a, PatchNode)],
            [a for a in step.actions if isinstance(a, SLURM_ACTIONS)],
            [a for a in step.actions if not isinstance(a, (PatchNode, *SLURM_ACTIONS))],
        ]
        if i == crash_at:
            groups = groups[: 2 if crash_keeps_slurm else 1]
        for group in groups:
            for action in group:
                world.apply(action)
        world.tick()
        now += timedelta(seconds=step_seconds)
    return world


def start(world: World, source: str, target: str, now: datetime) -> None:
    from slurmpool.moves import first_phase

    world.record(MoveRecord(id="m1", source=source, target=target, phase=first_phase(target, source), since=now, started=now), None)


@dataclass
class PoolWorld:
    """Several nodes of one pool, each its own World, moved by whole passes: snapshot ->
    decide -> the actions in the executor's order. No fakes of the core: decide() runs as is."""

    spec: object
    worlds: dict[str, World]
    now: datetime
    status: object = None
    decisions: list = field(default_factory=list)

    def view(self) -> SlurmView:
        nodes = {w.slurm_node.name: w.slurm_node for w in self.worlds.values() if w.slurm_node}
        return SlurmView(True, nodes=nodes, jobs=tuple(j for w in self.worlds.values() for j in w.jobs))

    def snapshot(self):
        from slurmpool.interfaces import PoolRef
        from slurmpool.snapshot import PoolSnapshot

        nodes = tuple(w.node for w in self.worlds.values())
        return PoolSnapshot(pool=PoolRef("ns", "gpu", "uid"), spec=self.spec, nodes=nodes, slurm=self.view(), now=self.now, previous=self.status)

    def run(self, passes: int = 30) -> None:
        from slurmpool.decide import decide
        from slurmpool.snapshot import ApplyResult
        from slurmpool.status import build_status

        for _ in range(passes):
            snap = self.snapshot()
            decision = decide(snap)
            self.decisions.append(decision)
            for name, step in decision.steps.items():
                world = self.worlds[name]
                world.record(step.move, step.settled)
                for kind in ((PatchNode,), SLURM_ACTIONS):
                    for action in step.actions:
                        if isinstance(action, kind):
                            world.apply(action)
                for action in step.actions:
                    if not isinstance(action, (PatchNode, *SLURM_ACTIONS)):
                        world.apply(action)
            for world in self.worlds.values():
                world.tick()
            self.status = build_status(snap, decision, ApplyResult())
            self.now += timedelta(seconds=1)
