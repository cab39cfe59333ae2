"""A Node's Slurm NodeName (spec.slurm.nodeName / nodeNameLabel) and the fail-closed rule: a node
the pool holds in Slurm that Slurm does not list is never drained blind (issue 25, item 4)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from slurmbridge import SlurmJob

from slurmpool.core.moves import Drain
from slurmpool.core.slurmnames import by_node, slurm_name
from slurmpool.core.view import ANN_PLACEMENT, LABEL_SIDE, SLURM, SLURM_TAINT_KEY, NodeView, PodView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .sim import PoolWorld, World

FQDN = ("gpu01.cluster.example.com", "gpu02.cluster.example.com")


def spec_with(slurm_nodes=0, **slurm):
    spec = make_spec(slurm_nodes=slurm_nodes, max_moves=2)
    return spec.model_copy(update={"slurm": spec.slurm.model_copy(update=slurm)})


@pytest.mark.parametrize("slurm, labels, expected", [
    ({}, {}, "gpu01.cluster.example.com"),
    ({"node_name": "{shortName}"}, {}, "gpu01"),
    ({"node_name": "{hostname}"}, {"kubernetes.io/hostname": "gpu01-host"}, "gpu01-host"),
    ({"node_name": "{hostname}"}, {}, "gpu01.cluster.example.com"),  # no hostname label: the Node's name
    ({"node_name": "sl-{shortName}"}, {}, "sl-gpu01"),
    ({"node_name_label": "example.com/slurm-name"}, {"example.com/slurm-name": "n17"}, "n17"),
    ({"node_name_label": "example.com/slurm-name"}, {}, None),  # no label: no name, never guessed
    ({"node_name_label": "example.com/slurm-name"}, {"example.com/slurm-name": "bad;name"}, None),
])
def test_slurm_name(slurm, labels, expected):
    assert slurm_name(spec_with(**slurm).slurm, FQDN[0], labels) == expected


def test_the_template_is_checked_by_the_crd_model():
    with pytest.raises(ValueError):
        spec_with().slurm.model_validate({**spec_with().slurm.model_dump(by_alias=True), "nodeName": "{name};reboot"})


def test_by_node_renames_nodes_jobs_and_leaves_out_what_no_node_maps_to():
    job = SlurmJob(job_id="42", state="RUNNING", partition="gpu", user="a", num_nodes=2, nodes=("gpu01", "other9"), gpus_per_node=8,
                   start_time=None, end_time=None, reason="None", name="train")
    view = SlurmView(True, nodes={"gpu01": slurm_node("gpu01", "ALLOCATED"), FQDN[1]: slurm_node(FQDN[1])}, jobs=(job,))
    mapped = by_node(view, {FQDN[0]: "gpu01", FQDN[1]: "gpu02"})
    assert set(mapped.nodes) == {FQDN[0]}  # "gpu02.cluster..." in Slurm is not the Node gpu02 maps to
    assert mapped.jobs_on(FQDN[0])[0].job_id == "42" and mapped.jobs_on("gpu01") == []
    assert by_node(view, {"gpu01": "gpu01"}) is view


def test_by_node_keeps_the_jobs_that_name_no_node_as_they_are():
    """A queue is mostly jobs that name no node: each pool's renamed view shares them (was: every
    job copied per pool and pass); the renamed ones are renamed as before."""
    plain = SlurmJob(job_id="44", state="PENDING", partition="gpu", user="a", num_nodes=4, nodes=(), gpus_per_node=8,
                     start_time=None, end_time=None, reason="Resources", name="gang")
    pinned = replace(plain, job_id="45", required_nodes=("gpu01",))
    view = SlurmView(True, nodes={"gpu01": slurm_node("gpu01")}, jobs=(plain, pinned))
    mapped = by_node(view, {FQDN[0]: "gpu01"})
    assert mapped.jobs[0] is plain and mapped.jobs[1].required_nodes == (FQDN[0],)
    assert [j.job_id for j in mapped.pending_in("gpu")] == ["44", "45"] and mapped.pending_in("gpu")[1].required_nodes == (FQDN[0],)
    unpinned = SlurmView(True, nodes=view.nodes, jobs=(plain, replace(plain, job_id="46", state="RUNNING", nodes=("gpu01",))))
    assert unpinned.pending_in("gpu") == [plain]  # indexed once per poll ...
    shared = by_node(unpinned, {FQDN[0]: "gpu01"})
    assert shared._of_pending is unpinned._of_pending and shared.pending_in("gpu")[0] is plain  # ... and shared
    assert shared.jobs_on(FQDN[0])[0].job_id == "46"
    assert mapped._of_pending is not view._of_pending  # a pending job renamed: derived again


def test_by_node_renames_the_nodes_a_job_names_and_keeps_those_no_node_maps_to():
    """Demand asks by Node name which nodes a job names (-w) and which Slurm lists as unavailable;
    a Slurm name no Node maps to stays as it is (a node outside the pool, as reservations')."""
    job = SlurmJob(job_id="43", state="PENDING", partition="gpu", user="a", num_nodes=2, nodes=(), gpus_per_node=8,
                   start_time=None, end_time=None, reason="ReqNodeNotAvail, UnavailableNodes:gpu02,cpu09", name="pinned",
                   required_nodes=("gpu02", "cpu09"), unavailable_nodes=("gpu02", "cpu09"))
    (mapped,) = by_node(SlurmView(True, jobs=(job,)), {FQDN[0]: "gpu01", FQDN[1]: "gpu02"}).jobs
    assert mapped.required_nodes == mapped.unavailable_nodes == (FQDN[1], "cpu09")


def slurm_world(name: str, slurm_name: str) -> World:
    node = NodeView(
        name=name, annotations={ANN_PLACEMENT: SLURM}, labels={LABEL_SIDE: "slurm", "gpu": "true"},
        taints=({"key": SLURM_TAINT_KEY, "value": "true", "effect": "NoSchedule"},), unschedulable=True,
        pods=(PodView("slurm", f"slurmd-{name}", f"u-{name}", slurmd=True, ready=True),),
    )
    job = SlurmJob(job_id=f"4{name[4]}", state="RUNNING", partition="gpu", user="a", num_nodes=1, nodes=(slurm_name,),
                   gpus_per_node=8, start_time=None, end_time=None, reason="None", name="train")
    return World(node=node, slurm_node=slurm_node(slurm_name, "ALLOCATED"), jobs=[job])


def test_without_the_mapping_nothing_moves_and_the_status_says_why():
    """The probe of issue 25: two ALLOCATED nodes with running jobs, Slurm's short names beside
    FQDN Nodes. Before: Draining -> StoppingSlurmd -> Relabeling in one pass, job 42 killed."""
    pool = PoolWorld(spec_with(), {n: slurm_world(n, n.split(".")[0]) for n in FQDN}, NOW)
    pool.run(passes=5)
    assert all(w.node.placement == SLURM and w.node.move is None and w.node.slurmd_pod for w in pool.worlds.values())
    assert not any(isinstance(a, Drain) for d in pool.decisions for s in d.steps.values() for a in s.actions)
    unhealthy = {(r.node, r.kind) for r in pool.status.unhealthy_nodes}
    assert unhealthy == {(n, "SlurmUnlisted") for n in FQDN}
    assert all("Slurm NodeName" in r.reason for r in pool.status.unhealthy_nodes)


def test_through_the_mapping_the_nodes_drain_under_their_slurm_names_and_move():
    pool = PoolWorld(spec_with(node_name="{shortName}"), {n: slurm_world(n, n.split(".")[0]) for n in FQDN}, NOW)
    pool.run(passes=3)
    first = pool.decisions[0]
    assert first.slurm_names == {FQDN[0]: "gpu01", FQDN[1]: "gpu02"}
    assert {a.node for s in first.steps.values() for a in s.actions if isinstance(a, Drain)} == set(FQDN)  # apply maps them
    assert all(w.slurm_node.drain_set for w in pool.worlds.values())
    assert all(w.node.move is not None and w.node.move.phase == "Draining" for w in pool.worlds.values())  # jobs still run
    for w in pool.worlds.values():
        w.finish_jobs()
    pool.run(passes=10)
    assert all(w.node.placement == "inference:default" for w in pool.worlds.values())


def test_a_move_out_of_slurm_on_a_node_slurm_stops_listing_waits_and_says_so():
    from slurmpool.core.moves import Pass, advance
    from slurmpool.core.view import MoveRecord

    world = slurm_world(FQDN[0], "gpu01")
    move = MoveRecord(id="m1", source=SLURM, target="inference:default", phase="Draining", since=NOW, started=NOW)
    node = replace(world.node, annotations={**world.node.annotations})
    step = advance(move, node, Pass(SlurmView(True, nodes={}), spec_with(), NOW), None)
    assert step.move is not None and step.move.phase == "Draining" and [str(b) for b in step.blocked_by] == ["slurm-unlisted"]
    assert not step.actions or not any(isinstance(a, Drain) for a in step.actions)


def test_an_orphan_slurmd_pod_whose_slurm_name_cannot_be_known_is_kept():
    """nodeNameLabel: a deleted Node's label is gone with it, so Slurm's view of its node cannot be
    found; the pod stays (reported) rather than be deleted as 'serves nothing'."""
    from slurmpool.core.decide import decide
    from slurmpool.core.interfaces import PoolRef
    from slurmpool.core.snapshot import PoolSnapshot

    orphan = PodView("slurm", "slurmd-gone", "u1", slurmd=True, node="gone.example.com", pool="gpu")
    view = SlurmView(True, nodes={"gone": slurm_node("gone", "ALLOCATED")})
    for slurm, deleted in (({"node_name_label": "example.com/slurm-name"}, False), ({"node_name": "{shortName}"}, False),
                           ({}, True)):
        snap = PoolSnapshot(pool=PoolRef("ns", "gpu", "u"), spec=spec_with(**slurm), nodes=(), slurm=view, now=NOW, orphans=(orphan,))
        assert bool(decide(snap).orphans_to_delete) is deleted, slurm


def test_two_nodes_mapping_to_one_slurm_name_are_reported_and_left_alone_the_rest_moves():
    """Issue 37 item 7: `{shortName}` on FQDNs from two racks: the last Node won, the other was
    misreported as unlisted, and both got slurmd pods with the same Slurm name. Now both are
    reported on the pool (naming each other) and neither moves nor gets a slurmd pod; gpu03 does."""
    racks = ("gpu01.rack1.example.com", "gpu01.rack2.example.com")
    worlds = {n: slurm_world(n, "gpu01") for n in racks}
    worlds["gpu03.rack1.example.com"] = slurm_world("gpu03.rack1.example.com", "gpu03")
    for name in racks:  # both in inference: a move to Slurm would start a slurmd pod named gpu01
        w = worlds[name]
        worlds[name] = replace(w, node=replace(w.node, annotations={ANN_PLACEMENT: "inference:default"}, labels={"gpu": "true"},
                                               taints=(), unschedulable=False, pods=()), jobs=[])
    pool = PoolWorld(spec_with(slurm_nodes=3, node_name="{shortName}"), worlds, NOW)
    pool.run(passes=3)
    for name in racks:
        assert pool.worlds[name].node.move is None and not pool.worlds[name].node.slurmd_pod
        assert not any(name in d.steps for d in pool.decisions)
    records = {r.node: r.message for r in pool.status.invalid_records}
    assert set(records) == set(racks)
    assert racks[1] in records[racks[0]] and racks[0] in records[racks[1]] and "gpu01" in records[racks[0]]
    assert any(c.type == "Degraded" and c.status == "True" for c in pool.status.conditions)
    assert pool.decisions[0].slurm_names.get("gpu03.rack1.example.com") == "gpu03"


def test_a_constant_template_collides_every_node():
    pool = PoolWorld(spec_with(slurm_nodes=0, node_name="gpu"), {n: slurm_world(n, "gpu") for n in FQDN}, NOW)
    pool.run(passes=3)
    assert all(w.node.placement == SLURM and w.node.move is None for w in pool.worlds.values())
    assert {r.node for r in pool.status.invalid_records} == set(FQDN)
