"""The counters metrics.py starts at 0 cover exactly the label values the code sets.

A counter series that appears at 1 has no increase() in Prometheus, so an alert on the first
failure after a start would stay silent (docs/metrics.md). These tests read the code that sets
the labels, so a new action, direction or Slurm command without its zero series fails here."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from slurmbridge import SlurmUnavailable, SlurmUnsupported
from slurmbridge.backend import ScontrolBackend, SlurmBackend, SlurmCommands, slurm_commands
from slurmbridge.rest import RestAuth, RestBackend
from slurmpool.adapters import access, metrics
from slurmpool.controller.snapshots import NoSlurm

from .slurmfake import Refusing

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
    labels = {_action(call.args[2]) for call in _calls(tree, "_guard")}  # _guard(ctx, result, action, ...)
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


def _seconds_and_errors(command: str) -> tuple[float, float]:
    labels = {"command": command}
    return (REGISTRY.get_sample_value("slurmpool_slurm_command_duration_seconds_count", labels) or 0.0,
            REGISTRY.get_sample_value("slurmpool_slurm_command_errors_total", labels) or 0.0)


def test_slurm_commands_are_the_protocols_calls_with_the_label_values_the_dashboards_use():
    assert metrics.SLURM_COMMANDS == slurm_commands() == (
        "nodes", "jobs", "drain", "resume", "requeue", "cancel", "ping", "reservations", "partition_max_times",
        "create_reservation", "delete_reservation", "power_down", "power_up", "power_save", "signal")


async def test_instrumented_passes_every_slurm_command_on_and_times_and_counts_it_under_its_name():
    inner, calls = Refusing(), []
    instrumented = access.Instrumented(inner)
    for command in slurm_commands():
        arity = len(inspect.signature(getattr(SlurmCommands, command)).parameters) - 1  # self
        args = tuple(object() for _ in range(arity))

        async def record(*got, command=command):
            calls.append((command, got))

        setattr(inner, command, record)
        seconds, errors = _seconds_and_errors(command)
        await getattr(instrumented, command)(*args)
        assert calls[-1] == (command, args) and _seconds_and_errors(command) == (seconds + 1, errors)
        delattr(inner, command)  # the fake's own: it refuses
        with pytest.raises(SlurmUnsupported):
            await getattr(instrumented, command)(*args)
        assert _seconds_and_errors(command) == (seconds + 2, errors + 1)
    # the rest pass through, untimed
    assert instrumented.filters_jobs is True and instrumented.commands_run == 0 and await instrumented.can_reserve() is False
    assert await instrumented.close() is None


def _fakes() -> list[type]:
    """Every Slurm backend the tests define (a class with an async Slurm command)."""
    found = []
    for path in sorted(Path(__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            if any(isinstance(f, ast.AsyncFunctionDef) and f.name in slurm_commands() for f in cls.body):
                found.append(getattr(importlib.import_module(f"tests.{path.stem}"), cls.name))
    return found


def test_every_backend_and_fake_has_every_call_of_the_protocol():
    """A new call on SlurmBackend fails here until each backend makes it (or refuses it)."""
    calls = [name for name, member in inspect.getmembers(SlurmBackend) if inspect.iscoroutinefunction(member)]
    assert set(slurm_commands()) < set(calls)
    fakes = _fakes()
    assert len(fakes) >= 8
    for backend in [ScontrolBackend, RestBackend, NoSlurm, access.Instrumented, Refusing, *fakes]:
        for name in calls:
            method = getattr(backend, name, None)
            assert inspect.iscoroutinefunction(method), f"{backend.__name__}.{name}"
            wanted = list(inspect.signature(getattr(SlurmBackend, name)).parameters)
            inspect.signature(method).bind(*wanted)  # takes the Protocol's arguments


async def test_every_backend_answers_the_capabilities():
    backends = [ScontrolBackend(runner=None), RestBackend("http://slurmrestd", RestAuth(token="t")), NoSlurm(),
                access.Instrumented(Refusing()), Refusing()]
    for backend in backends:
        assert isinstance(backend, SlurmBackend)
        assert isinstance(backend.commands_run, int) and isinstance(backend.filters_jobs, bool)
    assert [b.filters_jobs for b in backends] == [True, False, True, True, True]
    assert await backends[0].can_reserve() is True and await backends[2].can_reserve() is False
    for command in slurm_commands():  # NoSlurm fails closed
        with pytest.raises(SlurmUnavailable):
            await getattr(backends[2], command)(*[None] * (len(inspect.signature(getattr(SlurmCommands, command)).parameters) - 1))


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
    """The operator's own from its start; a pool's from its first pass (pools.py calls poolmetrics.begin
    before the pass acts), with the pool's label."""
    from slurmpool.controller import poolmetrics

    pool = "ns/zeros"
    poolmetrics.begin(pool)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for m in REGISTRY.collect() for s in m.samples}
    for d in metrics.DIRECTIONS:
        for r in metrics.FAILURE_REASONS:
            assert samples[("slurmpool_moves_failed_total", (("direction", d), ("pool", pool), ("reason", r)))] == 0
        assert samples[("slurmpool_moves_completed_total", (("direction", d), ("pool", pool)))] == 0
        assert samples[("slurmpool_move_duration_seconds_bucket", (("direction", d), ("le", "1.0"), ("pool", pool)))] == 0
    for a in metrics.ACTIONS:
        assert samples[("slurmpool_action_errors_total", (("action", a), ("pool", pool)))] == 0
    assert samples[("slurmpool_evictions_refused_total", (("pool", pool),))] == 0
    assert samples[("slurmpool_drain_duration_seconds_count", (("pool", pool),))] == 0
    assert samples[("slurmpool_leader", ())] in (0, 1)
    for c in metrics.SLURM_COMMANDS:
        assert ("slurmpool_slurm_command_errors_total", (("command", c),)) in samples
    assert ("slurmpool_reconcile_total", (("result", "error"),)) in samples
    for w in metrics.EVENT_DROP_REASONS:
        assert ("slurmpool_events_dropped_total", (("why", w),)) in samples
