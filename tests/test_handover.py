"""Planned handover (issue 24), the pure part: leaving nodes by the planner, drain forecast,
the reservation wanted ahead of an edge."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from slurmbridge import SlurmJob
from slurmpool.core.forecast import free_at
from slurmpool.core.handover import Edge, PoolView, is_ours, leaving_nodes, planned, reservation_name
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.planner import Goal
from slurmpool.core.view import ANN_PLACEMENT, SLURM, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node

POOL = PoolRef("ns", "gpu", "2f0c6a8e-uid")
NAME = reservation_name(POOL)


def running(job_id, node, minutes):
    end = None if minutes is None else NOW + timedelta(minutes=minutes)
    return SlurmJob(job_id=job_id, name="train", user="u", state="RUNNING", partition="gpu", nodes=(node,), gpus_per_node=8,
                    num_nodes=1, start_time=NOW - timedelta(minutes=1), end_time=end, reason="None")


def lab(jobs=()):
    nodes = [NodeView(f"gpu0{i}", annotations={ANN_PLACEMENT: SLURM}) for i in range(1, 6)]
    nodes += [NodeView(f"gpu0{i}", annotations={ANN_PLACEMENT: "inference:default"}) for i in range(6, 9)]
    busy = {n for j in jobs for n in j.nodes}
    states = {n.name: slurm_node(n.name, "ALLOCATED" if n.name in busy else "IDLE") for n in nodes[:5]}
    return nodes, SlurmView(True, nodes=states, jobs=tuple(jobs))


def test_the_forecast_is_the_latest_end_of_a_nodes_jobs_and_none_without_a_limit():
    _, slurm = lab([running("1", "gpu01", 10), running("2", "gpu01", 30), running("3", "gpu02", None)])
    assert free_at("gpu01", slurm, NOW) == NOW + timedelta(minutes=30)
    assert free_at("gpu02", slurm, NOW) is None
    assert free_at("gpu03", slurm, NOW) == NOW


def test_the_planner_chooses_the_leaving_nodes_idle_ones_first_then_soonest_free():
    nodes, slurm = lab([running("1", "gpu01", 50), running("2", "gpu02", 5), running("3", "gpu03", 20), running("4", "gpu04", 40)])
    spec = make_spec(slurm_nodes=5, max_moves=1)  # one move a wave: the waves still reach the split
    assert leaving_nodes(PoolView(spec, nodes, slurm, NOW), Goal(2)) == ["gpu05", "gpu02", "gpu03"]


def test_a_handover_is_planned_only_for_an_edge_within_the_lead_time_that_takes_nodes_from_slurm():
    nodes, slurm = lab([running("1", "gpu01", 50), running("2", "gpu02", 5), running("3", "gpu03", None)])
    spec = make_spec(slurm_nodes=5, max_moves=8)
    edge = NOW + timedelta(minutes=30)

    def at_edge(count, lead, view=slurm):
        return planned(POOL, PoolView(spec, nodes, view, NOW), Edge(edge, count, edge + timedelta(hours=1)), lead)

    h = at_edge(2, timedelta(hours=1))
    assert h is not None and h.reservation == NAME and h.start == edge and h.flags == ("MAINT", "IGNORE_JOBS")
    assert h.nodes == ("gpu04", "gpu05", "gpu02")
    assert h.forecast == {"gpu04": NOW, "gpu05": NOW, "gpu02": NOW + timedelta(minutes=5)} and h.late == []
    assert at_edge(2, timedelta(minutes=10)) is None  # too far ahead
    assert at_edge(6, timedelta(hours=1)) is None  # Slurm grows
    assert at_edge(2, timedelta(hours=1), SlurmView(False)) is None
    # jobs without a limit or past the edge are named ahead of it
    late = at_edge(0, timedelta(hours=1))
    assert set(late.late) == {"gpu01", "gpu03"}


def test_only_the_pools_own_reservation_is_ours():
    assert reservation_name(POOL) == NAME and NAME.startswith("slurmpool-ns.gpu-")
    assert is_ours(NAME, POOL)
    assert not is_ours(NAME + "2", POOL) and not is_ours("maint-friday", POOL) and not is_ours("slurmpool-ns-gpu", POOL)


def test_reservation_names_cannot_collide_and_stay_within_slurms_bounds():
    """Issue 37 item 5: pool a-x in team and pool x in team-a both got slurmpool-team-a-x; a pool
    of the same name on a second install (another uid) got the same name too."""
    from slurmbridge import validate
    names = {reservation_name(PoolRef("team", "a-x", "u1")), reservation_name(PoolRef("team-a", "x", "u2")),
             reservation_name(PoolRef("team", "a-x", "u3"))}
    assert len(names) == 3
    long = reservation_name(PoolRef("n" * 63, "p" * 253, "u"))
    assert validate.reservation_name(long) == long and len(long) <= 128


# ---------------------------------------------------------------- the pass's decision (reconcile)

from slurmbridge import SlurmReservation  # noqa: E402
from slurmpool.core.handover import UNAVAILABLE, next_edge, reconcile  # noqa: E402
from slurmpool.core.health import Finding, NodeHealth  # noqa: E402
from slurmpool.core.models import SlurmNodePoolSpec  # noqa: E402
from slurmpool.core.phases import Phase  # noqa: E402
from slurmpool.core.view import ANN_MOVE, MoveRecord  # noqa: E402

EDGE = NOW + timedelta(minutes=30)  # the window "30 12 * * *" opens at 12:30 UTC, for 1h, with 2 Slurm nodes


def windowed(lead="4h", enabled=True, windows=True):
    spec = make_spec(slurm_nodes=5, max_moves=8).model_dump(by_alias=True)
    if windows:
        spec["schedule"] = [{"name": "day", "cron": "30 12 * * *", "duration": "1h", "slurmNodes": 2}]
    spec["handover"] = {"enabled": enabled, **({"leadTime": lead} if lead else {})}
    return SlurmNodePoolSpec.model_validate(spec)


def with_reservations(slurm, *reservations, api=True):
    return SlurmView(True, nodes=slurm.nodes, jobs=slurm.jobs, reservations=tuple(reservations) if api else None, reservations_api=api)


def ours(nodes, start=EDGE, name=NAME):
    return SlurmReservation(name=name, nodes=tuple(nodes), start=start, end=start + timedelta(hours=1),
                            flags=frozenset({"MAINT", "IGNORE_JOBS", "SPEC_NODES"}), state="INACTIVE")


def busy():
    return lab([running("1", "gpu01", 50), running("2", "gpu02", 5), running("3", "gpu03", None)])


def decide_at(spec, nodes, slurm, now=NOW, count=5, health=None, **kw):
    return reconcile(POOL, PoolView(spec, nodes, slurm, now, health), count, **kw)


def test_the_next_edge_sets_the_windows_count_until_its_end():
    edge = next_edge(windowed(), 8, NOW)
    assert (edge.at, edge.slurm_nodes, edge.until) == (EDGE, 2, EDGE + timedelta(hours=1))
    assert next_edge(windowed(windows=False), 8, NOW) is None


def test_an_edge_beyond_the_lead_time_plans_nothing():
    nodes, slurm = busy()
    plan = decide_at(windowed(lead="10m"), nodes, with_reservations(slurm))
    assert plan.outcome == "none" and plan.create is None and plan.delete == () and plan.status is None


def test_an_edge_within_the_lead_time_creates_the_reservation_on_the_leaving_nodes_until_the_windows_end():
    nodes, slurm = busy()
    plan = decide_at(windowed(), nodes, with_reservations(slurm))
    assert plan.outcome == "create" and plan.delete == ()
    assert plan.create.reservation == NAME and plan.create.nodes == ("gpu04", "gpu05", "gpu02")
    assert plan.create.start == EDGE and plan.minutes == 60 and plan.create.flags == ("MAINT", "IGNORE_JOBS")
    assert plan.status.state == "Planned" and plan.status.late == []
    assert [e.reason for e in plan.events] == ["HandoverReserved"]


def test_jobs_without_a_limit_or_past_the_edge_are_named_late():
    nodes, slurm = busy()
    spec = windowed().model_copy(update={"schedule": [windowed().schedule[0].model_copy(update={"slurm_nodes": 0})]})
    plan = decide_at(spec, nodes, with_reservations(slurm))
    assert set(plan.status.late) == {"gpu01", "gpu03"} and "drain.onTimeout" in plan.events[0].message


def test_an_edge_that_does_not_lower_the_slurm_count_plans_nothing():
    nodes, slurm = busy()
    assert decide_at(windowed(), nodes, with_reservations(slurm), count=2).outcome == "none"


def test_the_reservation_as_wanted_is_kept():
    nodes, slurm = busy()
    plan = decide_at(windowed(), nodes, with_reservations(slurm, ours(["gpu02", "gpu04", "gpu05"])))
    assert plan.outcome == "keep" and plan.create is None and plan.delete == () and plan.status.state == "Reserved"


def test_reserved_nodes_that_still_fit_are_kept_though_the_planner_would_choose_others_now():
    nodes, slurm = busy()  # the planner now prefers gpu02 (ends in 5 min) to gpu01 (50 min)
    plan = decide_at(windowed(), nodes, with_reservations(slurm, ours(["gpu01", "gpu04", "gpu05"])))
    assert plan.outcome == "keep" and plan.status.nodes == ["gpu01", "gpu04", "gpu05"] and plan.status.late == ["gpu01"]


def test_a_reserved_node_that_became_unhealthy_replaces_the_reservation():
    nodes, slurm = busy()
    health = {"gpu04": NodeHealth((Finding("SlurmDown", "down", NOW),))}
    plan = decide_at(windowed(), nodes, with_reservations(slurm, ours(["gpu02", "gpu04", "gpu05"])), health=health)
    assert plan.outcome == "replace" and plan.delete == (NAME,)
    assert "gpu04" not in plan.create.nodes and len(plan.create.nodes) == 3
    assert [e.reason for e in plan.events] == ["HandoverReplanned"]


def test_a_reservation_for_another_start_is_replaced():
    nodes, slurm = busy()
    plan = decide_at(windowed(), nodes, with_reservations(slurm, ours(["gpu02", "gpu04", "gpu05"], start=EDGE + timedelta(minutes=5))))
    assert plan.outcome == "replace" and plan.create.start == EDGE


def test_the_window_removed_deletes_the_reservation():
    nodes, slurm = busy()
    plan = decide_at(windowed(windows=False), nodes, with_reservations(slurm, ours(["gpu02", "gpu04", "gpu05"])))
    assert plan.outcome == "delete" and plan.delete == (NAME,) and plan.create is None
    assert [e.reason for e in plan.events] == ["HandoverCancelled"]
    off = decide_at(windowed(enabled=False), nodes, with_reservations(slurm, ours(["gpu02", "gpu04", "gpu05"])))
    assert off.outcome == "delete"


def _moving_out(node: NodeView) -> NodeView:
    move = MoveRecord(id="m1", source=SLURM, target="inference:default", phase=Phase.DRAINING, since=EDGE, started=EDGE)
    return NodeView(node.name, annotations={**node.annotations, ANN_MOVE: move.to_annotation()})


def test_past_the_edge_the_reservation_is_kept_while_a_move_out_of_slurm_goes_on_one_of_its_nodes():
    nodes, slurm = busy()
    nodes = [_moving_out(n) if n.name == "gpu04" else n for n in nodes]
    later = EDGE + timedelta(minutes=1)
    plan = decide_at(windowed(), nodes, with_reservations(slurm, ours(["gpu02", "gpu04", "gpu05"])), now=later, count=2)
    assert plan.outcome == "keep" and plan.delete == () and plan.status.state == "Handing" and "gpu04" in plan.status.message


def test_past_the_edge_with_the_moves_done_the_reservation_is_deleted():
    nodes, slurm = busy()
    nodes = [NodeView(n.name, annotations={ANN_PLACEMENT: "inference:default"}) if n.name in ("gpu02", "gpu04", "gpu05") else n
             for n in nodes]
    later = EDGE + timedelta(minutes=3)
    plan = decide_at(windowed(), nodes, with_reservations(slurm, ours(["gpu02", "gpu04", "gpu05"])), now=later, count=2)
    assert plan.outcome == "delete" and plan.delete == (NAME,) and plan.status is None
    assert [e.reason for e in plan.events] == ["HandoverDone"]


def test_reservations_of_others_are_never_touched():
    """Issue 37 item 5: the orphan sweep deleted any slurmpool-<ns>-* no local pool owned: a
    person's slurmpool-ns-maintenance, another install's. Only the pool's exact name is ever deleted."""
    nodes, slurm = busy()
    others = [ours(["gpu01"], name=n) for n in ("maint-friday", "slurmpool-ns-maintenance", "slurmpool-other-gpu", "slurmpool-ns-old",
                                                 reservation_name(PoolRef("ns", "gpu", "other-install-uid")),
                                                 reservation_name(PoolRef("ns", "old", "deleted-pool-uid")))]
    for spec in (windowed(windows=False), windowed()):
        plan = decide_at(spec, nodes, with_reservations(slurm, *others))
        assert not set(plan.delete) & {r.name for r in others}


def test_a_reservation_under_the_old_name_is_found_and_made_again_under_the_new_one_on_its_nodes():
    """The upgrade path: slurmpool-<ns>-<pool> made by an older version, with our flags, is replaced
    (the same nodes while they still fit); past its edge it is kept while its moves go on."""
    nodes, slurm = busy()
    legacy = ours(["gpu01", "gpu04", "gpu05"], name="slurmpool-ns-gpu")
    plan = decide_at(windowed(), nodes, with_reservations(slurm, legacy))
    assert plan.outcome == "replace" and plan.delete == ("slurmpool-ns-gpu",)
    assert plan.create.reservation == NAME and plan.create.nodes == ("gpu01", "gpu04", "gpu05")
    gone = decide_at(windowed(windows=False), nodes, with_reservations(slurm, legacy))
    assert gone.outcome == "delete" and gone.delete == ("slurmpool-ns-gpu",)
    moving = [_moving_out(n) if n.name == "gpu04" else n for n in nodes]
    handing = decide_at(windowed(), moving, with_reservations(slurm, ours(["gpu04"], name="slurmpool-ns-gpu")),
                        now=EDGE + timedelta(minutes=1), count=2)
    assert handing.outcome == "keep" and handing.delete == ()
    persons = SlurmReservation(name="slurmpool-ns-gpu", nodes=("gpu01",), start=EDGE, end=EDGE + timedelta(hours=1),
                               flags=frozenset({"MAINT"}), state="INACTIVE")  # not our flags: a person's, left alone
    kept = decide_at(windowed(), nodes, with_reservations(slurm, persons))
    assert kept.outcome == "create" and kept.delete == ()


def test_an_access_without_reservations_reports_it_once_and_plans_nothing():
    nodes, slurm = busy()
    plan = decide_at(windowed(), nodes, with_reservations(slurm, api=False))
    assert plan.outcome == "unavailable" and plan.create is None and plan.delete == ()
    assert plan.status.state == "Unavailable" and plan.status.message == UNAVAILABLE
    assert [e.reason for e in plan.events] == ["HandoverUnavailable"]
    again = decide_at(windowed(), nodes, with_reservations(slurm, api=False), previous=plan.status)
    assert again.outcome == "unavailable" and again.events == []


def test_reservations_that_could_not_be_read_change_nothing():
    nodes, slurm = busy()
    view = SlurmView(True, nodes=slurm.nodes, jobs=slurm.jobs, reservations=None, reservations_error="cannot list reservations: boom")
    plan = decide_at(windowed(), nodes, view)
    assert plan.outcome == "unknown" and plan.create is None and plan.delete == ()


def test_at_the_edge_the_planner_takes_the_reserved_nodes_first_among_idle_ones():
    nodes, slurm = lab()  # all idle: by name, gpu01.. would go first
    view = with_reservations(slurm, ours(["gpu03", "gpu04", "gpu05"], start=NOW))
    assert sorted(leaving_nodes(PoolView(make_spec(slurm_nodes=5, max_moves=8), nodes, view, NOW), Goal(2))) == ["gpu03", "gpu04", "gpu05"]
    assert sorted(leaving_nodes(PoolView(make_spec(slurm_nodes=5, max_moves=8), nodes, slurm, NOW), Goal(2))) != ["gpu03", "gpu04", "gpu05"]


def test_at_the_edge_the_planner_takes_the_reserved_nodes_first_though_they_are_busy_and_others_idle():
    """The plan's nodes, whose jobs the handover warned (e2e, 26.05 over REST: the edge took a busy
    node nobody warned and kept a warned one, whose job then never saw its requeue)."""
    nodes, slurm = lab([running(str(i), f"gpu0{i}", 120) for i in (2, 3, 4, 5)])  # gpu01 idle
    view = with_reservations(slurm, ours(["gpu04", "gpu05"], start=NOW))
    assert sorted(leaving_nodes(PoolView(make_spec(slurm_nodes=5, max_moves=8), nodes, view, NOW), Goal(3))) == ["gpu04", "gpu05"]
    assert sorted(leaving_nodes(PoolView(make_spec(slurm_nodes=5, max_moves=8), nodes, slurm, NOW), Goal(3))) == ["gpu01", "gpu02"]
    # Before the edge (a surge of demand): an idle node still goes first, then the reserved busy ones.
    ahead = with_reservations(slurm, ours(["gpu04", "gpu05"], start=NOW + timedelta(minutes=30)))
    assert leaving_nodes(PoolView(make_spec(slurm_nodes=5, max_moves=8), nodes, ahead, NOW), Goal(3)) == ["gpu01", "gpu04"]


def test_slurm_time_limits_parse_as_scontrol_prints_them():
    from slurmbridge.parse import parse_duration, parse_partition_max_times

    assert parse_duration("04:00:00") == timedelta(hours=4)
    assert parse_duration("1-12:00:00") == timedelta(days=1, hours=12)
    assert parse_duration("30") == timedelta(minutes=30) and parse_duration("30:15") == timedelta(minutes=30, seconds=15)
    assert parse_duration("UNLIMITED") is None and parse_duration("NONE") is None and parse_duration("") is None
    text = ("PartitionName=gpu AllowGroups=ALL MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 Nodes=gpu[01-08]\n"
            "PartitionName=debug MaxTime=UNLIMITED Nodes=gpu01\n")
    assert parse_partition_max_times(text) == {"gpu": timedelta(days=2), "debug": None}


def test_the_lead_time_is_the_specs_else_the_partitions_max_time_else_4h_at_most_max_lead_time():
    from slurmpool.core.handover import lead_time

    _, slurm = busy()
    spec = windowed(lead=None)
    assert lead_time(spec, slurm)[0] == timedelta(hours=4)
    assert lead_time(spec, replace(slurm, max_times={"gpu": None}))[0] == timedelta(hours=4)  # UNLIMITED
    assert lead_time(spec, replace(slurm, max_times={"gpu": timedelta(hours=6)})) == (timedelta(hours=6), "partition gpu MaxTime")
    assert lead_time(spec, replace(slurm, max_times={"gpu": timedelta(days=3)}))[0] == timedelta(hours=24)  # maxLeadTime
    assert lead_time(windowed(lead="90m"), replace(slurm, max_times={"gpu": timedelta(hours=6)}))[0] == timedelta(minutes=90)


def test_an_edge_beyond_the_partitions_max_time_waits_for_it():
    nodes, slurm = busy()
    short = replace(with_reservations(slurm), max_times={"gpu": timedelta(minutes=20)})  # the edge is 30 min away
    assert decide_at(windowed(lead=None), nodes, short).outcome == "none"
    plan = decide_at(windowed(lead=None), nodes, replace(short, max_times={"gpu": timedelta(hours=1)}))
    assert plan.outcome == "create" and plan.status.lead_time == "1h00m (partition gpu MaxTime)"


def test_a_one_off_window_gets_the_same_planned_handover_as_a_recurring_one():
    nodes, slurm = busy()
    recurring = decide_at(windowed(), nodes, with_reservations(slurm))
    spec = windowed().model_dump(by_alias=True)
    spec["schedule"] = [{"name": "once", "at": EDGE.isoformat(), "duration": "1h", "slurmNodes": 2}]
    one_off = decide_at(SlurmNodePoolSpec.model_validate(spec), nodes, with_reservations(slurm))
    assert one_off.outcome == "create" and one_off.create == recurring.create and one_off.until == recurring.until
    assert one_off.status == recurring.status


def test_moves_in_flight_that_use_the_budget_up_do_not_cancel_the_planned_reservation():
    """Issue 37 item 4: a move-now in flight at a budget of 1 left the leaving nodes planned with a
    budget of 0: the reservation was deleted as "no edge within the lead time" and made again later."""
    nodes, slurm = busy()
    spec = windowed().model_copy(update={"max_concurrent_moves": 1})
    nodes = [_moving_out(n) if n.name == "gpu06" else n for n in nodes]  # in flight, not leaving Slurm: it uses the budget
    wanted = decide_at(spec, nodes, with_reservations(slurm))
    assert wanted.outcome == "create" and len(wanted.create.nodes) == 3
    held = decide_at(spec, nodes, with_reservations(slurm, ours(wanted.create.nodes)))
    assert held.outcome == "keep" and held.delete == ()
