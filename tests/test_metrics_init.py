"""The counters metrics.py starts at 0 cover exactly the label values the code sets.

A counter series that appears at 1 has no increase() in Prometheus, so an alert on the first
failure after a start would stay silent (docs/metrics.md). These tests read the code that sets
the labels, so a new action, direction or Slurm command without its zero series fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from prometheus_client import REGISTRY

from slurmpool.adapters import metrics

SRC = Path(metrics.__file__).parents[1]  # the slurmpool package


def _calls(tree: ast.AST, name: str):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
            func = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if func == name:
                yield node


def _action(arg: ast.expr) -> str:
    """A guarded action's label: an `Action` member, named where it is guarded (never computed)."""
    assert isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "Action", ast.dump(arg)
    return metrics.Action[arg.attr].value


def test_actions_are_the_labels_of_every_guarded_action():
    tree = ast.parse((SRC / "controller" / "apply.py").read_text())
    labels = {_action(call.args[1]) for call in _calls(tree, "_guard")}
    # and every other action label set in apply.py (_guard's own is its parameter)
    labels |= {_action(k.value) for call in _calls(tree, "labels") for k in call.keywords
               if k.arg == "action" and ast.unparse(k.value) != "action"}
    assert labels and labels == set(metrics.ACTIONS)
    # the label values themselves: the alerts and the dashboard select on them
    assert metrics.ACTIONS == ("patch", "create", "delete", "evict", "scontrol", "scancel")


def test_directions_are_the_direction_enum_and_every_direction_label_is_one():
    from slurmpool.core.placement import Direction

    assert metrics.DIRECTIONS == ("to_slurm", "to_inference", "between_pools") == tuple(Direction)
    assert Direction.of("slurm", "inference:a") == "to_inference" and Direction.of("none", "inference:a") == "to_inference"
    assert Direction.of("inference:a", "slurm") == "to_slurm" and Direction.of("none", "slurm") == "to_slurm"
    assert Direction.of("inference:a", "inference:b") == "between_pools"
    tree = ast.parse((SRC / "controller" / "apply.py").read_text())
    calls = [k.value for call in _calls(tree, "labels") for k in call.keywords if k.arg == "direction"]
    assert calls
    for value in calls:  # Direction.of(...), or a name bound to it
        assert (isinstance(value, ast.Call) and ast.unparse(value.func) == "Direction.of") or isinstance(value, ast.Name), ast.dump(value)


def test_failure_reasons_are_every_reason_counted():
    reasons, calls = set(), 0
    for path in SRC.rglob("*.py"):
        if path.name == "metrics.py":
            continue
        for call in _calls(ast.parse(path.read_text()), "labels"):
            if isinstance(call.func.value, ast.Attribute) and call.func.value.attr == "MOVES_FAILED":
                calls += 1
                reason = next(k.value for k in call.keywords if k.arg == "reason")
                assert isinstance(reason, ast.Constant), f"{path.name}: a computed reason: list its values in metrics.py"
                reasons.add(reason.value)
    assert calls and reasons == set(metrics.FAILURE_REASONS)


def test_slurm_commands_are_the_instrumented_backend_calls():
    tree = ast.parse((SRC / "adapters" / "access.py").read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Instrumented")
    names = next(tuple(e.value for e in c.comparators[0].elts) for c in ast.walk(cls)
                 if isinstance(c, ast.Compare) and isinstance(c.ops[0], ast.NotIn))
    assert set(names) == set(metrics.SLURM_COMMANDS)


def test_event_drop_reasons_are_every_why_counted():
    whys, calls = set(), 0
    for call in _calls(ast.parse((SRC / "adapters" / "kube.py").read_text()), "labels"):
        if isinstance(call.func.value, ast.Attribute) and call.func.value.attr == "EVENTS_DROPPED":
            calls += 1
            why = next(k.value for k in call.keywords if k.arg == "why")
            whys |= {c.value for c in ast.walk(why) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    assert calls == 3 and whys == set(metrics.EVENT_DROP_REASONS)


def test_a_full_event_queue_counts_what_it_drops():
    import asyncio

    from slurmpool.adapters import kube

    def dropped():
        return REGISTRY.get_sample_value("slurmpool_events_dropped_total", {"why": "queue_full"})

    async def fill():
        adapter = kube.KubeAdapter.__new__(kube.KubeAdapter)  # no API client: only the queue is used
        adapter._events, adapter._events_unposted = asyncio.Queue(maxsize=2), 0
        obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu01", "uid": "u"}}
        for _ in range(5):
            await adapter.event(obj, "Normal", "Test", "m")
        return adapter._events.qsize()

    before = dropped()
    assert asyncio.run(fill()) == 2
    assert dropped() - before == 3


def test_every_known_label_value_is_exported_at_zero_from_the_start():
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for m in REGISTRY.collect() for s in m.samples}
    for d in metrics.DIRECTIONS:
        assert (("slurmpool_moves_failed_total", (("direction", d), ("reason", "rollback")))) in samples
        assert ("slurmpool_moves_completed_total", (("direction", d),)) in samples
        assert ("slurmpool_move_duration_seconds_bucket", (("direction", d), ("le", "1.0"))) in samples
    for a in metrics.ACTIONS:
        assert ("slurmpool_action_errors_total", (("action", a),)) in samples
    for c in metrics.SLURM_COMMANDS:
        assert ("slurmpool_slurm_command_errors_total", (("command", c),)) in samples
    assert ("slurmpool_reconcile_total", (("result", "error"),)) in samples
    for w in metrics.EVENT_DROP_REASONS:
        assert ("slurmpool_events_dropped_total", (("why", w),)) in samples
