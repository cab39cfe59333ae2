"""Slurm's state published on nodes (the annotation slurmpool.io/slurm, core/published.py), so that
`kubectl slurmpool` needs no Slurm access: folded into a patch the pass sends anyway, or queued
on the adapter's later lane; a value written lately is not written again (the watch lags it)."""

from __future__ import annotations

import time

from slurmpool.core.interfaces import Kube
from slurmpool.core.patch import annotations_of
from slurmpool.core.view import ANN_SLURM

PUBLISH_LAG = 10.0  # seconds: a value written this recently is not written again (the watch lags)


def fold_published(patches: dict[str, dict], values: dict[str, str], written: dict[str, tuple[str, float]]) -> tuple[dict, dict]:
    """Slurm's state to publish on a node this pass patches anyway goes in that patch: one write
    instead of two (a move changes both at most phases, and with 100 moves at once the apiserver
    is what every pass waits for). Returns the patches to send (the decision's are not changed)
    and the values folded in."""
    out, folded = {}, {}
    for name, patch in patches.items():
        value = values.get(name)
        if value is not None and not written_lately(written, name, value):
            metadata = patch.get("metadata", {})
            patch = {**patch, "metadata": {**metadata, "annotations": {**annotations_of(patch), ANN_SLURM: value}}}
            folded[name] = value
        out[name] = patch
    return out, folded


async def publish(kube: Kube, values: dict[str, str], written: dict[str, tuple[str, float]]) -> None:
    """Best effort, and nothing waits for it: queued on the adapter's later lane (when Slurm
    changes under hundreds of nodes at once, the pass waited for every one). A write that failed
    is made again once PUBLISH_LAG has passed, if the node still shows another value."""
    for name, value in values.items():
        if written_lately(written, name, value):
            continue
        await kube.patch_node_later(name, {"metadata": {"annotations": {ANN_SLURM: value}}})
        written[name] = (value, time.monotonic())


def written_lately(written: dict[str, tuple[str, float]], name: str, value: str) -> bool:
    last = written.get(name)
    return last is not None and last[0] == value and time.monotonic() - last[1] < PUBLISH_LAG
