"""The adapters every pass uses that need nothing of the controller, made complete in one place
at startup (handlers.startup). What calls back into the controller (its watches, its status
writer) is made with it instead (pools.PoolController)."""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes.client import ApiClient

from slurmpool.adapters.access import SlurmAccessPool
from slurmpool.adapters.kube import KubeAdapter
from slurmpool.adapters.leader import Lease, LeaderElector
from slurmpool.controller.settings import Settings


@dataclass(frozen=True)
class Services:
    kube: KubeAdapter
    leader: LeaderElector
    access: SlurmAccessPool

    @classmethod
    def connect(cls, settings: Settings, api_client: ApiClient) -> Services:
        kube = KubeAdapter(api_client)
        leader = LeaderElector(kube.api, Lease(namespace=settings.lease_namespace, identity=settings.identity,
                                               duration=settings.lease_duration, renew_every=settings.lease_renew))
        return cls(kube, leader, SlurmAccessPool(kube.read_secret))
