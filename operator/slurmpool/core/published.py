"""The node annotation `slurmpool.io/slurm`: what Slurm says of a node (state with its flags,
drain reason, jobs), published by the operator each pass so `kubectl slurmpool` needs no Slurm
access. The encoder (decide's step 6) and the decoder (the plugin) in one place, so the two agree."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from slurmbridge.models import SlurmJob, SlurmNode

from slurmpool.core import slurmstate
from slurmpool.core.view import ANN_SLURM, NodeView, SlurmView, iso, parse_time

MAX_JOBS_PUBLISHED = 32
JOB_NAME_CHARS = 40


def slurm_annotation(name: str, slurm: SlurmView) -> str | None:
    """Compact JSON of what Slurm says of the node; None when Slurm knows neither it nor a job on it."""
    sn = slurm.nodes.get(name)
    jobs = slurm.jobs_on(name)
    if sn is None and not jobs:
        return None
    body: dict[str, Any] = {
        "state": slurmstate.text(sn) if sn else "UNKNOWN",
        "reason": (sn.reason or "") if sn else "",
        "jobs": [
            {"id": j.job_id, "user": j.user, "name": j.name[:JOB_NAME_CHARS], "state": j.state, "end": iso(j.end_time) if j.end_time else None}
            for j in sorted(jobs, key=lambda j: j.job_id)[:MAX_JOBS_PUBLISHED]
        ],
    }
    if len(jobs) > MAX_JOBS_PUBLISHED:
        body["more"] = len(jobs) - MAX_JOBS_PUBLISHED
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def changed_annotations(nodes: Iterable[NodeView], slurm: SlurmView) -> dict[str, str]:
    """node -> its annotation, for each node whose annotation changed (none while Slurm is unread)."""
    if not slurm.available:
        return {}
    changed = {}
    for node in nodes:
        value = slurm_annotation(node.name, slurm)
        if value is not None and value != node.annotations.get(ANN_SLURM):
            changed[node.name] = value
    return changed


def published(node: NodeView) -> dict[str, Any]:
    """The node's annotation parsed ({} if none or unreadable: anyone with Node patch rights can write it)."""
    try:
        value = json.loads(node.annotations.get(ANN_SLURM) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def slurm_view(nodes: Iterable[NodeView]) -> SlurmView:
    """Slurm as the operator last published it on these nodes: their states and jobs, enough for
    the planner's victim order and the drain forecast."""
    snodes: dict[str, SlurmNode] = {}
    jobs: list[SlurmJob] = []
    for node in nodes:
        info = published(node)
        if not info:
            continue
        state, *flags = (info.get("state") or "UNKNOWN").split("+")
        snodes[node.name] = SlurmNode(
            name=node.name, state=state, flags=frozenset(flags), reason=info.get("reason") or None, gres="", gres_used="",
            features=(), partitions=(),
        )
        jobs += [_job(j, node.name) for j in info.get("jobs") or []]
    return SlurmView(available=True, nodes=snodes, jobs=tuple(jobs))


def _job(j: dict[str, Any], node: str) -> SlurmJob:
    end = j.get("end")
    return SlurmJob(
        job_id=str(j.get("id")), name=j.get("name") or "", user=j.get("user") or "", state=j.get("state") or "RUNNING",
        partition="", nodes=(node,), gpus_per_node=0, num_nodes=1, start_time=None,
        end_time=parse_time(end) if isinstance(end, str) else None, reason="",
    )
