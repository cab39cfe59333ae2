"""Others' Slurm reservations (issue 37 item 9): a node someone else's reservation holds, now or
within the lead time, is not chosen to leave Slurm; a pin or move-now moves it anyway and says so;
a failed read holds what the last status held. Parsed from the real output of each version."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from slurmbridge import SlurmJob
from slurmbridge.models import SlurmReservation
from slurmbridge.parse import parse_reservations
from slurmbridge.rest import parse_rest_reservation
from slurmpool.core.handover import PoolView, leaving_nodes, legacy_name, reservation_name
from slurmpool.core.models import ReservedNode
from slurmpool.core.planner import Goal, plan
from slurmpool.core.reservations import holds
from slurmpool.core.view import ANN_MOVE_NOW, ANN_PIN, ANN_PLACEMENT, SLURM, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .sim import POOL, PoolWorld
from .test_decide import slurm_node_world

FIXTURES = Path(__file__).parent / "fixtures" / "reservations"
INFERENCE = "inference:default"


def theirs(name, nodes, start=NOW - timedelta(minutes=5), minutes=60, flags=("SPEC_NODES",)):
    return SlurmReservation(name=name, nodes=tuple(nodes), start=start, end=start + timedelta(minutes=minutes),
                            flags=frozenset(flags), state="ACTIVE" if start <= NOW else "INACTIVE")


def pool_nodes(slurm=5, inference=1):
    nodes = [NodeView(f"gpu0{i}", annotations={ANN_PLACEMENT: SLURM}) for i in range(1, slurm + 1)]
    return nodes + [NodeView(f"gpu0{i}", annotations={ANN_PLACEMENT: INFERENCE}) for i in range(slurm + 1, slurm + inference + 1)]


def view_of(nodes, reservations=(), error=None):
    states = {n.name: slurm_node(n.name) for n in nodes}
    return SlurmView(True, nodes=states, reservations=None if error else tuple(reservations), reservations_error=error)


# ---------------------------------------------------------------- which reservations hold


def test_a_reservation_active_now_or_starting_within_the_lead_time_holds_its_pool_nodes_in_slurm():
    spec = make_spec(slurm_nodes=5)  # lead time: the default 4h (no partition MaxTime read)
    nodes = pool_nodes()
    found = holds(POOL, spec, nodes, view_of(nodes, [
        theirs("alice_7", ["gpu01", "gpu99"]),  # active; gpu99 is no node of the pool
        theirs("train-run", ["gpu02"], start=NOW + timedelta(hours=3)),  # starts within 4h
        theirs("next-week", ["gpu03"], start=NOW + timedelta(days=7)),  # beyond the lead time
        theirs("over", ["gpu04"], start=NOW - timedelta(hours=2), minutes=60),  # ended
        theirs("on-inference", ["gpu06"]),  # the node serves inference already: nothing to keep
    ]), NOW)
    assert sorted(found) == ["gpu01", "gpu02"]
    assert found["gpu01"] == ReservedNode(node="gpu01", reservation="alice_7", start="2026-11-29T11:55:00Z", end="2026-11-29T12:55:00Z")
    assert found["gpu02"].reservation == "train-run" and not found["gpu02"].leaving
    longer = make_spec(slurm_nodes=5).model_copy(update={"handover": make_spec().handover.model_copy(
        update={"lead_time": "192h", "max_lead_time": "192h"})})  # a week and a day, at most maxLeadTime
    assert "gpu03" in holds(POOL, longer, nodes, view_of(nodes, [theirs("next-week", ["gpu03"], start=NOW + timedelta(days=7))]), NOW)


def test_flags_that_reserve_nodes_hold_them_and_those_that_reserve_none_do_not():
    nodes = pool_nodes()
    held = {flag: bool(holds(POOL, make_spec(), nodes, view_of(nodes, [theirs("r", ["gpu01"], flags=(flag, "SPEC_NODES"))]), NOW))
            for flag in ("MAINT", "OVERLAP", "FLEX", "MAGNETIC", "REPLACE", "PURGE_COMP", "DAILY", "ANY_NODES", "LICENSE_ONLY", "TIME_FLOAT")}
    assert held == {"MAINT": True, "OVERLAP": True, "FLEX": True, "MAGNETIC": True, "REPLACE": True, "PURGE_COMP": True, "DAILY": True,
                    "ANY_NODES": False, "LICENSE_ONLY": False, "TIME_FLOAT": False}


def test_only_the_pools_own_reservation_is_not_held_another_pools_or_installs_slurmpool_one_is():
    nodes = pool_nodes()
    ours = theirs(reservation_name(POOL), ["gpu01"], flags=("MAINT", "IGNORE_JOBS", "SPEC_NODES"))
    old = theirs(legacy_name(POOL), ["gpu02"], flags=("MAINT", "IGNORE_JOBS", "SPEC_NODES"))  # an older version's, ours
    persons = theirs(legacy_name(POOL), ["gpu03"], flags=("MAINT", "SPEC_NODES"))  # that name by hand, without our flags
    other_install = theirs(reservation_name(replace(POOL, uid="another-uid")), ["gpu04"], flags=("MAINT", "IGNORE_JOBS"))
    found = holds(POOL, make_spec(), nodes, view_of(nodes, [ours, other_install]), NOW)
    assert sorted(found) == ["gpu04"]
    assert sorted(holds(POOL, make_spec(), nodes, view_of(nodes, [old]), NOW)) == []
    assert sorted(holds(POOL, make_spec(), nodes, view_of(nodes, [persons]), NOW)) == ["gpu03"]


def test_a_failed_read_holds_what_the_last_status_held_until_it_ends_and_one_that_cannot_make_them_still_holds():
    nodes = pool_nodes()
    before = [ReservedNode(node="gpu01", reservation="alice_7", end="2026-11-29T13:00:00Z", leaving=True),
              ReservedNode(node="gpu02", reservation="gone", end="2026-11-29T11:00:00Z")]  # ended meanwhile
    failed = view_of(nodes, error="cannot list reservations: timed out")
    assert holds(POOL, make_spec(), nodes, failed, NOW, before) == {"gpu01": before[0].model_copy(update={"leaving": False})}
    assert holds(POOL, make_spec(), nodes, SlurmView(False, error="down"), NOW, before).keys() == {"gpu01"}
    # slurmrestd before v0.0.43 lists reservations but cannot make them: others' hold all the same
    cannot = replace(view_of(nodes, [theirs("alice_7", ["gpu03"])]), reservations_api=False)
    assert holds(POOL, make_spec(), nodes, cannot, NOW, before).keys() == {"gpu03"}


# ---------------------------------------------------------------- the planner


def test_the_planner_never_chooses_a_held_node_to_leave_slurm_but_a_pin_moves_it():
    nodes = pool_nodes(slurm=4, inference=0)
    slurm = view_of(nodes)
    slurm = replace(slurm, nodes={**slurm.nodes, "gpu03": slurm_node("gpu03", "ALLOCATED")})
    slurm = replace(slurm, jobs=(SlurmJob(job_id="1", name="j", user="u", state="RUNNING", partition="gpu", nodes=("gpu03",),
                                          gpus_per_node=8, num_nodes=1, start_time=NOW, end_time=NOW + timedelta(hours=1), reason="None"),))
    spec = make_spec(slurm_nodes=2, max_moves=4)
    free = plan(spec, nodes, slurm, NOW)
    assert sorted(s.node for s in free.starts) == ["gpu01", "gpu02"]  # the idle ones
    held = plan(spec, nodes, slurm, NOW, Goal(held=frozenset({"gpu01", "gpu02"})))
    assert sorted(s.node for s in held.starts) == ["gpu03", "gpu04"]  # a busy node rather than a reserved one
    all_held = plan(spec, nodes, slurm, NOW, Goal(held=frozenset({"gpu01", "gpu02", "gpu03", "gpu04"})))
    assert all_held.starts == [] and not all_held.problems  # fewer than asked: the status says why
    pinned = [replace(n, annotations={**n.annotations, ANN_PIN: INFERENCE}) if n.name == "gpu01" else n for n in nodes]
    moved = plan(make_spec(slurm_nodes=4, max_moves=4), pinned, slurm, NOW, Goal(held=frozenset({"gpu01"})))
    assert [(s.node, s.cause) for s in moved.starts][:1] == [("gpu01", "pin")]


def test_the_planned_handover_leaves_held_nodes_out_of_its_reservation():
    nodes = pool_nodes(slurm=5, inference=0)
    spec = make_spec(slurm_nodes=5, max_moves=8)
    view = PoolView(spec, nodes, view_of(nodes), NOW)
    assert sorted(leaving_nodes(view, Goal(3, held=frozenset({"gpu01", "gpu02"})))) == ["gpu03", "gpu04"]
    assert sorted(leaving_nodes(replace(view, held=frozenset({"gpu01", "gpu02"})), Goal(3, held=frozenset({"gpu01", "gpu02"})))) \
        == ["gpu03", "gpu04"]


# ---------------------------------------------------------------- whole passes (decide and status)


def world(slurm=4, **kw):
    worlds = {f"gpu0{i}": slurm_node_world(f"gpu0{i}") for i in range(1, slurm + 1)}
    return PoolWorld(spec=make_spec(slurm_nodes=slurm, max_moves=2), worlds=worlds, now=NOW, **kw)


def placements(pool):
    return {n: w.node.placement for n, w in pool.worlds.items()}


def test_a_pass_keeps_reserved_nodes_in_slurm_moves_others_and_says_why_fewer_moved():
    pool = world(reservations=(theirs("alice_7", ["gpu01", "gpu02"]),))
    pool.spec = make_spec(slurm_nodes=1, max_moves=2)
    pool.run(passes=40)
    assert placements(pool) == {"gpu01": SLURM, "gpu02": SLURM, "gpu03": INFERENCE, "gpu04": INFERENCE}
    status = pool.status
    assert [(r.node, r.reservation, r.leaving) for r in status.reserved_nodes] == [("gpu01", "alice_7", False), ("gpu02", "alice_7", False)]
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.status == "False" and "kept in Slurm by others' reservations (status.reservedNodes): gpu01 (alice_7), gpu02 (alice_7)" \
        in ready.message
    kept = [e for d in pool.decisions for e in d.node_events if e.reason == "ReservedNodeKept"]
    assert sorted(e.node for e in kept) == ["gpu01", "gpu02"]  # once each, not every pass
    assert "reservation alice_7 from 2026-11-29T11:55:00Z until 2026-11-29T12:55:00Z holds it" in kept[0].message
    pool.reservations = ()  # the reservation is deleted: the split is reached
    pool.run(passes=40)
    assert sorted(placements(pool).values()).count(INFERENCE) == 3 and pool.status.reserved_nodes == []


def test_a_move_now_takes_a_reserved_node_out_anyway_and_says_it_is_in_the_reservation():
    pool = world(reservations=(theirs("alice_7", ["gpu01"]),))
    w = pool.worlds["gpu01"]
    w.node = replace(w.node, annotations={**w.node.annotations, ANN_MOVE_NOW: INFERENCE})
    pool.run(passes=1)
    moved = [e for e in pool.decisions[0].node_events if e.reason == "ReservedNodeMoved"]
    assert [e.node for e in moved] == ["gpu01"] and moved[0].type == "Warning"
    assert "gpu01 leaves Slurm on its move-now though reservation alice_7" in moved[0].message
    assert [(r.node, r.leaving) for r in pool.status.reserved_nodes] == [("gpu01", True)]
    pool.run(passes=40)
    assert pool.worlds["gpu01"].node.placement == INFERENCE


def test_a_move_out_of_slurm_still_draining_turns_back_when_a_reservation_comes_and_another_node_goes():
    pool = world()
    pool.spec = make_spec(slurm_nodes=3, max_moves=1)
    busy = SlurmJob(job_id="9", name="j", user="u", state="RUNNING", partition="gpu", nodes=("gpu01",), gpus_per_node=8, num_nodes=1,
                    start_time=NOW, end_time=NOW + timedelta(hours=2), reason="None")
    for name, w in pool.worlds.items():  # every node busy but gpu01 least: it is chosen, and stays Draining
        w.jobs = [replace(busy, job_id=f"j{name}", nodes=(name,), end_time=NOW + timedelta(hours=2 if name == "gpu01" else 9))]
    pool.run(passes=2)
    assert pool.worlds["gpu01"].node.move is not None and pool.worlds["gpu01"].node.move.phase == "Draining"
    pool.reservations = (theirs("alice_7", ["gpu01"]),)
    pool.run(passes=2)
    aborted = [e for d in pool.decisions for e in d.node_events + [x for s in d.steps.values() for x in s.events]
               if e.reason == "MoveAborted"]
    assert aborted and aborted[0].message.startswith("gpu01: reservation alice_7 from 2026-11-29T11:55:00Z until 2026-11-29T12:55:00Z "
                                                     "holds it, so it stays in Slurm; returning to slurm")
    moving = {n for n, w in pool.worlds.items() if w.node.move is not None and w.node.move.source == SLURM}
    assert "gpu01" not in moving and len(moving) == 1


def test_a_failed_read_neither_frees_held_nodes_nor_stops_other_moves():
    pool = world(reservations=(theirs("alice_7", ["gpu01"]),))
    pool.run(passes=1)
    pool.spec = make_spec(slurm_nodes=2, max_moves=2)
    pool.reservations, pool.reservations_error = None, "cannot list reservations: timed out"
    pool.run(passes=40)
    assert placements(pool)["gpu01"] == SLURM and sorted(placements(pool).values()).count(INFERENCE) == 2
    assert [r.node for r in pool.status.reserved_nodes] == ["gpu01"]


# ---------------------------------------------------------------- from the real output of each version


def test_the_real_2205_scontrol_reservations_hold_the_admins_node_and_not_ours():
    """22.05-scontrol.txt: `slurmpool-ns-gpu` (an older version's name, with our flags) on gpu[03-04]
    and an admin's `maint-friday` (MAINT) on gpu01, active 20:12:16-20:17:16."""
    listed = tuple(parse_reservations((FIXTURES / "22.05-scontrol.txt").read_text()))
    now = datetime(2026, 12, 2, 20, 13, tzinfo=timezone.utc)
    nodes = pool_nodes(slurm=5, inference=0)
    from slurmpool.core.interfaces import PoolRef
    found = holds(PoolRef("ns", "gpu", "uid"), make_spec(), nodes, view_of(nodes, listed), now)
    assert {n: r.reservation for n, r in found.items()} == {"gpu01": "maint-friday"} and found["gpu01"].flags == ["MAINT"]
    assert holds(PoolRef("ns", "gpu", "uid"), make_spec(), nodes, view_of(nodes, listed), now + timedelta(minutes=5)) == {}  # ended


def test_the_real_2411_rest_reservations_hold_the_admins_and_a_persons_nodes():
    """rest-24.11-get-200.json (slurmrestd 24.11.5, v0.0.42, which cannot make reservations but
    lists them): an admin's `maint-by-hand` on gpu01, active, and `alice_7` on gpu[02-03] an hour
    ahead (Users=root, no flags but the SPEC_NODES Slurm adds): all three held within the 4 h lead."""
    body = json.loads((FIXTURES / "rest-24.11-get-200.json").read_text())
    assert body["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.42"
    listed = tuple(r for r in map(parse_rest_reservation, body["reservations"]) if r is not None)
    assert [(r.name, r.nodes, sorted(r.flags)) for r in listed] == [
        ("maint-by-hand", ("gpu01",), ["IGNORE_JOBS", "MAINT", "SPEC_NODES"]), ("alice_7", ("gpu02", "gpu03"), ["SPEC_NODES"])]
    admins = listed[0]
    nodes = pool_nodes(slurm=4, inference=0)
    view = replace(view_of(nodes, listed), reservations_api=False)
    found = holds(POOL, make_spec(), nodes, view, admins.start + timedelta(minutes=1))
    assert {n: r.reservation for n, r in found.items()} == {"gpu01": "maint-by-hand", "gpu02": "alice_7", "gpu03": "alice_7"}
    result = plan(make_spec(slurm_nodes=3, max_moves=3), nodes, view, admins.start, Goal(held=frozenset(found)))
    assert [s.node for s in result.starts] == ["gpu04"]


def test_the_real_2605_rest_reservations_hold_the_admins_node_and_not_ours():
    """rest-26.05-get-200.json (slurmrestd 26.05.3, v0.0.45): an admin's `maint-by-hand` on gpu01 and
    the handover's on gpu[02-03], named as the pool `slurmpool/handover` of that day's version."""
    body = json.loads((FIXTURES / "rest-26.05-get-200.json").read_text())
    listed = tuple(r for r in map(parse_rest_reservation, body["reservations"]) if r is not None)
    admins = next(r for r in listed if r.name == "maint-by-hand")
    nodes = pool_nodes(slurm=3, inference=0)
    from slurmpool.core.interfaces import PoolRef
    pool = PoolRef("slurmpool", "handover", "uid")
    found = holds(pool, make_spec(), nodes, view_of(nodes, listed), admins.start + timedelta(minutes=1))
    assert {n: r.reservation for n, r in found.items()} == {"gpu01": "maint-by-hand"}
    assert found["gpu01"].flags == ["IGNORE_JOBS", "MAINT"]
    # a pass on that view: the planner takes gpu02 and gpu03, never gpu01
    spec = make_spec(slurm_nodes=1, max_moves=3)
    result = plan(spec, nodes, view_of(nodes, listed), admins.start, Goal(held=frozenset(found)))
    assert sorted(s.node for s in result.starts) == ["gpu02", "gpu03"]
