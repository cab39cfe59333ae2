"""A small HTTP/1.1 client on asyncio streams, with a pool of keep-alive connections, for slurmrestd.

Why not aiohttp: slurmrestd 26.05 answers every failed request with `Connection: Close`, a complete
JSON response, and then a second response (text/plain) on the same connection. aiohttp (both its C
and Python parsers) rejects the whole answer ("Data after `Connection: close`") whenever the second
response is in the same read as the first, so the JSON `errors` Slurm sent are lost and a refusal
looks like a broken connection. This client reads one response per request (Content-Length,
chunked, or up to EOF) and closes a connection the server asked to close without reading more.

A caller that reads a large answer as it comes (GET /jobs/: rest.py, jsonstream.py) passes a
`sink`: a success's body is then handed over in reads of at most READ bytes, the loop let run
between them, and never held here (MAX_BODY bounds only what is held).

Connections are reused when the server keeps them open (slurmrestd does for successes); a request
on a reused connection that the server had closed meanwhile is sent again once on a new one, before
any byte of an answer was read.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_BODY = 256 * 1024 * 1024  # /nodes/ of a large cluster is some MiB; more than this is not slurmrestd
MAX_HEADERS = 128
READ = 64 * 1024  # a sink's piece: parsed between two turns of the event loop
Sink = Callable[[bytes], None]


class HttpProtocolError(Exception):
    """The peer's bytes are not an HTTP/1.x response."""


class StaleConnection(Exception):
    """A reused keep-alive connection was closed by the server before it answered."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes


class HttpClient:
    def __init__(self, url: str, *, ssl_context: ssl.SSLContext | None = None, timeout: float = 20.0,
                 connections: int = 8) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.base = parts.path.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.tls else 80
        self.host_header = host if self.port == default else f"{host}:{self.port}"
        self.ssl_context = (ssl_context or ssl.create_default_context()) if self.tls else None
        self.timeout = timeout
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._slots = asyncio.Semaphore(connections)
        self.opened = 0  # connections opened, for tests of the pool

    async def request(self, method: str, path: str, headers: dict[str, str], body: bytes | None = None,
                      sink: Sink | None = None) -> Response:
        """The answer; with `sink`, a 2xx answer's body goes to the sink as it comes (Response.body empty)."""
        head = [f"{method} {self.base}{path} HTTP/1.1", f"Host: {self.host_header}", "Accept: application/json",
                f"Content-Length: {len(body or b'')}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        async with self._slots:
            async with asyncio.timeout(self.timeout) as limit:
                # A streamed answer may take longer than `timeout` to come whole: the limit is then
                # renewed with each piece (no piece for `timeout` seconds is the timeout).
                renew = (lambda: limit.reschedule(asyncio.get_running_loop().time() + self.timeout)) if sink else None
                while True:
                    reused = bool(self._idle)
                    reader, writer = self._idle.pop() if reused else await self._open()
                    try:
                        response, keep = await self._exchange(reader, writer, data, reused, sink, renew)
                    except StaleConnection:
                        _close(writer)
                        continue  # the server closed it while idle: again on a fresh connection
                    except BaseException:
                        _close(writer)
                        raise
                    if keep:
                        self._idle.append((reader, writer))
                    else:
                        _close(writer)
                    return response

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.opened += 1
        return await asyncio.open_connection(
            self.host, self.port, ssl=self.ssl_context, server_hostname=self.host if self.tls else None,
            limit=1024 * 1024)

    async def _exchange(self, reader, writer, data: bytes, reused: bool, sink: Sink | None = None,
                        renew: Callable[[], None] | None = None) -> tuple[Response, bool]:
        try:
            writer.write(data)
            await writer.drain()
            line = await reader.readline()
        except (ConnectionResetError, BrokenPipeError) as err:
            if reused:
                raise StaleConnection() from err
            raise
        if not line:
            if reused:
                raise StaleConnection()
            raise ConnectionResetError("the server closed the connection without answering")
        while True:
            status, version = _status(line)
            headers = await _headers(reader)
            if 100 <= status < 200:  # an interim answer (we never ask for 100-continue): the real one follows
                line = await reader.readline()
                continue
            break
        body = await _body(reader, status, headers, sink if 200 <= status < 300 else None, renew)
        close = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
        framed = "content-length" in headers or "chunked" in headers.get("transfer-encoding", "").lower()
        return Response(status, headers, body), not close and (framed or status in (204, 304))

    async def close(self) -> None:
        while self._idle:
            _, writer = self._idle.pop()
            _close(writer)


def _close(writer: asyncio.StreamWriter) -> None:
    try:
        writer.close()
    except Exception:  # noqa: BLE001 - closing a broken transport
        pass


def _status(line: bytes) -> tuple[int, str]:
    parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HttpProtocolError(f"not an HTTP response: {line[:80]!r}")
    return int(parts[1]), parts[0]


async def _headers(reader: asyncio.StreamReader) -> dict[str, str]:
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = await reader.readline()
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
        if line in (b"\r\n", b"\n"):
            return headers
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise HttpProtocolError(f"bad header line: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    raise HttpProtocolError(f"more than {MAX_HEADERS} headers")


async def _body(reader: asyncio.StreamReader, status: int, headers: dict[str, str], sink: Sink | None = None,
                renew: Callable[[], None] | None = None) -> bytes:
    if status in (204, 304):
        return b""
    if sink is not None:
        await _stream(reader, headers, sink, renew or (lambda: None))
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = bytearray()
        while True:
            size = _chunk_size(await reader.readline())
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(out)
            if len(out) + size > MAX_BODY:
                raise HttpProtocolError("answer too large")
            out += await reader.readexactly(size)
            await reader.readline()
    if "content-length" in headers:
        return await reader.readexactly(_content_length(headers, MAX_BODY))
    out = bytearray()  # neither: the body ends when the server closes
    while chunk := await reader.read(65536):
        out += chunk
        if len(out) > MAX_BODY:
            raise HttpProtocolError("answer too large")
    return bytes(out)


async def _stream(reader: asyncio.StreamReader, headers: dict[str, str], sink: Sink, renew: Callable[[], None]) -> None:
    """The body handed to `sink` in pieces of at most READ bytes, with a turn of the event loop
    after each (a read of buffered bytes does not give one), the time limit renewed by each."""
    async def pieces(size: int | None) -> None:  # size None: up to EOF
        while size is None or size > 0:
            piece = await reader.read(READ if size is None else min(READ, size))
            if not piece:
                if size is None:
                    return
                raise asyncio.IncompleteReadError(b"", size)
            renew()
            sink(piece)
            await asyncio.sleep(0)
            if size is not None:
                size -= len(piece)

    if "chunked" in headers.get("transfer-encoding", "").lower():
        while size := _chunk_size(await reader.readline()):
            await pieces(size)
            await reader.readline()
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass  # trailers
    elif "content-length" in headers:
        await pieces(_content_length(headers, None))
    else:
        await pieces(None)


def _chunk_size(line: bytes) -> int:
    try:
        size = int(line.split(b";", 1)[0].strip(), 16)
    except ValueError as err:
        raise HttpProtocolError(f"bad chunk size: {line[:40]!r}") from err
    if size < 0:
        raise HttpProtocolError(f"bad chunk size: {line[:40]!r}")
    return size


def _content_length(headers: dict[str, str], limit: int | None) -> int:
    try:
        length = int(headers["content-length"])
    except ValueError as err:
        raise HttpProtocolError(f"bad Content-Length: {headers['content-length']!r}") from err
    if length < 0 or (limit is not None and length > limit):
        raise HttpProtocolError(f"Content-Length {length} out of range")
    return length
