"""The bad-input corpus (tests/corpus.py) without a cluster: what the API server refuses the
operator's models refuse too (a pool stored under an older CRD is never acted on); every CEL
refusal has its rule in the generated CRD; what only the cluster can judge is a planner
problem or a model error, so the pool is reported and nothing moves."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from slurmpool.crd import render
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.planner import desired_split

from .corpus import by_kind, with_change
from .factories import make_spec

VALID = make_spec(slurm_nodes=1).model_dump(by_alias=True, exclude_none=True)


def cel_messages() -> list[str]:
    found = []

    def walk(node):
        if isinstance(node, dict):
            found.extend(r["message"] for r in node.get("x-kubernetes-validations", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load(render()))
    return found


def test_the_valid_base_is_valid():
    SlurmNodePoolSpec.model_validate(VALID)


@pytest.mark.parametrize("case", by_kind("schema") + by_kind("cel"), ids=lambda c: c.id)
def test_what_the_api_server_refuses_the_models_refuse(case):
    with pytest.raises(ValidationError):
        SlurmNodePoolSpec.model_validate(with_change(VALID, case.change))


@pytest.mark.parametrize("case", by_kind("cel"), ids=lambda c: c.id)
def test_each_cel_refusal_has_its_rule_in_the_crd(case):
    said = case.message.split(": ")[-1]  # what follows the API server's "field: Invalid value: ..."
    assert any(m in case.message or said in m for m in cel_messages()), f"no CEL rule says {case.message!r}"


@pytest.mark.parametrize("case", by_kind("operator"), ids=lambda c: c.id)
def test_what_only_the_cluster_can_judge_is_reported(case):
    body = with_change(VALID, case.change)
    try:
        spec = SlurmNodePoolSpec.model_validate(body)
    except ValidationError as err:  # reported by PoolController.report_invalid (controller/pools.py) as InvalidSpec
        assert case.message in str(err)
        return
    _, problems = desired_split(spec, case.nodes)
    assert any(case.message in p for p in problems), problems


def test_patterns_are_cel_rules_with_plain_messages():
    text = render()
    assert "pattern:" not in text.split("status:")[0], "a spec pattern left as a bare regex error"
