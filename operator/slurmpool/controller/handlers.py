"""The kopf layer: watches of Nodes and Pods (ours) and SlurmNodePools (kopf's), and a work queue of pools.

Each pool is reconciled on its own (workqueue.py): after a watch event that can make progress
possible (a Node or a pod of its nodes changed, its spec changed), at once after a pass that
acted, every `interval` seconds otherwise, and with backoff after a failure. So one pool whose
Slurm hangs or whose actions fail holds one worker and delays no other pool.

Why not kopf timers: kopf puts a finalizer on every object with a timer or daemon, so deleting a
pool would hang while the operator is down. Every pass is level-triggered: it recomputes
everything from the indexes and Slurm, so an event only makes a pass come sooner.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from dataclasses import replace
from datetime import datetime, timezone

import kopf
from pydantic import ValidationError

from slurmbridge import SlurmUnavailable

from slurmpool.adapters import metrics
from slurmpool.controller import poolmetrics
from slurmpool.adapters.access import SlurmAccessPool, lists_reservations
from slurmpool.controller.apply import ApplyContext, apply
from slurmpool.core.decide import decide
from slurmpool.core.interfaces import PoolRef, pool_object
from slurmpool.core.handover import reservation_name
from slurmpool.adapters.kube import KubeAdapter, NodeWatch, PodWatch
from slurmpool.adapters.leader import LeaderElector
from slurmpool.core.membership import Membership
from slurmpool.core.models import GROUP, PLURAL, VERSION, SlurmNodePoolSpec, SlurmNodePoolStatus
from slurmpool.core.moves import Cancel, Requeue, Resume
from slurmpool.core.phases import Phase
from slurmpool.core.poolpolicy import violations
from slurmpool.controller.settings import Settings
from slurmpool.core.snapshot import PoolSnapshot
from slurmpool.core.status import Observed, build_status, status_from
from slurmpool.adapters.statuswriter import StatusWriter
from slurmpool.core.target import author
from slurmpool.core.view import NodeView
from slurmpool.controller.workqueue import WorkQueue, run_workers

log = logging.getLogger("slurmpool")
# Phases that wait on Slurm or the node agent rather than on a watch event: polled faster.
QUICK_PHASES = frozenset({Phase.STARTING_SLURMD, Phase.REGISTERING, Phase.RESUMING, Phase.DRAINING})
QUICK_INTERVAL = 0.2
# What a move blocked only by these waits for is Slurm's to report soon (moves.py: Registering).
SLURM_SOON = frozenset({"slurmd-registration"})
SLOW_PASS = 2.0  # seconds: a pass slower than this is logged with where its time went
# A Slurm view this old still does for a pass: what must be fresher asks for it (a pool's own
# changes, a move waiting on Slurm, a move to start or a drain to resume), and a poll costs a
# round trip of scontrol and squeue (a few hundred ms) that most passes of a move do not need.
SLURM_MAX_AGE = 2.0
INDEX_LAG_RETRY = 0.05  # seconds: look again this soon when the watch has not brought our writes back
EXPECT_FOR = 10.0  # seconds: after this, a write the index has not shown makes the Node watch list again
BATCH_WINDOW = 0.02  # seconds (kopf's settings.batching)


class _NoSlurm:
    """Stands in when no backend could be built: every call fails closed."""

    async def _fail(self, *_, **__):
        raise SlurmUnavailable("no Slurm backend")

    nodes = jobs = drain = resume = requeue = cancel = ping = _fail

    async def close(self):
        return None


# ---------------------------------------------------------------- indexes (kopf keeps them from watches)

# Nodes and pods are not kopf indexes but watches of our own (kube.NodeWatch and kube.PodWatch:
# kopf's first listing of an index is quadratic in its objects, minutes for 5,000 Nodes; and after
# a watch that could not resume, kopf lists again without dropping what is gone, so a pod deleted
# while the API server restarted blocked its node's move for good). _node_changed is the Nodes'
# callback, _kick_node the pods'. The pools stay a kopf index (a few objects; a pool deleted in
# such a gap would linger in it: a known limit, docs/faults.md).


@kopf.index(GROUP, VERSION, PLURAL)
async def pools_index(body, namespace, name, **_):
    return {
        (namespace, name): {
            "uid": body.metadata.uid,
            "generation": body.metadata.get("generation"),
            "spec": copy.deepcopy(dict(body.get("spec", {}))),
            "status": copy.deepcopy(dict(body.get("status", {}))),
            "author": author(body.get("metadata", {}).get("managedFields")),  # of spec.slurmNodes
        }
    }


@kopf.on.event(GROUP, VERSION, PLURAL)
async def pool_changed(memo: kopf.Memo, type, namespace, name, body, **_):
    # Resource handlers only run once every index is filled: from now on the pools may be reconciled.
    memo.indexed.set()
    key = (namespace, name)
    if type == "DELETED":
        memo.queue.forget(key)
        memo.status.forget(namespace, name)
        memo.generations.pop(key, None)
        memo.membership.selectors_stale = True
        await _release_reservation(memo, namespace, name, body)
        return
    # Wake the pool for spec changes (and the first sight of it), not for our own status writes.
    generation = body.get("metadata", {}).get("generation")
    if memo.generations.get(key) != generation:
        memo.generations[key] = generation
        memo.membership.selectors_stale = True  # maybe: compared at the next pass
        memo.queue.add(key, urgent=True)  # a person's change goes before the passes of moves going


async def _release_reservation(memo: kopf.Memo, namespace: str, name: str, body) -> None:
    """A deleted pool's planned-handover reservation goes with it (best effort: while the operator
    was down, the next pass of a pool of the same namespace deletes it as an orphan: handover.py)."""
    try:
        spec = SlurmNodePoolSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return
    if not memo.leader.leading:
        return
    try:
        backend = await memo.access.backend(namespace, spec.slurm.access)
        if await lists_reservations(backend):
            await backend.delete_reservation(reservation_name(namespace, name))
    except Exception as err:  # noqa: BLE001 - the orphan sweep retries it
        log.warning("could not delete the reservation of deleted pool %s/%s: %s", namespace, name, err)


def _node_changed(memo: kopf.Memo, name: str) -> None:
    """NodeWatch's callback: the Node is sorted again by its labels (membership.py), or leaves
    every pool when deleted; the pools it was in or is in now are woken."""
    membership: Membership = memo.membership
    before = membership.owners(name) or ()
    store = memo.nodes.nodes.get(name)
    if store:
        membership.update(name, store[0].labels)
    else:
        membership.remove(name)
    # Sorted with selectors that may be old (a spec changed, not read yet): every pool looks.
    wake = memo.generations.keys() if membership.selectors_stale else set(before) | set(membership.owners(name) or ())
    for key in list(wake):
        memo.queue.add(key)


def _kick_node(memo: kopf.Memo, node: str) -> None:
    queue = memo.get("queue")
    if queue is None:
        return
    owners = memo.membership.owners(node)
    if owners is None:  # a node we have not sorted yet: maybe a new one
        owners = memo.generations.keys()
    for key in list(owners):
        queue.add(key)


# ---------------------------------------------------------------- startup


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, pools_index, **_):
    # Watches can stall silently; bound them so kopf re-lists (nolar/kopf#585).
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 30
    # kopf holds each object's events this long to batch them: 0.1 s by default, paid by every
    # phase that waits for a pod to go or come, and by every spec change before its first pass.
    settings.batching.batch_window = BATCH_WINDOW
    settings.persistence.finalizer = "slurmpool.io/finalizer"
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.level = logging.INFO
    config = Settings.from_env()
    memo.settings = config
    memo.indexed = asyncio.Event()
    memo.queue = WorkQueue()
    memo.generations, memo.membership = {}, Membership(exclude_control_plane=not config.pool_policy.allow_control_plane)
    memo.failures, memo.reconcile_errors, memo.published, memo.fresh, memo.last_poll = {}, {}, {}, set(), {}
    memo.expected = {}  # node -> (record annotations we wrote, when): until the watch shows them
    memo.relisting = {}  # nodes whose lag asked the Node watch to list again (once per write)
    memo.kube = KubeAdapter(_api_client())
    memo.status = StatusWriter(memo.kube.patch_pool_status, lambda pool, message: _status_failed(memo, pool, message))
    memo.leader = LeaderElector(memo.kube.api, namespace=config.lease_namespace, identity=config.identity,
                                duration=config.lease_duration, renew_every=config.lease_renew)
    memo.access = SlurmAccessPool(memo.kube.read_secret)
    memo.nodes = NodeWatch(memo.kube.api, lambda name: _node_changed(memo, name))
    memo.pods = PodWatch(memo.kube.api, lambda node: _kick_node(memo, node))
    memo.nodes.start()
    memo.pods.start()
    memo.tasks = [asyncio.create_task(run(memo, memo.nodes.nodes, memo.pods, pools_index))]


class NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf deep-copies every watched body (every Node and Pod event) to diff it for on.create/
    update/delete handlers and daemons; this operator has none (indexes and one on.event, which
    get no diff), and under load those copies held the event loop. tests/test_handlers.py
    fails when a handler that needs the diff is added."""

    def build(self, *, body, extra_fields=None) -> kopf.BodyEssence:
        return kopf.BodyEssence()


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_):
    for task in memo.get("tasks", ()):
        task.cancel()
    if memo.get("status"):
        memo.status.close()
    if memo.get("access"):
        await memo.access.close()


def _api_client():
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


async def run(memo, nodes_index, pod_watch, pools_index) -> None:
    await memo.indexed.wait()
    await memo.nodes.listed.wait()
    await memo.pods.listed.wait()
    config: Settings = memo.settings
    log.info("indexes ready; reconciling pools every %.1fs and on events, %d at once", config.interval, config.pool_concurrency)

    async def work(key) -> None:
        await reconcile_key(memo, key, nodes_index, pod_watch, pools_index)

    await asyncio.gather(run_workers(memo.queue, work, config.pool_concurrency), lead(memo, pools_index), loop_lag())


async def loop_lag(period: float = 0.25) -> None:
    """Samples how late the event loop runs a timer: the CPU work every pass waits behind."""
    loop = asyncio.get_running_loop()
    while True:
        asked = loop.time()
        await asyncio.sleep(period)
        metrics.EVENT_LOOP_LAG.observe(max(0.0, loop.time() - asked - period))


async def lead(memo, pools_index) -> None:
    """Every replica watches; only the Lease holder reconciles (two replicas never both move a
    node). On taking the Lease, every pool is queued."""
    was = False
    while True:
        leading = await memo.leader.ensure()
        if leading and not was:
            for key in list(pools_index):
                memo.queue.add(key)
        was = leading
        metrics.QUEUE_DEPTH.set(len(memo.queue))
        await asyncio.sleep(min(memo.leader.renew_every, 1.0))


# ---------------------------------------------------------------- one pool's pass


def _first(store):
    return next(iter(store), None)


async def reconcile_key(memo, key, nodes_index, pod_watch, pools_index) -> None:
    """One pass of one pool; schedules its next pass. Never raises."""
    config: Settings = memo.settings
    if not memo.leader.leading:
        memo.queue.add(key, after=config.interval)
        return
    raw = _first(pools_index.get(key, ()))
    if raw is None:
        return  # deleted: nothing more to do
    pool = PoolRef(key[0], key[1], raw["uid"], raw["generation"])
    started = time.monotonic()
    after = config.interval
    try:
        after = await _reconcile(memo, pool, raw, nodes_index, pod_watch, pools_index)
        metrics.RECONCILE_TOTAL.labels(result="ok").inc()
        memo.reconcile_errors.pop(pool.key, None)
    except Exception as err:  # noqa: BLE001 - one pool's failure must not stop the others
        log.exception("reconcile of %s failed", pool.key)
        metrics.RECONCILE_TOTAL.labels(result="error").inc()
        message = str(err)[:500] or type(err).__name__
        if memo.reconcile_errors.get(pool.key) != message:  # one Event per distinct failure, not one per pass
            memo.reconcile_errors[pool.key] = message
            await memo.kube.event(pool_object(pool), "Warning", "ReconcileError", message)
        after = None
    finally:
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
    if after is None:  # failed: back off
        failures = memo.failures.get(key, 0) + 1
        memo.failures[key] = failures
        after = min(config.backoff_max, config.backoff_base * 2 ** (failures - 1))
    else:
        memo.failures.pop(key, None)
    memo.queue.add(key, after=after)


def _membership(memo, pools_index) -> Membership:
    """Which pools select each node (overlaps are never acted on): nodes are sorted as the watch
    brings them (_node_changed); here the selectors are read again after a pool's spec changed or
    a pool went."""
    membership: Membership = memo.membership
    if membership.selectors_stale:
        selectors = {}
        for key, store in list(pools_index.items()):
            raw = _first(store)
            spec = _parse(raw)[0] if raw is not None else None
            # A pool the policy refuses owns no node: nothing of it runs anywhere.
            if spec is not None and not spec.node_selector.is_empty() and not violations(spec, memo.settings.pool_policy):
                selectors[key] = spec.node_selector
        membership.set_selectors(selectors)
    return membership


_parsed: dict[str, tuple[dict, SlurmNodePoolSpec | None, str]] = {}


def _parse(raw) -> tuple[SlurmNodePoolSpec | None, str]:
    """The pool's spec, validated (cached while the spec is unchanged), or why not."""
    key = f"{raw['uid']}/{raw['generation']}"
    hit = _parsed.get(key)
    if hit is not None and hit[0] == raw["spec"]:
        return hit[1], hit[2]
    try:
        spec, why = SlurmNodePoolSpec.model_validate(raw["spec"]), ""
    except ValidationError as err:
        spec, why = None, _short(err)
    if len(_parsed) > 1000:
        _parsed.clear()
    _parsed[key] = (copy.deepcopy(raw["spec"]), spec, why)
    return spec, why


async def _reconcile(memo, pool: PoolRef, raw, nodes_index, pod_watch, pools_index) -> float | None:
    """Snapshot, decide, apply, report. Returns when to look again (None: back off)."""
    config: Settings = memo.settings
    spec, why = _parse(raw)
    if spec is None:
        await _report_invalid(memo, pool, raw, why)
        return config.interval
    refused = violations(spec, config.pool_policy)
    if refused:
        await _report_invalid(memo, pool, raw, "; ".join(refused), policy=True)
        return config.interval
    t0 = time.monotonic()
    snap, backend = await _snapshot(memo, pool, spec, raw, nodes_index, pod_watch, pools_index)
    if _index_lags(memo, snap.nodes):
        return INDEX_LAG_RETRY  # our last writes have not come back through the watch yet
    t1 = time.monotonic()
    decision = decide(snap)
    snapshot_s, decide_s = t1 - t0, time.monotonic() - t1
    if snap.slurm.available and snap.slurm.polled_at < t0 and _needs_fresh_slurm(decision):
        # Which node to move, and whether a drain is still ours to resume, are read from a poll
        # begun after this pass did (an admin's drain just before a scale must count).
        again = time.monotonic()
        snap, backend = await _snapshot(memo, pool, spec, raw, nodes_index, pod_watch, pools_index, newer_than=t0)
        decided = time.monotonic()
        decision = decide(snap)
        snapshot_s, decide_s = snapshot_s + decided - again, decide_s + time.monotonic() - decided
    t2 = time.monotonic()
    result = await apply(ApplyContext(pool, spec, list(snap.nodes), memo.kube, backend or _NoSlurm(), memo.published,
                                      config.crash_after_phase), decision)
    now = time.monotonic()
    for name, record in result.records.items():
        memo.expected[name] = (record, now)
        memo.relisting.pop(name, None)
    if result.slurm_changed:
        memo.access.changed(pool.namespace, spec.slurm.access, pool.key)  # its next look must see what it did
    t3 = time.monotonic()
    status = build_status(snap, decision, result)
    _export_gauges(pool, list(snap.nodes))
    poolmetrics.export(pool.key, list(snap.nodes), status)
    _write_status(memo, pool, raw, status)
    t4 = time.monotonic()
    stages = {"snapshot": snapshot_s, "decide": decide_s, "apply": t3 - t2, "status": t4 - t3}
    for stage, seconds in stages.items():
        metrics.RECONCILE_STAGE_SECONDS.labels(stage=stage).observe(seconds)
    took = t4 - t0
    if took > SLOW_PASS or (decision.steps and log.isEnabledFor(logging.DEBUG)):
        log.log(logging.WARNING if took > SLOW_PASS else logging.DEBUG, "%s: pass took %.2f s (%s); %d step(s): %s",
                pool.key, took, ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in stages.items()), len(decision.steps),
                ", ".join(f"{n}:{s.move.phase if s.move else s.settled}" for n, s in sorted(decision.steps.items())[:8]))
    if result.errors:
        return None
    if result.acted:
        return 0.0  # at the speed of the real work: the next phase's done test may be true already
    if waiting_on_slurm(decision):  # e.g. a slurmd registering: look again soon, with a fresh poll
        memo.fresh.add((pool.namespace, pool.name))
        return QUICK_INTERVAL
    return config.interval


def waiting_on_slurm(decision) -> bool:
    """A move waits on what Slurm will report within a second or so (a drain taking, a slurmd
    registering): its pool looks again soon, on a fresh poll. Not a move blocked by jobs, pods or
    an outage: those wait minutes, and the interval does."""
    return any(step.move is not None and step.move.phase in QUICK_PHASES and set(step.blocked_by) <= SLURM_SOON
               for step in decision.steps.values())


def _index_lags(memo, nodes) -> bool:
    """True while a node's record we wrote is not yet in the index (the watch lags our writes): a
    pass on the old record would redo its step, or start a move on a node already moving.
    A lagging watch waits, never acts: after EXPECT_FOR the watch lists again, and the index wins
    only once a full list begun after the write is in (someone else changed the record since)."""
    lagging = False
    now = time.monotonic()
    for node in nodes:
        expected = memo.expected.get(node.name)
        if expected is None:
            continue
        record, at = expected
        if all(node.annotations.get(k) == v for k, v in record.items()) or memo.nodes.list_began > at:
            del memo.expected[node.name]  # seen, or a consistent list after our write says otherwise
            continue
        lagging = True
        if now - at > EXPECT_FOR and not memo.relisting.get(node.name):
            memo.relisting[node.name] = True
            log.warning("the Node watch has not shown %s's record written %.0f s ago: listing Nodes again", node.name, now - at)
            memo.nodes.request_relist()
    return lagging


def _needs_fresh_slurm(decision) -> bool:
    return bool(decision.starts) or any(isinstance(a, (Resume, Requeue, Cancel)) for s in decision.steps.values() for a in s.actions)


async def _snapshot(memo, pool: PoolRef, spec: SlurmNodePoolSpec, raw, nodes_index, pod_watch, pools_index, newer_than=None):
    key = (pool.namespace, pool.name)
    membership = _membership(memo, pools_index)
    mine: list[NodeView] = []
    overlaps: list[str] = []
    for name in membership.members(key):
        node = _first(nodes_index.get(name, ()))
        if node is None:  # deleted since the owners were sorted
            continue
        if len(membership.owners(name) or ()) > 1:
            overlaps.append(node.name)
            continue
        pods = pod_watch.on(node.name)
        mine.append(node if pods == node.pods else replace(node, pods=pods))  # a new view costs a parse of its records
    await _report_overlaps(memo, pool, overlaps, membership)
    # Pods bound to a node that is no Node (deleted): this pool's slurmd pods are reported and cleaned up.
    orphans = tuple(p for node in list(pod_watch.by_node) if node not in nodes_index for p in pod_watch.on(node)
                    if p.slurmd and p.pool == pool.name and p.namespace == pool.namespace)
    # Pools on one Slurm share a poll made within SLURM_MAX_AGE; a pool whose move waits on Slurm
    # asks for one begun after the poll it last saw (shared by every pool asking meanwhile).
    if newer_than is None and key in memo.fresh:
        newer_than = memo.last_poll.get(key)
    memo.fresh.discard(key)
    pending = spec.slurm.partition if spec.demand is not None and spec.demand.enabled else None
    max_age = slurm_max_age(spec, memo.settings.interval)
    backend, slurm = await memo.access.observe(pool.namespace, spec.slurm.access, max_age=max_age, pending=pending,
                                               topology=spec.topology.from_slurm, newer_than=newer_than, pool=pool.key,
                                               reservations=_handover_wanted(spec, raw))
    memo.last_poll[key] = slurm.polled_at
    pending = tuple(pod_watch.pending.values()) if spec.demand and spec.demand.enabled else ()
    snap = PoolSnapshot(
        pool=pool, spec=spec, nodes=tuple(mine), slurm=slurm, now=datetime.now(timezone.utc), previous=_previous_status(memo, pool, raw),
        overlaps=tuple(overlaps), orphans=orphans, pending=pending, author=raw.get("author"),
        owned_reservations=frozenset(reservation_name(ns, name) for ns, name in list(pools_index)),
    )
    return snap, backend


def slurm_max_age(spec: SlurmNodePoolSpec, interval: float) -> float:
    """How old a shared Slurm poll may be for this pool's pass. With demand on, no older than the
    pass interval: a job submitted just after a poll waited for the next one SLURM_MAX_AGE later,
    up to 2 s of a gang job's submit-to-running (bench: gang_job_submit_to_nodes_resumed)."""
    if spec.demand is not None and spec.demand.enabled:
        return min(SLURM_MAX_AGE, interval)
    return SLURM_MAX_AGE


def _handover_wanted(spec: SlurmNodePoolSpec, raw) -> bool:
    """The pool's reservations are read while it may plan a handover, and while its last status
    shows one (a schedule removed, or the handover turned off: ours is deleted)."""
    return (spec.handover.enabled and bool(spec.schedule)) or bool((raw.get("status") or {}).get("handover"))


async def _report_overlaps(memo, pool: PoolRef, overlaps: list[str], membership: Membership) -> None:
    """One Event per change of the overlap, not one per pass."""
    key = (pool.namespace, pool.name)
    seen = memo.setdefault("overlaps", {})
    if not overlaps:
        seen.pop(key, None)
    elif seen.get(key) != set(overlaps):
        seen[key] = set(overlaps)
        others = sorted({f"{ns}/{n}" for name in overlaps for ns, n in membership.owners(name) or () if (ns, n) != key})
        await memo.kube.event(pool_object(pool), "Warning", "NodeOverlap", f"nodes {', '.join(sorted(overlaps)[:10])} are also selected by {', '.join(others)}")


def _previous_status(memo, pool: PoolRef, raw) -> SlurmNodePoolStatus | None:
    """The status this pass builds on: the newest one handed to the writer (the watch lags it)."""
    try:
        return SlurmNodePoolStatus.model_validate(memo.status.wanted(pool) or raw.get("status") or {})
    except ValidationError:
        return None


def _write_status(memo, pool: PoolRef, raw, status: SlurmNodePoolStatus) -> None:
    """Handed to the writer (statuswriter.py): no pass waits for its status to be written."""
    body = status.model_dump(by_alias=True, exclude_none=False, mode="json")
    memo.status.submit(pool, body, raw.get("status") or {})


async def _status_failed(memo, pool: PoolRef, message: str) -> None:
    await memo.kube.event(pool_object(pool), "Warning", "StatusWriteFailed", f"cannot write the status: {message}")


async def _report_invalid(memo, pool: PoolRef, raw, message: str, policy: bool = False) -> None:
    previous = _previous_status(memo, pool, raw)
    seen = Observed(desired={}, policy=[message]) if policy else Observed(desired={}, problems=[f"invalid spec: {message}"])
    now = datetime.now(timezone.utc)
    status = status_from(pool.name, _placeholder_spec(raw), pool.generation, [], seen, previous.conditions if previous else [], now)
    status.target = previous.target if previous else None  # keeps the audit across a bad edit
    _write_status(memo, pool, raw, status)


def _placeholder_spec(raw) -> SlurmNodePoolSpec:
    return SlurmNodePoolSpec.model_construct(paused=bool((raw.get("spec") or {}).get("paused")), inference=_NoPools())


class _NoPools:
    pools: list = []


def _short(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5])


_exported: dict[str, set[tuple[str, str]]] = {}


def _export_gauges(pool: PoolRef, nodes: list[NodeView]) -> None:
    counts: dict[tuple[str, str], int] = dict.fromkeys(_exported.get(pool.key, ()), 0)
    for node in nodes:
        move = node.move
        placement = move.target if move else node.placement
        phase = str(move.phase) if move else "Settled"
        counts[(placement, phase)] = counts.get((placement, phase), 0) + 1
    for (placement, phase), n in counts.items():
        metrics.NODES.labels(pool=pool.key, placement=placement, phase=phase).set(n)
    _exported[pool.key] = {k for k, n in counts.items() if n}
