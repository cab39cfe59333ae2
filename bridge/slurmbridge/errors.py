"""Errors raised by the Slurm access layer and the mapping from Slurm's messages to them."""

from __future__ import annotations

import re
from collections.abc import Sequence

# Substrings of scontrol/squeue/scancel output that mean "Slurm could not be reached" rather than
# "the command was refused". Retrying may help with these; with the others it will not.
UNAVAILABLE_MARKERS: tuple[str, ...] = (
    "unable to contact slurm controller",
    "socket timed out",
    "munge",
    "invalid authentication credential",
    "authentication error",  # "Protocol authentication error" when munged is down
    "connection refused",
    "zero bytes were transmitted",
    "slurm_receive_msg",
    "communication connection failure",
)


class SlurmError(Exception):
    """A Slurm command ran and failed. Carries what the command printed so callers can inspect it."""

    def __init__(
        self,
        message: str,
        *,
        argv: Sequence[str] = (),
        returncode: int | None = None,
        stdout: str = "",
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    @property
    def output(self) -> str:
        """stdout and stderr together: Slurm prints some errors on stdout ("Node x not found")."""
        return f"{self.stdout}\n{self.stderr}"


class SlurmUnavailable(SlurmError):
    """Slurm could not be reached: SSH down or refused, host key mismatch, slurmctld down, munge
    errors, timeouts. Worth retrying later; the operator reports it as Degraded."""


class SlurmUnsupported(SlurmError):
    """This backend cannot make the call at all (slurmrestd before the API version that has it):
    retrying will not help; the caller reports the failed action or uses another way."""


# A line of stderr that reports a failure although the command exited 0 ("scancel: error: Kill
# job error on job id 7: Access/permission denied", "slurm_update error: ...").
_STDERR_ERROR = re.compile(r"(?:^|[\s:])error\b", re.IGNORECASE)


def check_exit(argv: Sequence[str], returncode: int | None, stdout: str, stderr: str) -> None:
    """Raise when a command failed: a non-zero exit, or an exit 0 with an error on stderr (some
    Slurm commands report a refused request only there). Warnings on stderr pass."""
    if returncode != 0 or any(_STDERR_ERROR.search(line) for line in stderr.splitlines()):
        raise command_failed(argv, returncode, stdout, stderr)


def command_failed(argv: Sequence[str], returncode: int | None, stdout: str, stderr: str) -> SlurmError:
    """Build the right exception for a command that failed (see check_exit)."""
    text = (stderr.strip() or stdout.strip() or "(no output)")
    cmd = argv[0] if argv else "command"
    message = f"{cmd} exited {returncode}: {text}"
    # Only stderr is matched: stdout can carry free text (node reasons, job names) that a user chose.
    lowered = stderr.lower()
    # 127 = command not found (missing Slurm client on the target): an environment problem.
    unavailable = returncode == 127 or any(m in lowered for m in UNAVAILABLE_MARKERS)
    cls = SlurmUnavailable if unavailable else SlurmError
    return cls(message, argv=argv, returncode=returncode, stdout=stdout, stderr=stderr)
