"""slurmpool: moves GPU nodes between a Slurm cluster and Kubernetes inference pools."""

from __future__ import annotations


def _installed_version() -> str:
    # The one place the version is written is pyproject.toml; the chart's version and appVersion
    # follow it (tests/test_version.py).
    from importlib.metadata import PackageNotFoundError, version

    for distribution in ("slurmpool", "kubectl-slurmpool"):  # the project, or the plugin's own wheel (plugin/)
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return "0+unknown"  # run from a checkout that was never installed


def __getattr__(name: str) -> str:
    # Read when asked for: importlib.metadata costs each `kubectl slurmpool status` 40 ms otherwise.
    if name == "__version__":
        globals()["__version__"] = value = _installed_version()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
