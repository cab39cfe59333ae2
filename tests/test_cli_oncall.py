"""issue 38's plugin: cluster flags anywhere, --dry-run=server, examples in every --help, exit 3
for a plan that cannot be made, `history`."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, urlsplit

import pytest

from slurmpool.cli import main as cli_main
from slurmpool.cli import render as cli_render
from slurmpool.cli import views as cli_views

from .test_cli import core_calls


class FakeApi:
    """Records how it was made and what it was asked to write."""

    made: list[tuple] = []
    writes: list[tuple] = []
    pool_body: dict = {}

    def __init__(self, kubeconfig, context):
        FakeApi.made.append((kubeconfig, context))

    @staticmethod
    def default_namespace(kubeconfig, context):
        return "from-context"

    def patch_pool(self, namespace, name, patch, dry_run=False):
        FakeApi.writes.append(("pool", namespace, name, patch, dry_run))

    def patch_node(self, name, patch, dry_run=False):
        FakeApi.writes.append(("node", name, patch, dry_run))
        return {"metadata": {"annotations": {}}}

    def pool(self, namespace, name):
        return FakeApi.pool_body

    def whole_pods_on(self, node):
        return []


@pytest.fixture
def fake(monkeypatch):
    FakeApi.made, FakeApi.writes = [], []
    monkeypatch.setattr(cli_main, "Api", FakeApi)
    return FakeApi


@pytest.mark.parametrize("argv", [
    ["--context", "prod", "--kubeconfig", "/k", "-n", "hpc", "pause", "gpu"],
    ["pause", "gpu", "--context", "prod", "--kubeconfig", "/k", "-n", "hpc"],
    ["--kubeconfig", "/k", "pause", "--context", "prod", "gpu", "-n", "hpc"],
])
def test_cluster_flags_go_anywhere_on_the_line(fake, argv, capsys):
    assert cli_main.main(argv) == 0
    assert fake.made == [("/k", "prod")] and fake.writes == [("pool", "hpc", "gpu", {"spec": {"paused": True}}, False)]


def test_without_cluster_flags_the_contexts_namespace(fake, capsys):
    assert cli_main.main(["resume", "gpu"]) == 0
    assert fake.made == [(None, None)] and fake.writes[0][1] == "from-context"


def test_dry_run_server_is_passed_on_and_said(fake, capsys):
    assert cli_main.main(["move", "gpu07", "--to", "slurm", "--dry-run=server"]) == 0
    assert fake.writes == [("node", "gpu07", {"metadata": {"annotations": {"slurmpool.io/move-now": "slurm"}}}, True)]
    assert "server dry run" in capsys.readouterr().out
    assert cli_main.main(["pause", "gpu", "--dry-run", "server", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["dryRun"] is True and fake.writes[-1][-1] is True
    with pytest.raises(SystemExit):
        cli_main.main(["pause", "gpu", "--dry-run=client"])  # not offered: it would check nothing


def test_a_dry_run_asks_the_api_server_with_dry_run_all_and_the_plugins_field_manager():
    core, sent = core_calls()
    core.patch_node("gpu07", {"metadata": {}}, field_manager="kubectl-slurmpool", dry_run="All")
    assert dict(parse_qsl(urlsplit(sent[0].url).query)) == {"dryRun": "All", "fieldManager": "kubectl-slurmpool"}


@pytest.mark.parametrize("command", [None, "status", "plan", "history", "move", "pause", "resume"])
def test_every_help_has_examples(command, capsys):
    with pytest.raises(SystemExit):
        cli_main.main([command, "--help"] if command else ["--help"])
    out = capsys.readouterr().out
    assert "examples:\n  kubectl slurmpool " + (command or "") in out


def test_a_plan_that_cannot_be_made_exits_3(monkeypatch, fake, capsys):
    from slurmpool.cli import plan as cli_plan

    monkeypatch.setattr(cli_main, "load_pool", lambda api, ns, name: ({}, None, []))
    for problems, code in (([], 0), (["minSlurmNodes 3 cannot hold with 2 nodes"], cli_main.EXIT_UNPLANNABLE)):
        monkeypatch.setattr(cli_plan, "plan_view", lambda *a, problems=problems, **k: {"problems": problems})
        monkeypatch.setattr(cli_main, "render_plan", lambda view, total: "plan")
        assert cli_main.main(["plan", "gpu"]) == code
    assert cli_main.EXIT_UNPLANNABLE not in (0, 1, 2)


POOL = {
    "metadata": {"name": "gpu", "namespace": "hpc"},
    "spec": {"mode": "Shadow"},
    "status": {
        "recentMoves": [
            {"node": "gpu02", "moveId": "b2", "from": "inference:llm", "to": "slurm", "cause": "move-now", "by": "kubectl-slurmpool",
             "started": "2026-11-29T11:50:00Z", "ended": "2026-11-29T12:00:00Z", "outcome": "Completed"},
            {"node": "gpu01", "moveId": "a1", "from": "slurm", "to": "inference:llm", "cause": "rebalance", "by": "Manual (kubectl (update))",
             "started": "2026-11-29T10:00:00Z", "ended": "2026-11-29T11:30:05Z", "outcome": "RolledBack"},
            {"node": "gpu03", "moveId": "c3", "from": "slurm", "to": "inference:llm", "cause": "rebalance", "by": "Schedule",
             "started": "2026-11-29T09:00:00Z", "ended": "2026-11-29T09:20:00Z", "outcome": "Completed", "jobsUnnamed": 2,
             "jobs": [{"how": "requeued", "count": 12, "ids": [str(100 + i) for i in range(10)]},
                      {"how": "signalled", "count": 1, "ids": []}, {"how": "drained", "count": 1, "ids": []}]},
        ],
        "shadow": {"wouldStart": ["gpu03: slurm -> inference:llm (rebalance, asked by Schedule)"], "wouldDo": [],
                   "since": "2026-11-29T11:00:00Z"},
    },
}


def test_history_lists_the_moves_newest_first_with_who_asked_and_what_shadow_would_do(fake, capsys):
    view = cli_views.history_view(POOL)
    assert [m["seconds"] for m in view["moves"]] == [600, 5405, 1200]
    text = cli_render.render_history(view, 200)
    lines = text.splitlines()
    assert lines[0] == "SlurmNodePool hpc/gpu (mode Shadow)" and lines[1].split()[:4] == ["ENDED", "NODE", "MOVE", "OUTCOME"]
    assert "gpu02" in lines[2] and "kubectl-slurmpool" in lines[2] and "10m00s" in lines[2]
    assert "gpu01" in lines[3] and "RolledBack" in lines[3] and "1h30m" in lines[3] and "Manual (kubectl (update))" in lines[3]
    assert "would now" in text and "start gpu03: slurm -> inference:llm" in text
    fake.pool_body = POOL
    assert cli_main.main(["history", "gpu", "-n", "hpc", "-o", "json"]) == 0
    assert [m["moveId"] for m in json.loads(capsys.readouterr().out)["moves"]] == ["b2", "a1", "c3"]


def test_history_of_a_pool_without_moves_says_so():
    text = cli_render.render_history(cli_views.history_view({"metadata": {"name": "gpu", "namespace": "hpc"}}))
    assert "No move has ended" in text and "would" not in text


def test_history_shows_each_moves_jobs_as_counts_and_their_ids_wide(fake, capsys):
    view = cli_views.history_view(POOL)
    lines = cli_render.render_history(view, 200).splitlines()
    header = lines[1]
    jobs_at = header.index("JOBS")
    assert lines[2][jobs_at:].split()[0] == "-" and lines[4][jobs_at:].split()[0] == "r12,s1,d1,+2"
    assert "JOBS of the drain: r requeued, c cancelled, s signalled to checkpoint, d drained" in "\n".join(lines)
    wide = cli_render.render_history(view, 80, wide=True).splitlines()
    assert wide[1].endswith("JOB IDS") and wide[4].endswith("requeued 100,101,102,103,104,105,106,107,108,109 +2; signalled +1; drained +1")
    assert wide[2].endswith("-")
    FakeApi.pool_body = POOL
    assert cli_main.main(["history", "gpu", "-o", "json"]) == 0
    [moved] = [m for m in json.loads(capsys.readouterr().out)["moves"] if m["moveId"] == "c3"]
    assert moved["jobs"][0] == {"how": "requeued", "count": 12, "ids": [str(100 + i) for i in range(10)]} and moved["jobsUnnamed"] == 2
    assert cli_main.main(["history", "gpu", "-o", "wide"]) == 0
    assert "requeued 100,101" in capsys.readouterr().out
