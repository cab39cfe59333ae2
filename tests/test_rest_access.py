"""spec.slurm.access.rest in the operator: the spec, the shared access pool building a RestBackend
from Secrets (read through the adapter's read_secret), a bad Secret reported on that pool only,
and a renewed token picked up."""

from __future__ import annotations

import pytest
from aiohttp import web
from pydantic import ValidationError

from slurmpool.adapters import restaccess
from slurmpool.adapters.access import SlurmAccessPool, Wanted, access_key
from slurmpool.core.models import SlurmAccess
from slurmpool.core.view import SlurmView

from .restfake import FakeSlurmrestd, rest_node
from .test_apply import run, slurm_nodes
from .factories import make_spec


class ApiException(Exception):  # shaped as kubernetes.client's: status and reason
    def __init__(self, status, reason):
        super().__init__(f"({status}) Reason: {reason}")
        self.status, self.reason = status, reason


class Secrets:
    def __init__(self, data: dict[tuple[str, str], dict[str, str]]):
        self.data, self.reads = data, []

    async def read(self, namespace: str, name: str) -> dict[str, str]:
        self.reads.append((namespace, name))
        if (namespace, name) not in self.data:
            raise ApiException(404, "Not Found")
        return dict(self.data[(namespace, name)])


@pytest.fixture
async def slurmrestd():
    fake = FakeSlurmrestd(tokens={"jwt-1"}, nodes=[rest_node("gpu01", ["IDLE"])])
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    yield fake
    await runner.cleanup()


def rest_access(url: str, **kw) -> SlurmAccess:
    return SlurmAccess.model_validate({"rest": {"url": url, "tokenSecretRef": {"name": "slurm-jwt"}, **kw}})


def test_the_spec_takes_exactly_one_kind_of_access():
    access = rest_access("https://slurmrestd.slurm:6820")
    assert access.rest.token_secret_ref.key == "token" and access.rest.auth_header == "X-SLURM-USER-TOKEN"
    for body in ({}, {"local": {}, "rest": {"url": "http://x:1", "tokenSecretRef": {"name": "t"}}},
                 {"ssh": {"host": "h", "user": "u", "secretRef": {"name": "s"}}, "rest": {"url": "http://x:1", "tokenSecretRef": {"name": "t"}}}):
        with pytest.raises(ValidationError, match="set exactly one of slurm.access.ssh, slurm.access.local, slurm.access.rest"):
            SlurmAccess.model_validate(body)
    for url in ("ftp://x", "https://u:p@x", "https://x/?q=1", "https://x y"):
        with pytest.raises(ValidationError):
            rest_access(url)


async def test_a_pool_reads_slurm_through_slurmrestd(slurmrestd):
    secrets = Secrets({("team-a", "slurm-jwt"): {"token": "jwt-1\n", "user": "slurmpool"}})
    pool = SlurmAccessPool(secrets.read, retries=0)
    access = rest_access(slurmrestd.url, tokenSecretRef={"name": "slurm-jwt", "userKey": "user"})
    backend, view = await pool.observe("team-a", access, Wanted(max_age=0))
    assert view.available and set(view.nodes) == {"gpu01"}, view.error
    headers = slurmrestd.requests[-1][2]
    assert headers["X-SLURM-USER-TOKEN"] == "jwt-1" and headers["X-SLURM-USER-NAME"] == "slurmpool"
    assert access_key("team-a", access)[0] == "rest" and access_key("team-a", access) != access_key("team-b", access)
    await backend.drain(["gpu01"], "slurmpool: move m1 to inference")
    _, view = await pool.observe("team-a", access, Wanted(max_age=0))
    assert view.nodes["gpu01"].drain_set and view.nodes["gpu01"].reason == "slurmpool: move m1 to inference"
    await pool.close()


@pytest.mark.parametrize(
    "secret, ref, message",
    [
        (None, {}, "cannot read Secret team-a/slurm-jwt: 404 Not Found"),
        ({"other": "x"}, {}, "Secret team-a/slurm-jwt has no key 'token' (the slurmrestd JWT)"),
        ({"token": "  \n"}, {}, "Secret team-a/slurm-jwt key 'token' (the slurmrestd JWT) is empty"),
        ({"token": "a b"}, {}, "is not a JWT"),
        ({"token": "jwt-1"}, {"userKey": "user"}, "has no key 'user' (the Slurm user name)"),
    ],
)
async def test_a_bad_secret_is_reported_on_that_pool_only(slurmrestd, secret, ref, message):
    data = {("team-a", "slurm-jwt"): secret} if secret is not None else {}
    pool = SlurmAccessPool(Secrets(data).read, retries=0)
    bad = rest_access(slurmrestd.url, tokenSecretRef={"name": "slurm-jwt", **ref})
    backend, view = await pool.observe("team-a", bad, Wanted(max_age=0))
    assert backend is None and not view.available and message in view.error, view.error
    assert not any(p.startswith("/slurm/") for _, p, _, _ in slurmrestd.requests)  # nothing sent without a token
    # The same pool's Degraded condition carries it.
    nodes, _ = slurm_nodes(2)
    status, _, _ = await run(make_spec(slurm_nodes=1), nodes, view)
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert degraded.status == "True" and degraded.reason == "SlurmUnavailable" and message in degraded.message
    # Another pool, with its own good Secret, is not touched by it.
    other = Secrets({("team-b", "slurm-jwt"): {"token": "jwt-1", "user": "slurmpool"}})
    pool._read_secret = other.read
    _, view = await pool.observe("team-b", bad, Wanted(max_age=0))
    assert view.available, view.error
    await pool.close()


async def test_a_renewed_token_in_the_secret_is_used_after_a_refusal(slurmrestd):
    secrets = Secrets({("ns", "slurm-jwt"): {"token": "jwt-1"}})
    pool = SlurmAccessPool(secrets.read, retries=0)
    access = rest_access(slurmrestd.url, authHeader="Bearer")
    _, view = await pool.observe("ns", access, Wanted(max_age=0))
    assert view.available and slurmrestd.requests[-1][2]["Authorization"] == "Bearer jwt-1"
    slurmrestd.tokens = {"jwt-2"}  # jwt-1 expired; whoever renews tokens wrote jwt-2 into the Secret
    secrets.data[("ns", "slurm-jwt")] = {"token": "jwt-2"}
    _, view = await pool.observe("ns", access, Wanted(max_age=0))
    assert view.available, view.error
    assert slurmrestd.requests[-1][2]["Authorization"] == "Bearer jwt-2"
    slurmrestd.tokens = set()  # expired and not renewed: fail closed, with the reason
    pool._failing.clear()
    _, view = await pool.observe("ns", access, Wanted(max_age=0))
    assert not view.available and "511" in view.error and "expired" in view.error
    await pool.close()


async def test_a_ca_bundle_that_is_not_pem_is_reported(slurmrestd):
    secrets = Secrets({("ns", "slurm-jwt"): {"token": "jwt-1"}, ("ns", "slurm-ca"): {"ca.crt": "not a certificate"}})
    pool = SlurmAccessPool(secrets.read, retries=0)
    access = rest_access(slurmrestd.url.replace("http:", "https:"), caSecretRef={"name": "slurm-ca"})
    _, view = await pool.observe("ns", access, Wanted(max_age=0))
    assert not view.available and "Secret ns/slurm-ca key 'ca.crt' is not a PEM CA bundle" in view.error
    await pool.close()


async def test_unreachable_slurmrestd_is_slurm_unavailable(unused_tcp_port):
    secrets = Secrets({("ns", "slurm-jwt"): {"token": "jwt-1"}})
    pool = SlurmAccessPool(secrets.read, retries=0)
    _, view = await pool.observe("ns", rest_access(f"http://127.0.0.1:{unused_tcp_port}"), Wanted(max_age=0))
    assert isinstance(view, SlurmView) and not view.available and "unreachable" in view.error
    await pool.close()


def test_token_max_age_is_short():
    assert restaccess.TOKEN_MAX_AGE <= 60


def test_the_rest_sample_is_a_valid_pool():
    from pathlib import Path

    import yaml

    from slurmpool.core.models import SlurmNodePoolSpec

    sample = yaml.safe_load((Path(__file__).resolve().parents[1] / "deploy" / "samples" / "rest-pool.yaml").read_text())
    spec = SlurmNodePoolSpec.model_validate(sample["spec"])
    assert spec.slurm.access.rest.ca_secret_ref.key == "ca.crt" and spec.slurm.access.ssh is None
