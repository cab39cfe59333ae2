"""One active replica: a coordination.k8s.io Lease, as controller-runtime does it.

Every replica keeps its watches warm; only the Lease holder runs reconcile passes. The
holder renews the Lease every few seconds; a replica takes it over only once it has not
seen the Lease change for `duration` seconds of its own monotonic clock, as client-go does
(observedTime): the holder's renewTime is another machine's clock, and with skewed clocks two
replicas could both judge themselves leader. A replica that starts waits a whole `duration`
before taking a Lease someone else holds. Writes carry the
resourceVersion they read, so two replicas can never both win the same round. A holder
that cannot renew stops acting before the others may take over (`renew_deadline`).
The identity is the pod name (POD_NAME, else the host name): a restarted container of the
same pod takes its Lease back at once, while another pod waits for it to expire.
On SIGTERM the holder steps down (`step_down`: it stops acting) and then releases the Lease
(`release`: holderIdentity cleared, a duration of 1 s, as client-go's ReleaseOnCancel), and a
Lease without a holder is taken at the next look: a rollout hands over in a second or so.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger("slurmpool.leader")


def default_namespace() -> str:
    """The pod's namespace (settings.py reads SLURMPOOL_LEASE_NAMESPACE first)."""
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "default"


def default_identity() -> str:
    """The host name (settings.py reads SLURMPOOL_IDENTITY and POD_NAME first)."""
    return socket.gethostname()


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Lease:
    """Which Lease, held by whom, for how long (settings.py: SLURMPOOL_LEASE_*)."""

    name: str = "slurmpool"
    namespace: str | None = None  # default: the pod's namespace
    identity: str | None = None  # default: the host name
    duration: float = 15.0  # taken over only once not renewed for this long
    renew_every: float = 3.0


class LeaderElector:
    def __init__(self, api_client: client.ApiClient, lease: Lease = Lease(), clock=time.monotonic):
        self.api = client.CoordinationV1Api(api_client)
        self.name = lease.name
        self.namespace = lease.namespace or default_namespace()
        self.identity = lease.identity or default_identity()
        self.duration = lease.duration
        self.renew_every = lease.renew_every
        self.renew_deadline = lease.duration * 2 / 3  # stop acting well before others may take over
        self._renewed_at = 0.0  # monotonic time of our last successful write
        self._leading = False
        self._clock = clock
        self._observed: tuple | None = None  # the Lease's record as last read (holder, times, transitions)
        self._observed_at = 0.0  # when (our monotonic clock) we saw that record change
        self._stopped = False  # stepped down for good (the process is stopping)

    @property
    def leading(self) -> bool:
        return self._leading and not self._stopped and self._clock() - self._renewed_at < self.renew_deadline

    def step_down(self) -> None:
        """Stop acting at once and never take the Lease again (the process is stopping)."""
        self._stopped = True

    async def release(self) -> None:
        """After `step_down`: give up the Lease we hold, so another replica need not wait for it to
        expire. Best effort: unreleased, it expires as after a crash."""
        self.step_down()
        if not self._leading:
            return
        self._leading = False
        try:
            if await asyncio.to_thread(self._release):
                log.info("lease %s/%s released by %s", self.namespace, self.name, self.identity)
        except Exception as err:  # noqa: BLE001 - the others wait for it to expire
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, err)

    def _release(self) -> bool:
        lease = self.api.read_namespaced_lease(self.name, self.namespace)
        spec = lease.spec
        if spec is None or spec.holder_identity != self.identity:
            return False
        spec.holder_identity = None  # taken at once by the others (_try); 1 s for those that wait it out
        spec.lease_duration_seconds = 1
        spec.renew_time = _now()
        self.api.replace_namespaced_lease(self.name, self.namespace, lease)  # under the resourceVersion read
        return True

    async def ensure(self) -> bool:
        """Acquire or renew as needed; True while we may act."""
        if self._stopped:
            return False
        if self.leading and self._clock() - self._renewed_at < self.renew_every:
            return True
        try:
            won = await asyncio.to_thread(self._try)
        except Exception as err:  # noqa: BLE001 - no API, no leadership
            log.warning("lease %s/%s: %s", self.namespace, self.name, err)
            won = False
        if won:
            if not self._leading:
                log.info("lease %s/%s acquired by %s", self.namespace, self.name, self.identity)
            self._leading, self._renewed_at = True, self._clock()
        elif self._leading and not self.leading:
            log.warning("lease %s/%s lost by %s", self.namespace, self.name, self.identity)
            self._leading = False
        return self.leading

    def _expired(self, spec) -> bool:
        """Has the record stayed the same for the Lease's duration, by our own clock?"""
        record = (spec.holder_identity, spec.renew_time, spec.acquire_time, spec.lease_transitions)
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        return self._clock() - self._observed_at > (spec.lease_duration_seconds or self.duration)

    def _try(self) -> bool:
        now = _now()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=client.V1LeaseSpec(
                    holder_identity=self.identity,
                    lease_duration_seconds=int(self.duration),
                    acquire_time=now,
                    renew_time=now,
                    lease_transitions=0,
                ),
            )
            try:
                self.api.create_namespaced_lease(self.namespace, body)
                return True
            except ApiException as err2:
                if err2.status == 409:
                    return False
                raise
        spec = lease.spec
        if spec is None:  # a Lease made without one by someone else: not taken (ensure logs it)
            raise ValueError("the Lease has no spec")
        holder = spec.holder_identity
        if holder and holder != self.identity and not self._expired(spec):  # released (no holder): taken at once
            return False
        if holder != self.identity:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity = self.identity
        spec.renew_time = now
        spec.lease_duration_seconds = int(self.duration)
        try:  # replace carries the resourceVersion we read: a concurrent winner makes this 409
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
            return True
        except ApiException as err:
            if err.status == 409:
                return False
            raise
