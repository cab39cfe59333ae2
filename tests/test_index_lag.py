"""A pass of PoolController over a lagging Node watch (CI's `make load` flake: one pool of 25 nodes
adopted twice, and 3 moves of the scale started twice, while the watch lagged 10 s and more).

A pass reads its nodes from the watch, then awaits the Slurm poll (seconds, under load, behind
the other pools on one Slurm). A relist the lag asked for can land meanwhile: its list began after
our writes, so it shows them; but the nodes the pass took before the await are the old ones. Such a
list says nothing of those nodes: the pass must wait, not start the moves again on them."""

from __future__ import annotations

import asyncio
import json
import time

from slurmbridge.backoff import Backoff
from slurmpool.adapters import metrics
from slurmpool.controller import records
from slurmpool.controller.pools import PoolController
from slurmpool.controller.services import Services
from slurmpool.controller.settings import Settings
from slurmpool.controller.workqueue import WorkQueue
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.poolpolicy import PoolPolicy
from slurmpool.core.view import ANN_MOVE, NodeView, SlurmView

from .factories import make_spec, slurm_node
from .slurmfake import Refusing

KEY = ("ns", "gpu")
NAMES = ("gpu01", "gpu02", "gpu03", "gpu04")


class Kube:
    """The API server: Nodes as they really are (the watch shows them late, or not at all)."""

    api = None  # the controller's watches are fed by hand (_replace), never started

    def __init__(self):
        self.nodes = {n: NodeView(n, labels={"gpu": "true"}, ready=True, resources=(("nvidia.com/gpu", 8),)) for n in NAMES}
        self.patches: list[tuple[str, dict]] = []

    async def patch_node(self, name, patch):
        self.patches.append((name, patch))
        meta = patch.get("metadata", {})
        node = self.nodes[name]
        annotations = {**node.annotations, **meta.get("annotations", {})}
        labels = {**node.labels, **meta.get("labels", {})}
        spec = patch.get("spec", {})
        self.nodes[name] = NodeView(name, labels={k: v for k, v in labels.items() if v is not None},
                                    annotations={k: v for k, v in annotations.items() if v is not None},
                                    taints=tuple(spec.get("taints", node.taints)),
                                    unschedulable=spec.get("unschedulable", node.unschedulable), ready=True, resources=(("nvidia.com/gpu", 8),))

    async def read_node(self, name):
        return self.nodes[name]

    async def patch_node_later(self, name, patch):
        return None

    async def create_slurmd_pod(self, *args, **kwargs):
        return None

    async def delete_pod(self, *args):
        return None

    async def evict(self, *args):
        return None

    async def event(self, *args):
        return None

    async def patch_pool_status(self, pool, status):
        return None


class Backend(Refusing):
    async def drain(self, names, reason):
        return None

    async def resume(self, names):
        return None


class Access:
    """One Slurm; `during_poll` runs while a pass awaits its poll (what lands on the loop meanwhile)."""

    def __init__(self):
        self.during_poll = None
        self.clock = time.monotonic

    async def observe(self, namespace, access, wanted):
        began = time.monotonic()
        await asyncio.sleep(0)
        if self.during_poll is not None:
            self.during_poll()
        nodes = {n: slurm_node(n) for n in NAMES}
        return Backend(), SlurmView(available=True, nodes=nodes, polled_at=began)


class Leader:
    leading = True


def move_id(node: NodeView) -> str:
    return json.loads(node.annotations[ANN_MOVE])["id"]


def started_moves() -> float:
    return sum(s.value for m in metrics.MOVES_STARTED.collect() for s in m.samples if s.name.endswith("_total"))


def test_a_relist_landing_during_the_slurm_poll_does_not_let_the_pass_start_again_on_the_nodes_read_before():
    async def scenario():
        kube, access = Kube(), Access()
        settings = Settings(pool_policy=PoolPolicy(image_prefixes=("slurmd:",)))
        spec = make_spec(slurm_nodes=0, max_moves=4).model_dump(by_alias=True, exclude_none=True)
        raw = {"spec": spec, "uid": "u1", "generation": 1, "status": {}}
        controller = PoolController(settings, Services(kube, Leader(), access), {KEY: [raw]}, queue=WorkQueue(), backoff=Backoff(1, 8, jitter=0))
        pool = PoolRef(*KEY, "u1", 1)
        controller.nodes._replace(dict(kube.nodes), began=time.monotonic())  # the first list

        before = started_moves()
        await controller.reconcile(pool, raw, controller.state(KEY))  # adopts: every node's move starts
        assert started_moves() - before == len(NAMES)
        ids = {n: move_id(kube.nodes[n]) for n in NAMES}
        assert set(controller.written.expected) == set(NAMES)

        # The watch shows none of it (it lags). While the next pass awaits its poll, the relist that
        # the lag asked for lands: begun after the writes, it shows them.
        access.during_poll = lambda: controller.nodes._replace(dict(kube.nodes), began=time.monotonic())
        patches = len(kube.patches)
        after = await controller.reconcile(pool, raw, controller.state(KEY))
        access.during_poll = None
        assert started_moves() - before == len(NAMES) and len(kube.patches) == patches  # it read the old nodes: no start ...
        assert after == records.INDEX_LAG_RETRY  # ... it waits for the watch

        await controller.reconcile(pool, raw, controller.state(KEY))  # on the nodes the relist brought
        assert started_moves() - before == len(NAMES)  # still each node's one move
        assert {n: move_id(kube.nodes[n]) for n in NAMES} == ids  # the moves the first pass began go on

    asyncio.run(scenario())
