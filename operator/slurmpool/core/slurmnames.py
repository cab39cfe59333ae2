"""Which Slurm NodeName a Kubernetes Node is (`spec.slurm.nodeName`, `spec.slurm.nodeNameLabel`).
Pure. Sites that ran slurmd under systemd often have an FQDN Node beside a short NodeName.

`decide` reads Slurm through `by_node`: the view keyed by Node names (jobs' nodes and the nodes
they name too), so the core asks every question by Node name; Slurm's own name is used again only to write to Slurm (apply.py) and in
the slurmd pod (`SLURM_NODENAME`). A Node that maps to no valid name is absent from that view:
fail closed (health.py: `SlurmUnlisted` when its slurmd should run; moves.py: never "nothing to
drain" for a node leaving Slurm)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace

from slurmbridge.models import SlurmJob

from slurmpool.core.models import SLURM_NAME_PATTERN, SlurmSpec
from slurmpool.core.view import NodeView, SlurmView

HOSTNAME_LABEL = "kubernetes.io/hostname"
_VALID = re.compile(SLURM_NAME_PATTERN)


def slurm_name(slurm: SlurmSpec, node: str, labels: Mapping[str, str] | None) -> str | None:
    """The Node's Slurm NodeName, or None when it has none (its label missing, or not a Slurm
    name). `labels` None: the Node is gone (an orphan slurmd pod's): only a template over its
    name can be judged."""
    if slurm.node_name_label:
        value = (labels or {}).get(slurm.node_name_label) if labels is not None else None
    else:
        hostname = (labels or {}).get(HOSTNAME_LABEL, node) if labels is not None else node
        if labels is None and "{hostname}" in slurm.node_name:
            return None
        value = slurm.node_name.replace("{name}", node).replace("{shortName}", node.split(".", 1)[0]).replace("{hostname}", hostname)
    return value if value and _VALID.match(value) else None


def names_of(slurm: SlurmSpec, nodes: Iterable[NodeView], orphans: Iterable[str] = ()) -> dict[str, str | None]:
    """Node name -> its Slurm name, for the pool's nodes and the Nodes of its orphan slurmd pods."""
    out: dict[str, str | None] = {n.name: slurm_name(slurm, n.name, n.labels) for n in nodes}
    for name in orphans:
        out.setdefault(name, slurm_name(slurm, name, None))
    return out


def collisions(names: Mapping[str, str | None], nodes: Iterable[str]) -> dict[str, list[str]]:
    """Each of `nodes` whose Slurm name another of them has too (`{shortName}` on FQDNs from two
    racks, a constant template, a label value set twice) -> the others: which is Slurm's node
    cannot be known, so none of them is acted on (decide.py flags them)."""
    by_slurm: dict[str, list[str]] = {}
    for node in nodes:
        if (s := names.get(node)) is not None:
            by_slurm.setdefault(s, []).append(node)
    return {n: [o for o in same if o != n] for same in by_slurm.values() if len(same) > 1 for n in same}


def renamed(names: Mapping[str, str | None]) -> dict[str, str | None]:
    """Only the Nodes whose Slurm name differs (None: none)."""
    return {node: s for node, s in names.items() if s != node}


def by_node(view: SlurmView, names: Mapping[str, str | None]) -> SlurmView:
    """The view keyed by Node names: Slurm's nodes, jobs' node lists and topology mapped back; a
    Slurm node no Node maps to is left out (it is none of this pool's, and its name may be a
    Node's). Unchanged (the same object) when every name is its Node's."""
    if not renamed(names) or not view.available:
        return view
    node_of = {s: node for node, s in names.items() if s is not None}
    nodes = {node_of[s]: sn for s, sn in view.nodes.items() if s in node_of}
    # Most of a queue names no node (pending, no -w/-x): those stay the same objects (200 pools
    # renamed every job of 100,000 per pass: minutes of CPU a round).
    jobs = tuple(_job_by_node(j, node_of) if j.nodes or j.required_nodes or j.unavailable_nodes else j for j in view.jobs)
    topology = tuple(replace(g, nodes=tuple(node_of[n] for n in g.nodes if n in node_of)) for g in view.topology)
    reservations = view.reservations if view.reservations is None else \
        tuple(replace(r, nodes=tuple(node_of.get(n, n) for n in r.nodes)) for r in view.reservations)
    unnamed = frozenset(node for node, s in names.items() if s is None)
    # What the poll derived from its pending jobs holds the same objects unless one was renamed (-w, -x).
    renamed_pending = any(new is not old and old.state == "PENDING" for old, new in zip(view.jobs, jobs))
    return replace(view, nodes=nodes, jobs=jobs, topology=topology, reservations=reservations, unnamed=unnamed, _blocks={},
                   _of_pending={} if renamed_pending else view._of_pending)


def _job_by_node(job: SlurmJob, node_of: Mapping[str, str]) -> SlurmJob:
    """A job's nodes by Node name. The nodes it names keep a Slurm name no Node maps to (demand
    tells a node outside the pool that way), as reservations' do."""
    return replace(job, nodes=tuple(node_of[n] for n in job.nodes if n in node_of),
                   required_nodes=tuple(node_of.get(n, n) for n in job.required_nodes),
                   unavailable_nodes=tuple(node_of.get(n, n) for n in job.unavailable_nodes))
