"""kube.NodeWatch: the Nodes as compact views, listed by pages, kept in step with changes."""

from __future__ import annotations

import asyncio
import json

from slurmpool.kube import NodeWatch


def body(name: str, placement: str = "slurm") -> dict:
    return {"metadata": {"name": name, "labels": {"gpu": "true"}, "annotations": {"slurmpool.io/placement": placement, "other": "x"},
                         "managedFields": [{"manager": "kubelet"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


class Response:
    def __init__(self, page: dict):
        self.data = json.dumps(page).encode()


class Core:
    """list_node by pages of two, as the API server does with limit and continue."""

    def __init__(self, names):
        self.names, self.calls = list(names), []

    def list_node(self, limit, _continue=None, **_):
        start = int(_continue or 0)
        self.calls.append((limit, _continue))
        items = [body(n) for n in self.names[start:start + 2]]
        more = start + 2 < len(self.names)
        return Response({"metadata": {"resourceVersion": "42", "continue": str(start + 2) if more else None}, "items": items})


def test_a_list_replaces_the_nodes_and_wakes_only_what_changed():
    async def scenario():
        changed: list[str] = []
        watch = NodeWatch(None, changed.append)
        watch._loop = asyncio.get_running_loop()  # as start() sets it, without the thread
        watch.PAGE = 2
        watch.core = Core(["a", "b", "c"])
        assert await asyncio.to_thread(watch._list) == "42"
        await asyncio.sleep(0)  # the loop applies the list
        assert watch.listed.is_set() and sorted(watch.nodes) == ["a", "b", "c"] and sorted(changed) == ["a", "b", "c"]
        assert watch.core.calls == [(2, None), (2, "2")]  # by pages
        view = watch.nodes["a"][0]
        assert view.placement == "slurm" and view.annotations == {"slurmpool.io/placement": "slurm"} and view.ready
        # A relist after a lost watch: "b" is gone, "d" is new, "a" and "c" did not change.
        changed.clear()
        watch.core = Core(["a", "c", "d"])
        await asyncio.to_thread(watch._list)
        await asyncio.sleep(0)
        assert sorted(watch.nodes) == ["a", "c", "d"] and sorted(changed) == ["b", "d"]
        watch._set("a", None)  # a DELETED event
        assert "a" not in watch.nodes and changed[-1] == "a"

    asyncio.run(scenario())
