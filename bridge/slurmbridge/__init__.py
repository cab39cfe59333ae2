"""slurmbridge: async access to a Slurm cluster: scontrol/squeue/scancel locally or over SSH, or slurmrestd."""

from .backend import ScontrolBackend, SlurmBackend
from .errors import SlurmError, SlurmUnavailable
from .models import SlurmJob, SlurmNode, SlurmReservation, TopologyGroup
from .parse import parse_scontrol_nodes, parse_squeue
from .rest import CachedToken, RestAuth, RestBackend, SlurmAuthError, StaticToken
from .runner import CommandRunner, LocalRunner
from .ssh import SshRunner

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
