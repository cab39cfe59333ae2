"""An unreadable annotation is contained (issue 25): a move record nested 1,000 deep raised
RecursionError out of node_view, and the Node watch relisted forever, blind to every pool."""

import json

import pytest

from slurmpool.core.bodies import node_view
from slurmpool.core.view import ANN_DRAIN, ANN_MOVE, MAX_RECORD_CHARS


def node_with(annotation: str, value: str) -> dict:
    return {"metadata": {"name": "gpu01", "annotations": {annotation: value}}, "spec": {}, "status": {}}


@pytest.mark.parametrize("annotation", [ANN_MOVE, ANN_DRAIN])
@pytest.mark.parametrize("value, said", [
    ("[" * 1000 + "]" * 1000, "nested deeper than"),
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "too large"),
    (json.dumps({"id": "m1", "note": "x" * (MAX_RECORD_CHARS + 1)}), "too large"),
    ("[" * 5, "nested deeper than"),  # malformed too: refused before parsing
])
def test_a_deep_or_huge_record_is_a_problem_of_that_node_not_an_exception(annotation, value, said):
    view = node_view(node_with(annotation, value))
    assert [p.annotation for p in view.problems] == [annotation]
    assert said in view.problems[0].message
    assert view.move is None and view.drain_claim is None


def test_a_record_nested_just_enough_to_recurse_in_json_is_contained_too():
    # Past the depth check's bound of 4 levels anything deeper is refused, whatever json.loads would do.
    view = node_with(ANN_MOVE, json.dumps({"id": [[[[["deep"]]]]]}))
    assert "nested deeper than" in node_view(view).problems[0].message
