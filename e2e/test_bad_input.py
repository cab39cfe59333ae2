"""The bad-input corpus (tests/corpus.py) on the lab: the real apiserver refuses each invalid
spec with its message; what only the cluster can judge is accepted, reported by the running
operator as Degraded with a clear reason and message, and no node is touched."""

from __future__ import annotations

import sys

import pytest
import yaml
from pydantic import ValidationError
from harness import (REPO, NAMESPACE, Operator, apply, ensure_namespace_and_secret, get_json, install_crd, pool_manifest, pool_status,
                     reset_lab, wait)

sys.path.insert(0, str(REPO))
from slurmpool.core.models import SlurmNodePoolSpec  # noqa: E402
from tests.corpus import OVERLAP_MESSAGE, by_kind, with_change  # noqa: E402

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def ready(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    yield
    reset_lab(lab)


def manifest(lab, name: str, change: dict, nodes: list[str] | None = None) -> dict:
    body = pool_manifest(lab, name, 1)
    if nodes is not None:  # replaces the lab-wide selector: each case gets nodes of its own
        body["spec"]["nodeSelector"] = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}
    body["spec"] = with_change(body["spec"], change)
    return body


@pytest.mark.parametrize("case", by_kind("schema") + by_kind("cel"), ids=lambda c: c.id)
def test_the_api_server_refuses_with_a_clear_message(lab, ready, case):
    result = lab.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(manifest(lab, f"bad-{case.id}", case.change)),
                         check=False)
    assert result.returncode != 0, f"accepted: {case.change}"
    assert case.message in result.stderr, result.stderr


def test_the_valid_base_is_accepted(lab, ready):
    result = lab.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(manifest(lab, "good", {})), check=False)
    assert result.returncode == 0, result.stderr


MOVE_ANNOTATIONS = ("slurmpool.io/move", "slurmpool.io/placement", "slurmpool.io/pool", "slurmpool.io/settled-at")


def _valid(spec: dict) -> bool:
    try:
        SlurmNodePoolSpec.model_validate(spec)
        return True
    except ValidationError:
        return False


def degraded(lab, name: str):
    def check():
        status = pool_status(lab, name)
        cond = next((c for c in status.get("conditions", []) if c["type"] == "Degraded"), None)
        return cond if cond and cond["status"] == "True" else None

    return check


def test_what_only_the_cluster_can_judge_is_reported_and_nothing_moves(lab, ready):
    # Valid specs own their nodes (disjoint, or they would overlap); an invalid one owns none.
    free, pools = list(lab.nodes), []
    for case in by_kind("operator"):
        body = manifest(lab, case.id, case.change, lab.nodes[:case.nodes])
        if _valid(body["spec"]):
            body = manifest(lab, case.id, case.change, [free.pop(0) for _ in range(case.nodes)])
        pools.append((case, body))
    assert len(free) >= 2, "the lab needs two more nodes for the overlap"
    overlap = free[:2]  # selected by both pools below
    op = Operator(lab, "operator-bad-input.log").start()
    try:
        apply(lab, [body for _, body in pools] + [manifest(lab, f"overlap-{x}", {"slurmNodes": 0}, overlap) for x in "ab"])
        for case, _ in pools:
            cond = wait(degraded(lab, case.id), 60, what=f"{case.id}: Degraded")
            assert cond["reason"] == case.reason, cond
            assert case.message in cond["message"], cond
        for name in ("overlap-a", "overlap-b"):
            cond = wait(degraded(lab, name), 60, what=f"{name}: Degraded")
            assert cond["reason"] == "NodeOverlap" and OVERLAP_MESSAGE in cond["message"], cond
            assert all(n in cond["message"] for n in overlap), cond
        events = lab.kubectl("get", "events", "-n", NAMESPACE, "--field-selector", "reason=NodeOverlap",
                             "-o", "jsonpath={.items[*].message}").stdout
        assert "also selected by" in events, events
    finally:
        op.stop()
    # A move's record is written to the Node before the status that reports the pass: none exists,
    # and no node was cordoned, tainted or relabelled (slurmpool.io/slurm only mirrors Slurm's state).
    touched = {}
    for n in get_json(lab, "nodes", "-l", "slurmpool.io/lab=true")["items"]:
        marks = [k for k in (n["metadata"].get("annotations") or {}) if k in MOVE_ANNOTATIONS]
        marks += [k for k in n["metadata"]["labels"] if k in ("slurmpool.io/side", "slurmpool.io/inference-pool")]
        marks += [t["key"] for t in n["spec"].get("taints") or [] if t["key"].startswith("slurmpool.io/")]
        marks += ["unschedulable"] if n["spec"].get("unschedulable") else []
        if marks:
            touched[n["metadata"]["name"]] = marks
    assert not touched, touched
    assert not get_json(lab, "pods", "-n", NAMESPACE, "-l", "slurmpool.io/component=slurmd")["items"]
