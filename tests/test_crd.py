"""The CRD in crds/ is generated from the models: drift fails here; it stays structural."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from slurmpool.crd import crd, render
from slurmpool.core.models import SlurmNodePoolSpec, seconds

from .factories import make_spec

CRD_FILE = Path(__file__).resolve().parents[1] / "crds" / "slurmpool.io_slurmnodepools.yaml"


def test_committed_crd_matches_the_models():
    assert CRD_FILE.read_text() == render(), "crds/ drifted from the models: run `make crds`"


def walk(schema, path="$"):
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural():
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        for banned in ("$ref", "$defs", "anyOf", "title", "exclusiveMinimum", "const"):
            assert banned not in node, f"{path} has {banned}"
        assert "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields"), path


def test_subresources_and_columns():
    version = crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.slurmNodes"
    assert "status" in version["subresources"]
    names = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert names == ["Slurm", "Inference", "Target", "Source", "Moving", "Unhealthy", "Age"]
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert columns["Target"]["jsonPath"] == ".status.target.slurmNodes"  # in force, not the spec's
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert {"Blocked", "Paused", "Spec"} <= set(wide)
    assert crd()["spec"]["names"]["shortNames"] == ["snp"]


def test_defaults_and_durations():
    spec = make_spec()
    assert spec.drain.on_timeout == "Wait" and spec.max_concurrent_moves == 1
    assert seconds("1h30m") == 5400 and seconds("250ms") == 0.25


@pytest.mark.parametrize(
    "change,message",
    [
        ({"slurmNodes": -1}, "greater than or equal to 0"),
        ({"drain": {"onTimeout": "Kill"}}, "Wait"),
        ({"drain": {"timeout": "soon"}}, "pattern"),
        ({"maxConcurrentMoves": 0}, "greater than or equal to 1"),
    ],
)
def test_models_refuse_bad_input(change, message):
    body = make_spec().model_dump(by_alias=True, exclude_none=True)
    body.update(change)
    with pytest.raises(ValidationError, match=message):
        SlurmNodePoolSpec.model_validate(body)


def test_yaml_round_trip():
    assert yaml.safe_load(render())["metadata"]["name"] == "slurmnodepools.slurmpool.io"
