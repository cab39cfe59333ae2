"""What a step writes to its Node, computed once: `node_patch(pool, node, step, now)`, one merge
patch with the node's record (move, placement, drain claim, hold) and its shape (labels, taints,
cordon). Pure, with the clock passed in (the snapshot's). apply.py sends the patch as it is;
decide.py's view of the node after the step (`after`) is the same patch's record applied to the
view, so the two cannot disagree."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from slurmpool.core.interfaces import PoolRef
from slurmpool.core.moves import PatchNode, Step
from slurmpool.core.placement import pool_of
from slurmpool.core.view import (
    ANN_ADOPT, ANN_CHECKPOINT, ANN_CORDON_KEPT, ANN_DRAIN, ANN_GIVEN_BACK, ANN_HOLD_UNTIL, ANN_MOVE, ANN_PLACEMENT, ANN_POOL, ANN_POWER_DOWN_ASKED, ANN_SETTLED,
    SLURM_TAINT_KEY,
    MoveRecord, NodeView, iso,
)

Patch = dict[str, Any]  # a merge patch of a Node

# The annotations of a node's record: what the next pass decides on (the rest is for people).
RECORD = (ANN_MOVE, ANN_PLACEMENT, ANN_DRAIN, ANN_GIVEN_BACK, ANN_CHECKPOINT, ANN_POWER_DOWN_ASKED)
VIEWED = (*RECORD, ANN_HOLD_UNTIL)  # what `after` applies to the view (labels follow next round)


def node_patch(pool: PoolRef, node: NodeView, step: Step, now: datetime) -> Patch:
    """The node's record and shape for this step, as one merge patch (empty: nothing to write)."""
    patch: Patch = {}
    annotations = _record(pool, node, step, now)
    shape = shape_of(step)
    if shape is not None:
        patch = shape_write(node, node, shape)
    if annotations:
        patch.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
    return patch


def annotations_of(patch: Patch) -> dict[str, str | None]:
    annotations: dict[str, str | None] = patch.get("metadata", {}).get("annotations", {})
    return annotations


def after(node: NodeView, patch: Patch) -> NodeView:
    """The node's view once the patch's record is written (its labels and taints follow next round)."""
    annotations: dict[str, str | None] = dict(node.annotations)
    annotations.update({k: v for k, v in annotations_of(patch).items() if k in VIEWED})
    return replace(node, annotations={k: v for k, v in annotations.items() if v})


def rebuilt(before: NodeView, current: NodeView, step: Step, shape: PatchNode, patch: Patch) -> Patch:
    """The step's patch written again on `current`, the Node read after a conflict: its shape
    (`shape_of(step)`: only a patch with a shape has a precondition to fail) is rebuilt on the Node
    as it is now; its record is the step's. The cordon-kept mark the first shape
    drew from the stale Node is not carried over (a cordon someone lifted meanwhile is no longer
    theirs to keep); only the record's own drop of it, when the node settles in inference, is."""
    settles_in_inference = bool(step.settled and pool_of(step.settled))
    record = {k: v for k, v in annotations_of(patch).items() if k != ANN_CORDON_KEPT or settles_in_inference}
    fresh = shape_write(before, current, shape)
    if record:
        fresh["metadata"].setdefault("annotations", {}).update(record)
    return fresh


def shape_of(step: Step) -> PatchNode | None:
    shapes = [a for a in step.actions if isinstance(a, PatchNode)]
    return shapes[-1] if shapes else None


def shape_write(before: NodeView, current: NodeView, shape: PatchNode) -> Patch:
    """The node's labels, taints and cordon as a merge patch on `current` (the Node as last read),
    changing only what the step changes against `before` (the Node the pass decided on): a taint
    of someone else's, added since, is kept; one they removed is not put back. The taint list is
    written whole (a merge patch has no other way), so `current`'s resourceVersion is its
    precondition: on a conflict the Node is read again and this is rebuilt (apply._write_node).

    The cordon: the operator lifts only its own. A cordon found on the node when a move takes it
    to Slurm (`claims_cordon`, without our taint beside it) is someone else's: marked
    ANN_CORDON_KEPT, it stays when the node returns to inference."""
    wanted, had = _norm_set(shape.taints), _norm_set(before.taints)
    taints = [t for t in current.taints if _norm(t) in wanted or _norm(t) not in had]
    present = _norm_set(taints)
    taints += [dict(t) for t in shape.taints if _norm(t) not in present and _norm(t) not in had]
    spec: dict[str, Any] = {"taints": taints}
    annotations: dict[str, str | None] = {}
    if shape.unschedulable is True:
        if not current.unschedulable:
            spec["unschedulable"] = True
            if current.cordon_kept:  # their cordon was lifted meanwhile: this one is ours
                annotations[ANN_CORDON_KEPT] = None
        elif shape.claims_cordon and not current.cordon_kept and not current.has_taint(SLURM_TAINT_KEY, "NoSchedule"):
            annotations[ANN_CORDON_KEPT] = "true"
    elif shape.unschedulable is False and current.unschedulable and not current.cordon_kept and current.has_taint(SLURM_TAINT_KEY, "NoSchedule"):
        spec["unschedulable"] = False
    metadata: dict[str, Any] = {"labels": dict(shape.labels)}
    if current.version:
        metadata["resourceVersion"] = current.version
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def _norm(taint: Mapping[str, str]) -> tuple[str, str, str]:
    return (taint.get("key", ""), taint.get("value") or "", taint.get("effect", ""))


def _norm_set(taints: Iterable[Mapping[str, str]]) -> set[tuple[str, str, str]]:
    return {_norm(t) for t in taints}


def _record(pool: PoolRef, node: NodeView, step: Step, now: datetime) -> dict[str, str | None]:
    """The annotations of the node's record this step changes."""
    annotations: dict[str, str | None] = {}
    if _move_changed(node.annotations.get(ANN_MOVE), step.move):
        annotations[ANN_MOVE] = step.move.to_annotation() if step.move else None
    if step.settled and node.placement != step.settled:
        annotations[ANN_PLACEMENT] = step.settled
        annotations[ANN_SETTLED] = iso(now)  # for `kubectl slurmpool status`
    if (step.move or step.settled) and node.annotations.get(ANN_POOL) != pool.key:
        annotations[ANN_POOL] = pool.key
    if step.hold_until:
        annotations[ANN_HOLD_UNTIL] = iso(step.hold_until)
    if step.claim:  # a claim made this step wins over one dropped in a later phase of it, as the view has it
        if node.annotations.get(ANN_DRAIN) != step.claim.to_annotation():
            annotations[ANN_DRAIN] = step.claim.to_annotation()
    elif step.drop_claim and ANN_DRAIN in node.annotations:
        annotations[ANN_DRAIN] = None
    if step.checkpoint is not None:  # before the signal it records: a restart never signals twice
        annotations[ANN_CHECKPOINT] = json.dumps(step.checkpoint.body(), sort_keys=True)
    elif step.drop_checkpoint and ANN_CHECKPOINT in node.annotations:
        annotations[ANN_CHECKPOINT] = None
    if step.power_down_asked is not None:  # before the request it records: asked again once per bound
        annotations[ANN_POWER_DOWN_ASKED] = iso(step.power_down_asked)
    if step.given_back and ANN_GIVEN_BACK not in node.annotations:
        annotations[ANN_GIVEN_BACK] = iso(now)
    elif step.given_back is False and ANN_GIVEN_BACK in node.annotations:
        annotations[ANN_GIVEN_BACK] = None
    if step.adopted and ANN_ADOPT in node.annotations:
        annotations[ANN_ADOPT] = None  # a person's request, fulfilled (adoption.py)
    if step.settled and pool_of(step.settled) and node.cordon_kept:
        annotations[ANN_CORDON_KEPT] = None  # back in inference, their cordon kept: theirs as any other
    return annotations


def _move_changed(current: str | None, move: MoveRecord | None) -> bool:
    if move is None:
        return bool(current)
    old = MoveRecord.from_annotation(current)
    return old is None or old.model_dump() != move.model_dump()
