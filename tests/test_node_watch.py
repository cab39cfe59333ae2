"""kube.NodeWatch: the Nodes as compact views, listed by pages, kept in step with changes."""

from __future__ import annotations

import asyncio
import json

from slurmpool.adapters.kube import NodeWatch


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
        loop = asyncio.get_running_loop()  # as start() hands it to the thread
        watch.PAGE = 2
        watch.core = Core(["a", "b", "c"])
        assert await asyncio.to_thread(watch._list, loop) == "42"
        await asyncio.sleep(0)  # the loop applies the list
        assert watch.listed.is_set() and sorted(watch.nodes) == ["a", "b", "c"] and sorted(changed) == ["a", "b", "c"]
        assert watch.core.calls == [(2, None), (2, "2")]  # by pages
        view = watch.nodes["a"][0]
        assert view.placement == "slurm" and view.annotations == {"slurmpool.io/placement": "slurm"} and view.ready
        # A relist after a lost watch: "b" is gone, "d" is new, "a" and "c" did not change.
        changed.clear()
        watch.core = Core(["a", "c", "d"])
        await asyncio.to_thread(watch._list, loop)
        await asyncio.sleep(0)
        assert sorted(watch.nodes) == ["a", "c", "d"] and sorted(changed) == ["b", "d"]
        watch._set("a", None)  # a DELETED event
        assert "a" not in watch.nodes and changed[-1] == "a"

    asyncio.run(scenario())


def pod(name: str, node: str = "", gpus: int = 0, unschedulable: bool = False) -> dict:
    status = {"phase": "Running" if node else "Pending"}
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": limits}}]}, "status": status}


class PodCore:
    def __init__(self, pods):
        self.pods = list(pods)

    def list_pod_for_all_namespaces(self, limit, _continue=None, **_):
        return Response({"metadata": {"resourceVersion": "7", "continue": None}, "items": self.pods})


def test_a_pod_deleted_while_the_watch_was_away_is_gone_after_the_next_list():
    """kopf's index kept such a pod for good after an API server restart (its relist adds, never
    drops), and a move waited for it to leave its node forever (CI, test_apiserver_restart_mid_move)."""
    from slurmpool.adapters.kube import PodWatch

    async def scenario():
        woken: list[str] = []
        watch = PodWatch(None, woken.append)
        loop = asyncio.get_running_loop()
        watch.core = PodCore([pod("server", "gpu01"), pod("other", "gpu02"), pod("waiting", gpus=8, unschedulable=True),
                              pod("cpu-only", unschedulable=True)])
        await asyncio.to_thread(watch._list, loop)
        await asyncio.sleep(0)
        assert watch.listed.is_set() and [p.name for p in watch.on("gpu01")] == ["server"]
        assert [p.name for p in watch.pending.values()] == ["waiting"]  # a pod that asks for no GPU is no demand
        assert sorted(woken) == ["gpu01", "gpu02"] and watch.on("gpu03") == ()
        # The watch was lost; meanwhile "server" was deleted and "waiting" was scheduled on gpu03.
        woken.clear()
        watch.core = PodCore([pod("other", "gpu02"), pod("waiting", "gpu03", gpus=8)])
        await asyncio.to_thread(watch._list, loop)
        await asyncio.sleep(0)
        assert watch.on("gpu01") == () and "gpu01" not in watch.by_node
        assert [p.name for p in watch.on("gpu03")] == ["waiting"] and watch.pending == {}
        assert sorted(woken) == ["gpu01", "gpu03"]  # "other" did not change: its node is not woken
        watch._set("uid-other", None)  # a DELETED event
        assert watch.on("gpu02") == () and woken[-1] == "gpu02"

    asyncio.run(scenario())
