"""How Slurm commands get executed: the CommandRunner protocol and the local subprocess runner."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from .errors import SlurmUnavailable, check_exit

# Pinned for every command so the parsers see one date format and one zone whatever the host's
# settings: "standard" is ISO 8601 without a zone, and TZ=UTC makes Slurm print UTC.
DEFAULT_ENV: Mapping[str, str] = {"SLURM_TIME_FORMAT": "standard", "TZ": "UTC"}


@runtime_checkable
class CommandRunner(Protocol):
    async def run(self, argv: list[str], timeout: float) -> str:
        """Run argv, return its stdout. Raise SlurmError when it exits non-zero and
        SlurmUnavailable when Slurm (or the host) cannot be reached or the timeout passes."""
        ...

    async def close(self) -> None: ...


def _decode(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Kill and wait for a command we gave up on: a stuck scontrol keeps retrying for a long time
    when slurmctld is down, and must not pile up across polls."""
    if proc.returncode is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    await proc.wait()


class LocalRunner:
    """Runs commands as local subprocesses, never through a shell."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = {**DEFAULT_ENV, **(env or {})}

    async def run(self, argv: list[str], timeout: float) -> str:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **self.env},
            )
        except OSError as e:  # not installed, not executable: Slurm is not reachable from here
            raise SlurmUnavailable(f"cannot run {argv[0]}: {e}", argv=argv) from e
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            await _reap(proc)
            raise SlurmUnavailable(f"{argv[0]} timed out after {timeout:g}s", argv=argv) from None
        except asyncio.CancelledError:
            await _reap(proc)
            raise
        stdout, stderr = _decode(out), _decode(err)
        check_exit(argv, proc.returncode, stdout, stderr)
        return stdout

    async def close(self) -> None:
        return None
