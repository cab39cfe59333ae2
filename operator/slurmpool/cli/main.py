"""`kubectl slurmpool`: the on-call's view of a SlurmNodePool, a dry-run planner, and the knobs.

    kubectl slurmpool status POOL [-n NS] [-o wide|json|yaml] [--watch]   every node: side, phase, time in it, jobs, pods
    kubectl slurmpool plan POOL [--slurm-nodes N] [--at TIME] [-o json|yaml] which nodes would move, what they would disturb
    kubectl slurmpool history POOL [-o wide|json|yaml]      the last moves that ended: when, why, who asked, how, their jobs (status.recentMoves)
    kubectl slurmpool move NODE --to slurm|inference[:POOL] ask for one node to move now (move-now annotation)
    kubectl slurmpool pause POOL / resume POOL             spec.paused
    (move, pause, resume: --dry-run=server asks the API server, admission included, and writes nothing)

Installed with the package as the console script `kubectl-slurmpool`, so kubectl finds it on
PATH. It reads the same kubeconfig as kubectl (KUBECONFIG, or --kubeconfig/--context, before or after
the command). Its writes carry the field manager `kubectl-slurmpool`, which the operator records as
who asked for a move (status.recentMoves). Exit codes: 0, 1 an error, 2 usage, 3 a plan that
cannot be made. It needs
no Slurm access: the operator publishes each node's Slurm state and jobs in the node
annotation `slurmpool.io/slurm`. `plan` runs the operator's own planner on that state and
changes nothing. No kopf import here: the command starts fast.

It reads only the pool's Nodes (its nodeSelector as a label selector, pages of JSON, the next asked
for while one is parsed) and only the pods not ended on them: a field selector per node for small
pools, else the cluster's pods in one answer, kept only when on a pool node. Pods come in the
apiserver's protobuf (podproto.py: a quarter of the apiserver's CPU of JSON), read as they arrive
and parsed in batches in C, describing only the fields read; `status` keeps each pod's key and
node, `plan` a view of each. `plan` reads whole pods (what each needs of a node) only for the
nodes of a move between inference pools, node by node, the one place a pod's spec counts. No client
models, and the garbage collector off meanwhile. No import of kopf, asyncssh or the client's
CoreV1Api (api.py's `CoreCalls`): `make bench` times `status` on 5,000 Nodes and 50,000 pods.
Shell completion: the console script `kubectl_complete-slurmpool` (kubectl 1.26+ calls it).

The parts: main.py (the commands), api.py and pages.py (the reads), views.py (`status`), plan.py
(`plan`, imported only by it), render.py (tables), complete.py (completion), podproto.py (pods in
protobuf). The Slurm-state annotation, the drain forecast and the waves are the core's
(core/published.py, core/forecast.py, core/waves.py), as the operator uses them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from slurmpool.cli.api import Api, load_pool, load_status
from slurmpool.cli.render import OUTPUTS, render_history, render_plan, render_status, width
from slurmpool.cli.views import history_view, status_view
from slurmpool.core.models import parse_at as parse_rfc3339
from slurmpool.core.placement import names_a_side
from slurmpool.core.view import ANN_MOVE_NOW, iso


DRY_RUN_NOTE = " (server dry run: the API server accepted it; nothing was written)"
AT_OFFSET = re.compile(r"\+(?=\d)(?:(\d{1,6})d)?(?:(\d{1,6})h)?(?:(\d{1,6})m)?(?:(\d{1,6})s)?")
LATEST_AT = datetime(2999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)  # as far as a window's `at` may be (models.RFC3339_PATTERN)


def parse_at(text: str, now: datetime) -> datetime:
    """`plan --at`: an RFC 3339 time with its offset, or an offset from now (+2h, +1h30m, +45m, +1d);
    in the future. ValueError with the reason otherwise."""
    text = text.strip()
    if text.startswith("+"):
        match = AT_OFFSET.fullmatch(text)
        if not match:
            raise ValueError(f"--at {text!r}: an offset is + and numbers of at most 6 digits with d, h, m or s, e.g. +2h or +1h30m")
        days, hours, minutes, secs = (int(x or 0) for x in match.groups())
        at = now + timedelta(days=days, hours=hours, minutes=minutes, seconds=secs)
    else:
        try:
            at = parse_rfc3339(text)
        except ValueError:
            raise ValueError(f"--at {text!r}: give an RFC 3339 time with its offset (e.g. 2026-12-24T18:00:00Z) "
                             "or an offset from now (e.g. +2h)") from None
    if at <= now:
        raise ValueError(f"--at {text}: not in the future (now is {iso(now)})")
    if at > LATEST_AT:
        raise ValueError(f"--at {text}: after {iso(LATEST_AT)}, the latest time a schedule may name")
    return at.astimezone(timezone.utc)


def _emit(data: Any, text: str, output: str, watching: bool = False) -> None:
    if output == "json":
        print(json.dumps(data, indent=None if watching else 2, sort_keys=True, default=str))
    elif output == "yaml":
        import yaml

        print(("---\n" if watching else "") + yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=True).rstrip())
    else:
        print(text)
    sys.stdout.flush()


def watch_status(api: Api, namespace: str, name: str, output: str, interval: float, total: int) -> None:
    """Status again every `interval` seconds until interrupted: on a terminal the table is redrawn
    in place; otherwise one document per round (JSON lines, YAML documents, tables apart)."""
    redraw = output in ("table", "wide") and sys.stdout.isatty()
    while True:
        started = time.monotonic()
        pool, nodes, pod_keys = load_status(api, namespace, name)
        view = status_view(pool, nodes, datetime.now(timezone.utc), pod_keys)
        text = render_status(view, total, wide=output == "wide")
        if redraw:
            text = "\033[H\033[2J" + text
        elif output in ("table", "wide"):
            text += "\n"
        _emit(view, text, output, watching=True)
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


class _Version(argparse.Action):
    """--version, read only when asked for (importlib.metadata: 40 ms of every other command)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from slurmpool import __version__

        print(f"kubectl-slurmpool {__version__}")
        parser.exit()


EXIT_UNPLANNABLE = 3  # `plan`: the split cannot be made (the plan's problems); 1 is an error, 2 a usage error

EXAMPLES = {
    None: """examples:
  kubectl slurmpool status gpu -n hpc                    every node of pool gpu in namespace hpc
  kubectl slurmpool plan gpu --slurm-nodes 4             what would move for 4 Slurm nodes (exit 3: cannot be planned)
  kubectl slurmpool history gpu                          the last moves that ended, and who asked
  kubectl slurmpool move gpu07 --to slurm --dry-run=server
  kubectl slurmpool pause gpu --context prod

--context, --kubeconfig and -n go anywhere on the line. Exit codes: 0 done, 1 an error (one line on
stderr), 2 a usage error, 3 `plan` cannot make the split (the plan's problems).""",
    "status": """examples:
  kubectl slurmpool status gpu -n hpc
  kubectl slurmpool status gpu -o wide --watch --interval 5
  kubectl slurmpool status gpu -o json | jq '.nodes[] | select(.phase != "Settled")'""",
    "plan": """examples:
  kubectl slurmpool plan gpu                             for the target in force
  kubectl slurmpool plan gpu --slurm-nodes 4 -o wide
  kubectl slurmpool plan gpu --at +2h                    the schedule's count in two hours, and its handover

Exits 3 when the split cannot be made (min counts, floors: the plan's problems), 0 otherwise.""",
    "history": """examples:
  kubectl slurmpool history gpu -n hpc
  kubectl slurmpool history gpu -o wide                  each move's job ids (requeued, cancelled, signalled, drained)
  kubectl slurmpool history gpu -o json | jq '.moves[] | select(.outcome != "Completed")'""",
    "move": """examples:
  kubectl slurmpool move gpu07 --to slurm
  kubectl slurmpool move gpu07 --to inference:llm --dry-run=server   admission's answer, nothing written""",
    "pause": """examples:
  kubectl slurmpool pause gpu -n hpc
  kubectl slurmpool pause gpu --dry-run=server           admission's answer (the on-call policy), nothing written""",
    "resume": """examples:
  kubectl slurmpool resume gpu -n hpc
  kubectl slurmpool resume gpu --dry-run=server""",
}


def _parser() -> argparse.ArgumentParser:
    """The cluster flags (--kubeconfig, --context, -n) before the command or after it: each
    command's copy leaves the value alone unless given (SUPPRESS), so either place works."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="kubectl slurmpool", description="On-call tools for SlurmNodePools.",
                                     epilog=EXAMPLES[None], formatter_class=raw)
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    common = argparse.ArgumentParser(add_help=False)
    for each, default in ((parser, None), (common, argparse.SUPPRESS)):
        each.add_argument("--kubeconfig", default=default, help="kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
        each.add_argument("--context", default=default, help="the kubeconfig context (default: its current one)")
        each.add_argument("-n", "--namespace", default=default, help="the pool's namespace (default: the context's)")
    common.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    writes = argparse.ArgumentParser(add_help=False)
    writes.add_argument("--dry-run", choices=("none", "server"), default="none",
                        help="server: the API server checks the change (admission included) and writes nothing")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, text: str, *parents: argparse.ArgumentParser) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common, *parents], help=text, description=text, epilog=EXAMPLES[name], formatter_class=raw)
    p = command("status", "every node of a pool: side, phase, time in phase, jobs or pods")
    p.add_argument("pool")
    p.add_argument("-w", "--watch", action="store_true", help="show it again every --interval seconds until interrupted")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between rounds of --watch (default 2)")
    p = command("plan", "dry run: which nodes would move and which jobs and pods they disturb")
    p.add_argument("pool")
    p.add_argument("--slurm-nodes", type=int, default=None, help="plan for this Slurm count (default: the current target)")
    p.add_argument("--at", default=None, metavar="TIME",
                   help="plan as at TIME (RFC 3339, e.g. 2026-12-24T18:00:00Z, or +2h): the schedule's count then and the "
                        "planned handover an edge then gets")
    p = command("history", "the last moves of a pool that ended (status.recentMoves): when, why, who asked, how, the jobs they drained or requeued")
    p.add_argument("pool")
    p = command("move", "ask the operator to move one node now (slurmpool.io/move-now)", writes)
    p.add_argument("node")
    p.add_argument("--to", required=True, help="slurm, inference or inference:POOL")
    for verb in ("pause", "resume"):
        p = command(verb, f"{verb} a pool (spec.paused)", writes)
        p.add_argument("pool")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    at = None
    if args.command == "plan" and args.at is not None:
        try:
            at = parse_at(args.at, datetime.now(timezone.utc))
        except ValueError as err:
            parser.error(str(err))
    if args.command == "move" and not names_a_side(args.to):
        parser.error("--to must be slurm, inference or inference:POOL")

    try:
        api = Api(args.kubeconfig, args.context)
        namespace = args.namespace or Api.default_namespace(args.kubeconfig, args.context)
        now = datetime.now(timezone.utc)
        if args.command == "status" and args.watch:
            # Ctrl-C ends it even where SIGINT came ignored (a child of a background shell job: CI).
            signal.signal(signal.SIGINT, signal.default_int_handler)
            watch_status(api, namespace, args.pool, args.output, max(0.5, args.interval), width())
        elif args.command == "status":
            pool, nodes, pod_keys = load_status(api, namespace, args.pool)
            view = status_view(pool, nodes, now, pod_keys)
            _emit(view, render_status(view, width(), wide=args.output == "wide"), args.output)
        elif args.command == "plan":
            from slurmpool.cli.plan import Asked, plan_view  # the planner and the rest, for `plan` only

            pool, spec, nodes = load_pool(api, namespace, args.pool)
            view = plan_view(spec, pool, nodes, now, Asked(args.slurm_nodes, at), pods_of=api.whole_pods_on)
            _emit(view, render_plan(view, 10**6 if args.output == "wide" else width()), args.output)
            if view["problems"]:
                return _done(EXIT_UNPLANNABLE, argv)
        elif args.command == "history":
            view = history_view(api.pool(namespace, args.pool))
            _emit(view, render_history(view, width(), wide=args.output == "wide"), args.output)
        elif args.command == "move":
            dry = args.dry_run == "server"
            body = api.patch_node(args.node, {"metadata": {"annotations": {ANN_MOVE_NOW: args.to}}}, dry_run=dry)
            owner = (body.get("metadata", {}).get("annotations") or {}).get("slurmpool.io/pool")
            note = f"; pool {owner} will move it" if owner else "; no SlurmNodePool has adopted this node yet"
            _emit({"node": args.node, "moveNow": args.to, "pool": owner, "dryRun": dry},
                  f"node/{args.node} annotated {ANN_MOVE_NOW}={args.to}{note} (the split is kept: another node moves the other way)"
                  + DRY_RUN_NOTE * dry, args.output)
        else:
            paused, dry = args.command == "pause", args.dry_run == "server"
            api.patch_pool(namespace, args.pool, {"spec": {"paused": paused}}, dry_run=dry)
            _emit({"pool": args.pool, "namespace": namespace, "paused": paused, "dryRun": dry},
                  f"slurmnodepool {namespace}/{args.pool} {'paused: no new moves start; moves in flight finish' if paused else 'resumed'}"
                  + DRY_RUN_NOTE * dry, args.output)
    except KeyboardInterrupt:  # the end of --watch: at once, not after the reads still in flight end
        try:
            sys.stdout.flush()
        finally:
            os._exit(0)
    except BrokenPipeError:  # `| head`: the reader took what it wanted; no error for that
        return _done(0, argv)
    except Exception as err:  # noqa: BLE001 - one clear line for the on-call, not a traceback
        from kubernetes.client.rest import ApiException

        if isinstance(err, ApiException):
            try:
                message = json.loads(err.body or "{}").get("message") or err.reason
            except ValueError:
                message = err.reason
            print(f"error: {message}", file=sys.stderr)
        else:
            print(f"error: {err}", file=sys.stderr)
        if os.environ.get("SLURMPOOL_DEBUG"):
            raise
        return _done(1, argv)
    return _done(0, argv)


def _done(code: int, argv: list[str] | None) -> int:
    """Run as the command (`argv` None), it ends here, without the interpreter's teardown: freeing
    the views of a large pool one by one (0.1-0.2 s of 5,000 Nodes and 50,000 pods) for nothing."""
    if argv is None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:  # a reader gone (`| head`): what it did not take is lost either way
                pass
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
