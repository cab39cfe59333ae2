"""Membership (which pools select each node) is kept current incrementally: the same answers as
matching every node against every selector, after any sequence of label, node and selector changes."""

from __future__ import annotations

import random

from slurmpool.membership import Membership
from slurmpool.models import LabelSelector


def sel(**labels) -> LabelSelector:
    return LabelSelector(match_labels=labels)


def brute(selectors, nodes):
    owners = {name: tuple(k for k, s in selectors.items() if s.matches(labels)) for name, labels in nodes.items()}
    members = {k: sorted(n for n, o in owners.items() if k in o) for k in selectors}
    return owners, members


def check(m: Membership, selectors, nodes):
    owners, members = brute(selectors, nodes)
    for name in nodes:
        assert m.owners(name) == owners[name], name
    for key in selectors:
        assert m.members(key) == members[key], key


def test_a_relabelled_node_changes_pool_and_others_stay():
    m = Membership()
    selectors = {"a": sel(group="a"), "b": sel(group="b")}
    nodes = {"n1": {"group": "a"}, "n2": {"group": "a"}, "n3": {"group": "b"}}
    m.refresh(selectors, nodes.items())
    assert m.members("a") == ["n1", "n2"] and m.members("b") == ["n3"]
    nodes["n2"] = {"group": "b"}  # a new dict, as every watch event brings
    m.refresh(None, nodes.items())
    assert m.members("a") == ["n1"] and m.members("b") == ["n2", "n3"] and m.owners("n2") == ("b",)


def test_a_node_gone_leaves_every_pool_and_a_new_one_is_unknown_until_refreshed():
    m = Membership()
    selectors = {"a": sel(group="a")}
    m.refresh(selectors, [("n1", {"group": "a"}), ("n2", {"group": "a"})])
    m.refresh(None, [("n1", {"group": "a"})])
    assert m.members("a") == ["n1"] and m.owners("n2") is None
    assert m.owners("n9") is None


def test_a_changed_selector_sorts_every_node_again_and_an_overlap_has_two_owners():
    m = Membership()
    nodes = {"n1": {"group": "a", "gpu": "h100"}, "n2": {"group": "b", "gpu": "h100"}}
    m.refresh({"a": sel(group="a"), "b": sel(group="b")}, nodes.items())
    m.refresh({"a": sel(group="a"), "b": sel(gpu="h100")}, nodes.items())
    assert m.owners("n1") == ("a", "b") and m.members("b") == ["n1", "n2"]
    m.refresh({"b": sel(gpu="h100")}, nodes.items())  # pool a deleted
    assert m.owners("n1") == ("b",) and m.members("a") == []


def test_random_changes_match_a_full_sort_every_time():
    rng = random.Random(12)
    groups = ["g1", "g2", "g3"]
    nodes = {f"n{i}": {"group": rng.choice(groups)} for i in range(40)}
    selectors = {g: sel(group=g) for g in groups}
    m = Membership()
    m.refresh(selectors, nodes.items())
    check(m, selectors, nodes)
    for _ in range(300):
        what = rng.random()
        changed_selectors = None
        if what < 0.5:
            nodes[rng.choice(sorted(nodes))] = {"group": rng.choice(groups)}
        elif what < 0.7:
            nodes.pop(rng.choice(sorted(nodes)), None) if len(nodes) > 1 else None
        elif what < 0.85:
            nodes[f"n{rng.randrange(60)}"] = {"group": rng.choice(groups), "x": "1"}
        else:
            g = rng.choice(groups)
            selectors = {**selectors, g: rng.choice([sel(group=g), sel(x="1"), sel(group=g, x="1")])}
            changed_selectors = selectors
        m.refresh(changed_selectors, list(nodes.items()))
        check(m, selectors, nodes)
