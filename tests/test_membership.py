"""Membership (which pools select each node) is kept current incrementally: the same answers as
matching every node against every selector, after any sequence of label, node and selector changes."""

from __future__ import annotations

import random

from slurmpool.core.membership import Membership
from slurmpool.core.models import LabelSelector


def sel(**labels) -> LabelSelector:
    return LabelSelector(match_labels=labels)


def check(m: Membership, selectors, nodes):
    owners = {name: tuple(k for k, s in selectors.items() if s.matches(labels)) for name, labels in nodes.items()}
    for name in nodes:
        assert m.owners(name) == owners[name], name
    for key in selectors:
        assert m.members(key) == sorted(n for n, o in owners.items() if key in o), key


def test_a_relabelled_node_changes_pool_and_others_stay():
    m = Membership()
    m.set_selectors({"a": sel(group="a"), "b": sel(group="b")})
    for name, group in (("n1", "a"), ("n2", "a"), ("n3", "b")):
        m.update(name, {"group": group})
    assert m.members("a") == ["n1", "n2"] and m.members("b") == ["n3"]
    m.update("n2", {"group": "b"})
    assert m.members("a") == ["n1"] and m.members("b") == ["n2", "n3"] and m.owners("n2") == ("b",)


def test_a_node_gone_leaves_every_pool_and_an_unseen_one_is_unknown():
    m = Membership()
    m.set_selectors({"a": sel(group="a")})
    m.update("n1", {"group": "a"})
    m.update("n2", {"group": "a"})
    m.remove("n2")
    assert m.members("a") == ["n1"] and m.owners("n2") is None and m.owners("n9") is None


def test_a_changed_selector_sorts_every_node_again_and_an_overlap_has_two_owners():
    m = Membership()
    m.update("n1", {"group": "a", "gpu": "h100"})  # seen before any pool: owned by none
    m.update("n2", {"group": "b", "gpu": "h100"})
    assert m.owners("n1") == ()
    m.set_selectors({"a": sel(group="a"), "b": sel(group="b")})
    m.set_selectors({"a": sel(group="a"), "b": sel(gpu="h100")})
    assert m.owners("n1") == ("a", "b") and m.members("b") == ["n1", "n2"]
    m.set_selectors({"b": sel(gpu="h100")})  # pool a deleted
    assert m.owners("n1") == ("b",) and m.members("a") == []


def test_random_changes_match_a_full_sort_every_time():
    rng = random.Random(12)
    groups = ["g1", "g2", "g3"]
    nodes = {f"n{i}": {"group": rng.choice(groups)} for i in range(40)}
    selectors = {g: sel(group=g) for g in groups}
    m = Membership()
    m.set_selectors(selectors)
    for name, labels in nodes.items():
        m.update(name, labels)
    check(m, selectors, nodes)
    for _ in range(300):
        what = rng.random()
        if what < 0.5:
            name = rng.choice(sorted(nodes))
            nodes[name] = {"group": rng.choice(groups)}
            m.update(name, nodes[name])
        elif what < 0.7 and len(nodes) > 1:
            gone = rng.choice(sorted(nodes))
            nodes.pop(gone)
            m.remove(gone)
        elif what < 0.85:
            name = f"n{rng.randrange(60)}"
            nodes[name] = {"group": rng.choice(groups), "x": "1"}
            m.update(name, nodes[name])
        else:
            g = rng.choice(groups)
            selectors = {**selectors, g: rng.choice([sel(group=g), sel(x="1"), sel(group=g, x="1")])}
            m.set_selectors(selectors)
        check(m, selectors, nodes)


def test_the_stale_selectors_flag_lives_in_the_shared_object_and_clears_once_read():
    # kopf gives each resource handler a shallow copy of its memo: a flag must live in an object
    # they share (a pool created after the first pass once never had its selector read).
    m = Membership()
    assert m.selectors_stale
    m.set_selectors({"a": sel(group="a")})
    assert not m.selectors_stale
    m.selectors_stale = True  # as pool_changed does
    m.update("n1", {"group": "b"})
    m.set_selectors({"a": sel(group="a"), "b": sel(group="b")})
    assert not m.selectors_stale and m.members("b") == ["n1"]
