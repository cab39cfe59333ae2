"""Inference demand through DRA claims (demand/claims.py, demand/dra_pods.py) and groups that start
together (demand/pod_groups.py, PodGroups' minCount), read from resource.k8s.io/v1 and
scheduling.k8s.io objects kept as fixtures (tests/fixtures/dra/README.md says where each shape is from)."""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import yaml
from kubernetes.client.rest import ApiException

from slurmpool.adapters.kube import DraIndex, PodGroupIndex
from slurmpool.controller.freshness import Freshness
from slurmpool.controller.snapshots import Sources, snapshot
from slurmpool.core.decide import decide
from slurmpool.core.demand import Seen, signals
from slurmpool.core.demand.dra_pods import LAG_BOUND
from slurmpool.core.demand.claims import ALL, CLAIM, TEMPLATE, claim_asks, key, slice_devices, template_asks
from slurmpool.core.demand.pendingpod import GroupPolicy, is_pending_gpu_pod, pending_pod, pod_group_policy
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.membership import Membership
from slurmpool.core.models import GPU, SlurmNodePoolSpec
from slurmpool.core.placement import SLURM, Side
from slurmpool.core.view import ANN_MOVE, ANN_PLACEMENT, ANN_SETTLED, MoveRecord, iso, NodeView, PodView, SlurmView

from .factories import NOW, make_spec, slurm_node

FIXTURES = Path(__file__).parent / "fixtures" / "dra"
NS = "slurmpool-demo"


def load(name: str) -> list[dict]:
    return list(yaml.safe_load_all((FIXTURES / name).read_text()))


def by_name(name: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in load(name)}


def index() -> dict[str, tuple[tuple[str, int], ...]]:
    """What the DRA watches hold: every template and claim, by claims.key."""
    out = {key(TEMPLATE, NS, n): template_asks(o) for n, o in by_name("resourceclaimtemplates.yaml").items()}
    out |= {key(CLAIM, NS, n): claim_asks(o) for n, o in by_name("resourceclaims.yaml").items()}
    return out


def spec(**inference) -> SlurmNodePoolSpec:
    body = make_spec(slurm_nodes=4).model_dump(by_alias=True, exclude_none=True)
    body["inference"]["pools"] = [{"name": "llm", "labels": {"slurmpool.io/inference-pool": "llm"},
                                   "taints": [{"key": "slurmpool.io/inference", "value": "llm", "effect": "NoSchedule"}]}]
    body["demand"] = {"inference": inference} if inference else {}
    return SlurmNodePoolSpec.model_validate(body)


def nodes(devices: int = 8, inference: int = 0, published: bool = True,
          settled: timedelta | None = timedelta(seconds=30)) -> tuple[list[NodeView], dict]:
    """Four Slurm nodes whose driver publishes `devices` GPUs each, and `inference` settled at llm
    `settled` before NOW (None: no slurmpool.io/settled-at)."""
    on_slurm = [NodeView(f"s{i}", labels={"gpu": "true"}, annotations={ANN_PLACEMENT: SLURM},
                         devices=(("gpu.nvidia.com", devices),)) for i in range(4)]
    record = {ANN_PLACEMENT: "inference:llm"} | ({ANN_SETTLED: iso(NOW - settled)} if settled is not None else {})
    at_llm = [NodeView(f"i{i}", labels={"gpu": "true"}, annotations=record,
                       devices=(("gpu.nvidia.com", devices),) if published else ()) for i in range(inference)]
    return on_slurm + at_llm, {n.name: slurm_node(n.name) for n in on_slurm}


def pods(*names: str):
    every = {p["metadata"]["name"]: p for p in load("pods.yaml")}
    return [pending_pod(every[n]) for n in names or every]


def test_slices_count_whole_gpus_of_their_node():
    got = [slice_devices(s) for s in load("resourceslices.yaml")]
    # gpu02: 7 whole GPUs and 3 MIG devices carved from the eighth (never counted twice); a slice for all nodes is no node's
    assert got == [("gpu01", "gpu.nvidia.com", 8), ("gpu02", "gpu.nvidia.com", 7), ("", "net.example.com", 1)]


def test_templates_and_claims_ask_per_request():
    asks = index()
    assert asks[key(TEMPLATE, NS, "gpu8")] == (("gpu.nvidia.com", 8),)
    assert asks[key(TEMPLATE, NS, "gpu2")] == (("gpu.nvidia.com", 2),)
    assert asks[key(TEMPLATE, NS, "whole-node")] == (("gpu.nvidia.com", ALL),)
    assert asks[key(TEMPLATE, NS, "one-default")] == (("gpu.nvidia.com", 1),)  # count defaults to 1
    assert asks[key(TEMPLATE, NS, "mig-or-gpu")] == (("mig.nvidia.com", 1),)  # firstAvailable: the scheduler's first try
    assert asks[key(CLAIM, NS, "shared-4")] == (("gpu.nvidia.com", 4),)
    assert asks[key(CLAIM, NS, "dra-gpus-8x2vq")] == ()  # allocated: served where it is


def test_the_pod_index_keeps_pods_that_only_claim():
    for body in load("pods.yaml"):
        assert is_pending_gpu_pod(body["spec"], body["status"]), body["metadata"]["name"]
    pod = pods("dra8")[0]
    assert pod.claims == ((TEMPLATE, "gpu8"),) and pod.requests == ()
    assert pods("shared")[0].claims == ((CLAIM, "shared-4"),)
    assert pods("both-ways")[0].requests == ((GPU, 2),)


def test_claimed_devices_are_inference_demand_per_node_devices():
    ns, states = nodes()
    sig = signals(Seen(spec(), ns, SlurmView(True, nodes=states), pods(), claims=index(), now=NOW))
    dra = next(w for w in sig.wants if "claim" in w.what)
    # dra8: 8, whole: a node's 8, shared: 4 -> 20 devices on 8-device nodes: 3 nodes. Not counted: the
    # allocated claim, the MIG class (not configured), the template not indexed yet, and both-ways
    # (its nvidia.com/gpu is gpu_pods': 2 GPUs, 1 node).
    assert (dra.waiting, dra.gpus, dra.nodes, dra.pools) == (3, 20, 3, (("llm", 3),))
    assert sig.nodes(Side.INFERENCE) == 4 and sig.waiting(Side.INFERENCE) == 4 and sig.gpus(Side.INFERENCE) == 22
    assert sig.unstartable == (f"pod {NS}/too-big asks for 16 gpu.nvidia.com device(s) in one claim; a node holds 8",)


def test_a_claim_several_pods_share_is_counted_once():
    # Three pods of one Deployment name the same ResourceClaim: its 4 devices are one allocation (on
    # one node, where all three then run), so they ask for 4 GPUs and one node, not 12 and two.
    ns, states = nodes()
    shared = pods("shared")[0]
    three = [replace(shared, name=f"shared-{i}") for i in range(3)]
    sig = signals(Seen(spec(), ns, SlurmView(True, nodes=states), three, claims=index(), now=NOW))
    assert (sig.waiting(Side.INFERENCE), sig.gpus(Side.INFERENCE), sig.nodes(Side.INFERENCE)) == (3, 4, 1)
    # One pod that names the claim in two entries: still one allocation
    twice = replace(shared, claims=shared.claims * 2)
    assert signals(Seen(spec(), ns, SlurmView(True, nodes=states), [twice], claims=index(), now=NOW)).gpus(Side.INFERENCE) == 4
    # Beside them, pods of a template each get a claim of their own: 4 + 8 + 8 devices, 3 nodes
    sig = signals(Seen(spec(), ns, SlurmView(True, nodes=states), three + pods("dra8") + [replace(pods("dra8")[0], name="dra8-b")],
                  claims=index(), now=NOW))
    assert (sig.waiting(Side.INFERENCE), sig.gpus(Side.INFERENCE), sig.nodes(Side.INFERENCE)) == (5, 20, 3)


def test_a_shared_claim_too_big_for_a_node_is_reported_for_each_pod():
    ns, states = nodes(devices=2)
    shared = pods("shared")[0]
    sig = signals(Seen(spec(), ns, SlurmView(True, nodes=states), [shared, replace(shared, name="shared-b")], claims=index(), now=NOW))
    assert sig.nodes(Side.INFERENCE) == 0 and len(sig.unstartable) == 2


def test_group_members_that_share_a_claim_count_its_devices_once():
    s, ns, states = eight()
    shared = pods("shared")[0]
    members = [replace(shared, name=f"m{i}", group="gang:pair", group_size=2) for i in range(2)]
    sig = signals(Seen(s, ns, SlurmView(True, nodes=states), members, claims=index(), now=NOW))
    # the claim's devices are on one node, where both members must run: one node, not two
    assert (sig.waiting(Side.INFERENCE), sig.gpus(Side.INFERENCE), sig.nodes(Side.INFERENCE)) == (2, 4, 1)


def test_devices_per_node_come_from_the_slices():
    ns, states = nodes(devices=4)
    sig = signals(Seen(spec(), ns, SlurmView(True, nodes=states), pods("shared", "dra8"), claims=index(), now=NOW))
    assert sig.nodes(Side.INFERENCE) == 1 and sig.waiting(Side.INFERENCE) == 1  # shared's 4 fit; dra8's 8 fit no 4-GPU node
    assert sig.unstartable == (f"pod {NS}/dra8 asks for 8 gpu.nvidia.com device(s) in one claim; a node holds 4",)


def test_configured_device_classes_count():
    ns, states = nodes()
    sig = signals(Seen(spec(deviceClasses=["mig.nvidia.com"]), ns, SlurmView(True, nodes=states), pods(), claims=index(), now=NOW))
    assert (sig.waiting(Side.INFERENCE), sig.gpus(Side.INFERENCE)) == (2, 3)  # mig-first's 1 MIG device; both-ways' 2 GPUs


def test_a_node_whose_slices_lag_is_not_asked_for_twice():
    claims, wanted = index(), pods("dra8", "whole")  # 2 nodes' worth
    ns, states = nodes(inference=1, published=False)  # one node moved to llm, its driver not published yet
    lagging = signals(Seen(spec(), ns, SlurmView(True, nodes=states), wanted, claims=claims, now=NOW))
    assert lagging.nodes(Side.INFERENCE) == 1
    assert "1 node(s) of theirs not serving yet, settled there in the last 120 s: their driver's ResourceSlices or the scheduler lag" in lagging.what(Side.INFERENCE)
    # Published, but the scheduler has not placed a pod there yet (its back-off): still not asked for twice.
    # (On the lab, without this, two DRA pods moved a third node.)
    ns, states = nodes(inference=1, published=True)
    daemon = PodView("kube-system", "dra-plugin", "u1", owner_kinds=("DaemonSet",), node="i0")
    ns[-1] = replace(ns[-1], pods=(daemon,))
    assert signals(Seen(spec(), ns, SlurmView(True, nodes=states), wanted, claims=claims, now=NOW)).nodes(Side.INFERENCE) == 1
    # Serving a pod: the node counts as any other, the rest of the need is asked for.
    ns[-1] = replace(ns[-1], pods=(daemon, PodView(NS, "other", "u2", owner_kinds=("ReplicaSet",), node="i0")))
    assert signals(Seen(spec(), ns, SlurmView(True, nodes=states), wanted, claims=claims, now=NOW)).nodes(Side.INFERENCE) == 2
    # A node still moving is the decision's to deduct (incoming), not the lag's
    record = MoveRecord(id="m1", source="slurm", target="inference:llm", phase="Relabeling", since=NOW, started=NOW)
    ns, states = nodes(inference=1, published=False)
    ns[-1] = replace(ns[-1], annotations={ANN_PLACEMENT: SLURM, ANN_MOVE: record.to_annotation()})
    assert signals(Seen(spec(), ns, SlurmView(True, nodes=states), wanted, claims=claims, now=NOW)).nodes(Side.INFERENCE) == 2


def test_the_lag_is_bounded_from_the_end_of_the_move():
    # An idle node with slices that the scheduler still leaves empty after LAG_BOUND is idle for
    # another reason: it no longer holds the pods' need back, nor does one whose driver never published.
    claims, wanted = index(), pods("dra8", "whole")  # 2 nodes' worth
    view = SlurmView(True, nodes=nodes()[1])
    for published in (True, False):
        ns, _ = nodes(inference=1, published=published, settled=LAG_BOUND - timedelta(seconds=1))
        recent = signals(Seen(spec(), ns, view, wanted, claims=claims, now=NOW))
        assert recent.nodes(Side.INFERENCE) == 1
        assert f"settled there in the last {LAG_BOUND.total_seconds():.0f} s" in recent.what(Side.INFERENCE)
        ns, _ = nodes(inference=1, published=published, settled=LAG_BOUND + timedelta(seconds=1))
        old = signals(Seen(spec(), ns, view, wanted, claims=claims, now=NOW))
        assert old.nodes(Side.INFERENCE) == 2 and "not serving yet" not in old.what(Side.INFERENCE)
    # A node settled by no record that says when (a hand-written placement) is not waited for
    ns, _ = nodes(inference=1, published=True, settled=None)
    assert signals(Seen(spec(), ns, view, wanted, claims=claims, now=NOW)).nodes(Side.INFERENCE) == 2


class _Listed:
    def __init__(self, items: list[dict]):
        self.data = json.dumps({"metadata": {"resourceVersion": "7"}, "items": items}).encode()


def test_the_dra_index_keeps_asks_and_each_nodes_devices():
    async def scenario():
        kicked: list[str] = []
        dra = DraIndex(None, kicked.append)
        templates, claims, slices = dra.watches
        objects = {templates: load("resourceclaimtemplates.yaml"), claims: load("resourceclaims.yaml"), slices: load("resourceslices.yaml")}
        loop = asyncio.get_running_loop()
        for watch, items in objects.items():
            watch.call = lambda limit, _continue=None, items=items, **_: _Listed(items)
            await asyncio.to_thread(watch._list, loop)
        await asyncio.sleep(0)
        assert dra.asks == index()
        assert dra.devices("gpu01") == (("gpu.nvidia.com", 8),) and dra.devices("gpu02") == (("gpu.nvidia.com", 7),)
        assert dra.devices("gpu03") == () and sorted(kicked) == ["gpu01", "gpu02"]
        # gpu01's driver takes its slice down (the node left inference): its devices go, its pool is kicked
        kicked.clear()
        slices._set("gpu01-gpu.nvidia.com-x7k2p", None)
        assert dra.devices("gpu01") == () and kicked == ["gpu01"]
        claims._set(key(CLAIM, NS, "shared-4"), None)
        assert key(CLAIM, NS, "shared-4") not in dra.asks

    asyncio.run(scenario())


def test_an_api_server_without_dra_is_said_once_and_not_listed_again(caplog):
    async def scenario():
        dra = DraIndex(None, lambda node: None)
        calls: list[int] = []

        def not_served(**_):
            calls.append(1)
            raise ApiException(status=404, reason="Not Found")

        watch = dra.watches[2]
        watch.call = not_served
        await asyncio.to_thread(watch._run, asyncio.get_running_loop())  # returns: no relist loop
        await asyncio.sleep(0)
        assert calls == [1] and watch.listed.is_set() and dra.devices("gpu01") == ()

    asyncio.run(scenario())
    assert "does not serve ResourceSlices" in caplog.text


# ---------------------------------------------------------------- groups that start together (pod_groups.py)


def group_pods(*names: str):
    every = {o["metadata"]["name"]: o for f in ("groups.yaml", "podgroups.yaml") for o in load(f) if o["kind"] == "Pod"}
    return [pending_pod(every[n]) for n in names]


LLAMA = ("llama-405b-0", "llama-405b-1", "llama-405b-2")
EMBED = ("embed-0-0", "embed-0-1")  # the two pods of a basic PodGroup (podgroups.yaml)


def eight(**demand) -> tuple[SlurmNodePoolSpec, list[NodeView], dict]:
    """A pool of 8 nodes, all in Slurm, 8 GPUs each."""
    body = spec().model_dump(by_alias=True, exclude_none=True)
    body["demand"] = demand
    on_slurm = [NodeView(f"s{i}", labels={"gpu": "true", "block": f"b{i // 4}"}, annotations={ANN_PLACEMENT: SLURM},
                         resources=((GPU, 8),)) for i in range(8)]
    return SlurmNodePoolSpec.model_validate(body), on_slurm, {n.name: slurm_node(n.name) for n in on_slurm}


def test_groups_are_read_from_podgroups_lws_and_the_gang_label():
    assert [(p.group, p.group_size) for p in group_pods(*LLAMA)] == [("podgroup:llama-405b-0", 0)] * 3
    assert [(p.group, p.group_size) for p in group_pods("deepseek-0", "huge-0")] == [("lws:deepseek/0", 3), ("gang:huge", 12)]


def test_a_group_is_one_unit_of_n_nodes():
    s, ns, states = eight()
    sig = signals(Seen(s, ns, SlurmView(True, nodes=states), group_pods(*LLAMA), now=NOW))
    assert sig.nodes(Side.INFERENCE) == 3 and sig.waiting(Side.INFERENCE) == 3 and sig.pool_nodes == {"llm": 3}
    # an LWS leader whose two workers are not made yet: the group's 3 nodes
    assert signals(Seen(s, ns, SlurmView(True, nodes=states), group_pods("deepseek-0"), now=NOW)).nodes(Side.INFERENCE) == 3
    # gpu_pods does not count them again
    assert [w.what for w in sig.wants] == ["3 pod(s) in groups that start together want 3 node(s)"]


def test_a_group_larger_than_the_pool_is_reported_not_chased():
    s, ns, states = eight()
    sig = signals(Seen(s, ns, SlurmView(True, nodes=states), group_pods("huge-0"), now=NOW))
    assert sig.nodes(Side.INFERENCE) == 0
    assert sig.unstartable == (f"group {NS}/gang:huge needs 12 node(s) at once; the pool has 8",)
    capped, ns, states = eight(inference={"maxNodes": 2})
    assert signals(Seen(capped, ns, SlurmView(True, nodes=states), group_pods(*LLAMA), now=NOW)).unstartable == (
        f"group {NS}/podgroup:llama-405b-0 needs 3 node(s) at once; inference may hold (demand.inference.maxNodes) 2",)


def test_with_topology_a_group_must_fit_one_block():
    s, ns, states = eight()
    blocks = SlurmNodePoolSpec.model_validate({**s.model_dump(by_alias=True, exclude_none=True), "topology": {"blockLabel": "block"}})
    assert signals(Seen(blocks, ns, SlurmView(True, nodes=states), group_pods(*LLAMA), now=NOW)).nodes(Side.INFERENCE) == 3  # blocks of 4
    small = [replace(n, labels={**n.labels, "block": f"b{i // 2}"}) for i, n in enumerate(ns)]
    assert signals(Seen(blocks, small, SlurmView(True, nodes=states), group_pods(*LLAMA), now=NOW)).unstartable == (
        f"group {NS}/podgroup:llama-405b-0 needs 3 node(s) at once; the largest topology block has 2",)


def test_a_group_that_bounds_would_cut_waits_whole():
    s, ns, states = eight(slurm={"minNodes": 6})  # inference may gain 2 nodes now, the group needs 3
    sig = signals(Seen(s, ns, SlurmView(True, nodes=states), group_pods(*LLAMA), now=NOW))
    assert sig.nodes(Side.INFERENCE) == 0 and sig.unstartable == ()
    assert "1 group(s) wait: inference's bound leaves room for fewer nodes than they need" in sig.what(Side.INFERENCE)


# ---------------------------------------------------------------- PodGroups' minCount (kube.PodGroupIndex)


def podgroups() -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in load("podgroups.yaml") if o["kind"] == "PodGroup"}


def with_min_count(count: object) -> dict:
    body = copy.deepcopy(podgroups()["llama-405b-0"])
    body["spec"]["schedulingPolicy"]["gang"]["minCount"] = count
    return body


def test_a_podgroups_policy_reads_its_gang_min_count_or_basic():
    assert {n: pod_group_policy(o) for n, o in podgroups().items()} == {"llama-405b-0": GroupPolicy(3), "embed-0": GroupPolicy(None)}
    # the v1alpha3 object of groups.yaml has the same spec
    (alpha,) = [o for o in load("groups.yaml") if o["kind"] == "PodGroup"]
    assert pod_group_policy(alpha) == GroupPolicy(3)
    assert [(p.group, p.group_size) for p in group_pods(*EMBED)] == [("podgroup:embed-0", 0)] * 2


def test_a_podgroup_whose_policy_does_not_read_is_ignored():
    for count in (None, "3", 3.0, True, 0, -2, 2**31):
        assert pod_group_policy(with_min_count(count)) is None, count
    missing = with_min_count(3)
    del missing["spec"]["schedulingPolicy"]["gang"]["minCount"]
    both = with_min_count(3)
    both["spec"]["schedulingPolicy"]["basic"] = {}
    for body in (missing, both, {"spec": {}}, {"spec": {"schedulingPolicy": {"gang": 3}}}, {"spec": "x"}, {}):
        assert pod_group_policy(body) is None, body


def test_a_podgroups_min_count_sizes_its_group():
    s, ns, states = eight()
    two = group_pods(*LLAMA[:2])  # the third member is not made yet
    before = signals(Seen(s, ns, SlurmView(True, nodes=states), two, now=NOW))
    assert before.nodes(Side.INFERENCE) == 2  # unknown PodGroup: its pending pods are the group
    sig = signals(Seen(s, ns, SlurmView(True, nodes=states), two, pod_groups={(NS, "llama-405b-0"): 3}, now=NOW))
    assert (sig.nodes(Side.INFERENCE), sig.waiting(Side.INFERENCE), sig.pool_nodes) == (3, 2, {"llm": 3})
    # another namespace's PodGroup of that name is not theirs
    other = signals(Seen(s, ns, SlurmView(True, nodes=states), two, pod_groups={("elsewhere", "llama-405b-0"): 3}, now=NOW))
    assert other.nodes(Side.INFERENCE) == 2


def test_a_basic_or_unread_podgroup_is_sized_by_its_pending_pods():
    s, ns, states = eight()
    basic = signals(Seen(s, ns, SlurmView(True, nodes=states), group_pods(*EMBED), pod_groups={(NS, "embed-0"): None}, now=NOW))
    assert (basic.nodes(Side.INFERENCE), basic.waiting(Side.INFERENCE)) == (2, 2)
    assert [w.what for w in basic.wants] == ["2 pod(s) in groups that start together want 2 node(s)"]


def test_a_podgroup_larger_than_the_pool_is_reported_not_chased():
    s, ns, states = eight()
    sig = signals(Seen(s, ns, SlurmView(True, nodes=states), group_pods(*LLAMA), pod_groups={(NS, "llama-405b-0"): 12}, now=NOW))
    assert sig.nodes(Side.INFERENCE) == 0
    assert sig.unstartable == (f"group {NS}/podgroup:llama-405b-0 needs 12 node(s) at once; the pool has 8",)


def test_the_pass_reads_the_podgroup_index():
    """Sources -> PoolSnapshot.pod_groups -> decide's Seen: two of a gang of 3 want 3 nodes."""
    s, ns, states = eight()
    index = PodGroupIndex(None, lambda: None)
    index.min_counts[(NS, "llama-405b-0")] = 3

    class Pods:
        pending = {p.name: p for p in group_pods(*LLAMA[:2])}
        by_node: dict = {}

        def on(self, name):
            return ()

    class Access:
        async def observe(self, namespace, access, wanted):
            return None, SlurmView(True, nodes=states)

    class Status:
        def wanted(self, pool):
            return None

    membership = Membership()
    membership.set_selectors({("ns", "gpu"): s.node_selector})
    for node in ns:
        membership.update(node.name, node.labels)
    src = Sources({n.name: (n,) for n in ns}, Pods(), {}, membership, Access(), Status(), groups=index)
    raw = {"uid": "u", "generation": 1, "spec": {}}
    snap, _, _ = asyncio.run(snapshot(src, PoolRef("ns", "gpu", "u"), s, raw, Freshness(1.0)))
    assert snap.pod_groups == {(NS, "llama-405b-0"): 3}
    assert decide(snap).target.status.demand.pool_wants == {"llm": 3}
    assert decide(replace(snap, pod_groups={})).target.status.demand.pool_wants == {"llm": 2}


def test_the_podgroup_index_keeps_min_counts_and_wakes_the_pools():
    async def scenario():
        woken: list[int] = []
        groups = PodGroupIndex(None, lambda: woken.append(1))
        unread = {**with_min_count(-1), "metadata": {"namespace": NS, "name": "bad"}}
        listed = [*podgroups().values(), unread]
        groups.watch.call = lambda limit, _continue=None, **_: _Listed(listed)
        await asyncio.to_thread(groups.watch._list, asyncio.get_running_loop())
        await asyncio.sleep(0)
        assert groups.min_counts == {(NS, "llama-405b-0"): 3, (NS, "embed-0"): None} and len(woken) == 2
        # the scheduler's status writes that change no size wake no pool
        woken.clear()
        retried = copy.deepcopy(podgroups()["llama-405b-0"])
        retried["status"]["conditions"][0]["message"] = "0/9 nodes are available"
        groups.watch._set(f"{NS}/llama-405b-0", pod_group_policy(retried))
        assert woken == []
        # scaled: minCount is the one mutable field of a gang
        groups.watch._set(f"{NS}/llama-405b-0", pod_group_policy(with_min_count(4)))
        assert groups.min_counts[(NS, "llama-405b-0")] == 4 and woken == [1]
        # placed once: its pods that wait later are replacements, each alone
        scheduled = copy.deepcopy(with_min_count(4))
        scheduled["status"]["conditions"][0]["status"] = "True"
        groups.watch._set(f"{NS}/llama-405b-0", pod_group_policy(scheduled))
        assert groups.min_counts[(NS, "llama-405b-0")] is None and woken == [1, 1]
        groups.watch._set(f"{NS}/llama-405b-0", None)
        assert (NS, "llama-405b-0") not in groups.min_counts and woken == [1, 1, 1]

    asyncio.run(scenario())


def test_an_api_server_without_podgroups_is_said_once_and_not_listed_again(caplog):
    async def scenario():
        groups = PodGroupIndex(None, lambda: None)
        calls: list[int] = []

        def not_served(**_):
            calls.append(1)
            raise ApiException(status=404, reason="Not Found")

        groups.watch.call = not_served
        await asyncio.to_thread(groups.watch._run, asyncio.get_running_loop())  # returns: no relist loop
        await asyncio.sleep(0)
        assert calls == [1] and groups.watch.listed.is_set() and groups.min_counts == {}

    asyncio.run(scenario())
    assert "does not serve PodGroups" in caplog.text


# ---------------------------------------------------------------- objects the lab's API server returned (fixtures/dra/captured)


def captured(name: str) -> list[dict]:
    return list(yaml.safe_load_all((FIXTURES / "captured" / name).read_text()))


def test_the_lab_apiservers_objects_read_as_the_hand_written_ones():
    # the slices NVIDIA's driver publishes, as the lab's stand-in made them: 8 whole GPUs of one node each
    got = [slice_devices(s) for s in captured("resourceslices.yaml")]
    assert got and all(node and driver == "gpu.nvidia.com" and n == 8 for node, driver, n in got)
    # the DeviceClass: as the hand-written fixture has it
    real = {o["metadata"]["name"]: o["spec"] for o in captured("deviceclasses.yaml")}
    assert real["gpu.nvidia.com"] == by_name("deviceclasses.yaml")["gpu.nvidia.com"]["spec"]
    templates = {o["metadata"]["name"]: template_asks(o) for o in captured("resourceclaimtemplates.yaml")}
    assert templates == {"gpu8": (("gpu.nvidia.com", 8),), "gpu16": (("gpu.nvidia.com", 16),)}
    # a claim the scheduler allocated asks for nothing more; the shared one is one allocation for both pods
    claims = {o["metadata"]["name"]: o for o in captured("resourceclaims.yaml")}
    asks = {n.rsplit("-", 1)[0]: claim_asks(c) for n, c in claims.items()}  # made from a template: <pod>-<claim>-<random>
    assert asks == {"dra8-gpus": (), "shared": (), "too-big-gpus": (("gpu.nvidia.com", 16),)}  # too-big's was never allocated
    shared = claims["shared-4"]
    assert sorted(r["name"] for r in shared["status"]["reservedFor"]) == ["shared-a", "shared-b"]
    assert len(shared["status"]["allocation"]["devices"]["results"]) == 4
    # the pod no node could hold waits Unschedulable and is kept by the pod index; the running ones are not
    bodies = {p["metadata"]["name"]: p for p in captured("pods.yaml")}
    assert [n for n, p in bodies.items() if is_pending_gpu_pod(p["spec"], p["status"])] == ["too-big"]
    assert pending_pod(bodies["too-big"]).claims == ((TEMPLATE, "gpu16"),)


def test_the_lab_apiservers_shared_claim_counts_once_while_it_waits():
    # shared-4 as it was before the scheduler allocated it, named by the two pods as the API server returned them
    claim = {o["metadata"]["name"]: o for o in captured("resourceclaims.yaml")}["shared-4"]
    asks = {key(CLAIM, NS, "shared-4"): claim_asks({**claim, "status": {}})}
    bodies = {p["metadata"]["name"]: p for p in captured("pods.yaml")}
    waiting = [pending_pod(bodies[n]) for n in ("shared-a", "shared-b")]
    ns, states = nodes()
    sig = signals(Seen(spec(), ns, SlurmView(True, nodes=states), waiting, claims=asks, now=NOW))
    assert (sig.waiting(Side.INFERENCE), sig.gpus(Side.INFERENCE), sig.nodes(Side.INFERENCE)) == (2, 4, 1)


def test_the_lab_apiservers_podgroups_read_as_the_scheduler_treats_them():
    """captured/podgroups.yaml (v1.37.2, GenericWorkload on): gang `trio` (minCount 3) with its 3
    pods scheduled together; gang `quad` (minCount 4) with 3 pods, which the scheduler holds
    without any condition until the 4th exists; `loose` (basic) with 1 pod Unschedulable."""
    objects = captured("podgroups.yaml")
    groups = {o["metadata"]["name"]: pod_group_policy(o) for o in objects if o["kind"] == "PodGroup"}
    # a gang placed once sizes no group again (a replacement pod counts alone); one not yet placed, its minCount
    assert groups == {"trio": GroupPolicy(None), "quad": GroupPolicy(4), "loose": GroupPolicy(None)}
    pods = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Pod"}
    waiting = [n for n, p in pods.items() if is_pending_gpu_pod(p["spec"], p["status"])]
    assert waiting == ["loose-0"]  # quad's pods wait for their 4th member: no demand until it exists
    assert (pending_pod(pods["quad-0"]).group, pending_pod(pods["loose-0"]).group) == ("podgroup:quad", "podgroup:loose")
    assert all(p["status"]["phase"] == "Running" for n, p in pods.items() if n.startswith("trio"))
