"""Run Slurm commands on a controller or login host over one persistent asyncssh connection."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
from collections.abc import Mapping

import asyncssh

from .errors import SlurmUnavailable, check_exit
from .runner import DEFAULT_ENV

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
KeySource = str | bytes | os.PathLike[str]


def _read_source(source: KeySource, looks_inline: bool) -> str:
    """A path-like or a str without inline markers is a file path; anything else is the content."""
    if isinstance(source, bytes):
        return source.decode()
    if isinstance(source, os.PathLike) or not looks_inline:
        try:
            with open(os.fspath(source), encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            # A str that is no readable path may be key material: it is never quoted.
            named = repr(os.fspath(source)) if isinstance(source, os.PathLike) else "the file named (str, no key text)"
            raise ValueError(f"cannot read {named}: {e.strerror or type(e).__name__}") from None
    return source


def load_known_hosts(known_hosts: KeySource | asyncssh.SSHKnownHosts) -> asyncssh.SSHKnownHosts:
    """known_hosts as a path or as text. Known_hosts lines always contain spaces, paths do not;
    an empty text trusts no host at all (never "accept anything")."""
    if isinstance(known_hosts, asyncssh.SSHKnownHosts):
        return known_hosts
    if known_hosts is None:
        raise TypeError("known_hosts is required: host keys are always verified")
    inline = isinstance(known_hosts, str) and (not known_hosts.strip() or any(c.isspace() for c in known_hosts))
    try:
        return asyncssh.import_known_hosts(_read_source(known_hosts, inline))
    except (ValueError, asyncssh.Error) as e:
        raise ValueError(f"invalid known_hosts: {e}") from e


def load_client_key(client_key: KeySource | asyncssh.SSHKey) -> asyncssh.SSHKey:
    """Private key as a path or as text (PEM/OpenSSH text contains "-----BEGIN"), or as bytes
    (always content). The error never quotes the content, only a path."""
    if isinstance(client_key, asyncssh.SSHKey):
        return client_key
    inline = isinstance(client_key, str) and "-----BEGIN" in client_key
    try:
        return asyncssh.import_private_key(_read_source(client_key, inline))
    except (ValueError, asyncssh.KeyImportError) as e:
        raise ValueError(f"invalid SSH client key: {e}") from e


def remote_command(argv: list[str], env: Mapping[str, str]) -> str:
    """The command line sshd hands to the login shell: every word shell-quoted, the environment
    set through env(1) (works whatever the login shell; sshd's AcceptEnv is not needed)."""
    assignments = [f"{k}={v}" for k, v in env.items()]
    return shlex.join(["env", *assignments, *argv] if assignments else argv)


def _describe(e: BaseException) -> str:
    return str(e) or type(e).__name__


class SshRunner:
    """One SSH connection, opened on first use and reused for every command (a fresh connection
    costs ~45 ms plus auth; a command over an open one costs a channel). After a failure the
    connection is dropped and the next command reconnects.

    Files named by path are read once, here, so a bad key or known_hosts fails at construction.
    """

    def __init__(
        self,
        host: str,
        port: int,
        username: str,
        client_key: KeySource | asyncssh.SSHKey,
        known_hosts: KeySource | asyncssh.SSHKnownHosts,
        env: Mapping[str, str] | None = None,
        connect_timeout: float = 10,
        *,
        keepalive_interval: float = 15,
        max_sessions: int = 8,
    ) -> None:
        self.host, self.port, self.username = host, int(port), username
        self.connect_timeout = connect_timeout
        self.keepalive_interval = keepalive_interval
        self._known_hosts = load_known_hosts(known_hosts)
        self._client_key = load_client_key(client_key)
        self.env = {**DEFAULT_ENV, **(env or {})}
        for name in self.env:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"invalid environment variable name {name!r}")
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        # OpenSSH allows 10 sessions per connection by default (MaxSessions); stay below it.
        self._sessions = asyncio.Semaphore(max_sessions)

    @property
    def target(self) -> str:
        return f"{self.username}@{self.host}:{self.port}"

    def command(self, argv: list[str]) -> str:
        return remote_command(argv, self.env)

    async def _connect(self) -> asyncssh.SSHClientConnection:
        try:
            return await asyncssh.connect(
                self.host,
                self.port,
                username=self.username,
                known_hosts=self._known_hosts,
                client_keys=[self._client_key],
                # Only what we were given: no ~/.ssh/config, no agent, no other auth methods.
                config=[],
                agent_path=None,
                x509_trusted_certs=None,
                preferred_auth="publickey",
                password=None,
                connect_timeout=self.connect_timeout,
                keepalive_interval=self.keepalive_interval,
            )
        except asyncssh.HostKeyNotVerifiable as e:
            raise SlurmUnavailable(
                f"SSH host key verification failed for {self.host}:{self.port}: the host key it "
                f"presented is not trusted by the configured known_hosts ({e.reason}); "
                "refusing to connect (check known_hosts, or a man-in-the-middle)"
            ) from e
        except asyncssh.PermissionDenied as e:
            raise SlurmUnavailable(f"SSH authentication failed for {self.target}: {e.reason}") from e
        except (asyncssh.Error, OSError) as e:  # refused, unreachable, timeout (TimeoutError is an OSError)
            raise SlurmUnavailable(f"cannot connect to {self.target} over SSH: {_describe(e)}") from e

    async def _connection(self) -> asyncssh.SSHClientConnection:
        conn = self._conn
        if conn is not None and not conn.is_closed():
            return conn
        async with self._lock:  # one connect at a time, the others reuse its result
            if self._conn is None or self._conn.is_closed():
                self._conn = await self._connect()
            return self._conn

    def _drop(self, conn: asyncssh.SSHClientConnection) -> None:
        if self._conn is conn:
            self._conn = None
        conn.close()

    async def run(self, argv: list[str], timeout: float) -> str:
        command = self.command(argv)
        conn = await self._connection()
        try:
            async with self._sessions:
                async with conn.create_process(command, encoding="utf-8", errors="replace") as proc:
                    try:
                        result = await proc.wait(timeout=timeout)
                    except asyncssh.TimeoutError:
                        # Leaving the context closes the channel; ask sshd to kill the command too.
                        try:
                            proc.send_signal("KILL")
                        except (asyncssh.Error, OSError):
                            pass
                        raise SlurmUnavailable(
                            f"{argv[0]} on {self.target} timed out after {timeout:g}s", argv=argv
                        ) from None
        except SlurmUnavailable:
            raise
        except (asyncssh.Error, OSError) as e:  # connection lost, channel refused, broken pipe
            self._drop(conn)
            raise SlurmUnavailable(f"SSH to {self.target} failed: {_describe(e)}", argv=argv) from e
        stdout, stderr = str(result.stdout or ""), str(result.stderr or "")
        if result.exit_status is None or result.exit_status < 0:
            # No exit status: the connection died mid-command (asyncssh does not raise then) or
            # the command was killed by a signal. Its outcome is unknown, so it counts as an outage.
            if conn.is_closed():
                self._drop(conn)
            why = f"killed by signal {result.exit_signal[0]}" if result.exit_signal else "connection lost"
            raise SlurmUnavailable(
                f"{argv[0]} on {self.target}: {why} before it finished",
                argv=argv, stdout=stdout, stderr=stderr,
            )
        check_exit(argv, result.exit_status, stdout, stderr)
        return stdout

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            await conn.wait_closed()
