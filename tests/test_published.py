"""The core's one copy of what the plugin used to re-implement: the Slurm-state annotation
(core/published.py: encoder and decoder), the drain forecast (core/forecast.py) and the wave loop
(core/waves.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmbridge import SlurmJob
from slurmpool.core.forecast import draining_out_of_slurm, forecast, free_at
from slurmpool.core.phases import Phase
from slurmpool.core.planner import Goal, Plan, Start
from slurmpool.core.published import JOB_NAME_CHARS, MAX_JOBS_PUBLISHED, changed_annotations, published, slurm_annotation, slurm_view
from slurmpool.core.view import ANN_MOVE, ANN_MOVE_NOW, ANN_PLACEMENT, ANN_SLURM, SLURM, MoveRecord, NodeView, PodView, SlurmView, iso
from slurmpool.core.waves import PoolView, every_move_done, starts_done, waves

from .factories import NOW, make_spec, slurm_node

WORDS = st.text("abcXYZ-_ 09", max_size=50)
ENDS = st.one_of(st.none(), st.integers(-600, 600).map(lambda m: NOW + timedelta(minutes=m)))


def a_job(job_id: str, node: str, end: datetime | None, name: str = "train", user: str = "u", state: str = "RUNNING") -> SlurmJob:
    return SlurmJob(job_id=job_id, name=name, user=user, state=state, partition="gpu", nodes=(node,), gpus_per_node=8,
                    num_nodes=1, start_time=NOW, end_time=end, reason="None")


JOBS = st.lists(st.tuples(WORDS, WORDS, st.sampled_from(["RUNNING", "COMPLETING", "SUSPENDED"]), ENDS), max_size=MAX_JOBS_PUBLISHED)


@settings(max_examples=200, deadline=None)
@given(state=st.sampled_from(["IDLE", "MIXED", "ALLOCATED", "DOWN"]), flags=st.sets(st.sampled_from(["DRAIN", "NOT_RESPONDING", "COMPLETING"])),
       reason=st.one_of(st.none(), WORDS.filter(bool)), jobs=JOBS)
def test_decoding_the_annotation_gives_back_what_was_encoded(state, flags, reason, jobs):
    made = tuple(a_job(f"{i:03d}", "n1", end, name, user, job_state) for i, (name, user, job_state, end) in enumerate(jobs))
    slurm = SlurmView(True, nodes={"n1": slurm_node("n1", state, flags, reason)}, jobs=made)
    node = NodeView("n1", annotations={ANN_SLURM: slurm_annotation("n1", slurm)})
    back = slurm_view([node])
    sn = back.nodes["n1"]
    assert (sn.state, sn.flags, sn.reason) == (state, frozenset(flags), reason)
    assert [(j.job_id, j.name, j.user, j.state, j.end_time, j.nodes) for j in back.jobs] == [
        (j.job_id, j.name[:JOB_NAME_CHARS], j.user, j.state, j.end_time, ("n1",)) for j in made]
    # Encoding what was decoded writes the same annotation: the operator and the plugin agree.
    assert slurm_annotation("n1", back) == node.annotations[ANN_SLURM]


def test_only_the_first_jobs_are_published_with_a_count_of_the_rest():
    jobs = tuple(a_job(f"{i:03d}", "n1", None) for i in range(MAX_JOBS_PUBLISHED + 3))
    info = published(NodeView("n1", annotations={ANN_SLURM: slurm_annotation("n1", SlurmView(True, jobs=jobs))}))
    assert len(info["jobs"]) == MAX_JOBS_PUBLISHED and info["more"] == 3 and info["state"] == "UNKNOWN"


def test_an_annotation_not_written_by_the_operator_decodes_to_nothing():
    for text in ("", "not json", "[1]", '"x"'):
        assert published(NodeView("n1", annotations={ANN_SLURM: text})) == {}
    assert slurm_view([NodeView("n1", annotations={ANN_SLURM: "[1]"})]).nodes == {}
    odd = slurm_view([NodeView("n1", annotations={ANN_SLURM: '{"state":"MIXED","jobs":[{"id":7,"end":5}]}'})])
    assert odd.jobs[0].job_id == "7" and odd.jobs[0].end_time is None


def test_only_changed_annotations_are_published_and_none_while_slurm_is_unread():
    slurm = SlurmView(True, nodes={"n1": slurm_node("n1"), "n2": slurm_node("n2", "MIXED")}, jobs=(a_job("1", "n2", NOW),))
    same = NodeView("n1", annotations={ANN_SLURM: slurm_annotation("n1", slurm)})
    stale = NodeView("n2", annotations={ANN_SLURM: slurm_annotation("n1", slurm)})
    unknown = NodeView("n3")
    assert changed_annotations([same, stale, unknown], slurm) == {"n2": slurm_annotation("n2", slurm)}
    assert changed_annotations([same, stale, unknown], SlurmView(False)) == {}


# ---------------------------------------------------------------- the drain forecast, as its three former copies gave it


def former_free_at(node: str, slurm: SlurmView, now: datetime) -> datetime | None:  # core/handover.py's
    ends = [j.end_time for j in slurm.jobs_on(node)]
    if any(end is None for end in ends):
        return None
    return max([now, *ends])


def former_status_forecast(node: str, slurm: SlurmView) -> str | None:  # core/status.py's (None: not shown)
    ends = [j.end_time for j in slurm.jobs_on(node)]
    return ("unlimited" if any(end is None for end in ends) else iso(max(ends))) if ends else None


@settings(max_examples=300, deadline=None)
@given(ends=st.lists(ENDS, max_size=4))
def test_the_forecast_gives_what_each_former_copy_gave(ends):
    slurm = SlurmView(True, jobs=tuple(a_job(str(i), "n1", end) for i, end in enumerate(ends)))
    assert free_at("n1", slurm, NOW) == former_free_at("n1", slurm, NOW)
    jobs = forecast("n1", slurm)
    shown = (iso(jobs.last_end) if jobs.last_end is not None else "unlimited") if jobs.busy else None
    assert shown == former_status_forecast("n1", slurm)


def test_the_forecast_is_shown_for_nodes_draining_out_of_slurm_only():
    def moving(name, source, target, phase):
        record = MoveRecord(id=name, source=source, target=target, phase=phase, since=NOW, started=NOW)
        return NodeView(name, annotations={ANN_PLACEMENT: source, ANN_MOVE: record.to_annotation()})
    nodes = [moving("a", SLURM, "inference:default", Phase.DRAINING), moving("b", SLURM, "inference:default", Phase.STOPPING_SLURMD),
             moving("c", "inference:default", SLURM, Phase.EVICTING), NodeView("d", annotations={ANN_PLACEMENT: SLURM})]
    assert [n.name for n in draining_out_of_slurm(nodes)] == ["a"]


# ---------------------------------------------------------------- waves: what each caller assumes done


def test_the_handover_assumes_only_each_waves_starts_done_the_plugins_plan_every_move():
    """The operator's handover plans with the moves in flight still going (they hold their share of
    maxConcurrentMoves) and move-now as written; the plugin's dry run forecasts every move done."""
    def moving(name, source, target, phase):
        record = MoveRecord(id=name, source=source, target=target, phase=phase, since=NOW, started=NOW)
        return NodeView(name, annotations={ANN_PLACEMENT: source, ANN_MOVE: record.to_annotation()})
    pod = PodView("serve", "llm", "u1", node="n1")
    nodes = [NodeView("n1", annotations={ANN_PLACEMENT: "inference:default", ANN_MOVE_NOW: "slurm"}, pods=(pod,)),
             moving("n2", SLURM, "inference:default", Phase.DRAINING), moving("n3", "inference:default", SLURM, Phase.EVICTING),
             NodeView("n4", annotations={ANN_PLACEMENT: SLURM})]
    wave = Plan(desired={}, starts=[Start("n1", "inference:default", SLURM, "move-now")], aborts=["n3"])
    operator = starts_done(nodes, wave)
    assert list(operator) == ["n1"]
    assert operator["n1"].placement == SLURM and operator["n1"].move_now == "slurm" and operator["n1"].pods == (pod,)
    plugin = every_move_done(nodes, wave)
    assert {name: (n.placement, n.move, n.move_now) for name, n in plugin.items()} == {
        "n1": (SLURM, None, None), "n2": ("inference:default", None, None), "n3": ("inference:default", None, None)}
    assert plugin["n1"].pods == ()  # evicted on its way into Slurm


def test_the_waves_run_until_one_moves_nothing():
    nodes = [NodeView(f"n{i}", annotations={ANN_PLACEMENT: SLURM}) for i in range(1, 5)]
    view = PoolView(make_spec(slurm_nodes=4, max_moves=1), nodes, SlurmView(True, nodes={n.name: slurm_node(n.name) for n in nodes}), NOW)
    for assume in (starts_done, every_move_done):
        found = list(waves(view, Goal(1), assume))
        assert [len(w.plan.starts) for w in found] == [1, 1, 1, 0]
        assert [w.number for w in found] == [1, 2, 3, 4]
        assert all(w.moved[s.node].placement == SLURM for w in found for s in w.plan.starts)  # each as its wave found it
