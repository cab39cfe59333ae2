"""The planned handover's reservations over slurmrestd (issue 24): RestBackend against an
in-process slurmrestd (tests/restfake.py) that answers the reservation calls with the answers
slurmrestd 26.05.3 gave on the lab (tests/fixtures/reservations/rest-26.05-*.json: the file name
ends in the HTTP status). v0.0.42 (24.11's newest) answers POST and DELETE with a 404, as measured."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from aiohttp import web

from slurmbridge import SlurmError
from slurmbridge.rest import RestAuth, RestBackend, parse_rest_reservation
from slurmpool.adapters import access

from .restfake import UNKNOWN_URL, FakeSlurmrestd, rest_node

FIXTURES = Path(__file__).parent / "fixtures" / "reservations"
OURS = "slurmpool-slurmpool-handover"  # the name in the fixtures: pool "handover" of namespace "slurmpool"


def fixture(name: str) -> tuple[int, dict]:
    status = int(name.rsplit("-", 1)[1])
    return status, json.loads((FIXTURES / f"rest-26.05-{name}.json").read_text())


class ReservingSlurmrestd(FakeSlurmrestd):
    """Reservation paths answered with the recorded answers; everything else as restfake does."""

    async def handle(self, request: web.Request) -> web.Response:
        path = request.path
        parts = path.split("/")
        if not path.startswith("/slurm/") or len(parts) < 4 or parts[3] not in ("reservations", "reservation", "partitions"):
            return await super().handle(request)
        text = await request.text()
        self.requests.append((request.method, path, dict(request.headers), json.loads(text) if text else None))
        version, what = parts[2], parts[3]
        if version not in self.versions:
            return web.Response(status=404, text=UNKNOWN_URL)
        if request.method == "GET":
            answer = {"reservations": "get-200", "partitions": "partitions-200"}.get(what)
        elif version < "v0.0.43":
            answer = None  # measured: v0.0.42's POST /reservations/ is an unknown URL
        elif request.method == "POST" and what == "reservations":
            hosts = [r.get("node_list", "") for r in (json.loads(text) or {}).get("reservations", [])]
            answer = "post-bad-node-422" if any("gpu99" in h for h in hosts) else "post-200"  # the node the lab lacks
        elif request.method == "DELETE" and what == "reservation":
            answer = "delete-200" if parts[4] == OURS else "delete-gone-422"
        else:
            answer = None
        if answer is None:
            return web.Response(status=404, text=UNKNOWN_URL)
        status, body = fixture(answer)
        return web.json_response(body, status=status)


@pytest.fixture
async def rest():
    runners, backends = [], []

    async def start(versions=("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")) -> tuple[ReservingSlurmrestd, RestBackend]:
        fake = ReservingSlurmrestd(versions=versions, nodes=[rest_node("gpu01", ["IDLE"])])
        runner = web.AppRunner(fake.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]
        backend = RestBackend(f"http://127.0.0.1:{port}", RestAuth("good"), retries=0)
        backends.append(backend)
        return fake, backend

    yield start
    for b in backends:
        await b.close()
    for runner in runners:
        await runner.cleanup()


def test_a_listed_reservation_reads_as_scontrol_shows_it():
    _, body = fixture("get-200")
    by_name = {r.name: r for r in map(parse_rest_reservation, body["reservations"])}
    ours = by_name[OURS]
    assert ours.nodes == ("gpu02", "gpu03")
    assert ours.flags == {"MAINT", "IGNORE_JOBS", "SPEC_NODES"}
    # scontrol showed the same reservation as StartTime=2026-12-03T07:05:38 EndTime=2026-12-03T08:15:38 (UTC)
    assert ours.start == datetime(2026, 12, 3, 7, 5, 38, tzinfo=timezone.utc)
    assert ours.end == datetime(2026, 12, 3, 8, 15, 38, tzinfo=timezone.utc)
    assert by_name["maint-by-hand"].nodes == ("gpu01",)
    assert parse_rest_reservation({"node_list": "gpu01"}) is None  # no name: not a reservation


async def test_every_reservation_is_listed_the_operators_and_others(rest):
    _, backend = await rest()
    found = {r.name: r for r in await backend.reservations()}
    assert sorted(found) == ["maint-by-hand", OURS]  # an admin's too (issue 37): its nodes stay in Slurm
    theirs = found["maint-by-hand"]
    assert theirs.nodes == ("gpu01",) and theirs.flags == {"MAINT", "IGNORE_JOBS", "SPEC_NODES"}
    assert theirs.end - theirs.start == timedelta(minutes=10)


async def test_partition_max_time_unlimited_reads_as_none(rest):
    _, backend = await rest()
    assert await backend.partition_max_times() == {"gpu": None}


async def test_create_posts_a_root_maint_reservation_on_exactly_the_nodes_from_the_edge(rest):
    fake, backend = await rest()
    start = datetime(2026, 12, 3, 7, 5, 38, tzinfo=timezone.utc)
    await backend.create_reservation(OURS, ["gpu03", "gpu02"], start, 70, ["MAINT", "IGNORE_JOBS"])
    method, path, _, body = fake.requests[-1]
    assert (method, path) == ("POST", "/slurm/v0.0.45/reservations/")
    assert body == {"reservations": [{
        "name": OURS, "node_list": "gpu[02-03]", "start_time": {"set": True, "number": int(start.timestamp())},
        "duration": {"set": True, "number": 70}, "users": ["root"], "flags": ["MAINT", "IGNORE_JOBS"]}]}


async def test_a_refused_create_is_an_error_with_slurms_words(rest):
    _, backend = await rest()
    with pytest.raises(SlurmError, match="Invalid node name specified") as err:
        await backend.create_reservation("slurmpool-slurmpool-bad", ["gpu99"], datetime.now(timezone.utc), 5, ["MAINT"])
    assert err.value.returncode == 422


async def test_delete_and_a_reservation_already_gone_is_done(rest):
    fake, backend = await rest()
    await backend.delete_reservation(OURS)
    assert fake.requests[-1][:2] == ("DELETE", f"/slurm/v0.0.45/reservation/{OURS}")
    await backend.delete_reservation("slurmpool-slurmpool-gone")  # 422 "Requested reservation is invalid": done
    assert fake.requests[-1][:2] == ("DELETE", "/slurm/v0.0.45/reservation/slurmpool-slurmpool-gone")


@pytest.mark.parametrize("name", ["maint-by-hand", "slurmpool-../nodes", "slurmpool-a/b", "SLURMPOOL-X"])
async def test_a_reservation_not_named_as_ours_is_never_sent(rest, name):
    fake, backend = await rest()
    before = len(fake.requests)
    with pytest.raises(ValueError):
        await backend.delete_reservation(name)
    with pytest.raises(ValueError):
        await backend.create_reservation(name, ["gpu01"], datetime.now(timezone.utc), 5, ["MAINT"])
    assert len(fake.requests) == before


@pytest.mark.parametrize("versions,can", [
    (("v0.0.40", "v0.0.41", "v0.0.42"), False),  # 24.11
    (("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"), True),  # 26.05
    (("v0.0.41", "v0.0.42", "v0.0.43"), True),  # 25.05
])
async def test_the_capability_is_the_negotiated_version(rest, versions, can):
    fake, backend = await rest(versions)
    assert await backend.can_reserve() is can
    assert await backend.can_reserve() is can
    assert not any("/reservation" in path for _, path, _, _ in fake.requests)  # decided without trying


async def test_an_old_slurmrestd_refuses_writes_without_sending_them(rest):
    fake, backend = await rest(("v0.0.40", "v0.0.41", "v0.0.42"))
    with pytest.raises(SlurmError, match="v0.0.42 cannot create or delete reservations"):
        await backend.create_reservation(OURS, ["gpu02"], datetime.now(timezone.utc) + timedelta(minutes=5), 5, ["MAINT"])
    with pytest.raises(SlurmError, match="cannot create or delete"):
        await backend.delete_reservation(OURS)
    assert not any("/reservation" in path for _, path, _, _ in fake.requests)


async def test_the_poll_reads_reservations_on_every_version_and_says_where_it_can_make_them(rest):
    """24.11's slurmrestd (v0.0.42) cannot make a reservation but lists them: others' (an admin's
    maintenance) are kept in Slurm there as on 26.05 (issue 37)."""
    for versions, api in ((("v0.0.41", "v0.0.42"), False), (("v0.0.42", "v0.0.45"), True)):
        fake, backend = await rest(versions)
        instrumented = access.Instrumented(backend)
        view = await access.observe_slurm(instrumented, None)
        assert view.available and view.reservations_api is api
        assert await access.makes_reservations(instrumented) is api
        assert sorted(r.name for r in view.reservations) == ["maint-by-hand", OURS] and view.max_times == {"gpu": None}
        assert view.reservations_error is None
        version = versions[-1]
        assert ("GET", f"/slurm/{version}/reservations/") in [(m, p) for m, p, _, _ in fake.requests], fake.requests
        assert not any(m in ("POST", "DELETE") and "/reservation" in p for m, p, _, _ in fake.requests)


async def test_the_handover_over_slurmrestd_is_planned_where_it_can_reserve_and_unavailable_where_not(rest):
    """The pass's decision on the view a REST poll gives: 26.05 (v0.0.45) creates the reservation
    through slurmrestd, as scontrol would; 24.11 (v0.0.42) says HandoverUnavailable and sends nothing."""
    from slurmpool.core.handover import UNAVAILABLE, PoolView, reconcile, reservation_name
    from slurmpool.core.interfaces import PoolRef

    from .factories import NOW
    from .test_handover import busy, windowed

    nodes, _ = busy()
    for versions, outcome in ((("v0.0.41", "v0.0.42"), "unavailable"), (("v0.0.42", "v0.0.45"), "create")):
        fake, backend = await rest(versions)
        fake.nodes = [rest_node(n.name, ["IDLE"]) for n in nodes[:5]]
        view = await access.observe_slurm(backend, None)
        plan = reconcile(PoolRef("ns", "gpu"), PoolView(windowed(), nodes, view, NOW), 5)
        assert plan.outcome == outcome, plan
        if outcome == "unavailable":
            assert plan.status.message == UNAVAILABLE and [e.reason for e in plan.events] == ["HandoverUnavailable"]
            continue
        assert plan.create.reservation == reservation_name(PoolRef("ns", "gpu")) and len(plan.create.nodes) == 3
        await backend.create_reservation(plan.create.reservation, list(plan.create.nodes), plan.create.start, plan.minutes,
                                         plan.create.flags)
        body = fake.requests[-1][3]["reservations"][0]
        assert body["name"] == reservation_name(PoolRef("ns", "gpu")) and body["flags"] == ["MAINT", "IGNORE_JOBS"]
        assert body["start_time"]["number"] == int(plan.create.start.timestamp()) and body["duration"]["number"] == plan.minutes
