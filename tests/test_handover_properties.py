"""Handover properties (issue 37, fault-suite addition 3): random windows, budgets 1-3, moves in
flight inside the lead time, two pools whose old names collided (team/a-x, team-a/x), a
person's `slurmpool-...` reservation and a second install's on the same Slurm. Invariants: an
edge within the lead time that lowers the count gets its reservation whatever budget the moves
in flight use; a reservation is deleted before its edge only when the edge or its count
changed; no pool ever deletes another owner's reservation."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmbridge import SlurmReservation
from slurmpool.core.handover import RESERVATION_FLAGS, PoolView, legacy_name, reconcile, reservation_name
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.models import SlurmNodePoolSpec
from slurmpool.core.phases import Phase
from slurmpool.core.view import ANN_MOVE, ANN_PLACEMENT, SLURM, MoveRecord, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node

POOLS = (PoolRef("team", "a-x", "uid-a"), PoolRef("team-a", "x", "uid-b"))
SECOND_INSTALL = PoolRef("team", "a-x", "uid-of-another-cluster")


def foreign(name: str, flags=frozenset({"MAINT"})) -> SlurmReservation:
    return SlurmReservation(name=name, nodes=("gpu01",), start=NOW, end=NOW + timedelta(days=1), flags=flags, state="ACTIVE")


OTHERS = (foreign("slurmpool-team-maintenance"), foreign(reservation_name(SECOND_INSTALL), frozenset(RESERVATION_FLAGS)),
          foreign("slurmpool-team-a-x-nightly"), foreign("maint-friday"))


def spec(slurm_nodes: int, budget: int, minute: int, count: int) -> SlurmNodePoolSpec:
    body = make_spec(slurm_nodes=slurm_nodes, max_moves=budget).model_dump(by_alias=True)
    body["schedule"] = [{"name": "w", "cron": f"{minute} 12 * * *", "duration": "1h", "slurmNodes": count}]
    body["handover"] = {"leadTime": "2h"}
    return SlurmNodePoolSpec.model_validate(body)


def lab(coming: int) -> list[NodeView]:
    """gpu01-05 in Slurm, gpu06-08 in inference, the first `coming` of those moving into Slurm."""
    nodes = [NodeView(f"gpu0{i}", annotations={ANN_PLACEMENT: SLURM}) for i in range(1, 6)]
    for i in range(6, 9):
        if i - 6 < coming:
            move = MoveRecord(id=f"m{i}", source="inference:default", target=SLURM, phase=Phase.EVICTING, since=NOW, started=NOW)
            nodes.append(NodeView(f"gpu0{i}", annotations={ANN_PLACEMENT: "inference:default", ANN_MOVE: move.to_annotation()}))
        else:
            nodes.append(NodeView(f"gpu0{i}", annotations={ANN_PLACEMENT: "inference:default"}))
    return nodes


@settings(max_examples=120, deadline=None)
@given(budget=st.integers(1, 3), coming=st.integers(0, 3), minute=st.integers(1, 59), count=st.integers(0, 4),
       later=st.integers(0, 59))
def test_the_reservation_holds_until_its_edge_and_no_other_owners_is_touched(budget, coming, minute, count, later):
    edge = NOW.replace(minute=minute)
    nodes = lab(coming)
    in_force = 5 + coming  # the moves in flight into Slurm are wanted: the edge lowers from there
    states = {n.name: slurm_node(n.name) for n in nodes[:5]}
    present = list(OTHERS)  # one Slurm: each pool's reservation beside the others'
    assert reservation_name(POOLS[0]) != reservation_name(POOLS[1])
    for pool in POOLS:
        theirs = {r.name for r in present}
        s = spec(in_force, budget, minute, count)
        first = reconcile(pool, PoolView(s, nodes, SlurmView(True, nodes=states, reservations=tuple(present)), NOW), in_force)
        assert not set(first.delete) & theirs
        assert first.outcome == "create", f"an edge lowering {in_force} to {count} within the lead time plans no reservation"
        made = SlurmReservation(name=first.create.reservation, nodes=first.create.nodes, start=first.create.start,
                                end=first.until, flags=frozenset({*RESERVATION_FLAGS, "SPEC_NODES"}), state="INACTIVE")
        present.append(made)
        slurm_after = SlurmView(True, nodes=states, reservations=tuple(present))
        now = min(NOW + timedelta(minutes=later), edge - timedelta(seconds=1))
        again = reconcile(pool, PoolView(s, nodes, slurm_after, now), in_force)
        assert again.outcome == "keep" and again.delete == (), "deleted before its edge with the edge and its count unchanged"
        moved = reconcile(pool, PoolView(spec(in_force, budget, minute, count + 1), nodes, slurm_after, now), in_force)
        assert not set(moved.delete) & theirs and set(moved.delete) <= {made.name, legacy_name(pool)}
