"""Shell completion of `kubectl slurmpool`: the console script `kubectl_complete-slurmpool`
(kubectl 1.26+ calls it with the words typed, the last one partial)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from slurmpool.cli.api import Api
from slurmpool.cli.render import OUTPUTS

COMMANDS = ("status", "plan", "history", "move", "pause", "resume")
CLUSTER = ("--namespace", "--kubeconfig", "--context")  # anywhere on the line
FLAGS = {
    "status": (*CLUSTER, "--output", "--watch", "--interval"),
    "plan": (*CLUSTER, "--output", "--slurm-nodes", "--at"),
    "history": (*CLUSTER, "--output"),
    "move": ("--to", "--output", "--dry-run=server", "--kubeconfig", "--context"),
    "pause": (*CLUSTER, "--output", "--dry-run=server"),
    "resume": (*CLUSTER, "--output", "--dry-run=server"),
}
VALUE_FLAGS = ("-n", "--namespace", "-o", "--output", "--to", "--slurm-nodes", "--at", "--interval", "--kubeconfig", "--context",
               "--dry-run")
NO_FILES = ":4"  # cobra's ShellCompDirectiveNoFileComp, what kubectl reads from the last line


def complete(words: list[str], pools: Callable[[str | None], list[str]], nodes: Callable[[], list[str]]) -> list[str]:
    """Candidates for the last of `words` (the plugin's arguments as typed, the last one partial).
    `pools(namespace)` and `nodes()` are asked only when a pool or a node name is wanted."""
    *done, word = words or [""]
    namespace = next((done[i + 1] for i, w in enumerate(done[:-1]) if w in ("-n", "--namespace")), None)
    previous = done[-1] if done else ""
    command = next((w for w in done if w in COMMANDS), None)
    if previous in ("-o", "--output"):
        found = list(OUTPUTS)
    elif previous == "--to":
        found = ["slurm", "inference", "inference:"]
    elif previous in VALUE_FLAGS:
        return []  # a namespace, a number, a file: nothing to offer
    elif command is None:
        found = ["--kubeconfig", "--context", "--version"] if word.startswith("-") else list(COMMANDS)
    elif word.startswith("-"):
        found = list(FLAGS[command])
    elif [w for i, w in enumerate(done) if not w.startswith("-") and w not in COMMANDS and (i == 0 or done[i - 1] not in VALUE_FLAGS)]:
        return []  # the pool or node is already there
    else:
        found = nodes() if command == "move" else pools(namespace)
    return [c for c in found if c.startswith(word)]


def complete_main(argv: list[str] | None = None) -> int:
    """`kubectl_complete-slurmpool ARGS... PARTIAL`: one candidate a line, then kubectl's directive."""
    words = list(sys.argv[1:] if argv is None else argv)
    api: list[Api] = []

    def option(name: str) -> str | None:  # --kubeconfig and --context, wherever typed
        return next((words[i + 1] for i, w in enumerate(words[:-2]) if w == name), None)

    kubeconfig, context = option("--kubeconfig"), option("--context")

    def client() -> Api:
        if not api:
            api.append(Api(kubeconfig, context))
        return api[0]

    try:
        found = complete(words, lambda ns: client().pool_names(ns or Api.default_namespace(kubeconfig, context)),
                         lambda: client().node_names())
    except Exception:  # noqa: BLE001 - no cluster: complete nothing rather than print a traceback
        found = []
    print("\n".join([*found, NO_FILES]))
    return 0
