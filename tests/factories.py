"""Small builders for specs, Slurm states and API answers shared by the unit tests."""

from __future__ import annotations

from datetime import datetime, timezone

from slurmbridge import SlurmNode
from slurmpool.cli import podproto
from slurmpool.core.models import SlurmNodePoolSpec

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def make_spec(
    slurm_nodes=2, min_slurm=0, min_inference=0, max_moves=1, paused=False, pools=None, drain=None, gres="gpu:h100:8"
) -> SlurmNodePoolSpec:
    pools = pools or [("default", 0, 0, None)]
    return SlurmNodePoolSpec.model_validate(
        {
            "nodeSelector": {"matchLabels": {"gpu": "true"}},
            "slurmNodes": slurm_nodes,
            "minSlurmNodes": min_slurm,
            "minInferenceNodes": min_inference,
            "maxConcurrentMoves": max_moves,
            "paused": paused,
            "slurm": {
                "partition": "gpu",
                "gres": gres,
                "slurmdPod": {"image": "slurmd:22.05", "command": ["slurmd", "-D", "-N", "$(NODE_NAME)"]},
                "access": {"local": {}},
            },
            "inference": {
                "pools": [
                    {"name": n, "priority": pr, "minNodes": mn, **({"maxNodes": mx} if mx is not None else {}),
                     "labels": {"pool": n}, "taints": [{"key": "inference", "value": n, "effect": "NoSchedule"}]}
                    for n, pr, mn, mx in pools
                ]
            },
            "drain": drain or {},
        }
    )


def slurm_node(name, state="IDLE", flags=(), reason=None, gres="gpu:h100:8") -> SlurmNode:
    return SlurmNode(
        name=name, state=state, flags=frozenset(flags), reason=reason, gres=gres, gres_used="gpu:h100:0",
        features=(), partitions=("gpu",),
    )


def pod_list_page(pods: list[tuple[str, str, str]], token: str | None = None, kind: str = "PodList") -> bytes:
    """A PodList page as the apiserver frames it: the magic, a runtime.Unknown, the list in it."""
    listed = podproto.PodList()
    for namespace, name, node in pods:
        pod = listed.items.add()
        pod.metadata.namespace, pod.metadata.name, pod.spec.nodeName = namespace, name, node
    if token:
        listed.metadata.continue_token = token
    envelope = podproto.Unknown(raw=listed.SerializeToString())
    envelope.typeMeta.kind = kind
    return podproto.MAGIC + envelope.SerializeToString()
