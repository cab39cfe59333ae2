"""The operator's settings, read once from the environment at startup (the chart sets them);
`slurmpool run`'s flags override them (__main__.py) and kopf's memo carries them to the
controller. Nothing else reads the environment, so a test can build a Settings of its own."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from slurmpool.core.poolpolicy import PoolPolicy


@dataclass(frozen=True)
class Settings:
    # A pool is reconciled at least this often (seconds), and at once on a watch event.
    interval: float = 1.0
    # Pools reconciled at once. They share no node; a pool's time is mostly waiting on the
    # apiserver and Slurm, so one slow or hung pool must not hold up the rest.
    pool_concurrency: int = 16
    # After a failed pass: retry in backoff_base, 2x, 4x ... at most backoff_max seconds.
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    # The Lease `slurmpool`: taken over only once not renewed for lease_duration seconds.
    lease_duration: float = 15.0
    lease_renew: float = 3.0
    lease_namespace: str | None = None  # default: the pod's namespace
    identity: str | None = None  # default: POD_NAME, else the host name
    # Fault injection for the crash tests: SIGKILL right after recording a step entering this phase.
    crash_after_phase: str | None = None
    # What a pool may ask of its nodes (the chart's poolPolicy, as JSON in SLURMPOOL_POOL_POLICY).
    pool_policy: PoolPolicy = field(default_factory=PoolPolicy)
    # The process: the metrics server (port 0: none), kopf's liveness endpoint, the log lines.
    metrics_port: int = 8080
    metrics_address: str = "0.0.0.0"
    liveness: str = ""  # e.g. http://0.0.0.0:8081/healthz
    log_format: str = "text"  # or json
    # `slurmpool run --dry-run`: every pool in shadow mode (controller/shadow.py): decides, writes nothing
    # to Nodes, pods or Slurm, and reports what it would have done.
    dry_run: bool = False

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)

        def number(name: str, default: float, kind=float, least=None):
            value = env.get(name)
            if value in (None, ""):
                return default
            try:
                parsed = kind(value)
            except ValueError:
                raise ValueError(f"{name}={value!r} is not a number") from None
            if (parsed <= 0) if least is None else (parsed < least):
                raise ValueError(f"{name}={value!r} must be above 0" if least is None else f"{name}={value!r} must be at least {least}")
            return parsed

        lease_duration = number("SLURMPOOL_LEASE_DURATION", cls.lease_duration)
        lease_renew = number("SLURMPOOL_LEASE_RENEW", cls.lease_renew)
        if lease_renew >= lease_duration * 2 / 3:
            raise ValueError(f"SLURMPOOL_LEASE_RENEW ({lease_renew:g}) must be under 2/3 of SLURMPOOL_LEASE_DURATION ({lease_duration:g})")
        pool_policy = PoolPolicy.from_json(env.get("SLURMPOOL_POOL_POLICY"))
        if not pool_policy.image_prefixes:  # every pool would be refused: say so at startup
            raise ValueError("SLURMPOOL_POOL_POLICY names no imagePrefixes, so no slurmd image is allowed: set the "
                             "registries slurmd images may come from, e.g. SLURMPOOL_POOL_POLICY="
                             "'{\"imagePrefixes\": [\"registry.example.com/hpc/\"]}' (the chart's poolPolicy.imagePrefixes)")
        return cls(
            interval=number("SLURMPOOL_INTERVAL", cls.interval),
            pool_concurrency=number("SLURMPOOL_POOL_CONCURRENCY", cls.pool_concurrency, int),
            backoff_base=number("SLURMPOOL_BACKOFF_BASE", cls.backoff_base),
            backoff_max=number("SLURMPOOL_BACKOFF_MAX", cls.backoff_max),
            lease_duration=lease_duration,
            lease_renew=lease_renew,
            lease_namespace=env.get("SLURMPOOL_LEASE_NAMESPACE") or None,
            identity=env.get("SLURMPOOL_IDENTITY") or env.get("POD_NAME") or None,
            crash_after_phase=env.get("SLURMPOOL_CRASH_AFTER_PHASE") or None,
            pool_policy=pool_policy,
            metrics_port=number("SLURMPOOL_METRICS_PORT", cls.metrics_port, int, least=0),
            metrics_address=env.get("SLURMPOOL_METRICS_ADDRESS") or cls.metrics_address,
            liveness=env.get("SLURMPOOL_LIVENESS") or cls.liveness,
            log_format=env.get("SLURMPOOL_LOG_FORMAT") or cls.log_format,
        )
