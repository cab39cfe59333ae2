"""An in-tree PEP 517 backend that writes the plugin's wheel (plugin/pyproject.toml says why):
the modules the plugin imports, from operator/ and bridge/, and the metadata. Standard library
only, so it builds offline. tests/test_plugin_wheel.py builds it and checks what is in it."""

from __future__ import annotations

import base64
import hashlib
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "kubectl_slurmpool"  # the distribution kubectl-slurmpool, as a wheel file names it
# What the plugin runs, and nothing of the operator's process (adapters, controller, kopf's wiring).
SOURCES = [
    (ROOT / "operator", ["slurmpool/__init__.py", "slurmpool/cli", "slurmpool/core"]),
    (ROOT / "bridge", ["slurmbridge/__init__.py", "slurmbridge/errors.py", "slurmbridge/models.py"]),
]
# What slurmpool.cli and slurmpool.core import (tests/test_cli.py keeps kopf and asyncssh out of it).
REQUIRES = ["kubernetes>=30", "pydantic>=2.6", "pyyaml>=6", "croniter>=6", "tzdata>=2024.1", "protobuf>=5.26"]
SCRIPTS = {"kubectl-slurmpool": "slurmpool.cli.main:main", "kubectl_complete-slurmpool": "slurmpool.cli.complete:complete_main"}


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def files() -> list[tuple[str, Path]]:
    """(path in the wheel, file) of every module the plugin needs."""
    out = []
    for base, names in SOURCES:
        for name in names:
            path = base / name
            found = sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts) if path.is_dir() else [path]
            out += [(p.relative_to(base).as_posix(), p) for p in found]
    return out


def metadata(ver: str) -> str:
    lines = ["Metadata-Version: 2.1", "Name: kubectl-slurmpool", f"Version: {ver}",
             "Summary: kubectl slurmpool: the on-call's view of SlurmNodePools, a dry-run planner, the knobs and the history of moves",
             "License: Apache-2.0", "Requires-Python: >=3.11", *(f"Requires-Dist: {r}" for r in REQUIRES)]
    return "\n".join(lines) + "\n"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None) -> str:
    ver = version()
    info = f"{NAME}-{ver}.dist-info"
    wheel_name = f"{NAME}-{ver}-py3-none-any.whl"
    entries = [(name, path.read_bytes()) for name, path in files()]
    entries += [
        (f"{info}/METADATA", metadata(ver).encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: slurmpool plugin/wheelbuild.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{info}/entry_points.txt", ("[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in SCRIPTS.items())).encode()),
    ]
    record = [_record_line(name, data) for name, data in entries] + [f"{info}/RECORD,,"]
    with zipfile.ZipFile(Path(wheel_directory) / wheel_name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in entries:
            wheel.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
        wheel.writestr(zipfile.ZipInfo(f"{info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return wheel_name
