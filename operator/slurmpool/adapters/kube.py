"""Kubernetes adapter: reads come from watches of our own (NodeWatch, PodWatch), writes go
through the official `kubernetes` client. That client is synchronous, so every call runs
in a worker thread: kopf's event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from slurmbridge.backoff import Backoff

from slurmpool.adapters import metrics
from slurmpool.adapters.eventseries import EventSeries
from slurmpool.core.demand.claims import CLAIM, TEMPLATE, Asks, claim_asks, slice_devices, template_asks
from slurmpool.core.demand.claims import key as claim_key
from slurmpool.core.demand.pendingpod import GroupPolicy, is_pending_gpu_pod, pending_pod, pod_group_policy
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.poolpolicy import SLURMD_CAPABILITIES
from slurmpool.core.interfaces import Conflict, PoolRef, Refused
from slurmpool.core.bodies import node_view, pod_view
from slurmpool.core.view import LABEL_COMPONENT, LABEL_POOL, SLURM_TAINT_KEY, NodeView, PodView

log = logging.getLogger("slurmpool.kube")
SLURMD_CONTAINER = "slurmd"
MERGE_PATCH = "application/merge-patch+json"
# API calls in flight at once. Our own threads, not the default executor that kopf also uses,
# and as many pooled connections (the client's default pool of 5 x CPUs would be the limit).
API_THREADS = 48
# Events are posted by a few workers from a bounded queue (best effort: dropped when full). One
# worker fell behind 500 moves at once and dropped thousands (e2e/load.py). An entry is a compact
# tuple (the body is built when it is posted), so a full queue holds a few MiB.
EVENT_WORKERS, EVENT_QUEUE = 4, 20000
# A failed Event post is tried again after 1, 2, 4 ... 10 s; a failed watch lists again after 0.5 ... 5 s.
EVENT_BACKOFF, RELIST_BACKOFF = Backoff(1.0, 10.0), Backoff(0.5, 5.0)
# Writes no pass waits for (Events, Slurm's state published on nodes) go through threads of their
# own: in the same queue as the record and status writes, a burst of them (100 moves publish on
# hundreds of nodes) made every pool's pass wait seconds for its own writes.
LATER_THREADS = 4


def slurmd_pod_name(node: str) -> str:
    return f"slurmd-{node}"[:253]


# ---------------------------------------------------------------- the Nodes, by a watch of our own


class ListWatch:
    """Objects of one kind as compact views, kept by a list and watch of our own in one thread.

    Not a kopf index, for two reasons. kopf's first listing of an index is quadratic in its
    objects (each object's worker waits for every other: minutes for 5,000 Nodes, with each
    whole body held meanwhile). And after a watch that could not resume (410 Gone, as after an
    API server restart) kopf lists again but never drops what the new list lacks: a pod deleted
    in that gap stayed in its index for good, and a move waited on it forever. Here every list
    replaces the whole store. A body is reduced to its view as it is read; the store is changed
    only on the event loop, and `listed` is set once the first full list is in."""

    PAGE = 100  # objects per list request: the bodies of a page are held at once (500 Nodes cost 8 MiB of RSS at 5,000)
    WATCH_SECONDS = 270  # the server ends a watch after this; kopf's setting, see handlers.startup
    KIND = "objects"
    OPTIONAL = False  # a kind the API server may not serve (404): then the store stays empty, said once

    def __init__(self, api: client.ApiClient):
        self.core = client.CoreV1Api(api)
        self.listed = asyncio.Event()
        self.list_began = 0.0  # monotonic time the last full list that is in began (a consistent read)
        self._relist = threading.Event()
        self._stream: watch.Watch | None = None

    # What a kind defines: its list call, and how a list or an event changes the store.
    def _list_call(self) -> Callable:
        raise NotImplementedError

    def _replace(self, bodies: dict[str, Any], began: float = 0.0) -> None:
        """The store is exactly what a full list read (views keyed as _key keys them)."""
        raise NotImplementedError

    def _key(self, body: dict) -> str:
        raise NotImplementedError

    def _reduce(self, body: dict) -> Any:
        raise NotImplementedError

    def _set(self, key: str, view: Any) -> None:
        raise NotImplementedError

    def request_relist(self) -> None:
        """List again (the watch lags): the stream stops at its next event or bookmark."""
        self._relist.set()
        if self._stream is not None:
            self._stream.stop()

    def start(self) -> None:
        loop = asyncio.get_running_loop()  # the thread hands every change to it
        threading.Thread(target=self._run, args=(loop,), name=f"{self.KIND.lower()}-watch", daemon=True).start()

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        failures = 0
        while True:
            try:
                version = self._list(loop)
                failures = 0
                while not self._relist.is_set():
                    version = self._watch(loop, version)
            except Exception as err:  # noqa: BLE001 - relist after any failure, as kopf does
                if self.OPTIONAL and isinstance(err, ApiException) and err.status == 404:
                    log.warning("the API server does not serve %s: not watched", self.KIND)
                    loop.call_soon_threadsafe(self.listed.set)
                    return
                gone = isinstance(err, ApiException) and err.status == 410  # too old a version: relist now
                if not gone:
                    # Short waits: while the API server is away the views are stale (as kopf's would be).
                    failures += 1
                    delay = RELIST_BACKOFF.delay(failures)
                    log.warning("watch of %s failed (%s); listing again in %.1f s", self.KIND, err, delay)
                    threading.Event().wait(delay)

    def _list(self, loop: asyncio.AbstractEventLoop) -> str:
        self._relist.clear()
        began = time.monotonic()
        views: dict[str, Any] = {}
        token = None
        while True:
            response = self._list_call()(limit=self.PAGE, _continue=token, _preload_content=False, _request_timeout=(30, 120))
            page = json.loads(response.data)
            for item in page.get("items") or ():
                views[self._key(item)] = self._reduce(item)
            token = page["metadata"].get("continue")
            if not token:
                break
        loop.call_soon_threadsafe(self._replace, views, began)
        return page["metadata"]["resourceVersion"]

    def _watch(self, loop: asyncio.AbstractEventLoop, version: str) -> str:
        # A return type given: the client would otherwise look the item's model up by the list
        # call's name even though nothing is deserialized, and it has none for resource.k8s.io/v1's
        # claims (V1ResourceClaim: the model is ResourceV1ResourceClaim in client 37).
        self._stream = watch.Watch(return_type=dict)
        stream = self._stream.stream(
            self._list_call(), resource_version=version, allow_watch_bookmarks=True, timeout_seconds=self.WATCH_SECONDS,
            _request_timeout=(30, self.WATCH_SECONDS + 30), deserialize=False,
        )
        for event in stream:  # an ERROR event (410: too old) raises ApiException: relist
            body = event["object"]
            version = body["metadata"].get("resourceVersion") or version
            if event["type"] in ("ADDED", "MODIFIED"):
                loop.call_soon_threadsafe(self._set, self._key(body), self._reduce(body))
            elif event["type"] == "DELETED":
                loop.call_soon_threadsafe(self._set, self._key(body), None)
        return version


class NodeWatch(ListWatch):
    """Every Node as a compact NodeView. `nodes` has the shape of a kopf index (name -> a store
    of one view). `on_change(name)` is called on the loop for each change."""

    KIND = "Nodes"

    def __init__(self, api: client.ApiClient, on_change: Callable[[str], None]):
        super().__init__(api)
        self.on_change = on_change
        self.nodes: dict[str, tuple[NodeView]] = {}

    def _list_call(self) -> Callable:
        return self.core.list_node

    def _key(self, body: dict) -> str:
        return body["metadata"]["name"]

    def _reduce(self, body: dict) -> NodeView:
        return node_view(body)

    def _replace(self, views: dict[str, NodeView], began: float = 0.0) -> None:
        self.list_began = began
        for name in [n for n in self.nodes if n not in views]:
            self._set(name, None)
        for name, view in views.items():
            if self.nodes.get(name) != (view,):
                self._set(name, view)
        self.listed.set()

    def _set(self, name: str, view: NodeView | None) -> None:
        if view is None:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = (view,)
        self.on_change(name)


@dataclass(frozen=True, slots=True)
class _PodEntry:
    node: str  # spec.nodeName ("" while unscheduled)
    view: PodView | None  # a pod on a node
    pending: Any = None  # demand.PendingPod: an unschedulable pod asking for an extended resource or a claim


class PodWatch(ListWatch):
    """Every pod that matters, compactly: the pods on each node (`on(node)`), and the pending,
    unschedulable pods asking for extended resources or ResourceClaims (`pending`, demand's
    inference signal: each pool counts the names it is told to); no other pod is
    kept. `on_change(node)` is called on the loop when a pod on that node comes, changes or goes."""

    KIND = "Pods"
    PAGE = 500

    def __init__(self, api: client.ApiClient, on_change: Callable[[str], None]):
        super().__init__(api)
        self.on_change = on_change
        self._pods: dict[str, _PodEntry] = {}  # uid -> entry
        self.by_node: dict[str, dict[str, PodView]] = {}  # node -> uid -> view
        self.pending: dict[str, Any] = {}  # uid -> PendingPod

    def on(self, node: str) -> tuple[PodView, ...]:
        return tuple(self.by_node.get(node, {}).values())

    def _list_call(self) -> Callable:
        return self.core.list_pod_for_all_namespaces

    def _key(self, body: dict) -> str:
        return body["metadata"].get("uid") or f"{body['metadata'].get('namespace')}/{body['metadata']['name']}"

    def _reduce(self, body: dict) -> _PodEntry:
        spec, status = body.get("spec") or {}, body.get("status") or {}
        node = spec.get("nodeName") or ""
        pending = pending_pod(body) if is_pending_gpu_pod(spec, status) else None
        return _PodEntry(node, pod_view(body) if node else None, pending)

    def _replace(self, entries: dict[str, _PodEntry], began: float = 0.0) -> None:
        self.list_began = began
        for uid in [u for u in self._pods if u not in entries]:
            self._set(uid, None)
        for uid, entry in entries.items():
            if (entry.view is not None or entry.pending is not None) and self._pods.get(uid) != entry:
                self._set(uid, entry)
        self.listed.set()

    def _set(self, uid: str, entry: _PodEntry | None) -> None:
        old = self._pods.pop(uid, None)
        if entry is not None and (entry.view is not None or entry.pending is not None):
            self._pods[uid] = entry
        if old is not None and old.view is not None:
            on_node = self.by_node.get(old.node, {})
            on_node.pop(uid, None)
            if not on_node:
                self.by_node.pop(old.node, None)
        self.pending.pop(uid, None)
        if entry is not None and entry.view is not None:
            self.by_node.setdefault(entry.node, {})[uid] = entry.view
        if entry is not None and entry.pending is not None:
            self.pending[uid] = entry.pending
        for node in {e.node for e in (old, entry) if e is not None and e.view is not None}:
            self.on_change(node)


# ---------------------------------------------------------------- DRA: claims, templates, slices


class KeyedWatch(ListWatch):
    """One kind demand reads (resource.k8s.io/v1's, scheduling.k8s.io/v1beta1's PodGroups) as compact
    values (`reduce` of each body; None: not kept), keyed as `key_of` keys them. `on_change(key,
    old, new)` is called on the loop for each value that changes."""

    # resource.k8s.io/v1 is served from Kubernetes 1.34, scheduling.k8s.io/v1beta1 only where it is
    # turned on (1.37+, gate GenericWorkload): elsewhere the demand that reads them sees nothing.
    OPTIONAL = True

    def __init__(self, api: client.ApiClient, kind: str, call: Callable, reduce: Callable[[dict], Any],
                 key_of: Callable[[dict], str], on_change: Callable[[str, Any, Any], None]):
        super().__init__(api)
        self.KIND, self.call, self.reduce, self.key_of, self.on_change = kind, call, reduce, key_of, on_change
        self.values: dict[str, Any] = {}

    def _list_call(self) -> Callable:
        return self.call

    def _key(self, body: dict) -> str:
        return self.key_of(body)

    def _reduce(self, body: dict) -> Any:
        return self.reduce(body)

    def _replace(self, views: dict[str, Any], began: float = 0.0) -> None:
        self.list_began = began
        for k in [k for k in self.values if k not in views]:
            self._set(k, None)
        for k, value in views.items():
            self._set(k, value)
        self.listed.set()

    def _set(self, name: str, view: Any) -> None:
        old = self.values.get(name)
        if view is None:
            self.values.pop(name, None)
        else:
            self.values[name] = view
        if old != view:
            self.on_change(name, old, view)


def _named(kind: str) -> Callable[[dict], str]:
    return lambda body: claim_key(kind, body["metadata"].get("namespace", ""), body["metadata"]["name"])


class DraIndex:
    """What DRA demand reads: the devices ResourceClaimTemplates and ResourceClaims ask for
    (`asks`, by claims.key), and the whole devices each node's ResourceSlices publish, per driver
    (`devices(node)`). `on_node(node)` is called on the loop when a node's devices change."""

    def __init__(self, api: client.ApiClient, on_node: Callable[[str], None]):
        resource = client.ResourceV1Api(api)
        self.on_node = on_node
        self.asks: dict[str, Asks] = {}
        self._by_node: dict[str, dict[str, tuple[str, int]]] = {}  # node -> slice name -> (driver, devices)
        self.watches = (
            KeyedWatch(api, "ResourceClaimTemplates", resource.list_resource_claim_template_for_all_namespaces, template_asks,
                       _named(TEMPLATE), self._asked),
            KeyedWatch(api, "ResourceClaims", resource.list_resource_claim_for_all_namespaces, claim_asks, _named(CLAIM), self._asked),
            KeyedWatch(api, "ResourceSlices", resource.list_resource_slice, slice_devices,
                       lambda body: body["metadata"]["name"], self._sliced),
        )

    def start(self) -> None:
        for w in self.watches:
            w.start()

    def devices(self, node: str) -> tuple[tuple[str, int], ...]:
        per_driver: dict[str, int] = {}
        for driver, n in self._by_node.get(node, {}).values():
            per_driver[driver] = per_driver.get(driver, 0) + n
        return tuple(sorted(per_driver.items()))

    def _asked(self, name: str, _old: Any, asks: Asks | None) -> None:
        if asks is None:
            self.asks.pop(name, None)
        else:
            self.asks[name] = asks

    def _sliced(self, name: str, old: tuple[str, str, int] | None, new: tuple[str, str, int] | None) -> None:
        for entry in (old, new):
            if entry is not None and entry[0]:
                self._by_node.get(entry[0], {}).pop(name, None)
        if new is not None and new[0]:
            self._by_node.setdefault(new[0], {})[name] = (new[1], new[2])
        for node in {e[0] for e in (old, new) if e is not None and e[0]}:
            if node in self._by_node and not self._by_node[node]:
                del self._by_node[node]
            self.on_node(node)


# ---------------------------------------------------------------- PodGroups: the size of a gang


def _namespaced(body: dict) -> str:
    return f"{body['metadata'].get('namespace', '')}/{body['metadata']['name']}"


class PodGroupIndex:
    """What group demand reads of Kubernetes gang scheduling: each PodGroup's (scheduling.k8s.io/v1beta1)
    gang minCount by (namespace, name), None for a basic policy (`min_counts`; a PodGroup whose policy
    does not read is left out, as pendingpod.pod_group_policy says). `on_change()` is called on the
    loop when one changes: a PodGroup names no node, so any pool's demand may count it."""

    def __init__(self, api: client.ApiClient, on_change: Callable[[], None]):
        scheduling = client.SchedulingV1beta1Api(api)
        self.on_change = on_change
        self.min_counts: dict[tuple[str, str], int | None] = {}
        self.watch = KeyedWatch(api, "PodGroups", scheduling.list_pod_group_for_all_namespaces, pod_group_policy, _namespaced,
                                self._changed)

    def start(self) -> None:
        self.watch.start()

    def _changed(self, key: str, _old: GroupPolicy | None, policy: GroupPolicy | None) -> None:
        namespace, name = key.split("/", 1)  # neither has a slash
        if policy is None:
            self.min_counts.pop((namespace, name), None)
        else:
            self.min_counts[(namespace, name)] = policy.min_count
        self.on_change()


# ---------------------------------------------------------------- writes


def slurmd_pod(pool: PoolRef, spec: SlurmNodePoolSpec, node: str, slurm_name: str | None = None, boot: bool = False) -> dict[str, Any]:
    """The slurmd pod for one node: bound to it directly (the node is cordoned), host network,
    tolerating the cordon and our Slurm taint. See e2e/lab/README.md for the lab's contract.
    `boot`: Slurm is powering the node up, so `-b` is appended to the args (slurmd reports a boot
    now; a wrapper in slurmdPod.command must pass its arguments on to slurmd: docs/pools.md)."""
    t = spec.slurm.slurmd_pod
    tolerations = [
        {"key": SLURM_TAINT_KEY, "operator": "Exists"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    ] + [x.model_dump(by_alias=True, exclude_none=True) for x in t.tolerations]
    env = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "SLURM_NODENAME", "value": slurm_name or node}]  # spec.slurm.nodeName: `slurmd -N $(SLURM_NODENAME)`
    env += [{"name": e.name, "value": e.value} for e in t.env]
    container: dict[str, Any] = {
        "name": SLURMD_CONTAINER,
        "image": t.image,
        "command": list(t.command),
        "args": list(t.args) + (["-b"] if boot else []),
        "env": env,
        "resources": t.resources.model_dump(by_alias=True),
    }
    if t.security_context is not None:  # checked against the pool policy (poolpolicy.py) before any pod
        container["securityContext"] = t.security_context.model_dump(by_alias=True, exclude_none=True)
    else:
        container["securityContext"] = {"capabilities": {"drop": ["ALL"], "add": list(SLURMD_CAPABILITIES)}}
    if t.volume_mounts:
        container["volumeMounts"] = [dict(m) for m in t.volume_mounts]
    pod_spec: dict[str, Any] = {
        "nodeName": node,
        "hostNetwork": True,
        "restartPolicy": "Always",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": t.termination_grace_period_seconds,
        "tolerations": tolerations,
        "containers": [container],
    }
    if t.volumes:
        pod_spec["volumes"] = [dict(v) for v in t.volumes]
    if t.service_account_name:
        pod_spec["serviceAccountName"] = t.service_account_name
    if t.priority_class_name:
        pod_spec["priorityClassName"] = t.priority_class_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": slurmd_pod_name(node),
            "namespace": pool.namespace,
            # No ownerReference on purpose: deleting a pool must never garbage-collect the
            # slurmd of a node running jobs. Nodes and pods stay where they are.
            "labels": {LABEL_COMPONENT: "slurmd", LABEL_POOL: pool.name},
            "annotations": {"slurmpool.io/node": node},
        },
        "spec": pod_spec,
    }


class KubeAdapter:
    """Implements interfaces.Kube over the kubernetes client, off the event loop."""

    def __init__(self, api_client: client.ApiClient | None = None):
        self.api = api_client or client.ApiClient()
        self.api.rest_client.pool_manager.connection_pool_kw["maxsize"] = API_THREADS + LATER_THREADS
        self._pool = ThreadPoolExecutor(API_THREADS, thread_name_prefix="kube")
        self._later_pool = ThreadPoolExecutor(LATER_THREADS, thread_name_prefix="kube-later")
        self._node_patches: dict[str, dict] = {}  # node -> what to write later (the latest wins)
        self._node_patches_ready = asyncio.Event()
        self._node_patch_tasks: list[asyncio.Task] = []
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.requests = 0  # API requests made (the benchmark counts them per reconcile)
        self._events: asyncio.Queue[tuple[Any, ...]] | None = None  # made with its workers, by the first Event
        self._events_unposted = 0
        self._event_tasks: list[asyncio.Task] = []

    async def _call(self, fn, *args, later: bool = False, keep: bool = False, **kwargs):
        """Run one client call in a thread of its lane. Without `keep`, the answer is read and
        dropped unparsed: a write answers with the whole object, and building the client's models
        of it was ~5 % of the operator's CPU under `make load` (py-spy), for nothing that reads them."""
        self.requests += 1
        pool = self._later_pool if later else self._pool
        queued = time.monotonic()
        lane = "later" if later else "now"

        def timed():
            started = time.monotonic()
            metrics.KUBE_THREAD_WAIT_SECONDS.labels(lane=lane).observe(started - queued)
            try:
                if keep:
                    return fn(*args, **kwargs)
                answer = fn(*args, _preload_content=False, **kwargs)  # a non-2xx still raises ApiException
                if hasattr(answer, "release_conn"):
                    answer.read()
                    answer.release_conn()
                return None
            finally:
                metrics.KUBE_REQUEST_SECONDS.labels(call=fn.__name__).observe(time.monotonic() - started)

        return await asyncio.get_running_loop().run_in_executor(pool, timed)

    async def patch_node(self, name: str, patch: dict) -> None:
        try:
            await self._call(self.core.patch_node, name, patch, _content_type=MERGE_PATCH)
        except ApiException as err:
            if err.status == 409:  # the patch's resourceVersion precondition failed
                raise Conflict(f"node {name} changed meanwhile") from err
            if _refused(err):
                raise Refused(f"({err.status}) {_message(err) or err.reason}") from err
            raise

    async def read_node(self, name: str) -> NodeView | None:
        try:
            body = await self._call(self.core.read_node, name, keep=True)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return node_view(self.api.sanitize_for_serialization(body))

    async def patch_node_later(self, name: str, patch: dict) -> None:
        """Queue a node patch nothing waits for and return: written soon by the later lane, merged
        with what is still queued for the node. A failure is logged (the caller writes it again)."""
        self._node_patches[name] = _merged(self._node_patches.get(name, {}), patch)
        self._node_patches_ready.set()
        if not self._node_patch_tasks:
            self._node_patch_tasks = [asyncio.create_task(self._write_node_patches()) for _ in range(LATER_THREADS)]

    async def _write_node_patches(self) -> None:
        while True:
            if not self._node_patches:
                self._node_patches_ready.clear()
                await self._node_patches_ready.wait()
                continue
            name = next(iter(self._node_patches))
            patch = self._node_patches.pop(name)
            try:
                await self._call(self.core.patch_node, name, patch, _content_type=MERGE_PATCH, later=True)
            except Exception as err:  # noqa: BLE001 - best effort
                log.warning("could not patch node %s: %s", name, err)

    async def create_slurmd_pod(self, pool: PoolRef, spec: SlurmNodePoolSpec, node: str, slurm_name: str | None = None,
                                boot: bool = False) -> None:
        try:
            await self._call(self.core.create_namespaced_pod, pool.namespace, slurmd_pod(pool, spec, node, slurm_name, boot))
        except ApiException as err:
            if err.status == 409:  # already there: level-triggered, that is success
                return
            if _refused(err):
                raise Refused(f"({err.status}) {_message(err) or err.reason}") from err
            raise

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
        try:
            await self._call(self.core.delete_namespaced_pod, name, namespace, body=body)
        except ApiException as err:
            if err.status not in (404, 409):
                raise

    async def evict(self, namespace: str, name: str) -> str | None:
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            await self._call(self.core.create_namespaced_pod_eviction, name, namespace, eviction)
        except ApiException as err:
            if err.status == 404:
                return None
            if err.status == 429:  # a PodDisruptionBudget says no: report it, never force
                return _message(err) or "refused by a PodDisruptionBudget"
            raise
        return None

    async def event(self, obj: dict, type_: str, reason: str, message: str) -> None:
        """Queue a Kubernetes Event; a worker posts it, so the reconcile never waits on it.
        (kopf.event only works inside kopf's own handler tasks, not in our loop.)"""
        if self._events is None:
            self._events = asyncio.Queue(maxsize=EVENT_QUEUE)
            self._event_tasks = [asyncio.create_task(self._post_events(self._events)) for _ in range(EVENT_WORKERS)]
        try:
            self._events.put_nowait(_queued_event(obj, type_, reason, message))
            self._events_unposted += 1
        except asyncio.QueueFull:
            metrics.EVENTS_DROPPED.labels(why="queue_full").inc()
            log.warning("event queue full; dropped %s %s", reason, message)

    async def flush_events(self, timeout: float) -> int:
        """On a graceful stop, give the workers `timeout` seconds to post what is queued (a rollout
        of the operator must not swallow the MoveStarted of a move it just began); returns how
        many were left, counted as dropped (`shutdown`). A SIGKILL still loses the queue."""
        if self._events is None:
            return 0
        try:
            await asyncio.wait_for(self._events.join(), timeout)
        except asyncio.TimeoutError:
            pass
        left = self._events_unposted  # queued, or being posted
        if left:
            metrics.EVENTS_DROPPED.labels(why="shutdown").inc(left)
            log.warning("stopping with %d Events not posted after %.0f s", left, timeout)
        return left

    async def _post_events(self, events: asyncio.Queue[tuple[Any, ...]], retry_for: float = 120.0) -> None:
        while True:
            item = await events.get()
            try:
                if (name := await self._new_in_series(item)) is not None:
                    ref, type_, reason, message, now = item
                    await self._post_event(*_event_body(ref, type_, reason, message, now, name), retry_for)
            finally:
                self._events_unposted -= 1
                events.task_done()

    async def _new_in_series(self, item: tuple) -> str | None:
        """An Event posted again within its series' window (eventseries.py): its count and
        lastTimestamp raised, None. Else the name to create the new Event under."""
        if getattr(self, "_series", None) is None:  # made on first use, as the queue is
            self._series = EventSeries()
        ref, _, _, _, now = item
        name, count = self._series.add(item[:4], ref[2], time.monotonic())
        if count > 1:
            try:
                await self._call(self.core.patch_namespaced_event, name, ref[3] or "default",
                                 {"count": count, "lastTimestamp": now}, later=True, _content_type=MERGE_PATCH)
                return None
            except Exception:  # noqa: BLE001 - gone (its hour passed, deleted) or never created: a new Event
                name, _ = self._series.restart(item[:4], ref[2], time.monotonic())
        return name

    async def _post_event(self, namespace: str, body: dict, retry_for: float) -> None:
        delays, waited = EVENT_BACKOFF.delays(), 0.0
        while True:
            try:
                await self._call(self.core.create_namespaced_event, namespace, body, later=True)
                return
            except Exception as err:  # noqa: BLE001 - an Event is best effort
                # Kept (in order) while the apiserver restarts or sheds load: MoveCompleted must
                # not vanish. Only a request the apiserver will never take is given up at once.
                refused = _refused(err)
                if refused or waited >= retry_for:
                    metrics.EVENTS_DROPPED.labels(why="refused" if refused else "gave_up").inc()
                    log.warning("could not post event %s (%s): %s", body["reason"], _status_of(err), err)
                    return
                delay = next(delays)
                await asyncio.sleep(max(delay, _retry_after(err)))
                waited += delay

    async def patch_pool_status(self, pool: PoolRef, status: dict) -> None:
        await self._call(
            self.custom.patch_namespaced_custom_object_status,
            "slurmpool.io",
            "v1alpha1",
            pool.namespace,
            "slurmnodepools",
            pool.name,
            {"status": status},
            _content_type=MERGE_PATCH,
        )

    async def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        import base64

        secret = await self._call(self.core.read_namespaced_secret, name, namespace, keep=True)
        return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}


# The 4xx that say "not now" rather than "never": a request timeout, and too many requests (the
# apiserver's inflight limit, or priority and fairness). A 5xx or a lost connection is tried again too.
TRANSIENT_STATUSES = frozenset({408, 429})


def _status_of(err: Exception) -> str:
    return str(err.status) if isinstance(err, ApiException) and err.status else type(err).__name__


def _refused(err: Exception) -> bool:
    """A 4xx the apiserver will answer the same way however often it is asked."""
    status = err.status if isinstance(err, ApiException) else None
    return status is not None and 400 <= status < 500 and status not in TRANSIENT_STATUSES


def _retry_after(err: Exception) -> float:
    """The apiserver's Retry-After on a 429 (seconds), else 0."""
    headers = getattr(err, "headers", None) or {}
    try:
        return min(float(headers.get("Retry-After", 0)), 10.0)
    except (TypeError, ValueError):
        return 0.0


def _merged(base: dict, patch: dict) -> dict:
    """Two merge patches as one (the second wins)."""
    out = dict(base)
    for key, value in patch.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _queued_event(obj: dict, type_: str, reason: str, message: str) -> tuple:
    """What the queue keeps of an Event: the object's reference, what happened, and when."""
    meta = obj["metadata"]
    ref = (obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"), meta.get("uid"))
    return ref, type_, reason, message[:1024], datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event_body(ref: tuple, type_: str, reason: str, message: str, now: str, name: str | None = None) -> tuple[str, dict]:
    """The Event to create; `name`: the series' (eventseries.py), else one the apiserver generates."""
    api_version, kind, obj_name, obj_namespace, uid = ref
    namespace = obj_namespace or "default"  # events of cluster-scoped objects
    return namespace, {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace} if name else {"generateName": f"{obj_name}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": api_version,
            "kind": kind,
            "name": obj_name,
            **({"namespace": obj_namespace} if obj_namespace else {}),
            **({"uid": uid} if uid else {}),
        },
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": "slurmpool"},
        "reportingComponent": "slurmpool.io/operator",
        "reportingInstance": socket.gethostname()[:128],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def _message(err: ApiException) -> str:
    import json

    try:
        return json.loads(err.body or "{}").get("message", "")
    except ValueError:
        return str(err.reason or "")
