"""One pool's snapshot, assembled from the watches' views, kopf's pool index, the status handed to
the writer and a Slurm poll. It reads only: Events and status writes are the pass's (pools.py),
and how fresh the poll must be is freshness.py's to say."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import NoReturn

from pydantic import ValidationError

from slurmbridge import SlurmUnavailable

from slurmpool.adapters.access import SlurmAccessPool, Wanted
from slurmpool.adapters.kube import DraIndex, PodGroupIndex, PodWatch
from slurmpool.adapters.statuswriter import StatusWriter
from slurmpool.controller.freshness import Freshness
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.membership import Membership
from slurmpool.core.models import SlurmNodePoolSpec, SlurmNodePoolStatus
from slurmpool.core.poolpolicy import PoolPolicy, violations
from slurmpool.core.snapshot import PoolSnapshot
from slurmpool.core.view import ANN_MOVE, ANN_POOL, NodeView

ParsedSpec = tuple[SlurmNodePoolSpec | None, str]  # the spec, or None and why not


@dataclass
class SpecCache:
    """A pool's spec, validated once per uid, generation and content."""

    key: str = ""  # uid/generation
    raw: dict | None = None
    parsed: ParsedSpec = (None, "")

    def parse(self, raw: dict) -> ParsedSpec:
        key = f"{raw['uid']}/{raw['generation']}"
        if self.raw is not None and self.key == key and self.raw == raw["spec"]:
            return self.parsed
        try:
            parsed: ParsedSpec = (SlurmNodePoolSpec.model_validate(raw["spec"]), "")
        except ValidationError as err:
            parsed = (None, short(err))
        self.key, self.raw, self.parsed = key, copy.deepcopy(raw["spec"]), parsed
        return parsed


class NoSlurm:
    """The SlurmBackend that stands in when none could be built: it cannot reserve, and every call
    to Slurm fails closed (SlurmUnavailable), as an unreachable Slurm does."""

    commands_run = 0
    filters_jobs = True

    async def _fail(self, *_: object, **__: object) -> NoReturn:
        raise SlurmUnavailable("no Slurm backend")

    nodes = jobs = drain = resume = requeue = cancel = ping = _fail
    reservations = partition_max_times = create_reservation = delete_reservation = topology = _fail
    power_down = power_up = power_save = signal = _fail

    async def can_reserve(self) -> bool:
        return False

    async def close(self) -> None:
        return None


def short(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5])


def first(store):
    return next(iter(store), None)


def selectors(pools_index, parse, policy: PoolPolicy) -> dict:
    """Each pool's nodeSelector, for membership.py: a pool the policy refuses owns no node (nothing
    of it runs anywhere), nor does one whose spec cannot be read. `parse(key, raw)`: its spec."""
    out = {}
    for key, store in list(pools_index.items()):
        raw = first(store)
        spec = parse(key, raw)[0] if raw is not None else None
        if spec is not None and not spec.node_selector.is_empty() and not violations(spec, policy):
            out[key] = spec.node_selector
    return out


@dataclass
class Sources:
    """What a snapshot is read from."""

    nodes: dict  # node name -> the NodeWatch's store of its view
    pods: PodWatch
    pools: Mapping  # kopf's index of the pools
    membership: Membership  # with fresh selectors
    access: SlurmAccessPool
    status: StatusWriter
    listed: Callable[[], float] = lambda: 0.0  # the Node watch's list_began now (records.lags)
    dra: DraIndex | None = None  # claims' asks and nodes' devices (DRA demand, GPU metrics)
    groups: PodGroupIndex | None = None  # each PodGroup's gang minCount (group demand)


def previous_status(status: StatusWriter, pool: PoolRef, raw) -> SlurmNodePoolStatus | None:
    """The status this pass builds on: the newest one handed to the writer (the watch lags it)."""
    try:
        return SlurmNodePoolStatus.model_validate(status.wanted(pool) or raw.get("status") or {})
    except ValidationError:
        return None


def members(src: Sources, key: tuple[str, str]) -> tuple[list[NodeView], list[str]]:
    """The pool's nodes with their pods, and the nodes another pool selects too (never acted on)."""
    mine: list[NodeView] = []
    overlaps: list[str] = []
    for name in src.membership.members(key):
        node = first(src.nodes.get(name, ()))
        if node is None:  # deleted since the owners were sorted
            continue
        if len(src.membership.owners(name) or ()) > 1:
            overlaps.append(node.name)
            continue
        pods, devices = src.pods.on(node.name), src.dra.devices(node.name) if src.dra else ()
        # a new view costs a parse of its records
        mine.append(node if (pods, devices) == (node.pods, node.devices) else replace(node, pods=pods, devices=devices))
    return mine, overlaps


def strays(src: Sources, pool: PoolRef) -> tuple[NodeView, ...]:
    """Nodes with this pool's move record in flight that no pool selects now (relabelled, or taken
    out by an inference pool's labels): decide ends their move on a side and reports them. A node
    another pool selects is that pool's to carry on."""
    out = []
    for name, store in list(src.nodes.items()):
        node = first(store)
        if node is None or node.annotations.get(ANN_POOL) != pool.key or ANN_MOVE not in node.annotations:
            continue
        if not src.membership.owners(name) and src.membership.owners(name) is not None:
            out.append(replace(node, pods=src.pods.on(name)))
    return tuple(out)


async def snapshot(src: Sources, pool: PoolRef, spec: SlurmNodePoolSpec, raw, fresh: Freshness):
    """The pool's snapshot, the Slurm backend of its access (None: none could be built), and the
    Node watch's list_began as its nodes were read: a list that lands while the poll below is
    awaited shows the Nodes after them, not the views this snapshot holds."""
    mine, overlaps = members(src, (pool.namespace, pool.name))
    stray = strays(src, pool)
    listed = src.listed()  # with the nodes, before any await
    # Pods bound to a node that is no Node (deleted): this pool's slurmd pods are reported and cleaned up.
    orphans = tuple(p for node in list(src.pods.by_node) if node not in src.nodes for p in src.pods.on(node)
                    if p.slurmd and p.pool == pool.name and p.namespace == pool.namespace)
    demand = spec.demand is not None and spec.demand.enabled
    wanted = Wanted(*fresh, pool=pool.key, pending=spec.slurm.partition if demand else None,
                    topology=spec.topology.from_slurm,
                    power_save=spec.slurm.parking == "PowerSave")
    backend, slurm = await src.access.observe(pool.namespace, spec.slurm.access, wanted)
    snap = PoolSnapshot(
        pool=pool, spec=spec, nodes=tuple(mine), strays=stray, slurm=slurm, now=datetime.now(timezone.utc),
        previous=previous_status(src.status, pool, raw), overlaps=tuple(overlaps), orphans=orphans,
        pending=tuple(src.pods.pending.values()) if demand else (), author=raw.get("author"),
        claims=dict(src.dra.asks) if demand and src.dra else {},
        pod_groups=dict(src.groups.min_counts) if demand and src.groups else {},
    )
    return snap, backend, listed
