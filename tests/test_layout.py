"""The layout keeps the architecture (ARCHITECTURE.md, issue 28): the core imports no I/O stack,
the controller stays thin, and no function takes a bag of parameters. The import boundaries
themselves are import-linter's contracts in pyproject.toml (`lint-imports`, run by `make unit`)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "operator" / "slurmpool"
MAX_CONTROLLER_LINES = 300
MAX_PARAMETERS = 6
# Wider on purpose, each with its reason.
WIDE_ON_PURPOSE = {
    # CoreCalls stands in for CoreV1Api's methods, so it takes their keywords (_headers,
    # _request_timeout, _preload_content) as the client does; callers name each one.
    "cli/api.py:_call",
}


def test_the_core_loads_neither_ssh_nor_kopf_nor_the_kubernetes_client():
    code = ("import slurmpool.core.decide, slurmpool.core.status, sys; "
            "print(sorted(m for m in ('asyncssh', 'kopf', 'kubernetes', 'aiohttp', 'prometheus_client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_controller_module_is_over_300_lines():
    long = {p.name: n for p in (PACKAGE / "controller").glob("*.py") if (n := len(p.read_text().splitlines())) > MAX_CONTROLLER_LINES}
    assert not long, f"split these controller modules (at most {MAX_CONTROLLER_LINES} lines): {long}"


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = fn.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return len([n for n in names if n not in ("self", "cls")])


def test_no_function_takes_more_than_six_parameters():
    wide = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _parameters(node) > MAX_PARAMETERS
                    and f"{path.relative_to(PACKAGE)}:{node.name}" not in WIDE_ON_PURPOSE):
                wide.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({_parameters(node)})")
    assert not wide, "pass a dataclass instead of these parameter lists:\n" + "\n".join(wide)


def test_slurmbridges_root_names_only_its_models_and_errors():
    """A name the root loaded lazily (a module `__getattr__`) would hide its submodule from the
    import contracts: `from slurmbridge import SshRunner` in the core would pass them and load
    asyncssh. So the root imports its models and errors plainly and nothing else (lint-imports
    keeps it from importing a backend; this keeps it from doing so at run time)."""
    root = PACKAGE.parents[1] / "bridge" / "slurmbridge" / "__init__.py"
    tree = ast.parse(root.read_text())
    assert not [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    assert imports and all(isinstance(n, ast.ImportFrom) and n.level == 1 and n.module in ("models", "errors") for n in imports)
    code = "import slurmbridge, sys; print(sorted(m for m in sys.modules if m.startswith('slurmbridge.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['slurmbridge.errors', 'slurmbridge.models']"
