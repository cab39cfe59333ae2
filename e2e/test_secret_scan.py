"""No secret text in a status, an Event, the operator's log or /metrics, on the lab (issue 26).

Recognisable material goes into every Secret field the operator reads: the SSH private key (a key
body without its BEGIN line, once read as a file path and quoted in Degraded) and known_hosts; the
slurmrestd token (with a CR/LF header injection), the user name (likewise) and the CA bundle. One
pool per bad field, selecting no node, so each is reported and nothing else happens. The operator
runs under the chart's ServiceAccount; once every pool is Degraded naming its Secret and key, the
pools' status, the namespace's Events, the operator's log and its /metrics are scanned."""

from __future__ import annotations

import json
import urllib.request

import pytest

from harness import NAMESPACE, Operator, apply, ensure_namespace_and_secret, events_json, install_crd, pool_json, pool_manifest, wait
from load import free_port

pytestmark = pytest.mark.e2e
MARK = "S3CR3T-MATERIAL"
NONE = {"matchLabels": {"slurmpool-e2e/secret-scan": "none"}}  # selects no node: only the access is exercised
SECRETS = {
    "scan-ssh-key": {"ssh-privatekey": f"b3BlbnNzaC1rZXktdjEAAAAA{MARK}-key", "known_hosts": f"127.0.0.1 ssh-ed25519 {MARK}"},
    "scan-known-hosts": {"ssh-privatekey": "", "known_hosts": f"{MARK}-known-hosts"},  # the key is filled in below
    "scan-token": {"token": f"{MARK}-jwt\r\nX-Evil: 1"},
    "scan-user": {"token": "jwt-1", "user": f"{MARK}-user\r\nX-Evil: 1"},
    "scan-ca": {"token": "jwt-1", "ca.crt": f"-----BEGIN CERTIFICATE-----\n{MARK}-ca\n-----END CERTIFICATE-----\n"},
}
# pool name -> (its access, the Secret and key its Degraded message must name)
POOLS = {
    "scan-ssh-key": ({"ssh": {"host": "127.0.0.1", "port": 1, "user": "slurmpool", "secretRef": {"name": "scan-ssh-key"}}},
                     "Secret slurmpool-e2e/scan-ssh-key key 'ssh-privatekey'"),
    "scan-known-hosts": ({"ssh": {"host": "127.0.0.1", "port": 1, "user": "slurmpool", "secretRef": {"name": "scan-known-hosts"}}},
                         "Secret slurmpool-e2e/scan-known-hosts key 'known_hosts'"),
    "scan-token": ({"rest": {"url": "https://127.0.0.1:1", "tokenSecretRef": {"name": "scan-token"}}},
                   "Secret slurmpool-e2e/scan-token key 'token'"),
    "scan-user": ({"rest": {"url": "https://127.0.0.1:2", "tokenSecretRef": {"name": "scan-user", "userKey": "user"}}},
                  "Secret slurmpool-e2e/scan-user key 'user'"),
    "scan-ca": ({"rest": {"url": "https://127.0.0.1:3", "tokenSecretRef": {"name": "scan-ca"}, "caSecretRef": {"name": "scan-ca"}}},
                "Secret slurmpool-e2e/scan-ca key 'ca.crt'"),
}


def secret(name: str, data: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NAMESPACE}, "stringData": data}


def degraded(lab, name: str) -> dict | None:
    conditions = (pool_json(lab, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Degraded" and c["status"] == "True"), None)


def test_no_secret_text_anywhere(lab):
    assert NAMESPACE == "slurmpool-e2e"
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    import asyncssh
    valid_key = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    data = {name: dict(values) for name, values in SECRETS.items()}
    data["scan-known-hosts"]["ssh-privatekey"] = valid_key
    apply(lab, [secret(name, values) for name, values in data.items()])
    port = free_port()
    operator = Operator(lab, "operator-secret-scan.log", args=["run", "--metrics-port", str(port)]).start()
    try:
        for name, (access, _) in POOLS.items():
            manifest = pool_manifest(lab, name, 0)
            manifest["spec"]["nodeSelector"] = NONE
            manifest["spec"]["slurm"]["access"] = access
            apply(lab, manifest)
        for name, (_, named) in POOLS.items():
            condition = wait(lambda name=name, named=named: (c := degraded(lab, name)) and named in c["message"] and c, 120,
                             what=f"{name} Degraded naming {named}")
            print(f"{name}: {condition['reason']}: {condition['message'][:200]}")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        statuses = [json.dumps(pool_json(lab, name).get("status")) for name in POOLS]
        event_text = json.dumps(events_json(lab, NAMESPACE))
        log = operator.log_path.read_text(errors="replace")
        for where, text in [("status", "\n".join(statuses)), ("Events", event_text), ("log", log), ("/metrics", metrics)]:
            assert MARK not in text, f"secret material in the {where}"
            assert "X-Evil" not in text, f"a header injection in the {where}"
        assert "slurmpool_reconcile_total" in metrics  # the scrape is the operator's
    finally:
        operator.stop()
        print(operator.log_tail(20))
        lab.kubectl("delete", "snp", *POOLS, "-n", NAMESPACE, "--ignore-not-found", check=False)
        lab.kubectl("delete", "secret", *SECRETS, "-n", NAMESPACE, "--ignore-not-found", check=False)
