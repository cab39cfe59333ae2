"""The kopf layer: kopf's index of SlurmNodePools and its events, startup and cleanup. Everything
else is the controller's (pools.py: each pool's state and its pass; services.py: the adapters it
uses), made once at startup and kept as `memo.controller`.

Why not kopf timers: kopf puts a finalizer on every object with a timer or daemon, so deleting a
pool would hang while the operator is down; each pool is a key in a work queue instead.
Nodes and pods are not kopf indexes but watches of our own (kube.NodeWatch and kube.PodWatch:
kopf's first listing of an index is quadratic in its objects, minutes for 5,000 Nodes; and after
a watch that could not resume, kopf lists again without dropping what is gone, so a pod deleted
while the API server restarted blocked its node's move for good). The pools stay a kopf index (a
few objects; a pool deleted in such a gap would linger in it: a known limit, docs/faults.md).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import kopf

from slurmpool.controller.pools import PoolController
from slurmpool.controller.services import Services
from slurmpool.controller.settings import Settings
from slurmpool.core.models import GROUP, PLURAL, VERSION
from slurmpool.core.target import author

BATCH_WINDOW = 0.02  # seconds (kopf's settings.batching)


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
    await memo.controller.pool_changed(type, (namespace, name), body)


@kopf.on.startup()
async def startup(*, settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    # kopf hands each index in by its function's name; its ActivityFn Protocol has no slot for one.
    pools_index = kwargs["pools_index"]
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
    # `slurmpool run` hands its settings in kopf's memo; read here only when kopf runs the module itself.
    config = memo.get("settings") or Settings.from_env()
    memo.controller = PoolController(config, Services.connect(config, _api_client()), pools_index)
    memo.controller.start()


class NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf deep-copies every watched body (every Node and Pod event) to diff it for on.create/
    update/delete handlers and daemons; this operator has none (indexes and one on.event, which
    get no diff), and under load those copies held the event loop. tests/test_handlers.py
    fails when a handler that needs the diff is added."""

    def build(self, *, body, extra_fields=None) -> kopf.BodyEssence:
        return kopf.BodyEssence()


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_):
    controller = memo.get("controller")
    if controller is not None:
        await controller.close()


def _api_client():
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()
