"""slurmbridge: async access to a Slurm cluster: scontrol/squeue/scancel locally or over SSH, or slurmrestd."""

from .backend import ScontrolBackend, SlurmBackend
from .errors import SlurmError, SlurmUnavailable
from .models import SlurmJob, SlurmNode, SlurmReservation, TopologyGroup
from .parse import parse_scontrol_nodes, parse_squeue
from .rest import CachedToken, RestAuth, RestBackend, SlurmAuthError, StaticToken
from .runner import CommandRunner, LocalRunner


def __getattr__(name: str):
    """SshRunner on first use: asyncssh and cryptography cost 28 MiB and 0.1 s to import, which
    `kubectl slurmpool` (models only) should not pay."""
    if name == "SshRunner":
        from .ssh import SshRunner

        return SshRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CachedToken",
    "CommandRunner",
    "LocalRunner",
    "RestAuth",
    "RestBackend",
    "ScontrolBackend",
    "SlurmAuthError",
    "SlurmBackend",
    "SlurmError",
    "SlurmJob",
    "SlurmNode",
    "SlurmReservation",
    "SlurmUnavailable",
    "SshRunner",
    "StaticToken",
    "TopologyGroup",
    "parse_scontrol_nodes",
    "parse_squeue",
]
