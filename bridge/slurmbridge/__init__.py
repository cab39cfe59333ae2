"""slurmbridge: async access to a Slurm cluster (scontrol/squeue/scancel) locally or over SSH."""

from .backend import ScontrolBackend, SlurmBackend
from .errors import SlurmError, SlurmUnavailable
from .models import SlurmJob, SlurmNode, TopologyGroup
from .parse import parse_scontrol_nodes, parse_squeue
from .runner import CommandRunner, LocalRunner
from .ssh import SshRunner

__all__ = [
    "CommandRunner",
    "LocalRunner",
    "ScontrolBackend",
    "SlurmBackend",
    "SlurmError",
    "SlurmJob",
    "SlurmNode",
    "SlurmUnavailable",
    "SshRunner",
    "TopologyGroup",
    "parse_scontrol_nodes",
    "parse_squeue",
]
