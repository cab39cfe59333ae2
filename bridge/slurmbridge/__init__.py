"""slurmbridge: async access to a Slurm cluster: scontrol/squeue/scancel locally or over SSH, or slurmrestd.

The root imports only the models and errors; the backends, runners and HTTP client load on first use,
so that the operator's pure core and `kubectl slurmpool` (models only) pay for none of them (asyncssh
and cryptography alone cost 28 MiB and 0.1 s)."""

from importlib import import_module

from .errors import SlurmError, SlurmUnavailable
from .models import SlurmJob, SlurmNode, SlurmReservation, TopologyGroup

_LAZY = {
    "ScontrolBackend": ".backend",
    "SlurmBackend": ".backend",
    "parse_scontrol_nodes": ".parse",
    "parse_squeue": ".parse",
    "CachedToken": ".rest",
    "RestAuth": ".rest",
    "RestBackend": ".rest",
    "SlurmAuthError": ".rest",
    "StaticToken": ".rest",
    "CommandRunner": ".runner",
    "LocalRunner": ".runner",
    "SshRunner": ".ssh",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


__all__ = sorted([*_LAZY, "SlurmError", "SlurmUnavailable", "SlurmJob", "SlurmNode", "SlurmReservation", "TopologyGroup"])
