"""SlurmBackend over slurmrestd (Slurm's REST API, data parsers v0.0.40 to v0.0.45) with a JWT.

What slurmrestd answers, as read from Slurm 26.05's source (src/slurmrestd, src/plugins/data_parser):
- Every answer is a JSON object with `meta`, `errors` and `warnings`. A failed call usually has a
  non-2xx status (502/504 when slurmctld cannot be reached, 404 for an unknown job, 500 otherwise),
  but not always: a 200 whose `errors` is not empty is a failure too, and is treated as one (fail
  closed, as Slinky's client learned).
- No token gets 401; a token slurmctld does not accept (expired, signed with another key) gets 511.
  Both are `SlurmAuthError`: the token is read again once (it may have been renewed) and the call
  retried once; if it still fails, the error says so plainly.
- Connection refused, resets and timeouts are `SlurmUnavailable`, as an SSH or slurmctld outage is
  for the scontrol backend, so the operator's `SlurmView.available=false` path is the same.

Calls:
- nodes: GET /slurm/V/nodes/ (one call; asked-for names are filtered here, unknown ones are absent).
- jobs: GET /slurm/V/jobs/, filtered here as `squeue -a [-p] [-t]` would; job ids are printed as
  squeue prints them: 42, 42_3 (array task), 7_[0-3] (pending array tasks), 5+1 (het component).
  No version filters jobs by partition or state (26.05's openapi/slurmctld reads only `update_time`
  and `flags`; GET /jobs/state/ has no partition, nodes or GRES), and a job is some 5 KB of JSON:
  the answer is read as it comes (jsonstream.py), each job filtered and reduced to a SlurmJob
  alone, so memory is what is kept, whatever the queue's size.
- topology: slurmrestd has no topology endpoint in any version: [] (what scontrol gives for
  topology/flat). Use `spec.topology.blockLabel` with REST access.
- drain/resume: POST /slurm/V/node/NAME {"state":["DRAIN"],"reason":...} / {"state":["RESUME"]},
  one per node, concurrently. Resuming a node that is not drained succeeds, as with scontrol
  ("Invalid node state specified"; 26.05 says "Invalid node state transition", which is not
  specific, so then the node is read and must show no DRAIN and not be DOWN).
- cancel: DELETE /slurm/V/jobs/ {"jobs":[...],"signal":"SIGKILL"} (every version from v0.0.40): one
  call that takes every squeue id form, as scancel does; per-job errors in `status` are failures
  except "already finished"/"invalid job id" (scancel exits 0 for those).
- requeue: GET /slurm/V/job/ID/requeue, which only v0.0.45 (Slurm 26.05) serves. On older
  versions there is no way to requeue over REST: `requeue` raises SlurmUnsupported saying so (the
  operator reports the failed action; use drain.onTimeout Cancel, Wait or Rollback there). As with
  scontrol, a requeued job is then released (POST /slurm/V/job/ID {"begin_time":"now"}) once PENDING.
- signal (drain.onTimeout Checkpoint): DELETE /slurm/V/job/ID?signal=USR1&flags=BATCH_JOB (FULL_JOB for
  every step), one per job: openapi/slurmctld's `_parse_job_delete` reads `signal` and the WARN_FLAGS
  `flags` in v0.0.42 to v0.0.45 (read in 26.05's source; v0.0.40/41, 24.11's, take the same query).
  A job's own `--signal` has no field in any version's job (kill_warning_* belong to the job
  *description* of a submission only); v0.0.44+ give its `submit_line`, which shows the option when
  it was on sbatch's command line (SlurmJob.declared_signal). A job's `requeue` and `batch_flag`
  are in every version (SlurmJob.requeue).
- reservations (every one is listed: the planner keeps nodes in others' in Slurm; only the planned
  handover's, named `slurmpool-...`, are ever created, changed or deleted): GET /slurm/V/reservations/, POST /slurm/V/reservations/ {"reservations":[desc]}
  (create; slurmrestd updates one of that name instead), DELETE /slurm/V/reservation/NAME. Only
  v0.0.43+ (Slurm 25.05+) can create and delete (measured on 26.05.3: v0.0.42's POST is a 404), so
  `can_reserve()` says from the negotiated version whether to make any; every version lists them
  (GET, v0.0.40 on: others' are kept in Slurm on 24.11 too). partition_max_times:
  GET /slurm/V/partitions/ (maximums.time, minutes; infinite: UNLIMITED).
- ping: GET /slurm/V/ping/; a controller that is not responding is SlurmUnavailable, unless its
  status says the token was refused (26.05 answers 200 then): SlurmAuthError.

HTTP goes through http.py (a keep-alive pool on asyncio streams), not aiohttp: see there why.

The API version is the highest of `versions` that the server lists in GET /openapi/v3 (probing
GET /slurm/V/ping/ from the highest down when the spec cannot be read), chosen on first use and
again after a 404 for an unknown path (slurmrestd upgraded or downgraded under us).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from . import validate
from .backend import (
    _RELEASE_ALREADY, _REQUEUE_ALREADY, _REQUEUE_REFUSED, _RESERVATION_GONE, _RESUME_ALREADY, _SETTLING, REFUSED, SETTLE_POLL, power_requests,
    refuse_power_down,
)
from .backoff import Backoff
from .errors import UNAVAILABLE_MARKERS, SlurmError, SlurmUnavailable, SlurmUnsupported
from .http import HttpClient, HttpProtocolError, Sink
from .jsonstream import ListStream
from .models import DeclaredSignal, PowerSave, SlurmJob, SlurmNode, SlurmReservation, TopologyGroup, gpu_count
from .parse import power_save_from_config

log = logging.getLogger(__name__)

KNOWN_VERSIONS = ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
REQUEUE_VERSIONS = frozenset({"v0.0.45"})  # the first data parser with GET /job/{id}/requeue
# The first data parser that creates and deletes reservations (Slurm 25.05); 24.11 serves up to v0.0.42.
RESERVATION_VERSIONS = frozenset({"v0.0.43", "v0.0.44", "v0.0.45"})
# The first data parser with GET /conf (slurm.conf as slurmctld has it): Slurm 26.05.
CONF_VERSIONS = frozenset({"v0.0.45"})
POWER_SAVE_KEYS = ("SuspendProgram", "ResumeProgram", "SuspendTime", "ResumeTimeout", "SuspendExcParts",
                   "SuspendExcNodes", "ReconfigFlags", "SuspendRate", "ResumeRate", "SlurmctldParameters")
# The node states a power request sends: flag names every data parser from v0.0.40 knows (measured:
# v0.0.42 to v0.0.44 refuse "POWER_DOWN_FORCE" and "POWER_DOWN_ASAP" as unknown flags, with 500).
_POWER_STATES = {"POWER_DOWN": ["POWER_DOWN"], "POWER_UP": ["POWER_UP"], "POWER_DOWN_FORCE": ["POWER_DOWN", "POWERED_DOWN"]}
_VERSION_PATH = re.compile(r"^/slurm/(v0\.0\.\d+)/")

NODE_BASE_STATES = ("UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "INVALID")
JOB_BASE_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
})
# squeue's %T is job_state_string(): the first of these flags the job has, else its base state.
JOB_FLAG_PRECEDENCE = (
    "COMPLETING", "STAGE_OUT", "CONFIGURING", "EXPEDITING", "RESIZING", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING",
)
# What squeue lists without -t: jobs not finished, or still completing.
_LISTED_BY_DEFAULT = frozenset({"PENDING", "RUNNING", "SUSPENDED"})
# scancel exits 0 for these; so does cancel.
_CANCEL_ALREADY = ("job has already finished", "already completing or completed", "invalid job id specified",
                   "job/step already completing or completed")
# RESUME refused on a node that is not drained or down: 24.11's words, and 26.05's (not specific).
_RESUME_REFUSED = ("invalid node state specified", "invalid node state transition")


class SlurmAuthError(SlurmError):
    """slurmrestd refused the credentials (401, 511) or they could not be read."""


@dataclass(frozen=True)
class RestAuth:
    """A JWT and how to present it: X-SLURM-USER-TOKEN (with X-SLURM-USER-NAME when `user` is
    set), or `Authorization: Bearer`."""

    token: str
    user: str | None = None
    bearer: bool = False

    def headers(self) -> dict[str, str]:
        validate.token(self.token)  # the last check before a header: never CR/LF into the request
        if self.user:
            validate.user_name(self.user)
        if self.bearer:
            out = {"Authorization": f"Bearer {self.token}"}
        else:
            out = {"X-SLURM-USER-TOKEN": self.token}
        if self.user:
            out["X-SLURM-USER-NAME"] = self.user
        return out

    def __repr__(self) -> str:  # never log a token
        return f"RestAuth(token=<{len(self.token)} chars>, user={self.user!r}, bearer={self.bearer})"


class CachedToken:
    """Credentials read through `read` (the operator reads a Secret), kept `max_age` seconds.

    `get(refresh=True)` reads at once (after a 401/511: the token may have been renewed). A read
    that fails while a token is cached keeps the cached one (an API server blip must not stop
    Slurm access), unless the read was forced by a refusal: then the failure is the answer."""

    def __init__(self, read: Callable[[], Awaitable[RestAuth]], max_age: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self._read = read
        self.max_age = max_age
        self._clock = clock
        self._cached: tuple[float, RestAuth] | None = None
        self._lock = asyncio.Lock()
        self.reads = 0

    async def get(self, refresh: bool = False) -> RestAuth:
        async with self._lock:
            now = self._clock()
            if self._cached and not refresh and now - self._cached[0] < self.max_age:
                return self._cached[1]
            self.reads += 1
            try:
                auth = await self._read()
            except Exception as err:  # noqa: BLE001 - reported as the backend's own error below
                if self._cached and not refresh:
                    log.warning("cannot read the slurmrestd token again, keeping the one read before: %s", err)
                    self._cached = (now, self._cached[1])
                    return self._cached[1]
                raise SlurmAuthError(f"cannot read the slurmrestd token: {err}") from err
            if not isinstance(auth, RestAuth) or not auth.token:
                raise SlurmAuthError("the slurmrestd token is empty")
            self._cached = (now, auth)
            return auth


class StaticToken:
    def __init__(self, auth: RestAuth):
        self.auth = auth

    async def get(self, refresh: bool = False) -> RestAuth:
        return self.auth


class RestBackend:
    """SlurmBackend over slurmrestd. One HttpClient (a pool of keep-alive connections, see
    http.py for why not aiohttp) per backend, made on first use inside the running loop. Every call is retried on
    SlurmUnavailable with exponential backoff and jitter, as ScontrolBackend does; `commands_run` counts
    HTTP requests, retries included."""

    def __init__(
        self,
        url: str,
        token: CachedToken | StaticToken | RestAuth,
        *,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 20.0,
        retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 5.0,
        jitter: float = 0.2,
        requeue_settle: float = 30.0,
        versions: Sequence[str] = KNOWN_VERSIONS,
        connections: int = 8,
    ) -> None:
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(f"slurmrestd url {url!r} must start with http:// or https://")
        self.url = url.rstrip("/")
        self.token = StaticToken(token) if isinstance(token, RestAuth) else token
        self.ssl_context = ssl_context
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.retry_backoff = Backoff(backoff, max_backoff, jitter)
        self.requeue_settle = requeue_settle
        self.versions = tuple(versions)
        self.connections = connections
        self.version: str | None = None
        self.commands_run = 0
        self._http: HttpClient | None = None
        self._negotiating = asyncio.Lock()

    # ------------------------------------------------------------------ HTTP

    def _client(self) -> HttpClient:
        if self._http is None:
            self._http = HttpClient(self.url, ssl_context=self.ssl_context, timeout=self.timeout,
                                    connections=self.connections)
        return self._http

    async def _send(self, method: str, path: str, body: Any = None, refresh: bool = False,
                    stream: Callable[[], ListStream] | None = None) -> tuple[int, Any, str]:
        """One HTTP request: (status, parsed JSON or None, text). Transport failures are
        SlurmUnavailable; nothing here judges the status. `stream`: a success's body is read as it
        comes into a new ListStream (its parsed answer is then the stream's; no text)."""
        auth = await self.token.get(refresh=refresh)
        if not auth.token:
            raise SlurmAuthError("the slurmrestd token is empty", argv=(method, path))
        headers = auth.headers()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.commands_run += 1
        argv = (method, path)
        reader = stream() if stream else None
        sink: Sink | None = reader.feed if reader else None
        try:
            resp = await self._client().request(method, path, headers, data, sink)
        except ssl.SSLCertVerificationError as e:
            raise SlurmError(f"slurmrestd at {self.url}: TLS certificate not trusted: {e}", argv=argv) from e
        except ssl.SSLError as e:
            raise SlurmError(f"slurmrestd at {self.url}: TLS error: {e}", argv=argv) from e
        except HttpProtocolError as e:
            raise SlurmError(f"slurmrestd at {self.url} did not answer in HTTP ({method} {path}): {e}", argv=argv) from e
        except (OSError, EOFError, TimeoutError) as e:
            what = "timed out" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
            raise SlurmUnavailable(f"slurmrestd at {self.url} unreachable ({method} {path}): {what}", argv=argv) from e
        except ValueError as e:  # the stream's JSON (a SlurmError raised by its keep goes through)
            raise SlurmError(f"slurmrestd answered {method} {path} with malformed JSON: {e}", argv=argv) from e
        if reader is not None and 200 <= resp.status < 300:
            try:
                return resp.status, reader.close(), ""
            except ValueError as e:
                raise SlurmError(f"slurmrestd answered {method} {path} with malformed JSON: {e}", argv=argv) from e
        text = resp.body.decode("utf-8", errors="replace")
        try:
            parsed = json.loads(text) if text.strip() else None
        except ValueError:
            parsed = None
        return resp.status, parsed, text

    async def _call(self, method: str, path: str, body: Any = None, *, benign: tuple[str, ...] = (),
                    stream: Callable[[], ListStream] | None = None) -> dict:
        """A request with the API version prefix, judged: returns the JSON object of a success,
        raises SlurmAuthError, SlurmUnavailable or SlurmError. `benign`: error texts that mean
        the goal already holds (then the answer counts as a success). `stream`: see _send."""
        for attempt in range(self.retries + 1):
            try:
                version = await self._version()
                full = f"/slurm/{version}{path}"
                status, data, text = await self._send(method, full, body, stream=stream)
                if status in (401, 511):  # the token may have been renewed: read it again, once
                    status, data, text = await self._send(method, full, body, refresh=True, stream=stream)
                return self._judge(method, full, status, data, text, benign)
            except SlurmUnavailable as e:
                if attempt == self.retries:
                    raise
                delay = self.retry_backoff.delay(attempt + 1)
                log.warning("slurmrestd unavailable (attempt %d), retrying in %.2fs: %s", attempt + 1, delay, e)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    def _judge(self, method: str, path: str, status: int, data: Any, text: str, benign: tuple[str, ...]) -> dict:
        argv = (method, path)
        errors = _errors(data)
        said = "; ".join(errors) if errors else (text.strip()[:300] or "(no body)")
        if status == 401:
            raise SlurmAuthError(
                f"slurmrestd refused the request (401 Unauthorized): no token, or a token it cannot use: {said}",
                argv=argv, returncode=status, stdout=text)
        if status == 511:
            raise SlurmAuthError(
                "slurmrestd did not accept the token (511 Network Authentication Required): expired, "
                f"or not signed with slurmctld's jwt key: {said}", argv=argv, returncode=status, stdout=text)
        if status == 404 and not isinstance(data, dict):
            # Not slurmrestd's answer about an object: the path itself is unknown (another version).
            self.version = None
            raise SlurmError(f"slurmrestd does not serve {method} {path} (404)", argv=argv, returncode=status, stdout=text)
        ok = 200 <= status < 300
        if ok and not isinstance(data, dict):
            if status == 204:
                return {}
            raise SlurmError(f"slurmrestd answered {method} {path} with no JSON object: {text[:200]!r}",
                             argv=argv, returncode=status, stdout=text)
        if ok and not errors:
            return data
        lowered = [e.lower() for e in errors]
        if benign and lowered and all(any(b in e for b in benign) for e in lowered):
            return data if isinstance(data, dict) else {}
        message = f"slurmrestd {method} {path} failed ({status}): {said}"
        unavailable = status in (502, 503, 504) or any(m in e for e in lowered for m in UNAVAILABLE_MARKERS)
        cls = SlurmUnavailable if unavailable else SlurmError
        raise cls(message, argv=argv, returncode=status, stdout=text, stderr="\n".join(errors))

    async def _version(self) -> str:
        if self.version:
            return self.version
        async with self._negotiating:
            if not self.version:
                self.version = await self._negotiate()
        return self.version

    async def _negotiate(self) -> str:
        """The highest of `versions` the server offers: from its OpenAPI spec, else by probing."""
        status, data, text = await self._send("GET", "/openapi/v3")
        if status in (401, 511):
            status, data, text = await self._send("GET", "/openapi/v3", refresh=True)
        if status == 200 and isinstance(data, dict) and isinstance(data.get("paths"), dict):
            offered = {m.group(1) for p in data["paths"] if (m := _VERSION_PATH.match(p))}
            usable = [v for v in self.versions if v in offered]
            if usable:
                return max(usable, key=_version_key)
            raise SlurmError(
                f"slurmrestd at {self.url} offers API versions {sorted(offered, key=_version_key)}, none of "
                f"{list(self.versions)} (is it run with -s openapi/slurmctld?)", argv=("GET", "/openapi/v3"))
        for version in sorted(self.versions, key=_version_key, reverse=True):
            path = f"/slurm/{version}/ping/"
            status, data, text = await self._send("GET", path)
            if status in (401, 511):
                self._judge("GET", path, status, data, text, ())
            if status != 404:
                return version
        raise SlurmError(f"slurmrestd at {self.url} serves none of the API versions {list(self.versions)}",
                         argv=("GET", "/openapi/v3"), returncode=status, stdout=text)

    # ------------------------------------------------------------------ reads

    async def nodes(self, names: Sequence[str] | None = None) -> dict[str, SlurmNode]:
        wanted = None
        if names is not None:
            wanted = set(validate.node_names(names))
            if not wanted:
                return {}
        data = await self._call("GET", "/nodes/")
        if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
            # A 200 without its node list is a failed poll, never an empty cluster (nothing to drain).
            raise SlurmUnavailable(f"slurmrestd answered GET /nodes/ without a node list (keys: {sorted(data)[:8] if isinstance(data, dict) else type(data).__name__})")
        nodes = {}
        for raw in data["nodes"]:
            node = parse_rest_node(raw)
            if node is not None and (wanted is None or node.name in wanted):
                nodes[node.name] = node
        return nodes

    filters_jobs = False  # GET /jobs/ answers every job: a caller wanting several filters asks once

    async def jobs(self, partition: str | None = None, states: Sequence[str] | None = None) -> list[SlurmJob]:
        if partition is not None:
            validate.partition(partition)
        wanted = None
        if states is not None:
            wanted = set(validate.job_states(states))
            if not wanted:
                return []

        def keep(raw: Any) -> SlurmJob | None:
            """A job of the answer as it comes: filtered on its state and partition first (most of a
            queue is not asked for), read whole only when kept."""
            try:
                if not _state_wanted(job_state(raw.get("job_state"))[1], wanted):
                    return None
                if partition is not None and partition not in _text(raw.get("partition")).split(","):
                    return None
                return parse_rest_job(raw, shared_tells)[0]
            except (AttributeError, KeyError, TypeError, ValueError) as e:
                raise SlurmError(f"cannot read a job in slurmrestd's answer: {e}: {str(raw)[:200]}",
                                 argv=("GET", "/jobs/")) from e

        shared_tells = True  # set once the version is known, before the first job comes
        def reader() -> ListStream:
            nonlocal shared_tells
            # v0.0.45 dumps the removed "shared" as an empty list and has no "exclusive" in a job's info.
            shared_tells = not self.version or _version_key(self.version) < _version_key("v0.0.45")
            return ListStream("jobs", keep)

        data = await self._call("GET", "/jobs/", stream=reader)
        if not isinstance(data.get("jobs"), list):  # a failed poll, never an empty queue (no demand, nothing running)
            raise SlurmUnavailable(f"slurmrestd answered GET /jobs/ without a job list (keys: {sorted(data)[:8]})")
        return data["jobs"]

    async def topology(self) -> list[TopologyGroup]:
        """slurmrestd has no topology endpoint: no blocks (as scontrol says for topology/flat)."""
        return []

    async def ping(self) -> None:
        """slurmctld answers: UP ("pinged", v0.0.40/41) or "responding" (v0.0.42+). A token
        slurmctld does not accept is not a 511 here: the ping answers 200 with the controller not
        responding and "status": "Protocol authentication error". That is a SlurmAuthError (after
        reading the token again once), not an outage."""
        for fresh in (False, True):
            if fresh:
                await self.token.get(refresh=True)
            data = await self._call("GET", "/ping/")
            pings = [p for p in _list(data, "pings") if isinstance(p, dict)]
            if not pings:
                raise SlurmUnavailable("slurmrestd answered the ping with no controller", argv=("GET", "/ping/"))
            if any(p.get("responding") is True or str(p.get("pinged", "")).upper() == "UP" for p in pings):
                return
            first = pings[0]
            status = str(first.get("status") or first.get("pinged") or "DOWN")
            if "authentication" not in status.lower():
                raise SlurmUnavailable(f"slurmctld is not responding: {first.get('hostname', '?')}: {status}",
                                       argv=("GET", "/ping/"), stdout=json.dumps(data)[:2000])
        raise SlurmAuthError(f"slurmctld did not accept the token (ping: {status}): expired, or not signed with "
                             "slurmctld's jwt key", argv=("GET", "/ping/"))

    # ------------------------------------------------------------------ reservations

    async def can_reserve(self) -> bool:
        """Can this slurmrestd create and delete reservations? Decided by the negotiated version
        (v0.0.43+), never by trying: the operator asks every pass."""
        return await self._version() in RESERVATION_VERSIONS

    async def reservations(self) -> list[SlurmReservation]:
        """Every reservation: the operator's (name prefix `slurmpool-`, the only ones it ever changes
        or deletes: validate.reservation_name) and everyone else's, which the planner keeps in Slurm."""
        data = await self._call("GET", "/reservations/")
        if not isinstance(data.get("reservations"), list):
            raise SlurmError("slurmrestd answered GET /reservations/ without a reservation list", argv=("GET", "/reservations/"))
        found = (parse_rest_reservation(raw) for raw in data["reservations"])
        return [r for r in found if r is not None]

    async def partition_max_times(self) -> dict[str, timedelta | None]:
        """Each partition's MaxTime (None: UNLIMITED): the planned handover's default lead time."""
        data = await self._call("GET", "/partitions/")
        out: dict[str, timedelta | None] = {}
        for raw in _list(data, "partitions"):
            if isinstance(raw, dict) and isinstance(raw.get("name"), str):
                minutes = _number((raw.get("maximums") or {}).get("time"))
                out[raw["name"]] = None if minutes is None else timedelta(minutes=minutes)
        return out

    async def create_reservation(self, name: str, nodes: Sequence[str], start: datetime, minutes: int, flags: Sequence[str]) -> None:
        """Create an operator reservation (root's, on exactly these nodes) from `start` for `minutes`,
        as ScontrolBackend does."""
        checked = validate.node_names(nodes)
        if not checked:
            raise ValueError("a reservation needs nodes")
        desc = {"name": validate.reservation_name(name), "node_list": validate.compress(checked),
                "start_time": {"set": True, "number": int(start.timestamp())},
                "duration": {"set": True, "number": max(1, int(minutes))}, "users": ["root"],
                "flags": validate.reservation_flags(flags)}
        await self._reserving()
        await self._call("POST", "/reservations/", {"reservations": [desc]})

    async def delete_reservation(self, name: str) -> None:
        """Delete an operator reservation; one already gone is done."""
        checked = validate.reservation_name(name)
        await self._reserving()
        await self._call("DELETE", f"/reservation/{quote(checked, safe='')}", benign=_RESERVATION_GONE)

    # ------------------------------------------------------------------ power saving

    async def power_down(self, nodes: Sequence[str], again: bool = False) -> None:
        """POST /node/NAME {"state": ["POWER_DOWN"]} per node that needs it (backend.power_requests);
        a node powering up without a job gets POWER_DOWN and POWERED_DOWN together, the two flags
        26.05's POWER_DOWN_FORCE is made of, which every version from v0.0.40 parses."""
        await self._power(nodes, down=True, again=again)

    async def power_up(self, nodes: Sequence[str]) -> None:
        """POST /node/NAME {"state": ["POWER_UP"]} per node that needs it (backend.power_requests)."""
        await self._power(nodes, down=False)

    async def _power(self, nodes: Sequence[str], down: bool, again: bool = False) -> None:
        checked = list(dict.fromkeys(validate.node_names(nodes)))
        if not checked:
            return
        current = await self.nodes(checked)
        requests = power_requests([(n, current.get(n)) for n in checked], down, again)
        sends = [(name, _POWER_STATES[state]) for state, names in requests.items() if state != REFUSED for name in names]
        await self._each(sends, lambda item: self._call("POST", f"/node/{quote(item[0], safe='')}", {"state": item[1]}))
        refuse_power_down(requests)

    async def power_save(self) -> PowerSave:
        """slurm.conf's power saving from GET /conf (v0.0.45, Slurm 26.05). Older versions have no
        endpoint that tells it (their partitions show SuspendTime and ResumeTimeout, never the
        programs): SlurmUnsupported, which the operator reports as not known."""
        version = await self._version()
        if version not in CONF_VERSIONS:
            raise SlurmUnsupported(
                f"slurmrestd {version} does not tell slurm.conf's power saving (GET /conf is v0.0.45's, Slurm 26.05): "
                "not known over this REST API; check slurm.conf as docs/slurm-admin.md says, or use SSH access",
                argv=("GET", "/conf"))
        data = await self._call("GET", "/conf")
        conf = data.get("slurm_conf")
        if not isinstance(conf, dict):
            raise SlurmError("slurmrestd answered GET /conf without slurm_conf", argv=("GET", "/conf"))
        return power_save_from_config({k: _conf_text(conf[k]) for k in POWER_SAVE_KEYS if k in conf})

    async def _reserving(self) -> None:
        if not await self.can_reserve():
            raise SlurmUnsupported(f"slurmrestd {self.version} cannot create or delete reservations (v0.0.43, Slurm 25.05, "
                             "and later can)", argv=("POST", "/reservations/"))

    # ------------------------------------------------------------------ writes

    async def drain(self, nodes: Sequence[str], reason: str) -> None:
        checked = list(dict.fromkeys(validate.node_names(nodes)))
        validate.reason(reason)
        await self._each(checked, lambda n: self._call("POST", f"/node/{quote(n, safe='')}",
                                                       {"state": ["DRAIN"], "reason": reason}))

    async def resume(self, nodes: Sequence[str]) -> None:
        """RESUME each node. Slurm refuses RESUME on a node that is neither drained nor down
        ("Invalid node state specified" up to 24.11, "Invalid node state transition" in 26.05):
        that is the goal already, but the 26.05 words are not specific to it, so the node is read
        and the refusal forgiven only when it shows no DRAIN and is not DOWN."""
        checked = list(dict.fromkeys(validate.node_names(nodes)))
        await self._each(checked, self._resume_one)

    async def _resume_one(self, name: str) -> None:
        try:
            await self._call("POST", f"/node/{quote(name, safe='')}", {"state": ["RESUME"]}, benign=_RESUME_ALREADY)
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            if not any(m in e.output.lower() for m in _RESUME_REFUSED):
                raise
            node = (await self.nodes([name])).get(name)
            if node is None or node.drain_set or node.state == "DOWN":
                raise

    async def cancel(self, job_ids: Sequence[str]) -> None:
        ids = rest_job_ids(job_ids)
        if not ids:
            return
        data = await self._call("DELETE", "/jobs/", {"jobs": ids, "signal": "SIGKILL"}, benign=_CANCEL_ALREADY)
        failed = []
        for entry in _list(data, "status"):
            err = entry.get("error") if isinstance(entry, dict) else None
            if not isinstance(err, dict) or not err.get("code"):
                continue
            text = f"{err.get('string') or ''} {err.get('message') or ''}".strip()
            if not any(b in text.lower() for b in _CANCEL_ALREADY):
                failed.append(f"{entry.get('step_id') or _number(entry.get('job_id'))}: {text}")
        if failed:
            raise SlurmError(f"slurmrestd could not cancel: {'; '.join(failed)}", argv=("DELETE", "/jobs/"),
                             stdout=json.dumps(data)[:2000])

    async def signal(self, job_ids: Sequence[str], signal: str, batch_only: bool) -> None:
        """Send each job a signal: DELETE /job/{id}?signal=S&flags=BATCH_JOB (or FULL_JOB), every
        version from v0.0.40 (openapi/slurmctld's _parse_job_delete; flags unset would mean FULL_JOB).
        A job already finished or purged is done, as scancel."""
        ids = rest_job_ids(job_ids)
        query = f"signal={quote(validate.signal(signal), safe='')}&flags={'BATCH_JOB' if batch_only else 'FULL_JOB'}"
        await self._each(ids, lambda i: self._call("DELETE", f"/job/{quote(i, safe='')}?{query}", benign=_CANCEL_ALREADY))

    async def requeue(self, job_ids: Sequence[str]) -> None:
        """Requeue jobs and let them start again at once (see ScontrolBackend.requeue). Only the
        v0.0.45 API (Slurm 26.05) can requeue; a pending array record (7_[0-3]) is pending
        already, so there is nothing to requeue (scontrol would say "Job is pending execution")."""
        # A part of a heterogeneous job (5+1) is requeued through its leader (5), as with scontrol.
        ids = list(dict.fromkeys(validate.het_leader(i) for i in rest_job_ids(job_ids) if "[" not in i))
        if not ids:
            return
        version = await self._version()
        if version not in REQUEUE_VERSIONS:
            raise SlurmUnsupported(
                f"slurmrestd {version} has no requeue endpoint (Slurm 26.05's v0.0.45 has one): cannot requeue "
                f"{','.join(ids)} over REST; use drain.onTimeout Cancel, Wait or Rollback, or SSH access",
                argv=("GET", "/job/{id}/requeue"))
        refused: SlurmError | None = None
        try:
            await self._each(ids, lambda i: self._call("GET", f"/job/{quote(i, safe='')}/requeue",
                                                       benign=_REQUEUE_ALREADY))
        except SlurmError as e:  # one Slurm may not requeue (422, 2037): the others are still released
            if isinstance(e, SlurmUnavailable) or not any(m in e.output.lower() for m in _REQUEUE_REFUSED):
                raise
            refused = e
        numeric = await self._wait_pending(ids)
        await self._each(numeric, lambda n: self._release(n))
        if refused is not None:
            raise refused

    async def _release(self, job_id: int) -> None:
        data = await self._call("POST", f"/job/{job_id}", {"begin_time": "now"}, benign=_RELEASE_ALREADY)
        bad = []
        for entry in _list(data, "results"):
            if isinstance(entry, dict) and entry.get("error_code"):
                text = f"{entry.get('error') or ''} {entry.get('why') or ''}".strip()
                if not any(b in text.lower() for b in _RELEASE_ALREADY):
                    bad.append(text)
        if bad:
            raise SlurmError(f"slurmrestd could not release job {job_id}: {'; '.join(bad)}", argv=("POST", f"/job/{job_id}"))

    async def _wait_pending(self, ids: list[str]) -> list[int]:
        """Wait (bounded by requeue_settle) until no requeued job is still settling; the numeric
        job ids to release of those then pending: an array task (42_3) has its own, and every part
        of a heterogeneous job (asked as its leader, 5) is released (a POST to the leader's id
        releases the leader only: measured on 26.05, its other parts kept BeginTime +120 s)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.requeue_settle
        polls = SETTLE_POLL.delays()
        delay = next(polls)
        while True:
            data = await self._call("GET", "/jobs/", stream=lambda: ListStream("jobs", _requeued(ids)))
            seen: dict[str, list[tuple[int, str, set[str]]]] = {}
            for key, entry in _list(data, "jobs"):
                seen.setdefault(key, []).append(entry)
            settling = [i for i in ids for (_, state, tokens) in seen.get(i, ())
                        if state in _SETTLING or tokens & _SETTLING]
            if not settling or loop.time() + delay > deadline:
                if settling:
                    log.warning("requeued jobs %s still settling after %.0fs", ",".join(dict.fromkeys(settling)),
                                self.requeue_settle)
                return [number for i in ids for (number, state, _) in seen.get(i, ()) if state == "PENDING" and number]
            await asyncio.sleep(delay)
            delay = next(polls)

    async def _each(self, items: list, call: Callable[[Any], Awaitable[Any]]) -> None:
        """Run one call per item concurrently; every call runs, then the first failure is raised
        (a SlurmUnavailable before any other, so the caller backs off)."""
        if not items:
            return
        results = await asyncio.gather(*(call(i) for i in items), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for r in errors:
            if not isinstance(r, Exception):
                raise r
        if errors:
            raise next((e for e in errors if isinstance(e, SlurmUnavailable)), errors[0])

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


# ---------------------------------------------------------------------- mapping


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.lstrip("v").split("."))


def _errors(data: Any) -> list[str]:
    """The `errors` of an answer as text: "error (error_number): description [source]"."""
    if not isinstance(data, dict):
        return []
    out = []
    for e in data.get("errors") or []:
        if isinstance(e, dict):
            parts = [str(e.get("error") or "").strip(), str(e.get("description") or "").strip()]
            text = ": ".join(p for p in parts if p) or json.dumps(e)
            if e.get("error_number"):
                text += f" (error {e['error_number']})"
            out.append(text)
        else:
            out.append(str(e))
    return out


def _list(data: Any, key: str) -> list:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, list) else []


def _number(value: Any) -> int | None:
    """A number as the data parsers dump it: a plain int, or {"set","infinite","number"}
    (None when unset or infinite), or null."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        return _number(value.get("number"))
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _time(value: Any) -> datetime | None:
    seconds = _number(value)
    if not seconds or seconds <= 0:  # 0 is Slurm's "None"/"Unknown"
        return None
    try:
        return datetime.fromtimestamp(seconds, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def _strings(value: Any) -> tuple[str, ...]:
    """A CSV_STRING: a list of strings, or (older dumps) one comma-separated string."""
    if isinstance(value, list):
        return tuple(str(v) for v in value if v not in (None, ""))
    if isinstance(value, str) and value not in ("", "(null)", "N/A"):
        return tuple(v for v in value.split(",") if v)
    return ()


def _conf_text(value: Any) -> str:
    """A GET /conf value as `scontrol show config` prints it: lists joined by commas, a number
    that is not set or infinite as INFINITE."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        number = _number(value)
        return "INFINITE" if number is None else str(number)
    return "" if value is None else str(value)


def _text(value: Any) -> str:
    return value if isinstance(value, str) and value != "(null)" else ""


def _tokens(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v).upper() for v in value if v]
    if isinstance(value, str) and value:
        return [t for t in re.split(r"[+,\s]+", value.upper()) if t]
    return []


def node_state(value: Any) -> tuple[str, frozenset[str]]:
    """["IDLE", "DRAIN"] -> ("IDLE", {"DRAIN"}): the base state and the flags, as scontrol's
    "IDLE+DRAIN". No base state at all reads as UNKNOWN (not responding: fail closed)."""
    tokens = _tokens(value)
    base = next((t for t in tokens if t in NODE_BASE_STATES), "UNKNOWN")
    return base, frozenset(t for t in tokens if t not in NODE_BASE_STATES)


def parse_rest_node(raw: Any) -> SlurmNode | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
        return None
    state, flags = node_state(raw.get("state"))
    reason = _text(raw.get("reason"))
    return SlurmNode(
        name=raw["name"],
        state=state,
        flags=flags,
        reason=reason or None,
        gres=_text(raw.get("gres")),
        gres_used=_text(raw.get("gres_used")),
        features=_strings(raw.get("features")),
        partitions=_strings(raw.get("partitions")),
        slurmd_start=_time(raw.get("slurmd_start_time")),
        reason_user=(_text(raw.get("reason_set_by_user")) or None) if reason else None,
        reason_time=_time(raw.get("reason_changed_at")) if reason else None,
        weight=w if isinstance(w := raw.get("weight"), int) and not isinstance(w, bool) else None,
    )


def parse_rest_reservation(raw: Any) -> SlurmReservation | None:
    """A reservation as GET /reservations/ dumps it (RESERVATION_INFO): node_list is a hostlist
    string ("gpu[02-03]"), flags a list, times {"set","infinite","number"}."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
        return None
    nodes = raw.get("node_list")
    hosts = ",".join(str(n) for n in nodes) if isinstance(nodes, list) else _text(nodes)
    return SlurmReservation(
        name=raw["name"],
        nodes=validate.expand(hosts),
        start=_time(raw.get("start_time")),
        end=_time(raw.get("end_time")),
        flags=frozenset(_tokens(raw.get("flags"))),
        # As scontrol's State: ACTIVE from its start until its end.
        state="ACTIVE" if (s := _time(raw.get("start_time"))) and s <= datetime.now(timezone.utc) else "INACTIVE",
    )


def job_state(value: Any) -> tuple[str, set[str]]:
    """What squeue's %T prints for a job (the first flag of JOB_FLAG_PRECEDENCE, else the base
    state), and every state token (base and flags) for -t filtering."""
    tokens = set(_tokens(value))
    shown = next((f for f in JOB_FLAG_PRECEDENCE if f in tokens), None)
    if shown is None:
        shown = next((t for t in _tokens(value) if t in JOB_BASE_STATES), None) or "UNKNOWN"
    return shown, tokens


def job_id(raw: dict) -> str:
    """The id as squeue's %i prints it (src/squeue/print.c _print_job_job_id)."""
    array_job = _number(raw.get("array_job_id")) or 0
    task_string = _text(raw.get("array_task_string"))
    task = _number(raw.get("array_task_id"))
    het = _number(raw.get("het_job_id")) or 0
    if task_string:
        return f"{array_job}_[{task_string}]"
    if task is not None and array_job:
        return f"{array_job}_{task}"
    if het:
        return f"{het}+{_number(raw.get('het_job_offset')) or 0}"
    number = _number(raw.get("job_id"))
    if number is None:
        raise ValueError("job without job_id")
    return str(number)


def parse_rest_job(raw: dict, shared_tells: bool = True) -> tuple[SlurmJob, set[str]]:
    """A job as GET /jobs/ dumps it (JOB_INFO). `shared_tells`: its "shared" says whether the job
    takes whole nodes (v0.0.40 to v0.0.44: ["none"] for --exclusive, as squeue's %h NO)."""
    if not isinstance(raw, dict):
        raise TypeError(f"a job is a {type(raw).__name__}, not an object")
    state, tokens = job_state(raw.get("job_state"))
    nodes = _text(raw.get("nodes"))
    return SlurmJob(
        job_id=job_id(raw),
        name=_text(raw.get("name")),
        user=_text(raw.get("user_name")),
        state=state,
        partition=_text(raw.get("partition")),
        nodes=validate.expand(nodes),
        gpus_per_node=gpu_count(_text(raw.get("tres_per_node"))),
        num_nodes=_number(raw.get("node_count")) or 0,
        start_time=_time(raw.get("start_time")),
        end_time=_time(raw.get("end_time")),
        # As squeue %r: the desc when Slurm set one ("ReqNodeNotAvail, UnavailableNodes:gpu04"),
        # else the reason's name; so each access path reports the same text.
        reason=(reason := _text(raw.get("state_description")) or _text(raw.get("state_reason"))),
        required_nodes=validate.expand(_hostlist(raw.get("required_nodes"))),
        unavailable_nodes=validate.unavailable_nodes(reason),
        exclusive=_exclusive(raw.get("shared")) if shared_tells else None,
        requeue=_requeueable(raw),
        declared_signal=_declared_signal(raw),
    ), tokens


def _hostlist(value: Any) -> str:
    """A node list as the data parsers dump it: a hostlist string ("gpu[03-04]") or a list of them."""
    return ",".join(str(n) for n in value) if isinstance(value, list) else _text(value)


def _exclusive(shared: Any) -> bool | None:
    """JOB_SHARED as the data parsers dump it: a list of flags ("none": the job takes whole
    nodes; "oversubscribe", "user", "mcs", "topo"; empty: the partition's default), or (older
    dumps) one string. Absent: not known."""
    if shared is None:
        return None
    return "NONE" in _tokens(shared)


def _declared_signal(raw: dict) -> DeclaredSignal | None:
    """The job's own --signal, read from its `submit_line` (v0.0.44+; only what sbatch's command line said)."""
    line, command = raw.get("submit_line"), raw.get("command")
    if not isinstance(line, str) or not line:
        return None
    found = validate.declared_signal(line, command if isinstance(command, str) else "")
    return DeclaredSignal(*found) if found else None


def _requeueable(raw: dict) -> bool | None:
    """Can Slurm requeue the job: a batch job (`batch_flag`) that allows it (`requeue`, false for
    sbatch --no-requeue)? Both are in every version's job (v0.0.40 to v0.0.45); None if either is missing."""
    requeue, batch = raw.get("requeue"), raw.get("batch_flag")
    if not isinstance(requeue, bool) or not isinstance(batch, bool):
        return None
    return requeue and batch


def _requeued(ids: list[str]) -> Callable[[Any], tuple[str, tuple[int, str, set[str]]] | None]:
    """What _wait_pending keeps of a job of GET /jobs/ as it comes: (the id it was asked by: a het
    job's leader for each part, (its number, state, state tokens)) for the jobs asked, else None."""
    asked = set(ids)

    def keep(raw: Any) -> tuple[str, tuple[int, str, set[str]]] | None:
        if not isinstance(raw, dict):
            return None
        het = _number(raw.get("het_job_id")) or 0
        key = str(het) if het else job_id(raw)
        if key not in asked:
            return None
        state, tokens = job_state(raw.get("job_state"))
        return key, (_number(raw.get("job_id")) or 0, state, tokens)
    return keep


def _state_wanted(tokens: set[str], wanted: set[str] | None) -> bool:
    if wanted is None:
        return bool(tokens & _LISTED_BY_DEFAULT) or "COMPLETING" in tokens or "STAGE_OUT" in tokens
    if "ALL" in wanted:
        return True
    return bool(tokens & wanted)


def rest_job_ids(ids: Sequence[str | int]) -> list[str]:
    """Job ids in every form squeue prints (42, 42_3, 7_[0-3], 5+1: validate.job_ids), once each;
    nothing else reaches a URL or a body."""
    return list(dict.fromkeys(validate.job_ids(ids)))
