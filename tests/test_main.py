"""`slurmpool run`: its flags override the settings read once from the environment, and the
result reaches the controller through kopf's memo; the environment is never written."""

from __future__ import annotations

import os

import kopf
import prometheus_client
import pytest

from slurmpool.__main__ import main


@pytest.fixture
def ran(monkeypatch):
    seen: dict = {}
    monkeypatch.setattr(kopf, "run", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setattr(prometheus_client, "start_http_server", lambda port, addr: seen.update(metrics=(port, addr)))
    monkeypatch.setattr("slurmpool.__main__.configure_logging", lambda log_format, verbose: seen.update(log_format=log_format))
    for name in [k for k in os.environ if k.startswith("SLURMPOOL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SLURMPOOL_POOL_POLICY", '{"imagePrefixes": ["registry.example.com/hpc/"]}')  # no default
    return seen


def test_flags_override_the_environment_and_reach_kopf_in_its_memo(ran, monkeypatch):
    monkeypatch.setenv("SLURMPOOL_INTERVAL", "3")
    monkeypatch.setenv("SLURMPOOL_METRICS_ADDRESS", "127.0.0.2")
    monkeypatch.setenv("SLURMPOOL_POOL_CONCURRENCY", "4")
    assert main(["run", "--interval", "0.5", "--metrics-port", "9100"]) == 0
    settings = ran["memo"].settings
    assert (settings.interval, settings.pool_concurrency, settings.metrics_port) == (0.5, 4, 9100)
    assert ran["metrics"] == (9100, "127.0.0.2")
    assert os.environ["SLURMPOOL_INTERVAL"] == "3"  # read, never written


def test_the_environment_alone_sets_the_process(ran, monkeypatch):
    monkeypatch.setenv("SLURMPOOL_METRICS_PORT", "0")
    monkeypatch.setenv("SLURMPOOL_LIVENESS", "http://0.0.0.0:8081/healthz")
    monkeypatch.setenv("SLURMPOOL_LOG_FORMAT", "json")
    main(["run"])
    assert "metrics" not in ran  # port 0: no metrics server
    assert ran["liveness_endpoint"] == "http://0.0.0.0:8081/healthz" and ran["log_format"] == "json"


def test_a_bad_setting_is_one_line_naming_it(ran, monkeypatch):
    monkeypatch.setenv("SLURMPOOL_METRICS_PORT", "-1")
    with pytest.raises(SystemExit, match="SLURMPOOL_METRICS_PORT='-1' must be at least 0"):
        main(["run"])
    with pytest.raises(SystemExit):
        main(["run", "--interval", "0"])
    assert "memo" not in ran


def test_run_refuses_to_start_with_no_slurmd_registry(ran, monkeypatch):
    """No default names a registry (issue 38): without imagePrefixes every pool would be refused."""
    monkeypatch.delenv("SLURMPOOL_POOL_POLICY")
    with pytest.raises(SystemExit, match="^slurmpool: SLURMPOOL_POOL_POLICY names no imagePrefixes, so no slurmd image is allowed"):
        main(["run"])
    assert "memo" not in ran
