"""GRES compared by meaning (type, count; slurmd's socket affinity ignored), on real 22.05 output."""

from datetime import timezone
from pathlib import Path

import pytest
from slurmbridge.parse import parse_scontrol_nodes
from slurmbridge.models import gpu_count, gres_shortfall, parse_gres
from slurmpool.core.moves import usable_problem

from tests.factories import make_spec

FIXTURES = Path(__file__).parent / "fixtures" / "gres"


def real_22_05():
    nodes = parse_scontrol_nodes((FIXTURES / "scontrol-22.05.txt").read_text(), timezone.utc)
    return {name: node.gres for name, node in nodes.items()}


def test_the_fixture_is_slurms_own_affinity_shapes():
    assert real_22_05() == {"n1": "gpu:h100:8(S:0-1)", "n2": "gpu:8(S:0)", "n3": "gpu:a100:4(S:0),gpu:h100:4(S:0-1)"}


@pytest.mark.parametrize("node, wanted", [
    ("n1", "gpu:h100:8"), ("n1", "gpu:8"), ("n1", "gpu"),
    ("n2", "gpu:8"),
    ("n3", "gpu:a100:4,gpu:h100:4"), ("n3", "gpu:h100:4"), ("n3", "gpu:8"), ("n3", "gpu:h100:4,gpu:a100:4"),
])
def test_real_reports_meet_the_spec(node, wanted):
    assert gres_shortfall(wanted, real_22_05()[node]) is None


@pytest.mark.parametrize("node, wanted, why", [
    ("n1", "gpu:a100:8", "gpu:a100:0 reported, 8 wanted"),
    ("n1", "gpu:h100:16", "gpu:h100:8 reported, 16 wanted"),
    ("n2", "gpu:h100:8", "gpu:h100:0 reported, 8 wanted"),  # an untyped report has no h100
    ("n3", "gpu:h100:8", "gpu:h100:4 reported, 8 wanted"),
    ("n3", "gpu:16", "gpu:8 reported, 16 wanted"),
    ("n1", "gpu:h100:8,nic:1", "nic:0 reported, 1 wanted"),
])
def test_real_reports_that_fall_short(node, wanted, why):
    assert gres_shortfall(wanted, real_22_05()[node]) == why


@pytest.mark.parametrize("text, parsed", [
    ("gpu:h100:8(S:0-1)", {("gpu", "h100"): 8}),
    ("gpu:8(S:0)", {("gpu", None): 8}),
    ("gpu:h100:8(S:0-1),nic:2", {("gpu", "h100"): 8, ("nic", None): 2}),
    ("gpu:h100:4(IDX:0,2-3),gpu:h100:4", {("gpu", "h100"): 8}),
    ("gpu:(null):0(IDX:N/A)", {("gpu", None): 0}),
    ("shard:h100:1K", {("shard", "h100"): 1024}),
    ("gpu", {("gpu", None): 1}),
    ("(null)", {}),
    ("", {}),
])
def test_parse_gres(text, parsed):
    assert parse_gres(text) == parsed


def test_gpu_count_agrees_on_the_real_shapes():
    assert [gpu_count(g) for g in real_22_05().values()] == [8, 8, 8]


@pytest.mark.parametrize("node, spec_gres", [("n1", "gpu:h100:8"), ("n2", "gpu:8"), ("n3", "gpu:a100:4,gpu:h100:4")])
def test_registering_accepts_what_real_slurmd_reports(node, spec_gres):
    nodes = parse_scontrol_nodes((FIXTURES / "scontrol-22.05.txt").read_text(), timezone.utc)
    assert usable_problem(nodes[node], make_spec(gres=spec_gres)) is None


def test_registering_names_the_shortfall():
    nodes = parse_scontrol_nodes((FIXTURES / "scontrol-22.05.txt").read_text(), timezone.utc)
    problem = usable_problem(nodes["n2"], make_spec(gres="gpu:h100:8"))
    assert problem == "GRES gpu:8(S:0) does not meet gpu:h100:8 (gpu:h100:0 reported, 8 wanted)"


def test_real_26_05_scontrol_and_slurmrestd_report_the_same_affinity_shape():
    """Captured from the lab's Slurm 26.05.3 with LAB_GRES_CORES=1 (a registered slurmd)."""
    import json

    from slurmbridge.rest import parse_rest_node

    line = parse_scontrol_nodes((FIXTURES / "scontrol-26.05.txt").read_text(), timezone.utc)["gpu01"]
    rest = parse_rest_node(json.loads((FIXTURES / "rest-26.05.json").read_text())["nodes"][0])
    assert line.gres == rest.gres == "gpu:h100:8(S:0-1)"
    assert usable_problem(line, make_spec(gres="gpu:h100:8")) is None
    assert usable_problem(rest, make_spec(gres="gpu:h100:8")) is None
