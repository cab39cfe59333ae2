"""Types shared by the core, the adapters and the executor. A leaf module (it imports only
the models), so adapters never need the executor for a type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from slurmpool.core.models import SlurmNodePoolSpec

if TYPE_CHECKING:
    from slurmpool.core.view import NodeView


class Refused(Exception):
    """The API server refused a write and will refuse it again (a 4xx: admission, validation, a
    missing PriorityClass, a quota); the text is its message."""


class Conflict(Exception):
    """A write's precondition (resourceVersion) failed: someone else changed the object first."""


@dataclass(frozen=True)
class PoolRef:
    namespace: str
    name: str
    uid: str = ""
    generation: int | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Kube(Protocol):
    """The Kubernetes writes the executor makes (kube.KubeAdapter implements it; apply.py uses it)."""

    async def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        """A merge patch; raises Conflict when the patch's metadata.resourceVersion is not the Node's."""

    async def read_node(self, name: str) -> NodeView | None:
        """The Node as it is now (None: it is gone); read only after a Conflict."""

    async def patch_node_later(self, name: str, patch: dict[str, Any]) -> None:
        """Queue a patch nothing waits for (Slurm's state published on the node) and return."""

    async def create_slurmd_pod(self, pool: PoolRef, spec: SlurmNodePoolSpec, node: str, slurm_name: str | None = None,
                                boot: bool = False) -> None: ...
    async def delete_pod(self, namespace: str, name: str, uid: str) -> None: ...
    async def evict(self, namespace: str, name: str) -> str | None:
        """Ask the Eviction API; return why it was refused (a PDB), or None."""

    async def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None: ...


def pool_object(pool: PoolRef) -> dict[str, Any]:
    return {
        "apiVersion": "slurmpool.io/v1alpha1",
        "kind": "SlurmNodePool",
        "metadata": {"namespace": pool.namespace, "name": pool.name, "uid": pool.uid},
    }


def node_object(name: str) -> dict[str, Any]:
    # kubectl describe node finds events by name (and uid == name, as the kubelet posts them).
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": name}}
