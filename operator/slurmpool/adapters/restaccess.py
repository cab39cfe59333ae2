"""`spec.slurm.access.rest`: a RestBackend whose JWT (and CA bundle) come from Secrets in the
pool's namespace, read through the Kubernetes adapter (`get` by name: no watch, no list).

The token is read when the backend is built (a missing Secret, key or empty token is a clear
error: the pool is Degraded `SlurmUnavailable` with it, and pools on other access are untouched),
then again at most every TOKEN_MAX_AGE seconds and at once after slurmrestd refuses it (401/511),
so a renewed token is used without a restart. The CA bundle is read once, when the backend is built.
"""

from __future__ import annotations

import ssl
from typing import Awaitable, Callable

from slurmbridge import validate
from slurmbridge.rest import CachedToken, RestAuth, RestBackend

from slurmpool.core.models import RestAccess

ReadSecret = Callable[[str, str], Awaitable[dict[str, str]]]
TOKEN_MAX_AGE = 30.0


def rest_key(namespace: str, rest: RestAccess) -> tuple:
    t, ca = rest.token_secret_ref, rest.ca_secret_ref
    return ("rest", rest.url, rest.auth_header, namespace, t.name, t.key, t.user_key,
            (ca.name, ca.key) if ca else None)


def _value(secret: dict[str, str], namespace: str, name: str, key: str, what: str) -> str:
    value = secret.get(key)
    if value is None:
        raise ValueError(f"Secret {namespace}/{name} has no key {key!r} ({what})")
    value = value.strip()
    if not value:
        raise ValueError(f"Secret {namespace}/{name} key {key!r} ({what}) is empty")
    return value


def token_reader(read_secret: ReadSecret, namespace: str, rest: RestAccess) -> Callable[[], Awaitable[RestAuth]]:
    ref = rest.token_secret_ref

    async def read() -> RestAuth:
        try:
            secret = await read_secret(namespace, ref.name)
        except Exception as err:  # noqa: BLE001 - the API's own words (404, 403) say what is wrong
            raise ValueError(f"cannot read Secret {namespace}/{ref.name}: {_short(err)}") from err
        token = _value(secret, namespace, ref.name, ref.key, "the slurmrestd JWT")
        try:
            validate.token(token)
        except ValueError as err:
            raise ValueError(f"Secret {namespace}/{ref.name} key {ref.key!r} is not a JWT: {err}") from None
        user = _value(secret, namespace, ref.name, ref.user_key, "the Slurm user name") if ref.user_key else None
        if user is not None:
            try:
                validate.user_name(user)
            except ValueError as err:
                raise ValueError(f"Secret {namespace}/{ref.name} key {ref.user_key!r} (the Slurm user name) is {err}") from None
        return RestAuth(token=token, user=user, bearer=rest.auth_header == "Bearer")

    return read


async def build_rest_backend(read_secret: ReadSecret, namespace: str, rest: RestAccess, *,
                             timeout: float, retries: int) -> RestBackend:
    read = token_reader(read_secret, namespace, rest)
    token = CachedToken(read, max_age=TOKEN_MAX_AGE)
    await token.get(refresh=True)  # a bad Secret is reported now, on this pool
    context = None
    if rest.ca_secret_ref:
        ca = rest.ca_secret_ref
        try:
            secret = await read_secret(namespace, ca.name)
        except Exception as err:  # noqa: BLE001
            raise ValueError(f"cannot read Secret {namespace}/{ca.name}: {_short(err)}") from err
        pem = _value(secret, namespace, ca.name, ca.key, "the CA bundle")
        try:
            context = ssl.create_default_context(cadata=pem)
        except (ssl.SSLError, ValueError):
            raise ValueError(f"Secret {namespace}/{ca.name} key {ca.key!r} is not a PEM CA bundle") from None
    return RestBackend(rest.url, token, ssl_context=context, timeout=timeout, retries=retries)


def _short(err: Exception) -> str:
    status, reason = getattr(err, "status", None), getattr(err, "reason", None)
    if status:
        return f"{status} {reason or ''}".strip()
    return str(err)[:200] or type(err).__name__
