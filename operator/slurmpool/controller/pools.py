"""The controller: each pool's state, and one pool's pass: snapshot -> decide -> apply -> status (adapters: services.py).

Each pool is reconciled on its own (workqueue.py): after a watch event that can make progress
possible (a Node or a pod of its nodes changed, its spec changed), at once after a pass that
acted, every `interval` seconds otherwise, and with backoff after a failure. So one pool whose
Slurm hangs or whose actions fail holds one worker and delays no other pool. Every pass is
level-triggered: it recomputes everything from the indexes and Slurm, so an event only makes a
pass come sooner."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from slurmbridge.backoff import Backoff

from slurmpool.adapters import metrics
from slurmpool.adapters.access import makes_reservations
from slurmpool.adapters.kube import DraIndex, NodeWatch, PodGroupIndex, PodWatch
from slurmpool.adapters.statuswriter import StatusWriter
from slurmpool.controller import poolmetrics, records, reports, snapshots
from slurmpool.controller.apply import ApplyContext, apply
from slurmpool.controller.freshness import SlurmFreshness
from slurmpool.controller.services import Services
from slurmpool.controller.settings import Settings
from slurmpool.controller.workqueue import WorkQueue, run_workers
from slurmpool.core.decide import decide
from slurmpool.core.events import Reason
from slurmpool.core.handover import owned
from slurmpool.core.interfaces import PoolRef, pool_object
from slurmpool.core.membership import Membership
from slurmpool.core.models import DemandSpec, SlurmNodePoolSpec, SlurmNodePoolStatus
from slurmpool.core.poolpolicy import violations
from slurmpool.core.status import build_status

log = logging.getLogger("slurmpool")
QUICK_INTERVAL = 0.2  # seconds: the next look of a pool whose move waits on Slurm (freshness.waiting_on_slurm)
Key = tuple[str, str]  # (namespace, name)
PoolsIndex = Mapping[Key, Iterable[dict[str, Any]]]  # kopf's index of the pools: key -> a store of one body (handlers.pools_index)
EVENT_FLUSH_SECONDS = 5.0  # of the pod's 30 s grace: the Events queued when SIGTERM came
STOP_SECONDS = 1.0  # on SIGTERM: for the passes under way to end, then for their statuses, before the Lease is released


@dataclass
class PoolState:
    """What the controller keeps of one pool between passes (all of it a cache: see ARCHITECTURE.md)."""

    generation: int | None = None  # of the spec last seen: a new one wakes the pool at once
    failures: int = 0  # failed passes in a row: the backoff
    reconcile_error: str | None = None  # the last ReconcileError posted (one Event per distinct failure)
    overlaps: frozenset[str] = frozenset()  # the overlap last posted as an Event
    spec: snapshots.SpecCache = field(default_factory=snapshots.SpecCache)
    slurm: SlurmFreshness = field(default_factory=SlurmFreshness)


class PoolController:
    """One per operator process (handlers.py makes it at startup). `pools_index`: kopf's index of
    the SlurmNodePools. Complete once made: what calls back into the controller (the Node and pod
    watches of our own, the status writer) is made here, with it; the rest comes in `services`."""

    def __init__(self, settings: Settings, services: Services, pools_index: PoolsIndex,
                 queue: WorkQueue[Key] | None = None, backoff: Backoff | None = None):
        self.settings, self.pools_index = settings, pools_index
        self.kube, self.leader, self.access = services.kube, services.leader, services.access
        self.queue: WorkQueue[Key] = queue if queue is not None else WorkQueue()
        self.backoff = backoff if backoff is not None else Backoff(settings.backoff_base, settings.backoff_max)
        self.membership = Membership(exclude_control_plane=not settings.pool_policy.allow_control_plane)
        self.status = StatusWriter(self.kube.patch_pool_status, self.status_failed)
        self.nodes, self.pods = NodeWatch(self.kube.api, self.node_changed), PodWatch(self.kube.api, self.kick_node)
        self.dra, self.groups = DraIndex(self.kube.api, self.kick_node), PodGroupIndex(self.kube.api, self.kick_node)  # demand: DRA's, gangs' sizes
        self.pools: dict[Key, PoolState] = {}
        self.published: dict[str, tuple[str, float]] = {}  # node -> Slurm state last published on it, and when (apply.py)
        self.written = records.Written()  # node records not yet back through the Node watch
        self.indexed = asyncio.Event()  # kopf's indexes are filled
        self.tasks: list[asyncio.Task[None]] = []

    def state(self, key: Key) -> PoolState:
        return self.pools.setdefault(key, PoolState())

    def start(self) -> None:
        for each in (self.nodes, self.pods, self.dra, self.groups):
            each.start()
        self.tasks = [asyncio.create_task(self.run())]

    async def close(self) -> None:
        """On SIGTERM (kopf's cleanup): stop acting, then release the Lease so another replica
        takes over at once rather than after a whole Lease duration (as client-go's ReleaseOnCancel)."""
        self.leader.step_down()  # no pass starts from now on; those under way may end, then are cancelled
        await self.queue.idle(STOP_SECONDS)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        with contextlib.suppress(TimeoutError):  # their statuses, written before another replica writes its own
            await asyncio.wait_for(self.status.flush(), STOP_SECONDS)
        self.status.close()
        await self.leader.release()
        await self.kube.flush_events(EVENT_FLUSH_SECONDS)
        await self.access.close()

    # ------------------------------------------------------------ events

    async def pool_changed(self, kind: str, key: Key, body) -> None:
        """kopf's event of a pool: a new spec (or the first sight) queues it ahead of the others."""
        self.indexed.set()  # resource handlers only run once every index is filled
        if kind == "DELETED":
            self.queue.forget(key)
            self.status.forget(*key)
            self.pools.pop(key, None)
            poolmetrics.forget(PoolRef(*key).key)
            self.membership.selectors_stale = True
            await self.release_reservation(key, body)
            return
        generation = body.get("metadata", {}).get("generation")  # not for our own status writes
        state = self.state(key)
        if state.generation != generation:
            state.generation = generation
            self.membership.selectors_stale = True  # maybe: compared at the next pass
            self.queue.add(key, urgent=True)  # a person's change goes before the passes of moves going

    async def release_reservation(self, key: Key, body) -> None:
        """A deleted pool's reservations go with it (handover.owned; best effort: one left behind ends at its end)."""
        namespace, name = key
        try:
            spec = SlurmNodePoolSpec.model_validate(body.get("spec") or {})
        except ValidationError:
            return
        if not self.leader.leading or self.settings.dry_run or spec.mode == "Shadow":  # shadow mode writes nothing to Slurm
            return
        try:
            backend = await self.access.backend(namespace, spec.slurm.access)
            if await makes_reservations(backend):
                for left in owned(PoolRef(namespace, name, (body.get("metadata") or {}).get("uid", "")), await backend.reservations()):
                    await backend.delete_reservation(left)
        except Exception as err:  # noqa: BLE001 - it ends by itself at its edge's end
            log.warning("could not delete the reservation of deleted pool %s/%s: %s", namespace, name, err)

    def node_changed(self, name: str) -> None:
        """NodeWatch's callback: the Node is sorted again by its labels (membership.py), or leaves
        every pool when deleted; the pools it was in or is in now are woken."""
        before = self.membership.owners(name) or ()
        store = self.nodes.nodes.get(name)
        if store:
            self.membership.update(name, store[0].labels)
        else:
            self.membership.remove(name)
        # Sorted with selectors that may be old (a spec changed, not read yet): every pool looks.
        stale = self.membership.selectors_stale
        for key in list(self.pools if stale else set(before) | set(self.membership.owners(name) or ())):
            self.queue.add(key)

    def kick_node(self, node: str = "") -> None:
        """PodWatch's and DraIndex's callback: a pod of the node, or its devices, changed; PodGroupIndex's: a gang's size (no node)."""
        owners = self.membership.owners(node)
        for key in list(self.pools if owners is None else owners):  # None: a node not sorted yet (maybe new), or no node: every pool
            self.queue.add(key)

    async def status_failed(self, pool: PoolRef, message: str) -> None:
        await self.kube.event(pool_object(pool), "Warning", Reason.StatusWriteFailed, f"cannot write the status: {message}")

    # ------------------------------------------------------------ the loop

    async def run(self) -> None:
        await self.indexed.wait()
        await self.nodes.listed.wait()
        await self.pods.listed.wait()
        config = self.settings
        log.info("indexes ready; reconciling pools every %.1fs and on events, %d at once", config.interval, config.pool_concurrency)
        await asyncio.gather(run_workers(self.queue, self.reconcile_key, config.pool_concurrency), self.lead(), reports.loop_lag())

    async def lead(self) -> None:
        """Every replica watches; only the Lease holder reconciles (two replicas never both move a
        node). On taking the Lease, every pool is queued."""
        was = None
        while True:
            leading = await self.leader.ensure()
            if leading != was:  # a replica that stops leading exports no pool's gauges; one that starts queues every pool
                poolmetrics.leading(leading)
                for key in list(self.pools_index) if leading else ():
                    self.queue.add(key)
            was = leading
            metrics.QUEUE_DEPTH.set(len(self.queue))
            await asyncio.sleep(min(self.leader.renew_every, 1.0))

    async def reconcile_key(self, key: Key) -> None:
        """One pass of one pool; schedules its next pass. Never raises."""
        if not self.leader.leading:
            self.queue.add(key, after=self.settings.interval)
            return
        raw = snapshots.first(self.pools_index.get(key, ()))
        if raw is None:  # deleted (a pass under way at the deletion exported its series again)
            poolmetrics.forget(PoolRef(*key).key)
            return
        pool, state = PoolRef(key[0], key[1], raw["uid"], raw["generation"]), self.state(key)
        poolmetrics.begin(pool.key)
        started = time.monotonic()
        try:
            after = await self.reconcile(pool, raw, state)
            metrics.RECONCILE_TOTAL.labels(result="ok").inc()
            state.reconcile_error = None
        except Exception as err:  # noqa: BLE001 - one pool's failure must not stop the others
            log.exception("reconcile of %s failed", pool.key)
            metrics.RECONCILE_TOTAL.labels(result="error").inc()
            message = str(err)[:500] or type(err).__name__
            if state.reconcile_error != message:  # one Event per distinct failure, not one per pass
                state.reconcile_error = message
                await self.kube.event(pool_object(pool), "Warning", Reason.ReconcileError, message)
            after = None
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
        state.failures = 0 if after is not None else state.failures + 1
        self.queue.add(key, after=self.backoff.delay(state.failures) if after is None else after)

    # ------------------------------------------------------------ one pool's pass

    async def reconcile(self, pool: PoolRef, raw, state: PoolState) -> float | None:
        """Snapshot, decide, apply, report. Returns when to look again (None: back off)."""
        config = self.settings
        spec, why = state.spec.parse(raw)
        if spec is None:
            self.report_invalid(pool, raw, why)
            return config.interval
        refused = violations(spec, config.pool_policy)
        if refused:
            self.report_invalid(pool, raw, "; ".join(refused), policy=True)
            return config.interval
        t0 = time.monotonic()
        snap, backend, listed = await self.snapshot(pool, spec, raw, state)
        if records.lags(self.written, [*snap.nodes, *snap.strays], self.nodes, time.monotonic(), listed):
            return records.INDEX_LAG_RETRY  # our last writes have not come back through the watch yet
        t1 = time.monotonic()
        decision = decide(snap)
        snapshot_s, decide_s = t1 - t0, time.monotonic() - t1
        if not (shadow := config.dry_run or spec.mode == "Shadow") and state.slurm.decide_again(snap.slurm, t0, decision):
            again = time.monotonic()
            snap, backend, _ = await self.snapshot(pool, spec, raw, state, newer_than=t0)
            decided = time.monotonic()
            decision = decide(snap)
            snapshot_s, decide_s = snapshot_s + decided - again, decide_s + time.monotonic() - decided
        if not self.leader.leading:  # the Lease lapsed during the Slurm poll: another replica may act now
            return config.interval
        t2 = time.monotonic()
        context = ApplyContext(pool, spec, [*snap.nodes, *snap.strays], self.kube, backend or snapshots.NoSlurm(), self.published,
                               config.crash_after_phase, shadow)
        result = await apply(context, decision)
        self.written.wrote(result.records, time.monotonic())
        if result.slurm_changed:
            state.slurm.changed(self.access.clock())  # its next look must see what it did
        t3 = time.monotonic()
        status = build_status(snap, decision, result)
        if self.leader.leading:  # not after the Lease was lost in the pass: poolmetrics.leading cleared them
            poolmetrics.export(pool.key, list(snap.nodes), status, counted=(spec.demand or DemandSpec()).inference)
        self.write_status(pool, raw, status)
        t4 = time.monotonic()
        reports.log_pass(pool, decision, {"snapshot": snapshot_s, "decide": decide_s, "apply": t3 - t2, "status": t4 - t3}, t4 - t0)
        if result.errors:
            return None
        if result.acted:
            return 0.0  # at the speed of the real work: the next phase's done test may be true already
        if not shadow and state.slurm.passed(decision):  # a slurmd registering: look soon, on a fresh poll (a shadow pass: no fresh polls)
            return QUICK_INTERVAL
        return config.interval

    async def snapshot(self, pool: PoolRef, spec: SlurmNodePoolSpec, raw, state: PoolState, newer_than: float | None = None):
        """The snapshot on the poll freshness.py allows, the overlap's Event if it changed, and the Node watch's `list_began` (records.lags)."""
        if self.membership.selectors_stale:
            parse = lambda key, pool_raw: self.state(key).spec.parse(pool_raw)  # noqa: E731
            self.membership.set_selectors(snapshots.selectors(self.pools_index, parse, self.settings.pool_policy))
        nodes = self.nodes
        src = snapshots.Sources(nodes.nodes, self.pods, self.pools_index, self.membership, self.access, self.status,
                                listed=lambda: nodes.list_began, dra=self.dra, groups=self.groups)
        fresh = state.slurm.want(spec, self.settings.interval, newer_than)
        snap, backend, listed = await snapshots.snapshot(src, pool, spec, raw, fresh)
        state.slurm.used(snap.slurm)
        await self.report_overlaps(pool, state, set(snap.overlaps))
        return snap, backend, listed

    async def report_overlaps(self, pool: PoolRef, state: PoolState, overlaps: set[str]) -> None:
        """One Event per change of the overlap, not one per pass."""
        if overlaps and state.overlaps != overlaps:
            message = reports.overlap_message((pool.namespace, pool.name), overlaps, self.membership)
            await self.kube.event(pool_object(pool), "Warning", Reason.NodeOverlap, message)
        state.overlaps = frozenset(overlaps)

    def report_invalid(self, pool: PoolRef, raw, message: str, policy: bool = False) -> None:
        previous = snapshots.previous_status(self.status, pool, raw)
        basis = reports.invalid_basis(pool.name, pool.generation, raw)
        self.write_status(pool, raw, reports.invalid_status(basis, previous, message, policy, datetime.now(timezone.utc)))

    def write_status(self, pool: PoolRef, raw, status: SlurmNodePoolStatus) -> None:
        """Handed to the writer (statuswriter.py): no pass waits for its status to be written."""
        body = status.model_dump(by_alias=True, exclude_none=False, mode="json")
        self.status.submit(pool, body, raw.get("status") or {})
