"""`slurmpool run`: the operator process (kopf, the reconcile loop and the metrics server)."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace


LOG_FORMATS = ("text", "json")


def configure_logging(log_format: str, verbose: bool) -> None:
    """Text as before; json is kopf's own formatter (python-json-logger), which also carries the
    object a kopf record is about (`object`: apiVersion, kind, name)."""
    import kopf

    if log_format not in LOG_FORMATS:
        raise SystemExit(f"slurmpool: --log-format {log_format!r}: choose one of {', '.join(LOG_FORMATS)}")
    if log_format == "json":
        kopf.configure(verbose=verbose, log_format=kopf.LogFormat.JSON)
    else:
        logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("asyncssh", "kopf.objects"):  # per-command and per-event INFO lines
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    from slurmpool import __version__

    parser = argparse.ArgumentParser(prog="slurmpool", description=__doc__)
    parser.add_argument("--version", action="version", version=f"slurmpool {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the operator")
    # Each flag's default is its setting (SLURMPOOL_METRICS_PORT, ... : controller/settings.py).
    run.add_argument("--metrics-port", type=int, help="0: no metrics server (default 8080)")
    run.add_argument("--metrics-address", help="default 0.0.0.0")
    run.add_argument("--liveness", help="e.g. http://0.0.0.0:8081/healthz")
    run.add_argument("--interval", type=float, help="seconds between reconcile passes (default 1)")
    run.add_argument("--verbose", action="store_true")
    run.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="text (default) or json: kopf's JSON lines, one object per record (docs/install.md#logs)",
    )
    run.add_argument("--dry-run", action="store_true", default=None,
                     help="shadow mode for every pool: decide as usual, write nothing to Nodes, pods or Slurm, and report "
                          "what it would do in status.shadow, Events and slurmpool_shadow_moves (docs/runbook.md#shadow-mode)")
    sub.add_parser("crd", help="print the CRD YAML")
    args = parser.parse_args(argv)

    if args.command == "crd":
        from slurmpool.crd import render

        sys.stdout.write(render())
        return 0

    from slurmpool.controller.settings import Settings

    try:
        settings = Settings.from_env()  # the one reading of the environment
    except ValueError as err:
        raise SystemExit(f"slurmpool: {err}") from None
    flags = {"interval": args.interval, "metrics_port": args.metrics_port, "metrics_address": args.metrics_address,
             "liveness": args.liveness, "log_format": args.log_format, "dry_run": args.dry_run}
    settings = replace(settings, **{k: v for k, v in flags.items() if v is not None})
    if settings.interval <= 0:
        parser.error("--interval must be above 0")
    import kopf

    configure_logging(settings.log_format, args.verbose)
    from prometheus_client import start_http_server

    from slurmpool.controller import handlers  # noqa: F401 - registers the kopf handlers

    if settings.metrics_port:
        start_http_server(settings.metrics_port, addr=settings.metrics_address)
    kopf.run(clusterwide=True, standalone=True, liveness_endpoint=settings.liveness or None, memo=kopf.Memo(settings=settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
