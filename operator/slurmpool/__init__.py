"""slurmpool: moves GPU nodes between a Slurm cluster and Kubernetes inference pools."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def _installed_version() -> str:
    # The one place the version is written is pyproject.toml; the chart's version and appVersion
    # follow it (tests/test_version.py).
    try:
        return version("slurmpool")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


__version__ = _installed_version()
