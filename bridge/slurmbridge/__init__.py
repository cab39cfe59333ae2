"""slurmbridge: async access to a Slurm cluster: scontrol/squeue/scancel locally or over SSH, or slurmrestd.

The root exports only the models and errors. Everything else is imported from its submodule
(`from slurmbridge.ssh import SshRunner`, `from slurmbridge.rest import RestBackend`), so the
import contracts (pyproject.toml [tool.importlinter]) see every edge: the operator's pure core and
`kubectl slurmpool` (models only) load no backend (asyncssh and cryptography alone cost 28 MiB and
0.1 s), and a name the root does not have fails at import, not on first use."""

from .errors import SlurmError, SlurmUnavailable, SlurmUnsupported
from .models import PowerSave, SlurmJob, SlurmNode, SlurmReservation, TopologyGroup

__all__ = ["PowerSave", "SlurmError", "SlurmJob", "SlurmNode", "SlurmReservation", "SlurmUnavailable", "SlurmUnsupported", "TopologyGroup"]
