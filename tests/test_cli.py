"""kubectl slurmpool: state from API objects, the dry-run plan, and output that fits a terminal."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import timedelta

import pytest

from slurmpool.cli import api as cli_api
from slurmpool.cli import complete as cli_complete
from slurmpool.cli import main as cli_main
from slurmpool.cli import pages as cli_pages
from slurmpool.cli import plan as cli_plan
from slurmpool.cli import render as cli_render
from slurmpool.cli import views as cli_views
from slurmpool.core.published import slurm_annotation, slurm_view
from slurmpool.core.view import ANN_MOVE, ANN_PLACEMENT, ANN_SETTLED, ANN_SLURM, SLURM, MoveRecord, PodView, SlurmView
from tests.factories import pod_list_page as page

from slurmbridge import SlurmJob

from .factories import NOW, make_spec, slurm_node

SPEC = make_spec(slurm_nodes=3, max_moves=8)


def job(job_id, node, minutes):
    return SlurmJob(job_id=job_id, name="train", user="alice", state="RUNNING", partition="gpu", nodes=(node,), gpus_per_node=8,
                    num_nodes=1, start_time=NOW, end_time=NOW + timedelta(minutes=minutes), reason="None")


def node_body(name, placement, slurm=None, move=None, settled=None):
    ann = {ANN_PLACEMENT: placement}
    if slurm:
        ann[ANN_SLURM] = slurm
    if move:
        ann[ANN_MOVE] = move.to_annotation()
    if settled:
        ann[ANN_SETTLED] = settled
    return {"metadata": {"name": name, "labels": {"gpu": "true"}, "annotations": ann}, "spec": {}, "status": {}}


def pod_body(name, node, kind="ReplicaSet"):
    return {"metadata": {"namespace": "serve", "name": name, "uid": name, "ownerReferences": [{"kind": kind}]},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def world():
    jobs = (job("101", "n1", 50), job("102", "n2", 5), job("103", "n2", 7))
    view = SlurmView(True, nodes={f"n{i}": slurm_node(f"n{i}", "MIXED" if i in (1, 2) else "IDLE") for i in (1, 2, 3)}, jobs=jobs)
    view_inf = {"n4": slurm_node("n4", "IDLE", {"DRAIN", "NOT_RESPONDING"}, reason="slurmpool: moving to inference:default")}
    nodes = [
        node_body("n1", SLURM, slurm_annotation("n1", view), settled="2026-11-29T11:00:00Z"),
        node_body("n2", SLURM, slurm_annotation("n2", view)),
        node_body("n3", SLURM, slurm_annotation("n3", view)),
        node_body("n4", "inference:default", slurm_annotation("n4", SlurmView(True, nodes=view_inf))),
        node_body("n5", "inference:default", move=MoveRecord(id="abc", source="inference:default", target=SLURM, phase="Evicting",
                                                              since=NOW - timedelta(minutes=3), started=NOW)),
        {"metadata": {"name": "other", "labels": {}}, "spec": {}, "status": {}},
    ]
    pods = [pod_body("llm-1", "n4"), pod_body("llm-2", "n4"), pod_body("agent", "n4", kind="DaemonSet"), pod_body("llm-3", "n5")]
    pool = {"metadata": {"name": "gpu", "namespace": "ns"}, "spec": SPEC.model_dump(by_alias=True, exclude_none=True),
            "status": {"target": {"slurmNodes": 3, "source": "Schedule", "since": "2026-11-29T11:00:00Z", "window": "night",
                                  "reason": "window night open", "nextChange": "2026-11-30T05:00:00Z", "inference": {"default": 2}},
                       "slurm": {"ready": 3, "desired": 3}, "moving": 1,
                       "inference": {"ready": 1, "desired": 2, "pools": [{"name": "default", "ready": 1, "desired": 2, "moving": 1}]}}}
    return pool, cli_views.pool_nodes(SPEC, nodes, pods)


def test_published_annotation_round_trips_into_a_slurm_view():
    pool, nodes = world()
    view = slurm_view(nodes)
    assert [j.job_id for j in view.jobs_on("n2")] == ["102", "103"]
    assert view.nodes["n4"].drain_set and not view.nodes["n4"].responding
    assert view.jobs_on("n1")[0].end_time == NOW + timedelta(minutes=50)
    assert json.loads(slurm_annotation("n1", SlurmView(True, nodes={"n1": slurm_node("n1")}, jobs=(job("9", "n1", 1),))))["jobs"][0]["user"] == "alice"


def test_status_rows_name_side_phase_age_and_workload():
    pool, nodes = world()
    view = cli_views.status_view(pool, nodes, NOW)
    rows = {r["node"]: r for r in view["nodes"]}
    assert set(rows) == {"n1", "n2", "n3", "n4", "n5"}  # only the pool's nodes
    assert rows["n2"]["jobs"] == ["102", "103"] and rows["n2"]["slurmState"] == "MIXED"
    assert sorted(rows["n4"]["pods"]) == ["serve/agent", "serve/llm-1", "serve/llm-2"]
    assert rows["n5"]["phase"] == "Evicting" and rows["n5"]["to"] == SLURM and rows["n5"]["age"] == "3m"
    assert rows["n1"]["age"] == "60m" and rows["n3"]["age"] == "-"
    text = cli_render.render_status(view, 80)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "source Schedule" in text and "n5" in text and "Evicting>slurm" in text and "jobs 102,103" in text
    assert "drain*" in text
    assert "Inference pools (ready/desired): default 1/2 (count 2)" in text
    assert view["inference"]["pools"] == [{"name": "default", "ready": 1, "desired": 2, "moving": 1}]


@pytest.mark.parametrize("width", [80, 100, 120])
def test_every_line_fits(width):
    pool, nodes = world()
    many = [f"{1000 + i}" for i in range(200)]
    view = cli_views.status_view(pool, nodes, NOW)
    view["nodes"][0]["jobs"] = many
    for line in cli_render.render_status(view, width).splitlines():
        assert len(line) <= width
    plan = cli_plan.plan_view(SPEC, pool, nodes, NOW, cli_plan.Asked(1))
    for line in cli_render.render_plan(plan, width).splitlines():
        assert len(line) <= width


def test_plan_lists_the_nodes_and_what_they_disturb_and_changes_nothing():
    pool, nodes = world()
    before = [n.annotations.copy() for n in nodes]
    plan = cli_plan.plan_view(SPEC, pool, nodes, NOW, cli_plan.Asked(1))
    moves = [(m["node"], m["to"], m["jobs"]) for m in plan["moves"]]
    # n5's move to Slurm (still evicting) turns back; n3 idle first, then n2 (its jobs end sooner than n1's)
    assert moves == [("n3", "inference:default", []), ("n2", "inference:default", ["102", "103"]), ("n5", "inference:default", [])]
    assert plan["moves"][-1]["cause"] == "abort"
    assert plan["inFlight"][0]["node"] == "n5"
    grow = cli_plan.plan_view(SPEC, pool, nodes, NOW, cli_plan.Asked(5))
    assert [(m["node"], m["pods"]) for m in grow["moves"]] == [("n4", ["serve/llm-1", "serve/llm-2"])]
    assert [n.annotations for n in nodes] == before
    text = cli_render.render_plan(plan, 100)
    assert "jobs 102,103" in text and "dry run" in text


def test_plan_forecasts_when_each_leaving_node_is_free_by_its_jobs_time_limits():
    pool, nodes = world()
    plan = cli_plan.plan_view(SPEC, pool, nodes, NOW, cli_plan.Asked(0))
    free = {m["node"]: m["freeAt"] for m in plan["moves"] if m["from"] == "slurm" and m["cause"] != "abort"}
    assert free == {"n3": "2026-11-29T12:00:00Z", "n2": "2026-11-29T12:07:00Z", "n1": "2026-11-29T12:50:00Z"}  # idle: now; n2: its later job
    text = cli_render.render_plan(plan, 120)
    assert any(line.startswith("WAVE") and "FREE" in line for line in text.splitlines()) and " now " in text and "2026-11-29T12:07:00Z" in text


def test_plan_shows_the_planned_handover_from_the_status():
    pool, nodes = world()
    pool = {**pool, "status": {**(pool.get("status") or {}), "handover": {
        "reservation": "slurmpool-ns-gpu", "flags": ["MAINT", "IGNORE_JOBS"], "nodes": ["n2", "n3"], "start": "2026-11-29T12:30:00Z",
        "end": "2026-11-29T13:30:00Z", "state": "Reserved", "late": ["n2"], "message": ""}}}
    text = cli_render.render_plan(cli_plan.plan_view(SPEC, pool, nodes, NOW, cli_plan.Asked(1)), 200)
    assert "planned handover (Reserved): reservation slurmpool-ns-gpu (MAINT,IGNORE_JOBS) from 2026-11-29T12:30:00Z" in text
    assert "jobs on n2 have no time limit or end after the edge: drain.onTimeout decides" in text
    assert "planned handover" not in cli_render.render_plan(cli_plan.plan_view(SPEC, world()[0], nodes, NOW, cli_plan.Asked(1)), 200)


def test_a_paused_pool_is_planned_as_on_resume_every_wave():
    spec = make_spec(slurm_nodes=3, max_moves=1)
    paused = spec.model_copy(update={"paused": True})
    pool, nodes = world()
    nodes = [n for n in nodes if n.name != "n5"]
    plan = cli_plan.plan_view(paused, pool, nodes, NOW, cli_plan.Asked(0))
    assert plan["paused"] and plan["moves"] == cli_plan.plan_view(spec, pool, nodes, NOW, cli_plan.Asked(0))["moves"]
    assert [m["node"] for m in plan["moves"]] == ["n3", "n2", "n1"]
    assert "these moves start on `kubectl slurmpool resume`" in cli_render.render_plan(plan, 120)


def test_plan_in_waves_when_the_budget_is_small():
    spec = make_spec(slurm_nodes=3, max_moves=1)
    pool, nodes = world()
    nodes = [n for n in nodes if n.name != "n5"]
    plan = cli_plan.plan_view(spec, pool, nodes, NOW, cli_plan.Asked(0))
    assert [m["wave"] for m in plan["moves"]] == [1, 2, 3]
    assert [m["node"] for m in plan["moves"]] == ["n3", "n2", "n1"]


def test_clip():
    assert cli_render.clip([], 10) == "-"
    assert cli_render.clip(["1", "2", "3"], 10) == "1,2,3"
    assert cli_render.clip([str(i) for i in range(100, 120)], 12) == "100,101 +18"
    assert len(cli_render.clip(["a-very-long-pod-name-indeed"], 10)) <= 10


def test_sinfo_states():
    assert [cli_render.sinfo_state(s) for s in ("IDLE", "MIXED+DRAIN", "IDLE+DRAIN+NOT_RESPONDING", "ALLOCATED", None)] == [
        "idle", "drng", "drain*", "alloc", "-"]
    # power saving (issue 39): sinfo shows its one suffix instead of '*'
    assert [cli_render.sinfo_state(s) for s in ("IDLE+DRAIN+POWERED_DOWN", "IDLE+POWERED_DOWN", "IDLE+DRAIN+POWERING_DOWN",
                                                "MIXED+NOT_RESPONDING+POWERING_UP")] == ["drain~", "idle~", "drain%", "mix#"]


def test_move_rejects_unknown_sides(capsys):
    with pytest.raises(SystemExit):
        cli_main.main(["move", "n1", "--to", "kubernetes"])
    assert "--to must be slurm, inference or inference:POOL" in capsys.readouterr().err


def test_unhealthy_nodes_are_shown_and_never_planned():
    pool, nodes = world()
    pool["status"]["unhealthy"] = 1
    pool["status"]["slurm"]["unhealthy"] = 1
    pool["status"]["unhealthyNodes"] = [{"node": "n3", "side": "slurm", "kind": "DrainedByOthers",
                                         "reason": "drained in Slurm by others: admin: bad HBM", "since": "2026-11-29T11:00:00Z"}]
    view = cli_views.status_view(pool, nodes, NOW)
    row = next(r for r in view["nodes"] if r["node"] == "n3")
    assert row["unhealthy"] == "drained in Slurm by others: admin: bad HBM"
    text = cli_render.render_status(view, 120)
    assert "unhealthy: Slurm 1, inference 0" in text and "n3: drained in Slurm by others: admin: bad HBM" in text
    # n3 is idle, the cheapest victim when healthy; unhealthy, it is never chosen
    plan = cli_plan.plan_view(SPEC, pool, nodes, NOW, cli_plan.Asked(1))
    assert "n3" not in [m["node"] for m in plan["moves"]] and plan["unhealthy"] == ["n3"]
    assert "never moved (unhealthy" in cli_render.render_plan(plan, 120)
    pool["status"]["unhealthyNodes"] = []
    assert "n3" in [m["node"] for m in cli_plan.plan_view(SPEC, pool, nodes, NOW, cli_plan.Asked(1))["moves"]]


def test_nodes_others_reservations_hold_are_never_planned_out_of_slurm():
    """As the operator (issue 37 item 9): the plan reads status.reservedNodes."""
    pool, nodes = world()
    assert "n3" in [m["node"] for m in cli_plan.plan_view(SPEC, pool, nodes, NOW, cli_plan.Asked(1))["moves"]]
    pool["status"]["reservedNodes"] = [{"node": "n3", "reservation": "alice_7", "start": "2026-11-29T11:00:00Z"}]
    moves = cli_plan.plan_view(SPEC, pool, nodes, NOW, cli_plan.Asked(1))["moves"]
    assert moves and "n3" not in [m["node"] for m in moves]


def test_status_names_pending_jobs_demand_does_not_count():
    demand = {"pendingJobs": 1, "pendingJobGpus": 64, "unstartableJobs": ["job 9: asks for 12 nodes, the pool has 8"]}
    pool = {"metadata": {"name": "gpu", "namespace": "ns"}, "spec": {"slurmNodes": 5},
            "status": {"target": {"slurmNodes": 5, "source": "Manual", "since": "2026-12-02T20:00:00Z", "demand": demand}}}
    text = cli_render.render_status(cli_views.status_view(pool, [], NOW), 120)
    assert "demand: 1 pending job(s) (64 GPUs)" in text
    assert "not demand, no split starts it: job 9: asks for 12 nodes, the pool has 8" in text
# ---------------------------------------------------------------- reads, outputs, completion


def test_the_node_selector_becomes_the_apis_label_selector():
    from slurmpool.core.models import LabelSelector

    selector = LabelSelector.model_validate({
        "matchLabels": {"gpu": "true", "a": "b"},
        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["x", "y"]},
                             {"key": "bad", "operator": "NotIn", "values": ["1"]},
                             {"key": "ib", "operator": "Exists"}, {"key": "old", "operator": "DoesNotExist"}]})
    assert cli_api.label_selector_query(selector) == "a=b,gpu=true,zone in (x,y),bad notin (1),ib,!old"


class RecordingApi:
    """Answers as the apiserver would for the selector and field selectors asked, and records them."""

    def __init__(self, pool, nodes, pods):
        self._pool, self._nodes, self._pods, self.asked = pool, nodes, pods, []

    def pool(self, namespace, name):
        return self._pool

    def start_pods(self, read=cli_api.Api.VIEWS):
        self.asked.append(("start pods", read))

    def nodes(self, label_selector):
        self.asked.append(("nodes", label_selector))
        return [n for n in self._nodes if n["metadata"]["labels"].get("gpu") == "true"]

    def pods_on(self, names, read=cli_api.Api.VIEWS):
        from slurmpool.core.bodies import pod_view

        self.asked.append(("pods", sorted(names), read))
        views = [pod_view(p) for p in self._pods if p["spec"]["nodeName"] in names]
        return iter([(v.node, v.key) for v in views if not v.slurmd] if read == cli_api.Api.KEYS else views)


def test_status_asks_only_for_the_pools_nodes_and_their_pods():
    pool, _ = world()
    nodes = [node_body(f"n{i}", SLURM) for i in (1, 2)] + [{"metadata": {"name": "other", "labels": {}}}]
    pods = [pod_body("llm-1", "n1"), pod_body("elsewhere", "other")]
    api = RecordingApi(pool, nodes, pods)
    _, views, keys = cli_api.load_status(api, "ns", "gpu")
    selector = cli_api.label_selector_query(SPEC.node_selector)
    assert api.asked == [("start pods", "keys"), ("nodes", selector), ("pods", ["n1", "n2"], "keys")]
    assert [v.name for v in views] == ["n1", "n2"] and keys == {"n1": ["serve/llm-1"], "n2": []}
    # plan: the same reads, of views
    api.asked.clear()
    _, _, views = cli_api.load_pool(api, "ns", "gpu")
    assert api.asked == [("start pods", "views"), ("nodes", selector), ("pods", ["n1", "n2"], "views")]
    assert [p.name for p in views[0].pods] == ["llm-1"]
    assert cli_views.status_view(pool, views, NOW)["nodes"] == cli_views.status_view(pool, views, NOW, keys)["nodes"]


def test_wide_status_shows_since_and_move_and_every_pod():
    pool, nodes = world()
    view = cli_views.status_view(pool, nodes, NOW)
    wide = cli_render.render_status(view, 80, wide=True)
    header = next(line for line in wide.splitlines() if line.startswith("NODE"))
    assert header.split() == ["NODE", "SIDE", "PHASE", "AGE", "SLURM", "FLAGS", "SINCE", "MOVE", "WORKLOAD"]
    n5 = next(line for line in wide.splitlines() if line.startswith("n5"))
    assert "abc" in n5.split()
    assert "serve/llm-1,serve/llm-2" in wide
    assert "SINCE" not in cli_render.render_status(view, 80)


def test_yaml_output_is_the_json_view(capsys):
    import yaml

    pool, nodes = world()
    view = cli_views.status_view(pool, nodes, NOW)
    cli_main._emit(view, "table", "yaml")
    assert yaml.safe_load(capsys.readouterr().out) == json.loads(json.dumps(view, default=str))
    cli_main._emit(view, "table", "json", watching=True)  # --watch: one JSON document a line
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["pool"] == "gpu"


@pytest.mark.parametrize("words, expected", [
    ([""], list(cli_complete.COMMANDS)),
    (["st"], ["status"]),
    (["status", ""], ["gpu", "train"]),
    (["status", "-n", "ns", "g"], ["gpu"]),
    (["status", "gpu", ""], []),
    (["status", "gpu", "-o", ""], ["table", "wide", "json", "yaml"]),
    (["status", "gpu", "--w"], ["--watch"]),
    (["move", "gpu0"], ["gpu01", "gpu02"]),
    (["move", "gpu01", "--to", "inf"], ["inference", "inference:"]),
    (["plan", "-n", ""], []),
])
def test_completion(words, expected):
    asked = []

    def pools(namespace):
        asked.append(namespace)
        return ["gpu", "train"]

    assert cli_complete.complete(words, pools, lambda: ["gpu01", "gpu02", "cpu01"]) == expected
    if "-n" in words and expected:
        assert asked == ["ns"]


def test_completion_prints_kubectls_directive_last(capsys, monkeypatch):
    monkeypatch.setattr(cli_complete, "Api", None)  # no cluster needed for a subcommand
    assert cli_complete.complete_main(["pl"]) == 0
    assert capsys.readouterr().out.splitlines() == ["plan", ":4"]


# ---------------------------------------------------------------- reads: protobuf pages, raw requests, pages ahead


def test_pods_read_in_protobuf_are_the_pods_on_each_node():
    pods = page([("serve", "llm-1", "n4"), ("serve", "llm-2", "n4"), ("slurm", "slurmd-n1", "n1"), ("serve", "pending", ""),
                 ("serve", "elsewhere", "cpu01")])
    views, _ = cli_pages.pod_page(pods)
    nodes = cli_views.with_pods(cli_views.pool_node_views(SPEC, [node_body("n1", SLURM), node_body("n4", "inference:default")]), views)
    n1, n4 = nodes
    assert [p.key for p in n4.pods] == ["serve/llm-1", "serve/llm-2"] and [p.key for p in n1.pods] == ["slurm/slurmd-n1"]
    rows = cli_views.node_rows(nodes, NOW)
    assert rows[1]["pods"] == ["serve/llm-1", "serve/llm-2"]


def test_a_server_that_answers_json_is_read_as_whole_pods():
    body = {"metadata": {"name": "llm", "namespace": "serve", "uid": "u"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    data = json.dumps({"kind": "PodList", "metadata": {"continue": "x"}, "items": [body]}, separators=(",", ":")).encode()
    views, token = cli_pages.pod_page(data)
    assert [(v.key, v.node, v.phase) for v in views] == [("serve/llm", "n1", "Running")] and token == "x"
    assert cli_pages.pod_page_head(data) == "x"


class PagedCalls:
    """A list call answering in pages linked by `continue`, recording each call's arguments."""

    def __init__(self, pages):
        self.pages, self.calls = pages, []

    def __call__(self, **kwargs):
        from types import SimpleNamespace

        self.calls.append(kwargs)
        index = int(kwargs["_continue"] or 0)
        token = str(index + 1) if index + 1 < len(self.pages) else None
        if isinstance(self.pages[index], list):  # pods: (namespace, name, node), in protobuf
            return SimpleNamespace(data=page(self.pages[index], token))
        # As the apiserver writes a list: its metadata (and `continue`) ahead of its items.
        answer = {"kind": "List", "metadata": {"continue": token} if token else {}, **self.pages[index]}
        return SimpleNamespace(data=json.dumps(answer, separators=(",", ":")).encode())


class StreamedList:
    """list_pod_for_all_namespaces answering `_stream=True` with the whole list in one answer (as
    urllib3's response: headers, read(amt), close), in `content_type`; else in pages (PagedCalls)."""

    def __init__(self, rows, content_type=None):
        from slurmpool.cli import podproto

        self.rows, self.calls, self.closed = rows, [], 0
        self.content_type = content_type or podproto.PROTOBUF
        self.paged = PagedCalls([rows[i:i + 120] for i in range(0, len(rows), 120)])

    def __call__(self, **kwargs):
        import io
        from types import SimpleNamespace

        self.calls.append(kwargs)
        if not kwargs.get("_stream"):
            return self.paged(**kwargs)
        body = io.BytesIO(page(self.rows))
        return SimpleNamespace(headers={"Content-Type": self.content_type}, read=body.read, close=self._close)

    def _close(self):
        self.closed += 1


def test_large_pools_read_the_pods_not_ended_in_one_answer_as_it_comes_and_keep_those_on_their_nodes():
    from types import SimpleNamespace

    from slurmpool.cli import podproto

    rows = [("serve", f"llm-{i}", f"n{i % 100}") for i in range(4500)]  # more than a batch (POD_PAGE)
    pods = StreamedList(rows)
    api = object.__new__(cli_api.Api)
    api.core = SimpleNamespace(list_pod_for_all_namespaces=pods)
    names = {f"n{i}" for i in range(70)}  # more than PODS_BY_NODE_UP_TO: one list of the whole cluster's pods
    got = list(api.pods_on(names))
    assert sorted(p.name for p in got) == sorted(name for _, name, node in rows if node in names)
    assert {(p.namespace, p.node in names) for p in got} == {("serve", True)}
    assert len(pods.calls) == 1 and pods.calls[0]["_stream"] and pods.closed == 1  # one request, not in pages
    assert pods.calls[0]["field_selector"] == cli_api.Api.RUNNING and pods.calls[0]["_headers"]["Accept"] == podproto.ACCEPT
    # status: each pod's node and key, the same pods
    keys = list(api.pods_on(names, cli_api.Api.KEYS))
    assert sorted(keys) == sorted((p.node, p.key) for p in got)


def test_a_server_that_answers_the_whole_list_in_json_is_read_in_pages_instead():
    from types import SimpleNamespace

    rows = [("serve", f"llm-{i}", f"n{i % 100}") for i in range(300)]
    pods = StreamedList(rows, content_type="application/json")
    api = object.__new__(cli_api.Api)
    api.core = SimpleNamespace(list_pod_for_all_namespaces=pods)
    names = {f"n{i}" for i in range(70)}
    got = list(api.pods_on(names))
    assert sorted(p.name for p in got) == sorted(name for _, name, node in rows if node in names)
    assert pods.closed == 1 and [c.get("_continue") for c in pods.calls[1:]] == [None, "1", "2"]


def test_the_next_page_is_asked_for_by_the_continue_read_from_the_answers_head():
    assert cli_pages.list_continue(b'{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7","continue":"eyJ2"},'
                             b'"rows":[{"object":{"metadata":{"continue":"no"}}}]}') == "eyJ2"
    assert cli_pages.list_continue(b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}') is None
    for head in (b'{"kind":"Table","rows":[' + b" " * 300 + b'],"metadata":{"continue":"x"}}', b'{"kind":"Table","metadata":{"continue":"x'):
        with pytest.raises(ValueError):
            cli_pages.list_continue(head)
    # An answer written otherwise (metadata last) is parsed before the next page is asked for: same pages.
    items = [{"metadata": {"name": f"n{i}"}} for i in range(5)]
    pages = [{"items": items[i:i + 2]} for i in range(0, 5, 2)]

    direct, reordered = PagedCalls(pages), PagedCalls(pages)

    def metadata_last(**kwargs):
        from types import SimpleNamespace

        answer = json.loads(reordered(**kwargs).data)
        return SimpleNamespace(data=json.dumps({**{k: v for k, v in answer.items() if k != "metadata"}, "metadata": answer["metadata"]}).encode())

    api = object.__new__(cli_api.Api)
    for call in (direct, metadata_last):
        got = [[item["metadata"]["name"] for item in items] for items in api._pages(call, 2)]
        assert got == [["n0", "n1"], ["n2", "n3"], ["n4"]]
    assert [c["_continue"] for c in direct.calls] == [c["_continue"] for c in reordered.calls] == [None, "1", "2"]


def test_ahead_keeps_order_raises_the_threads_error_and_stops_with_its_consumer():
    import threading

    assert list(cli_pages.ahead(iter(range(50)))) == list(range(50))

    def failing():
        yield 1
        raise RuntimeError("apiserver went away")

    with pytest.raises(RuntimeError, match="went away"):
        list(cli_pages.ahead(failing()))
    made = []

    def endless():
        while True:
            made.append(len(made))
            yield made[-1]

    items = cli_pages.ahead(endless())
    assert next(items) == 0
    items.close()  # the consumer stops: the thread ends rather than making items for good
    for thread in [t for t in threading.enumerate() if t.name == "slurmpool-pages"]:
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert len(made) <= 3  # at most the one handed over, the one waiting and the one being made
    # Pages read in one thread and parsed in another: closing the pages stops both threads.
    made.clear()

    def endless_list(**kwargs):
        from types import SimpleNamespace

        made.append(kwargs["_continue"])
        return SimpleNamespace(data=json.dumps({"kind": "PodList", "metadata": {"continue": str(len(made))}, "items": []}).encode())

    pages = object.__new__(cli_api.Api)._pages(endless_list, 10)
    assert next(pages) == [] and made[0] is None
    pages.close()
    for thread in [t for t in threading.enumerate() if t.name == "slurmpool-pages"]:
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert len(made) <= 6


class Answer:
    """As kubernetes.client.rest.RESTResponse: `data` is set by `read()`."""

    def __init__(self, status, body):
        self.status, self.reason, self.headers, self._body, self.data = status, "Forbidden" if status == 403 else "OK", {}, body, None

    def read(self):
        self.data = self._body
        return self.data

    def getheaders(self):
        return self.headers


def core_calls(status=200, answer=None):
    """CoreCalls on a real ApiClient (token auth) whose HTTP call is recorded and answered."""
    from types import SimpleNamespace

    from kubernetes import client

    config = client.Configuration(host="https://apiserver.test:6443", api_key={"authorization": "Bearer t0ken"})
    api = client.ApiClient(config)
    sent = []

    def call_api(method, url, headers, body, post_params, _request_timeout=None):
        sent.append(SimpleNamespace(method=method, url=url, headers=headers, body=body, timeout=_request_timeout))
        return Answer(status, json.dumps(answer or {"kind": "List", "items": []}).encode())

    api.call_api = call_api
    return cli_api.CoreCalls(api), sent


def test_core_calls_send_what_the_client_methods_would():
    from urllib.parse import parse_qsl, urlsplit

    from slurmpool.cli import podproto

    core, sent = core_calls()
    core.list_pod_for_all_namespaces(limit=2000, _continue="tok", field_selector=cli_api.Api.RUNNING, _preload_content=False,
                                     _request_timeout=(30, 120), _headers={"Accept": podproto.ACCEPT})
    core.list_node(limit=500, _continue=None, label_selector="gpu=true,zone in (a,b)", _preload_content=False)
    core.patch_node("gpu 01", {"metadata": {"annotations": {"slurmpool.io/move-now": "slurm"}}})
    pods, nodes, patch = sent
    url = urlsplit(pods.url)
    assert (pods.method, url.netloc, url.path) == ("GET", "apiserver.test:6443", "/api/v1/pods")
    assert dict(parse_qsl(url.query)) == {"limit": "2000", "continue": "tok", "fieldSelector": cli_api.Api.RUNNING}
    assert pods.headers["Accept"] == podproto.ACCEPT and pods.headers["authorization"] == "Bearer t0ken"
    assert pods.timeout == (30, 120)
    assert dict(parse_qsl(urlsplit(nodes.url).query)) == {"limit": "500", "labelSelector": "gpu=true,zone in (a,b)"}
    assert nodes.headers["Accept"] == "application/json"
    assert (patch.method, urlsplit(patch.url).path) == ("PATCH", "/api/v1/nodes/gpu%2001")
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert patch.body == {"metadata": {"annotations": {"slurmpool.io/move-now": "slurm"}}}


def test_core_calls_answer_as_the_client_does_and_raise_its_exception_on_refusal():
    from kubernetes.client.rest import ApiException

    core, _ = core_calls(answer={"metadata": {"name": "n1", "annotations": {"slurmpool.io/pool": "gpu"}}})
    assert core.patch_node("n1", {"metadata": {}})["metadata"]["annotations"] == {"slurmpool.io/pool": "gpu"}
    assert json.loads(core.list_node(_preload_content=False).data)["metadata"]["name"] == "n1"
    refused = {"kind": "Status", "message": 'nodes is forbidden: User "oncall" cannot list resource "nodes"', "code": 403}
    core, _ = core_calls(status=403, answer=refused)
    with pytest.raises(ApiException) as caught:
        core.list_node(limit=1, _preload_content=False)
    assert caught.value.status == 403 and json.loads(caught.value.body)["message"] == refused["message"]


def test_the_plugin_imports_neither_kopf_nor_asyncssh_nor_the_clients_core_models(tmp_path):
    """What makes `kubectl slurmpool` start fast and small (make bench's plugin figures)."""
    import subprocess
    import sys

    import yaml

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "me"}}]}))
    code = (f"import sys; from slurmpool.cli import main; main.Api({str(kubeconfig)!r}, None); "
            "print(sorted(m for m in ('kopf', 'asyncssh', 'kubernetes.client.api.core_v1_api', 'kubernetes.client.models.v1_pod') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------- plan --at, forecasts of moves in flight


@pytest.mark.parametrize("text, expected", [
    ("+2h", NOW + timedelta(hours=2)),
    ("+1h30m", NOW + timedelta(minutes=90)),
    ("+1d", NOW + timedelta(days=1)),
    ("+45s", NOW + timedelta(seconds=45)),
    ("2026-11-29T13:00:00Z", NOW + timedelta(hours=1)),
    ("2026-11-29T14:00:00+01:00", NOW + timedelta(hours=1)),
])
def test_plan_at_takes_an_rfc3339_time_or_an_offset_from_now(text, expected):
    assert cli_main.parse_at(text, NOW) == expected


@pytest.mark.parametrize("text, why", [
    ("+2x", "an offset is"),
    ("+", "an offset is"),
    ("tomorrow", "RFC 3339"),
    ("2026-11-29T13:00:00", "RFC 3339"),  # no offset: which time zone is meant is not guessed
    ("2026-11-29T11:00:00Z", "not in the future"),
    ("+0h", "not in the future"),
])
def test_plan_at_refuses_what_is_not_a_future_time_with_the_reason(text, why):
    with pytest.raises(ValueError, match=why):
        cli_main.parse_at(text, NOW)


def test_a_bad_plan_at_is_a_usage_error_before_anything_is_read(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["plan", "gpu", "--at", "yesterday"])
    assert exit_.value.code == 2 and "--at 'yesterday'" in capsys.readouterr().err


def scheduled(window: dict):
    """world()'s pool with one schedule window (n1 busy 50 min, n2 until +7 min, n3 idle: 3 in Slurm)."""
    body = SPEC.model_dump(by_alias=True, exclude_none=True)
    body["schedule"] = [{"duration": "1h", **window}]
    spec = type(SPEC).model_validate(body)
    pool, nodes = world()
    pool["spec"] = body
    return spec, pool, nodes


def test_plan_at_an_edge_plans_the_schedules_count_then_and_the_handover_it_gets():
    spec, pool, nodes = scheduled({"name": "day", "cron": "30 12 * * *", "slurmNodes": 1})
    plan = cli_plan.plan_view(spec, pool, nodes, NOW, cli_plan.Asked(None, NOW + timedelta(minutes=30)))
    assert plan["slurmNodes"] == 1 and plan["at"] == "2026-11-29T12:30:00Z"
    h = plan["handover"]
    assert h["reservation"].startswith("slurmpool-ns.gpu-") and h["flags"] == ["MAINT", "IGNORE_JOBS"] and h["state"] == "Forecast"
    assert h["nodes"] == ["n3", "n2"] and h["start"] == "2026-11-29T12:30:00Z" and h["end"] == "2026-11-29T13:30:00Z"
    assert h["forecast"] == {"n3": "2026-11-29T12:00:00Z", "n2": "2026-11-29T12:07:00Z"} and h["late"] == []
    assert [m["node"] for m in plan["moves"] if m["cause"] != "abort"] == ["n3", "n2"]  # n5, moving into Slurm, is turned back
    text = cli_render.render_plan(plan, 300)
    assert "Plan for ns/gpu at 2026-11-29T12:30:00Z: 1 Slurm node(s)" in text
    assert f"reservation {h['reservation']} (MAINT,IGNORE_JOBS) from 2026-11-29T12:30:00Z" in text
    assert "free by their jobs' time limits: n3 now, n2 2026-11-29T12:07:00Z" in text
    # before the window, the spec's count holds: nothing leaves, no handover
    quiet = cli_plan.plan_view(spec, pool, nodes, NOW, cli_plan.Asked(None, NOW + timedelta(minutes=10)))
    assert quiet["slurmNodes"] == 3 and quiet["handover"] is None and not [m for m in quiet["moves"] if m["cause"] != "abort"]


def test_plan_at_names_the_nodes_whose_jobs_outlast_the_edge():
    spec, pool, nodes = scheduled({"name": "day", "cron": "30 12 * * *", "slurmNodes": 0})
    h = cli_plan.plan_view(spec, pool, nodes, NOW, cli_plan.Asked(None, NOW + timedelta(minutes=30)))["handover"]
    assert h["late"] == ["n1"] and h["forecast"]["n1"] == "2026-11-29T12:50:00Z"
    assert "jobs on n1 have no time limit or end after the edge" in "\n".join(cli_render.handover_lines(h))


def test_plan_at_says_when_each_late_job_is_warned_to_checkpoint():
    spec, pool, nodes = scheduled({"name": "day", "cron": "30 12 * * *", "slurmNodes": 0})
    body = {**spec.model_dump(by_alias=True, exclude_none=True), "drain": {"onTimeout": "Checkpoint", "checkpoint": {"grace": "10m"}}}
    h = cli_plan.plan_view(type(SPEC).model_validate(body), pool, nodes, NOW, cli_plan.Asked(None, NOW + timedelta(minutes=30)))["handover"]
    assert [(c["nodes"], c["at"], c["signal"], c["signalled"]) for c in h["checkpoints"]] == [(["n1"], "2026-11-29T12:20:00Z", "USR1", None)]
    assert any(line.endswith("checkpoint at 2026-11-29T12:20:00Z (USR1)") and "on n1" in line for line in cli_render.handover_lines(h))
    assert cli_plan.plan_view(spec, pool, nodes, NOW, cli_plan.Asked(None, NOW + timedelta(minutes=30)))["handover"]["checkpoints"] == []


def test_the_status_handover_shows_checkpoint_at_with_the_time_the_signal_went():
    h = {"reservation": "slurmpool-ns-gpu", "nodes": ["n1"], "start": "2026-11-29T12:30:00Z", "state": "Reserved", "checkpoints": [
        {"job": "7", "nodes": ["n1"], "at": "2026-11-29T12:25:00Z", "signal": "USR1", "signalled": "2026-11-29T12:25:04Z"}]}
    assert "    job 7 on n1: checkpoint at 2026-11-29T12:25:00Z (USR1, sent 2026-11-29T12:25:04Z)" in cli_render.handover_lines(h)


def test_a_one_off_window_plans_the_same_handover_as_a_recurring_one():
    at = NOW + timedelta(minutes=30)
    recurring = cli_plan.plan_view(*scheduled({"name": "day", "cron": "30 12 * * *", "slurmNodes": 1}), NOW, cli_plan.Asked(None, at))
    one_off = cli_plan.plan_view(*scheduled({"name": "once", "at": "2026-11-29T13:30:00+01:00", "slurmNodes": 1}), NOW, cli_plan.Asked(None, at))
    assert one_off["handover"] == recurring["handover"] and one_off["slurmNodes"] == 1


def test_status_forecasts_when_each_node_draining_out_of_slurm_will_be_free():
    pool, nodes = world()
    draining = MoveRecord(id="d1", source=SLURM, target="inference:default", phase="Draining", since=NOW, started=NOW)
    nodes = [cli_views.pool_node_views(SPEC, [node_body(n.name, SLURM, n.annotations.get(ANN_SLURM), move=draining)])[0]
             if n.name in ("n2", "n3") else n for n in nodes]
    view = cli_views.status_view(pool, nodes, NOW)
    rows = {r["node"]: r for r in view["nodes"]}
    assert rows["n2"]["freeAt"] == "2026-11-29T12:07:00Z" and rows["n3"]["freeAt"] == "2026-11-29T12:00:00Z"
    assert "freeAt" not in rows["n1"] and "freeAt" not in rows["n5"]  # settled, or moving into Slurm
    text = cli_render.render_status(view, 200)
    assert "Draining out of Slurm, free by their jobs' time limits:" in text
    assert "  n2: free at 2026-11-29T12:07:00Z" in text and "  n3: free now" in text


def test_a_draining_node_with_a_job_without_a_time_limit_has_no_forecast():
    unlimited = SlurmJob(job_id="7", name="x", user="u", state="RUNNING", partition="gpu", nodes=("n1",), gpus_per_node=8,
                         num_nodes=1, start_time=NOW, end_time=None, reason="None")
    published = slurm_annotation("n1", SlurmView(True, nodes={"n1": slurm_node("n1", "MIXED")}, jobs=(unlimited,)))
    draining = MoveRecord(id="d1", source=SLURM, target="inference:default", phase="Draining", since=NOW, started=NOW)
    nodes = cli_views.pool_node_views(SPEC, [node_body("n1", SLURM, published, move=draining)])
    assert cli_views.draining_forecast(nodes, NOW) == {"n1": None}
    view = cli_views.status_view(world()[0], nodes, NOW)
    assert "n1: a job has no time limit: drain.onTimeout decides" in cli_render.render_status(view, 200)


def test_a_reader_gone_is_no_error(monkeypatch, capsys):
    """`kubectl slurmpool ... | head`: the pipe closes before the output is written."""

    class FakeApi:
        def __init__(self, *_):
            pass

        @staticmethod
        def default_namespace(*_):
            return "ns"

        def patch_node(self, name, body, dry_run=False):
            return {"metadata": {"annotations": {"slurmpool.io/pool": "gpu"}}}

    class ClosedPipe:
        def write(self, _):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli_main, "Api", FakeApi)
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert cli_main.main(["move", "n1", "--to", "slurm"]) == 0
    assert capsys.readouterr().err == ""


def test_plan_asks_for_whole_pods_only_where_a_move_between_inference_pools_needs_them():
    """`plan` reads pods without their spec (so no needs); what a pod needs of a
    node is read, node by node, only for a move between inference pools (which evicts the misfits):
    the same plan as from whole pods, and no other node's pods asked for."""
    spec = make_spec(slurm_nodes=1, max_moves=8, pools=[("llm", 10, 0, None), ("batch", 0, 0, None)])
    fits_llm = {"nodeSelector": {"pool": "llm"}, "tolerations": [{"key": "inference", "operator": "Exists"}]}
    anywhere = {"tolerations": [{"operator": "Exists"}]}
    pods = [{**pod_body(f"{kind}-{node}", node), "spec": {"nodeName": node, **needs}}
            for node in ("n2", "n3", "n4") for kind, needs in (("llm", fits_llm), ("any", anywhere))]
    bodies = [node_body("n1", SLURM), *(node_body(n, "inference:llm") for n in ("n2", "n3", "n4"))]
    pool = {"metadata": {"name": "gpu", "namespace": "ns"}, "spec": spec.model_dump(by_alias=True, exclude_none=True),
            "status": {"target": {"slurmNodes": 2, "inference": {"llm": 1, "batch": 1}}}}
    whole = cli_views.pool_nodes(spec, bodies, pods)
    rows = [replace(n, pods=tuple(replace(p, needs=PodView("", "", "").needs) for p in n.pods)) for n in whole]
    asked = []

    def pods_of(name):
        asked.append(name)
        return next(n for n in whole if n.name == name).pods

    expected = cli_plan.plan_view(spec, pool, whole, NOW)
    got = cli_plan.plan_view(spec, pool, rows, NOW, pods_of=pods_of)
    assert got == expected
    between = [m for m in got["moves"] if m["from"].startswith("inference:") and m["to"].startswith("inference:")]
    assert [(m["to"], m["pods"]) for m in between] == [("inference:batch", [f"serve/llm-{between[0]['node']}"])]
    assert asked == [between[0]["node"]]  # the node moving to Slurm evicts every evictable pod: no spec needed
    to_slurm = [m for m in got["moves"] if m["to"] == SLURM]
    assert [len(m["pods"]) for m in to_slurm] == [2]
    assert cli_plan.plan_view(spec, pool, rows, NOW)["moves"] != expected  # without them: no toleration read, every pod a misfit


def test_no_module_of_the_plugin_is_over_400_lines():
    from pathlib import Path

    here = Path(cli_main.__file__).parent
    long = {p.name: n for p in here.glob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"split these modules of cli/ by concern (at most 400 lines): {long}"


@pytest.mark.parametrize("text", ["+99999999d", "+" + "9" * 31 + "s", "9999-12-31T23:00:00Z", "0001-01-01T00:00:00+01:00", "+999999d999999h"])
def test_plan_at_far_out_of_range_is_a_clear_error_not_a_traceback(text, capsys):
    """Issue 37 item 6: `plan --at +99999999d` printed an OverflowError traceback."""
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["plan", "gpu", "--at", text])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--at" in err and "Traceback" not in err
