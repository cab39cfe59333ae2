"""The plugin's own wheel (plugin/): built offline, the plugin's modules and dependencies only, and
`kubectl slurmpool` runs from it without the operator's packages."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(tmp_path: Path) -> Path:
    spec = importlib.util.spec_from_file_location("wheelbuild", ROOT / "plugin" / "wheelbuild.py")
    assert spec is not None and spec.loader is not None
    backend = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backend)
    return tmp_path / backend.build_wheel(str(tmp_path))


def test_the_plugin_wheel_holds_the_plugin_and_the_core_and_no_operator(tmp_path):
    wheel = build(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "slurmpool/cli/main.py" in names and "slurmpool/core/decide.py" in names and "slurmbridge/models.py" in names
    assert not [n for n in names if n.startswith(("slurmpool/adapters", "slurmpool/controller", "slurmbridge/ssh", "slurmbridge/rest"))]
    assert "slurmpool/__main__.py" not in names
    info = next(n.rsplit("/", 1)[0] for n in names if n.endswith("/METADATA"))
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    requires = [line.split(": ", 1)[1].split(">")[0] for line in metadata.splitlines() if line.startswith("Requires-Dist")]
    assert "kubernetes" in requires and not {"kopf", "asyncssh", "prometheus-client", "python-hostlist"} & set(requires)
    assert "kubectl-slurmpool = slurmpool.cli.main:main" in zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    record = zipfile.ZipFile(wheel).read(f"{info}/RECORD").decode().splitlines()
    assert len(record) == len(names) and all(",sha256=" in line for line in record if not line.endswith("RECORD,,"))


def test_the_plugin_runs_from_its_wheel_alone(tmp_path):
    wheel = build(tmp_path)
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (f"import sys; sys.path.insert(0, {str(site)!r}); import slurmpool.cli.main as m; "
            f"assert m.__file__.startswith({str(site)!r}), m.__file__; "
            "code = m.main(['history', '--help'])")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert "examples:" in run.stdout
