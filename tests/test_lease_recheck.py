"""issue 37: leadership is checked again between a pass's Slurm poll and its writes. A poll can
take longer than the Lease's renew deadline (a slow slurmctld, slurmrestd behind a big queue);
another replica may hold the Lease by then and act on the same nodes, so this one writes nothing."""

from __future__ import annotations

import asyncio
import time

from slurmbridge.backoff import Backoff
from slurmpool.controller.pools import PoolController
from slurmpool.controller.services import Services
from slurmpool.controller.settings import Settings
from slurmpool.controller.workqueue import WorkQueue
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.poolpolicy import PoolPolicy

from .factories import make_spec
from .test_index_lag import KEY, Access, Kube


class Leader:
    leading = True


def test_a_lease_lost_during_the_slurm_poll_writes_nothing():
    async def scenario():
        kube, access, leader = Kube(), Access(), Leader()
        settings = Settings(pool_policy=PoolPolicy(image_prefixes=("slurmd:",)))
        spec = make_spec(slurm_nodes=0, max_moves=4).model_dump(by_alias=True, exclude_none=True)
        raw = {"spec": spec, "uid": "u1", "generation": 1, "status": {}}
        controller = PoolController(settings, Services(kube, leader, access), {KEY: [raw]}, queue=WorkQueue(), backoff=Backoff(1, 8, jitter=0))
        controller.nodes._replace(dict(kube.nodes), began=time.monotonic())
        access.during_poll = lambda: setattr(leader, "leading", False)  # the renew deadline passed while Slurm answered
        after = await controller.reconcile(PoolRef(*KEY, "u1", 1), raw, controller.state(KEY))
        assert kube.patches == [] and after == settings.interval

    asyncio.run(scenario())
