"""No secret text in a status, an Event, a log line or a metric (issue 26): recognisable material
in every Secret field the operator reads (SSH key and known_hosts; slurmrestd token, user name and
CA bundle), each malformed so that it is reported, then the pool's status (Degraded), the Events
the pass posts, every log record and the /metrics text are scanned for it. A user name or token
with CR/LF never reaches a header."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import REGISTRY, generate_latest

from slurmbridge.rest import RestAuth
from slurmpool.adapters.access import SlurmAccessPool, Wanted
from slurmpool.core.models import SlurmAccess

from .factories import make_spec
from .test_apply import run, slurm_nodes
from .test_rest_access import Secrets

MARK = "S3CR3T-MATERIAL"
# Each value is what a careless Secret might hold: a key body without its BEGIN line (once read as
# a file path and quoted), known_hosts junk, a token and a user name with a header injection, a CA.
SSH = {"ssh-privatekey": f"b3BlbnNzaC1rZXktdjEAAAAA{MARK}key", "known_hosts": f"{MARK}-known-hosts"}
REST = [
    ({"token": f"{MARK}-jwt\r\nX-Evil: 1"}, {}),
    ({"token": "jwt-1", "user": f"{MARK}-user\r\nX-Evil: 1"}, {"userKey": "user"}),
    ({"token": "jwt-1", "user": f"root {MARK}"}, {"userKey": "user"}),
]
CA = {"ca.crt": f"-----BEGIN CERTIFICATE-----\n{MARK}-ca\n-----END CERTIFICATE-----\n"}


def accesses() -> list[tuple[str, dict, SlurmAccess]]:
    ssh = SlurmAccess.model_validate({"ssh": {"host": "127.0.0.1", "user": "slurmpool", "secretRef": {"name": "slurm-ssh"}}})
    out = [("ssh key", {("ns", "slurm-ssh"): SSH}, ssh),
           ("ssh known_hosts", {("ns", "slurm-ssh"): {**SSH, "ssh-privatekey": VALID_KEY}}, ssh)]
    for i, (secret, ref) in enumerate(REST):
        rest = SlurmAccess.model_validate({"rest": {"url": f"https://127.0.0.1:{1 + i}", "tokenSecretRef": {"name": "jwt", **ref}}})
        out.append((f"rest {i}", {("ns", "jwt"): secret}, rest))
    rest = SlurmAccess.model_validate({"rest": {"url": "https://127.0.0.1:9", "tokenSecretRef": {"name": "jwt"},
                                                "caSecretRef": {"name": "ca"}}})
    out.append(("rest ca", {("ns", "jwt"): {"token": "jwt-1"}, ("ns", "ca"): CA}, rest))
    return out


def _valid_key() -> str:
    import asyncssh
    return asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()


VALID_KEY = _valid_key()


@pytest.mark.parametrize("what, secrets, access", accesses(), ids=[a[0] for a in accesses()])
async def test_secret_material_reaches_no_status_event_log_or_metric(what, secrets, access, caplog):
    caplog.set_level(logging.DEBUG)
    pool = SlurmAccessPool(Secrets(secrets).read, retries=0)
    backend, view = await pool.observe("ns", access, Wanted(max_age=0))
    assert backend is None and not view.available
    name = next(iter(secrets))[1] if what != "rest ca" else "ca"
    assert f"Secret ns/{name} key " in view.error, view.error  # named by Secret and key
    nodes, _ = slurm_nodes(2)
    status, kube, _ = await run(make_spec(slurm_nodes=1), nodes, view)
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert degraded.status == "True" and f"Secret ns/{name}" in degraded.message
    events = [str(c) for c in kube.calls if c[0] == "event"]
    text = "\n".join([status.model_dump_json(by_alias=True), *events, caplog.text, generate_latest(REGISTRY).decode()])
    assert MARK not in text
    assert "X-Evil" not in text
    await pool.close()


def test_a_header_never_carries_cr_or_lf():
    for auth in (RestAuth(token="a\r\nX-Evil: 1"), RestAuth(token="jwt", user="bob\r\nX-Evil: 1"), RestAuth(token="a b")):
        with pytest.raises(ValueError) as err:
            auth.headers()
        assert "X-Evil" not in str(err.value)
    assert RestAuth(token="eyJ.a-b_c.d", user="slurm.op").headers() == {"X-SLURM-USER-TOKEN": "eyJ.a-b_c.d", "X-SLURM-USER-NAME": "slurm.op"}


def test_the_ssh_user_has_no_default():
    with pytest.raises(ValueError, match="user"):
        SlurmAccess.model_validate({"ssh": {"host": "h", "secretRef": {"name": "s"}}})
