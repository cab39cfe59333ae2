"""A property-based model of a whole pool (issue 25): hypothesis drives `decide` over several
nodes and many passes against a simulated Slurm and Kubernetes (tests/sim.py's World per node),
with faults injected between passes:

- a lagging watch (the pass sees the pods of the pass before), relists and restarts (the pool's
  status lost), skewed clocks (slurmctld's stamps behind or ahead of the operator's clock),
  partial Slurm views (a node missing from a poll), Slurm unreachable, refused node writes, a
  failed slurmd pod, crashes between any two steps of a pass (after the node patch, after Slurm);
- people: scale changes, an admin's drain, jobs landing on Slurm nodes;
- parking (issue 39): the pool parks by Drain or PowerSave and switches between them; Slurm's
  power saving turns on and off (sim.py models the power flags, slurmd -b and ResumeTimeout).

Invariants, checked after every rule:
1. no node both runs slurmd and takes inference pods (a slurmd pod on it => cordoned);
2. no drain but the operator's is lifted (World.apply refuses to resume anyone else's drain);
3. never more moves in flight than maxConcurrentMoves;
4. no node stays off both sides past its bounds: once faults stop and jobs end, every move
   settles within a bounded number of passes (`settle`);
5. no slurmd started on a node Slurm shows powered down (World.apply), no node settled in Slurm
   powered down; once settled with power saving on, a PowerSave pool's parked nodes are powered
   down (`settle`).

`EXAMPLES` runs of up to `STEPS` rules each run in `make test`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from slurmbridge import SlurmJob

from slurmpool.core import slurmstate
from slurmpool.controller.published import fold_published
from slurmpool.core.decide import decide
from slurmpool.core.expiry import Requeue, Signal
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.moves import DeleteSlurmdPod, PatchNode
from slurmpool.core.ownership import our_drain
from slurmpool.core.snapshot import ApplyResult, PoolSnapshot
from slurmpool.core.status import build_status
from slurmpool.core.view import ANN_PLACEMENT, ANN_POOL, ANN_SLURM, LABEL_SIDE, SLURM, SLURM_TAINT_KEY, NodeView, PodView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .sim import POWER_SAVE_OFF, POWER_SAVE_ON, SLURM_ACTIONS, World

EXAMPLES = 300  # runs per `make test`
STEPS = 50  # rules per run at most
NODES = ("gpu01", "gpu02", "gpu03", "gpu04")
MAX_MOVES = 2
SETTLE_PASSES = 120  # 2 simulated minutes: the spec's timeouts below are well inside it
SPEC = dict(max_moves=MAX_MOVES, drain={"timeout": "30s", "onTimeout": "Rollback", "evictionTimeout": "30s",
                                        "onEvictionTimeout": "Rollback"})


def slurm_world(name: str) -> World:
    node = NodeView(
        name=name, annotations={ANN_PLACEMENT: SLURM}, labels={LABEL_SIDE: "slurm", "gpu": "true"},
        taints=({"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"},), unschedulable=True,
        pods=(PodView("slurm", f"slurmd-{name}", f"u-{name}", slurmd=True, ready=True),),
    )
    return World(node=node, slurm_node=slurm_node(name), clock=NOW, power_save=POWER_SAVE_ON)


class PoolModel(RuleBasedStateMachine):
    @initialize(slurm_nodes=st.integers(0, len(NODES)), parking=st.sampled_from(["Drain", "PowerSave"]),
                version=st.sampled_from(["22.05", "26.05"]))
    def start(self, slurm_nodes, parking="Drain", version="22.05"):
        spec = make_spec(slurm_nodes=slurm_nodes, **SPEC)
        # registerTimeout bounds a power-up Slurm refuses (its power saving off): inside SETTLE_PASSES
        spec = spec.model_copy(update={"slurm": spec.slurm.model_copy(update={"register_timeout": "60s"})})
        self.spec = with_parking(spec, parking)
        self.worlds = {n: replace(slurm_world(n), version=version) for n in NODES}
        self.power_save = POWER_SAVE_ON
        self.now = NOW
        self.status = None
        self.skew = timedelta(0)  # slurmctld's clock minus the operator's
        self.lag = False
        self.stale_pods: dict[str, tuple] = {}
        self.missing: set[str] = set()
        self.slurm_down = False
        self.refused: set[str] = set()
        self.crash: str | None = None  # after-patch | after-slurm
        self.job_ids = iter(range(100, 100000))

    # ------------------------------------------------------------ the operator's pass
    def view(self) -> SlurmView:
        if self.slurm_down:
            return SlurmView(False, error="down")
        nodes = {w.slurm_node.name: w.slurm_node for n, w in self.worlds.items() if w.slurm_node and n not in self.missing}
        return SlurmView(True, nodes=nodes, jobs=tuple(j for w in self.worlds.values() for j in w.jobs), power_save=self.power_save)

    def seen(self, name: str, world: World) -> NodeView:
        if self.lag and name in self.stale_pods:
            return replace(world.node, pods=self.stale_pods[name])
        return world.node

    def membership(self) -> dict:
        """The snapshot's nodes as controller/snapshots.py sorts them (MembershipModel churns them)."""
        return {"nodes": tuple(self.seen(n, w) for n, w in self.worlds.items())}

    def one_pass(self) -> None:
        snap = PoolSnapshot(pool=PoolRef("ns", "gpu", "uid"), spec=self.spec, slurm=self.view(), now=self.now,
                            previous=self.status, **self.membership())
        decision = decide(snap)
        for world in self.worlds.values():
            world.clock = self.now + self.skew  # Slurm stamps its reasons by its own clock
        refused = set(self.refused) & set(decision.steps)
        if decision.ending & set(decision.patches) and not decision.starts_may_follow(refused):
            refused |= decision.starting  # apply.py writes no start after a refused ending
        patches, folded = fold_published(decision.patches, decision.publish, {})
        for name in decision.steps:
            if name in refused:  # the node patch refused: no other step for it this pass (apply.py)
                continue
            self.worlds[name].write(patches.get(name, {}))  # the record and shape, Slurm's state folded in, as apply.py sends them
        if self.crash != "after-patch":
            for name, step in decision.steps.items():
                if name not in refused:
                    for action in step.actions:
                        if isinstance(action, SLURM_ACTIONS):
                            self.sends(name, action)
                            self.worlds[name].apply(action)
        if self.crash is None:
            for name, step in decision.steps.items():
                if name not in refused:
                    for action in step.actions:
                        if not isinstance(action, (PatchNode, *SLURM_ACTIONS)):
                            self.sends(name, action)
                            self.worlds[name].apply(action)
            for name, value in decision.publish.items():  # Slurm's state on the other Nodes, last in apply.py
                if name not in folded or name in refused:
                    self.worlds[name].write({"metadata": {"annotations": {ANN_SLURM: value}}})
            self.status = build_status(snap, decision, ApplyResult())
        else:
            self.status = None  # a restarted operator starts from the nodes alone
        self.crash = None
        self.stale_pods = {n: w.node.pods for n, w in self.worlds.items()}
        for world in self.worlds.values():
            world.tick()
        self.now += timedelta(seconds=1)

    def sends(self, name: str, action: object) -> None:
        """An action about to reach the node's world, Slurm's or a pod's (a model with more invariants checks it)."""

    # ------------------------------------------------------------ rules
    @rule(passes=st.integers(1, 5))
    def passes(self, passes):
        for _ in range(passes):
            self.one_pass()

    @rule(parking=st.sampled_from(["Drain", "PowerSave"]))
    def switch_parking(self, parking):
        self.spec = with_parking(self.spec, parking)

    @rule(state=st.sampled_from(["on", "off", "unknown"]))
    def slurm_power_save(self, state):
        """slurm.conf's power saving turned off or on (a reconfigure), or its read failing."""
        self.power_save = {"on": POWER_SAVE_ON, "off": POWER_SAVE_OFF, "unknown": None}[state]
        for world in self.worlds.values():
            world.power_save = self.power_save

    @rule(n=st.integers(0, len(NODES)))
    def scale(self, n):
        self.spec = self.spec.model_copy(update={"slurm_nodes": n})

    @rule(seconds=st.sampled_from([5, 20, 40]))
    def time_passes(self, seconds):
        self.now += timedelta(seconds=seconds)

    @rule(on=st.booleans())
    def lagging_watch(self, on):
        self.lag = on

    @rule()
    def relist(self):
        self.status = None

    @rule(seconds=st.integers(-30, 30))
    def skew_clocks(self, seconds):
        self.skew = timedelta(seconds=seconds)

    @rule(name=st.sampled_from(NODES), on=st.booleans())
    def partial_slurm_view(self, name, on):
        (self.missing.add if on else self.missing.discard)(name)

    @rule(down=st.booleans())
    def slurm_unreachable(self, down):
        self.slurm_down = down

    @rule(name=st.sampled_from(NODES), on=st.booleans())
    def refuse_writes(self, name, on):
        (self.refused.add if on else self.refused.discard)(name)

    @rule(where=st.sampled_from(["after-patch", "after-slurm"]))
    def crash_in_next_pass(self, where):
        self.crash = where
        self.one_pass()

    @rule(name=st.sampled_from(NODES))
    def slurmd_pod_fails(self, name):
        world = self.worlds[name]
        pods = tuple(replace(p, phase="Failed", ready=False) if p.slurmd else p for p in world.node.pods)
        world.node = replace(world.node, pods=pods)

    @rule(name=st.sampled_from(NODES))
    def job_lands(self, name):
        world = self.worlds[name]
        sn = world.slurm_node
        if sn is None or sn.drain_set or not sn.responding or world.node.slurmd_pod is None:
            return  # Slurm schedules only on a responding node nobody drained
        job = SlurmJob(job_id=str(next(self.job_ids)), name="train", user="alice", state="RUNNING", partition="gpu",
                       nodes=(name,), gpus_per_node=8, num_nodes=1, start_time=None, end_time=None, reason="None")
        world.jobs.append(job)

    @rule()
    def jobs_everywhere(self):
        """Every node Slurm can use runs a job: a scale-down has only busy nodes to drain."""
        for name in NODES:
            self.job_lands(name)

    @rule()
    def jobs_finish(self):
        for world in self.worlds.values():
            world.finish_jobs()

    @rule(name=st.sampled_from(NODES))
    def admin_drains(self, name):
        world = self.worlds[name]
        if world.slurm_node is not None and not world.slurm_node.drain_set:
            world.admin_drains("admin: bad DIMM")

    @rule(name=st.sampled_from(NODES))
    def admin_resumes(self, name):
        world = self.worlds[name]
        if world.drain_owner == "admin":
            world.admin_resumes()

    @rule()
    def settle(self):
        """Faults stop, people stop, jobs end: every move must settle within its bounds."""
        self.lag, self.missing, self.slurm_down, self.refused, self.crash = False, set(), False, set(), None
        self.slurm_power_save("on")  # off, a node parked powered down cannot come back (22.05, 24.11)
        for world in self.worlds.values():
            world.finish_jobs()
            if world.drain_owner == "admin":
                world.admin_resumes()
            # the kubelet's Failed slurmd pod is gone (part A replaces it; here it is deleted)
            world.node = replace(world.node, pods=tuple(p for p in world.node.pods if p.phase != "Failed"))
        for _ in range(SETTLE_PASSES):
            self.one_pass()
            if all(w.node.move is None for w in self.worlds.values()):
                break
        stuck = {n: (w.node.move.phase, w.node.move.target) for n, w in self.worlds.items() if w.node.move is not None}
        assert not stuck, f"off both sides past their bounds after {SETTLE_PASSES} passes: {stuck}"
        if self.spec.slurm.parking == "PowerSave" and self.power_save is POWER_SAVE_ON:
            for _ in range(3):  # the upkeep asks, Slurm takes it: POWERING_DOWN, then POWERED_DOWN
                self.one_pass()
            awake = {n: slurmstate.text(w.slurm_node) for n, w in self.worlds.items()
                     if w.node.placement != SLURM and w.drain_owner == "slurmpool" and not slurmstate.parked(w.slurm_node)}
            assert not awake, f"parked nodes of a PowerSave pool not powered down: {awake}"

    # ------------------------------------------------------------ invariants
    @invariant()
    def no_node_runs_slurmd_and_takes_inference_pods(self):
        for name, world in self.worlds.items():
            node = world.node
            slurmd_runs = any(p.slurmd and p.phase not in ("Failed", "Succeeded") for p in node.pods)
            if slurmd_runs:
                assert node.unschedulable and node.has_taint(SLURM_TAINT_KEY, "NoSchedule"), \
                    f"{name} runs slurmd and takes inference pods: {node.labels}, {node.taints}, cordoned={node.unschedulable}"

    @invariant()
    def no_node_settled_in_slurm_is_powered_down(self):
        for name, world in self.worlds.items():
            sn = world.slurm_node
            if world.node.move is None and world.node.placement == SLURM and sn is not None:
                assert not slurmstate.power_down_asked(sn), f"{name} serves Slurm but is powered down: {slurmstate.text(sn)}"

    @invariant()
    def never_more_moves_than_max_concurrent_moves(self):
        moving = [n for n, w in self.worlds.items() if w.node.move is not None]
        assert len(moving) <= MAX_MOVES, f"{len(moving)} moves in flight: {moving}"

    # Invariant 2 (no drain but the operator's is lifted) is World.apply's: it raises when a
    # Resume reaches a drain an admin or Slurm set.


def with_parking(spec, parking: str):
    return spec.model_copy(update={"slurm": spec.slurm.model_copy(update={"parking": parking})})


PoolModel.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPoolModel = PoolModel.TestCase


def test_a_refused_ending_keeps_its_slot_from_a_start_of_the_same_pass():
    """Found by the model: a move ends (an admin drained its node) and the planner gives its slot
    to a new start in the same pass; the ending's write is refused, so its move stays in flight.
    apply.py then writes no start that pass (PoolDecision.starts_may_follow): never more moves
    than maxConcurrentMoves."""
    model = PoolModel()
    model.start(slurm_nodes=0)
    model.crash_in_next_pass("after-patch")
    model.never_more_moves_than_max_concurrent_moves()
    model.refuse_writes("gpu01", on=True)
    model.admin_drains("gpu01")
    model.crash_in_next_pass("after-patch")
    model.never_more_moves_than_max_concurrent_moves()
    model.refuse_writes("gpu01", on=False)
    model.settle()
    model.never_more_moves_than_max_concurrent_moves()


# ---------------------------------------------------------------- drain.onTimeout: Checkpoint


GRACE = timedelta(seconds=20)


class CheckpointModel(PoolModel):
    """The same pool, faults and people with `onTimeout: Checkpoint` (issue 36). Invariants besides
    the pool's: a job is signalled at most once per move, and a job is requeued only once its
    grace has passed since the signal recorded on its Node, whatever crashed, relisted or lagged
    between (a crash between the record and the signal loses the signal, never repeats it)."""

    @initialize(slurm_nodes=st.integers(0, len(NODES)))
    def start(self, slurm_nodes):
        super().start(slurm_nodes)
        self.spec = make_spec(slurm_nodes=slurm_nodes, max_moves=MAX_MOVES,
                              drain={"timeout": "30s", "onTimeout": "Checkpoint", "checkpoint": {"grace": "20s"},
                                     "evictionTimeout": "30s", "onEvictionTimeout": "Rollback"})
        self.signals: set[tuple[str, str]] = set()  # (move id, job) signalled

    def sends(self, name, action):
        node = self.worlds[name].node  # as written this pass: the record went before the signal
        if isinstance(action, Signal):
            move = node.move.id if node.move else "health"
            for job in action.job_ids:
                assert (move, job) not in self.signals, f"job {job} signalled twice during move {move}"
                self.signals.add((move, job))
        if isinstance(action, Requeue):
            record = node.checkpoint
            for job in action.job_ids:
                at = record.at(job) if record else None
                assert at is not None and self.now - at >= GRACE, f"job {job} requeued at {self.now}, signalled at {at}"


CheckpointModel.TestCase.settings = settings(
    max_examples=EXAMPLES // 3, stateful_step_count=STEPS, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCheckpointModel = CheckpointModel.TestCase


def test_a_checkpointed_drain_survives_crashes_and_relists_in_its_grace():
    """A path the model walks: every node busy, a scale-down drains two, the drain times out, the
    jobs are signalled, the operator crashes (after the patch, after Slurm) and relists in the grace."""
    model = CheckpointModel()
    model.start(slurm_nodes=4)
    model.jobs_everywhere()
    model.scale(2)
    model.passes(2)
    model.time_passes(40)
    model.crash_in_next_pass("after-slurm")  # the record written and the signals sent, no status
    signalled = [j for w in model.worlds.values() for j in w.signalled]
    assert len(signalled) == 2, signalled
    model.relist()
    model.passes(5)
    model.crash_in_next_pass("after-patch")
    model.time_passes(5)
    model.passes(5)
    assert not [j for w in model.worlds.values() for j in w.requeued]  # still within the 20 s grace
    model.time_passes(5)
    model.passes(2)
    assert sorted(j for w in model.worlds.values() for j in w.requeued) == sorted(signalled)
    assert [j for w in model.worlds.values() for j in w.signalled] == signalled  # never twice
    model.settle()


# ---------------------------------------------------------------- issue 37: a lying Slurm, membership churn


class AdversaryModel(PoolModel):
    """The same pool against a Slurm that lies (issue 37, fault suite 1): between passes it lifts
    the operator's drain (a slurmctld failover that lost its state save, an admin's resume sweep),
    starts jobs on any node it may use (job_lands) and drops nodes from its answers
    (partial_slurm_view). Invariant: slurmd is never stopped on a node with a job."""

    @rule(name=st.sampled_from(NODES))
    def slurm_lifts_our_drain(self, name):
        world = self.worlds[name]
        if world.drain_owner == "slurmpool":
            world.admin_resumes()

    @rule()
    def slurm_lifts_every_drain_of_ours_and_jobs_land(self):
        for name in NODES:
            self.slurm_lifts_our_drain(name)
        self.jobs_everywhere()

    def sends(self, name, action):
        if isinstance(action, DeleteSlurmdPod) and not action.pod.ended:  # an ended pod's slurmd stopped already
            jobs = [j.job_id for j in self.worlds[name].jobs if name in j.nodes]
            assert not jobs, f"slurmd of {name} stopped under job(s) {jobs}"


AdversaryModel.TestCase.settings = settings(
    max_examples=EXAMPLES // 3, stateful_step_count=STEPS, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestAdversaryModel = AdversaryModel.TestCase


class MembershipModel(PoolModel):
    """The same pool while its membership churns (issue 37, fault suite 2): a node relabelled out
    of the selector (and back), a second pool selecting a node too (an overlap: neither acts on
    it), a Node deleted and created again under its name (its records gone, its slurmd pod with
    it; Slurm keeps its drain). A pool label over the selector's key the CRD refuses (test_crd).
    Invariants: every Node with a move record is in the pool's status (a move, an overlap, a node
    that left the selector) once a pass has seen it; once people stop, no move is left between
    sides, and no drain of the operator's stands without a claim it can read."""

    @initialize()
    def no_churn_yet(self):
        self.outside: set[str] = set()
        self.shared: set[str] = set()
        self.churned = False  # a node came back in with its move: the budget may be over until it ends

    def membership(self) -> dict:
        nodes = tuple(self.seen(n, w) for n, w in self.worlds.items() if n not in self.outside | self.shared)
        strays = tuple(w.node for n, w in self.worlds.items()
                       if n in self.outside and n not in self.shared and w.node.move is not None and w.node.annotations.get(ANN_POOL) == "ns/gpu")
        return {"nodes": nodes, "strays": strays, "overlaps": tuple(sorted(self.shared))}

    @rule(name=st.sampled_from(NODES), out=st.booleans())
    def relabel(self, name, out):
        self.churned |= not out and name in self.outside
        (self.outside.add if out else self.outside.discard)(name)

    @rule(name=st.sampled_from(NODES), on=st.booleans())
    def second_pool_selects(self, name, on):
        self.churned |= not on and name in self.shared
        (self.shared.add if on else self.shared.discard)(name)

    @rule(name=st.sampled_from(NODES))
    def node_created_again(self, name):
        world = self.worlds[name]
        world.node = NodeView(name=name, labels={"gpu": "true"})  # pods bound to the old Node went with it
        world.requeued += [j.job_id for j in world.jobs]
        world.jobs = []

    @invariant()
    def every_move_record_is_in_the_status(self):
        if self.status is None:
            return
        listed = {m.node for m in self.status.moves}
        said = " ".join(c.message for c in self.status.conditions if c.type == "Degraded")
        for name, world in self.worlds.items():
            if world.node.move is not None and world.node.annotations.get(ANN_POOL) == "ns/gpu":
                assert name in listed or name in said, f"{name} has move {world.node.move.id} and is in no status: {said!r}"

    @invariant()
    def never_more_moves_than_max_concurrent_moves(self):
        """Only over the nodes the pool selects alone: a node a person takes out mid-move frees its
        slot (the pool no longer counts it); relabelled back, it may bring its move over the budget
        for a while (the planner starts nothing while it is over)."""
        moving = [n for n, w in self.worlds.items() if w.node.move is not None and n not in self.outside | self.shared]
        assert len(moving) <= MAX_MOVES or self.churned, f"{len(moving)} moves in flight: {moving}"

    @rule()
    def settle(self):
        """People stop: every node is back in the selector alone. Nothing is left between sides,
        and every drain the operator set is one it can read as its own."""
        self.outside, self.shared = set(), set()
        super().settle()
        self.churned = False  # every move ended: the budget holds again
        for name, world in self.worlds.items():
            if world.drain_owner == "slurmpool" and world.slurm_node is not None and world.slurm_node.drain_set:
                assert our_drain(world.node, world.slurm_node), f"{name}: our drain {world.slurm_node.reason!r} without a claim"


MembershipModel.TestCase.settings = settings(
    max_examples=EXAMPLES // 3, stateful_step_count=STEPS, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestMembershipModel = MembershipModel.TestCase
