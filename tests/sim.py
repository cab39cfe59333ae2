"""A tiny pure simulation of one node's world (Kubernetes side and Slurm side) that
applies the state machine's actions, so moves can be walked, crashed and resumed in
unit tests without a cluster. It is deliberately simple: the lab tests the real thing.

Slurm's reasons are modelled per version, as slurmctld's set_node_reason() and RESUME do:
- "22.05": RESUME clears the Reason; a node that stops responding keeps its Reason.
- "24.11" (23.11 and later, accounting off): RESUME keeps the Reason and its stamp; a reason
  Slurm sets on a node that has one is appended (" : Not responding", " : gres/gpu count ...")
  and restamped by SlurmUser.
`drain_owner` is the ground truth the operator cannot see: who set the drain in force. Resuming a
drain that is not slurmpool's fails the test.

Power saving (slurmctld's power_save.c, 22.05): POWER_DOWN queues a power-down, taken at the next
tick by an idle node (POWERING_DOWN), powered down the tick after (POWERED_DOWN; the drain and its
reason stay). POWER_UP is taken at the next tick (POWERING_UP, NOT_RESPONDING); a job Slurm places
on a lendable node makes it POWERING_UP too (`slurm_asks_back`). It counts as booted only when a
slurmd started with `-b` registers; otherwise, ResumeTimeout after the request, it is DOWN and
POWERED_DOWN, its drain gone and its jobs requeued. A power-down of a node powering up with no job
is the bridge's POWER_DOWN_FORCE: taken at once. "26.05" also lifts the drain of a node as it
powers it down (its power_save.c: "Clear power_down_asap"). A power request while power saving is
off is refused (22.05 and 24.11 take none then). A slurmd started on a powered-down node fails the test.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from slurmbridge import PowerSave, SlurmJob, SlurmNode
from slurmpool.core import slurmstate
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.moves import (
    Cancel, CreateSlurmdPod, DeleteSlurmdPod, Drain, Evict, Pass, PatchNode, PowerDown, PowerUp, Requeue, Resume, Signal, Step, advance,
)
from slurmpool.core.patch import VIEWED, after, node_patch
from slurmpool.core.view import ANN_POOL, DrainClaim, MoveRecord, NodeView, PodView, SlurmView

VERSIONS = ("22.05", "24.11")
POOL = PoolRef("ns", "gpu", "uid")
RESUME_TIMEOUT = timedelta(seconds=60)
POWER_SAVE_ON = PowerSave(on=True, why_off="", resume_timeout=RESUME_TIMEOUT, suspend_exc_parts=("gpu",))
POWER_SAVE_OFF = PowerSave(on=False, why_off="SuspendTime=INFINITE", resume_timeout=RESUME_TIMEOUT)
POWER_REQUESTS = frozenset({"POWER_DOWN", "POWER_UP"})


def merged(node: NodeView, patch: dict) -> NodeView:
    """The Node once the apiserver took the operator's merge patch (core/patch.py's node_patch: record
    and shape in one request), as the next pass reads it. The record it shows is checked against the
    core's own `after`, the view a pass decides on after the step: the two must never disagree."""
    meta, spec = patch.get("metadata", {}), patch.get("spec", {})
    labels = {k: v for k, v in {**node.labels, **meta.get("labels", {})}.items() if v is not None}
    annotations = {k: v for k, v in {**node.annotations, **meta.get("annotations", {})}.items() if v is not None}
    written = replace(node, labels=labels, annotations=annotations, taints=tuple(spec.get("taints", node.taints)),
                      unschedulable=spec.get("unschedulable", node.unschedulable))
    seen = after(node, patch).annotations
    assert {k: v for k, v in annotations.items() if k in VIEWED} == {k: v for k, v in seen.items() if k in VIEWED}, patch
    return written


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
    signalled: list[str] = field(default_factory=list)  # every job a signal reached, once per signal
    log: list[str] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)  # the phases the moves entered, in order (run_move)
    actions: list = field(default_factory=list)  # every action applied, in order
    version: str = "22.05"
    drain_owner: str | None = None  # slurmpool | slurm | admin: who set the drain in force
    clock: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc)
    # Slurm's power saving as the operator reads it (None: the operator cannot read it; Slurm has it on)
    power_save: PowerSave | None = None
    booting: bool = False  # the slurmd pod was started with -b
    power_up_at: datetime | None = None  # when Slurm began powering the node up (ResumeTimeout runs from it)

    def __post_init__(self) -> None:
        if self.drain_owner is None and self.slurm_node is not None and self.slurm_node.drain_set:
            claimed = self.node.drain_claim is not None and self.node.drain_claim.reason == self.slurm_node.reason
            self.drain_owner = "slurmpool" if claimed else "admin"

    # -- Slurm's own hand
    def slurm_sets_reason(self, message: str, drain: bool = False) -> None:
        """slurmctld's set_node_reason(): append to a Reason already there (24.11), restamp."""
        sn = self.slurm_node
        reason = sn.reason
        if not reason:
            reason = message
        elif self.version != "22.05" and f" : {message}" not in reason:
            reason = f"{reason} : {message}"
        flags = sn.flags | {"DRAIN"} if drain else sn.flags
        self.slurm_node = replace(sn, reason=reason, flags=flags, reason_user="slurm", reason_time=self.clock)
        if drain:
            self.drain_owner = "slurm"

    def registers_short(self) -> None:
        """slurmd came back with fewer GPUs than configured: Slurm drains the node itself."""
        self.slurm_sets_reason("gres/gpu count reported lower than configured (7 < 8)", drain=True)
        self.slurm_node = replace(self.slurm_node, flags=self.slurm_node.flags | {"INVALID_REG"})

    def admin_drains(self, reason: str) -> None:
        self.slurm_node = replace(self.slurm_node, flags=self.slurm_node.flags | {"DRAIN"}, reason=reason,
                                  reason_user="admin", reason_time=self.clock)
        self.drain_owner = "admin"

    def admin_resumes(self) -> None:
        self._resume()

    def _resume(self) -> None:
        sn = self.slurm_node
        keep = self.version != "22.05"  # 23.11+: the Reason and its stamp stay
        self.slurm_node = replace(sn, flags=sn.flags - {"DRAIN", "INVALID_REG"}, reason=sn.reason if keep else None,
                                  reason_time=sn.reason_time if keep else None, reason_user=sn.reason_user if keep else None)
        self.drain_owner = None

    def view(self) -> SlurmView:
        if not self.slurm_up:
            return SlurmView(False, error="down")
        nodes = {self.slurm_node.name: self.slurm_node} if self.slurm_node else {}
        return SlurmView(True, nodes=nodes, jobs=tuple(self.jobs), power_save=self.power_save)

    def slurm_asks_back(self, job_id: str = "900") -> None:
        """Slurm places a job on the lendable node (`idle~`): POWERING_UP, the job CONFIGURING."""
        sn = self.slurm_node
        assert sn.flags >= {"POWERED_DOWN"} and not sn.drain_set, f"Slurm schedules only on a lendable node: {slurmstate.text(sn)}"
        self.slurm_node = replace(sn, state="MIXED", flags=sn.flags - {"POWERED_DOWN"} | {"POWERING_UP", "NOT_RESPONDING"})
        self.power_up_at = self.clock
        self.jobs.append(SlurmJob(job_id=job_id, name="pinned", user="alice", state="CONFIGURING", partition="gpu", nodes=(sn.name,),
                                  gpus_per_node=8, num_nodes=1, start_time=None, end_time=None, reason="None"))

    # -- world dynamics between reconciles
    def _power_tick(self, has_slurmd: bool) -> bool:
        """Power saving's part of a tick; True when it decided the node's state."""
        sn = self.slurm_node
        flags, busy = sn.flags, any(self.node.name in j.nodes for j in self.jobs)
        if "POWERING_UP" in flags and has_slurmd and self.booting and self.slurmd_registers:  # registered with -b: booted
            self.slurm_node = replace(sn, state="MIXED" if busy else "IDLE", flags=flags - {"POWERING_UP", "NOT_RESPONDING", "POWERED_DOWN"})
            self.jobs = [replace(j, state="RUNNING") if j.state == "CONFIGURING" else j for j in self.jobs]
            self.power_up_at = None
        elif "POWERING_UP" in flags and self.clock >= self.power_up_at + RESUME_TIMEOUT:  # not resumed by ResumeTimeout
            self.requeued += [j.job_id for j in self.jobs]
            self.jobs, self.power_up_at, self.drain_owner = [], None, None
            self.slurm_node = replace(sn, state="DOWN", flags=flags - {"POWERING_UP", "DRAIN", "POWER_DOWN", "NOT_RESPONDING"} | {"POWERED_DOWN"})
        elif "POWERING_UP" in flags:
            pass
        elif "POWER_UP" in flags:
            self.slurm_node = replace(sn, flags=flags - {"POWER_UP", "POWERED_DOWN"} | {"POWERING_UP", "NOT_RESPONDING"})
            self.power_up_at = self.clock
        elif "POWERING_DOWN" in flags:
            self.slurm_node = replace(sn, state="IDLE", flags=flags - {"POWERING_DOWN"} | {"POWERED_DOWN"})
        elif "POWER_DOWN" in flags and not busy and not has_slurmd:
            lifted = {"DRAIN"} if self.version == "26.05" else set()  # 26.05 clears a drain as it powers a node down
            self.slurm_node = replace(sn, state="IDLE", flags=flags - {"POWER_DOWN", "NOT_RESPONDING"} - lifted | {"POWERING_DOWN"})
            if lifted:
                self.drain_owner = None
        else:
            return "POWERED_DOWN" in flags
        return True

    def tick(self) -> None:
        sn = self.slurm_node
        if sn is None:  # Slurm does not know the node: only the pods move on
            self.node = replace(self.node, pods=tuple(p for p in self.node.pods if not p.deleting))
            return
        has_slurmd = self.node.slurmd_pod is not None
        if self._power_tick(has_slurmd):
            self.node = replace(self.node, pods=tuple(p for p in self.node.pods if not p.deleting))
            return
        busy = any(self.node.name in j.nodes for j in self.jobs)
        if has_slurmd and self.slurmd_registers:
            state = "MIXED" if busy else "IDLE"
            self.slurm_node = replace(sn, state=state, flags=sn.flags - {"NOT_RESPONDING"})
        elif not has_slurmd:
            if sn.reason and "NOT_RESPONDING" not in sn.flags:
                self.slurm_sets_reason("Not responding")
            self.slurm_node = replace(self.slurm_node, state="DOWN", flags=self.slurm_node.flags | {"NOT_RESPONDING"})
        # a deleting pod finishes its graceful stop
        pods = tuple(p for p in self.node.pods if not p.deleting)
        self.node = replace(self.node, pods=pods)

    def finish_jobs(self) -> None:
        self.jobs = []

    # -- actions
    def apply(self, action) -> None:
        self.log.append(type(action).__name__)
        self.actions.append(action)
        sn = self.slurm_node
        if isinstance(action, Drain) and sn:
            # The machine drains only a node not drained yet: it never overwrites anyone's reason.
            assert not sn.drain_set, f"drained {sn.name} again over reason {sn.reason!r}"
            claim = self.node.drain_claim
            assert claim is not None and claim.reason == action.reason, "drained without claiming the drain first"
            self.slurm_node = replace(sn, flags=sn.flags | {"DRAIN"}, reason=action.reason, reason_user="root", reason_time=self.clock)
            self.drain_owner = "slurmpool"
            if slurmstate.powering_up(sn) and slurmstate.busy(sn):  # "DRAIN/FAIL request for node ... being powered up. Requeuing jobs"
                self.requeued += [j.job_id for j in self.jobs]
                self.jobs = []
                self.slurm_node = replace(self.slurm_node, state="IDLE")
        elif isinstance(action, Resume) and sn:
            assert self.drain_owner in ("slurmpool", None), f"resumed a drain set by {self.drain_owner}: {sn.reason!r}"
            self._resume()
        elif isinstance(action, PowerDown | PowerUp) and sn and (self.power_save is None or self.power_save.on):
            if isinstance(action, PowerUp) and slurmstate.powered_down(sn):
                self.slurm_node = replace(sn, flags=sn.flags | {"POWER_UP"})
            elif isinstance(action, PowerDown) and slurmstate.powering_up(sn) and not slurmstate.busy(sn):
                # the bridge's POWER_DOWN_FORCE (a plain POWER_DOWN waits for ResumeTimeout there)
                self.slurm_node = replace(sn, flags=sn.flags - {"POWERING_UP", "NOT_RESPONDING"} | {"POWER_DOWN"})
                self.power_up_at = None
            elif isinstance(action, PowerDown) and not slurmstate.parked(sn):
                self.slurm_node = replace(sn, flags=sn.flags | {"POWER_DOWN"})
        elif isinstance(action, Signal):
            self.signalled += [j for j in action.job_ids if any(job.job_id == j for job in self.jobs)]
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
            assert not (sn and slurmstate.powered_down(sn)), "a slurmd started on a node Slurm shows powered down"
            if self.node.slurmd_pod is None:
                pod = PodView("slurm", f"slurmd-{self.node.name}", "uid", slurmd=True)
                self.node = replace(self.node, pods=self.node.pods + (pod,))
                self.booting = action.boot
        elif isinstance(action, DeleteSlurmdPod):
            self.node = replace(self.node, pods=tuple(replace(p, deleting=True) if p.slurmd else p for p in self.node.pods))
        else:
            assert not isinstance(action, PatchNode), "a node's shape is written with its record: write(node_patch(...))"

    def write(self, patch: dict) -> None:
        """The operator's node patch (record and shape), as apply.py sends it."""
        self.node = merged(self.node, patch)


SLURM_ACTIONS = (Drain, Resume, PowerDown, PowerUp, Signal, Requeue, Cancel)


def run_move(world: World, spec, now: datetime, rounds=40, crash_at: int | None = None, crash_keeps_slurm=False, step_seconds=1.0):
    """Reconcile until the move settles, in the executor's order: the node patch (record and
    shape, one atomic request), then Slurm actions, then pod actions. `crash_at`: on that
    round the operator dies after the node patch (and, with `crash_keeps_slurm`, after the
    Slurm actions too); the next round is what a restarted operator does."""
    for i in range(rounds):
        move = world.node.move
        if move is None:
            return world
        world.clock = now
        step = advance(move, world.node, Pass(world.view(), spec, now))
        world.phases += [str(p) for p in step.entered]
        world.write(node_patch(POOL, world.node, step, now))
        groups = [
            [a for a in step.actions if isinstance(a, SLURM_ACTIONS)],
            [a for a in step.actions if not isinstance(a, (PatchNode, *SLURM_ACTIONS))],
        ]
        if i == crash_at:
            groups = groups[: 1 if crash_keeps_slurm else 0]
        for group in groups:
            for action in group:
                world.apply(action)
        world.tick()
        now += timedelta(seconds=step_seconds)
    return world


def parked(node: NodeView, slurm_node: SlurmNode, pool: str, at: datetime) -> tuple[NodeView, SlurmNode]:
    """A node slurmpool parked in inference: its claim on the Node, its drain in Slurm."""
    reason = f"slurmpool: moving to inference:{pool}"
    node = merged(node, node_patch(POOL, node, Step(None, claim=DrainClaim(reason, at)), at))
    return node, replace(slurm_node, flags=slurm_node.flags | {"DRAIN"}, reason=reason, reason_user="root", reason_time=at)


def start(world: World, source: str, target: str, now: datetime) -> None:
    from slurmpool.core.moves import first_phase

    move = MoveRecord(id="m1", source=source, target=target, phase=first_phase(target, source), since=now, started=now)
    world.write(node_patch(POOL, world.node, Step(move), now))


@dataclass
class PoolWorld:
    """Several nodes of one pool, each its own World, moved by whole passes: snapshot ->
    decide -> the actions in the executor's order. No fakes of the core: decide() runs as is."""

    spec: object
    worlds: dict[str, World]
    now: datetime
    status: object = None
    decisions: list = field(default_factory=list)
    outside: set[str] = field(default_factory=set)  # Nodes the pool's selector no longer selects (relabelled)
    reservations: tuple | None = None  # Slurm's reservations as the poll lists them (None: not read)
    reservations_error: str | None = None  # their read failed

    def view(self) -> SlurmView:
        nodes = {w.slurm_node.name: w.slurm_node for w in self.worlds.values() if w.slurm_node}
        power_save = next(iter(self.worlds.values())).power_save if self.worlds else None
        return SlurmView(True, nodes=nodes, jobs=tuple(j for w in self.worlds.values() for j in w.jobs), power_save=power_save,
                         reservations=self.reservations, reservations_error=self.reservations_error)

    def snapshot(self):
        from slurmpool.core.snapshot import PoolSnapshot

        nodes = tuple(w.node for n, w in self.worlds.items() if n not in self.outside)
        # As controller/snapshots.py finds them: this pool's move record on a Node no pool selects.
        strays = tuple(w.node for n, w in self.worlds.items()
                       if n in self.outside and w.node.move is not None and w.node.annotations.get(ANN_POOL) == POOL.key)
        return PoolSnapshot(pool=POOL, spec=self.spec, nodes=nodes, slurm=self.view(), now=self.now, previous=self.status,
                            strays=strays)

    def run(self, passes: int = 30) -> None:
        from slurmpool.core.decide import decide
        from slurmpool.core.snapshot import ApplyResult
        from slurmpool.core.status import build_status

        for _ in range(passes):
            snap = self.snapshot()
            decision = decide(snap)
            self.decisions.append(decision)
            for world in self.worlds.values():
                world.clock = self.now
            for name, step in decision.steps.items():
                world = self.worlds[name]
                world.write(decision.patches.get(name, {}))
                for action in step.actions:
                    if isinstance(action, SLURM_ACTIONS):
                        world.apply(action)
                for action in step.actions:
                    if not isinstance(action, (PatchNode, *SLURM_ACTIONS)):
                        world.apply(action)
            for world in self.worlds.values():
                world.tick()
            self.status = build_status(snap, decision, ApplyResult())
            self.now += timedelta(seconds=1)
