"""Pods read in protobuf (cli/podproto.py) are the pods read in JSON (core/bodies.pod_view), but for
what the plugin does not read (what a pod needs of a node: `plan` reads whole JSON pods where a
move needs it; readiness, the kubelet's reason, creation time). The
fixtures are one list of the lab's apiserver (Kubernetes 1.37) in both encodings: seven pods made
to cover what the views read (a ReplicaSet's, a DaemonSet's, a slurmd pod of a pool, a static
pod, one being deleted, one Ready, one evicted); podlist-page1.pb is its first page of three."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurmpool.cli import podproto
from slurmpool.core.bodies import pod_view
from slurmpool.core.view import PodNeeds
from tests.factories import pod_list_page as page

FIXTURES = Path(__file__).parent / "fixtures" / "pods"


def test_the_apiservers_protobuf_list_reads_as_its_json_list():
    views, token = podproto.pod_page((FIXTURES / "podlist.pb").read_bytes())
    items = json.loads((FIXTURES / "podlist.json").read_text())["items"]
    assert token is None
    # What the plugin does not read: needs, readiness, the kubelet's reason and message, creation time.
    unread = {"needs": PodNeeds(), "ready": False, "reason": "", "message": "", "created": None}
    assert views == [replace(pod_view(body), **unread) for body in items]
    by_name = {v.name: v for v in views}
    # Each field the fixture was made to show, read as its pod has it:
    assert by_name["slurmd-bp-00001"].slurmd and by_name["slurmd-bp-00001"].pool == "gpu"
    assert by_name["agent-x"].owner_kinds == ("DaemonSet",) and not by_name["agent-x"].evictable
    assert by_name["static-y"].mirror and not by_name["static-y"].evictable
    assert by_name["going"].deleting and not by_name["llm-0"].deleting
    assert by_name["ready-z"].phase == "Running" and by_name["failed-w"].phase == "Failed" and by_name["failed-w"].ended
    assert {v.node for v in views} == {"bp-00000", "bp-00001", "bp-00002", "bp-00003"}


def test_a_pages_continue_is_read_from_its_head_alone():
    first = (FIXTURES / "podlist-page1.pb").read_bytes()
    views, token = podproto.pod_page(first)
    assert len(views) == 3 and token and podproto.continue_token(first) == token
    assert podproto.continue_token((FIXTURES / "podlist.pb").read_bytes()) is None
    assert podproto.continue_token(page([("a", "b", "n1")], token="eyJ2")) == "eyJ2"
    # A list whose head comes after its items (not as Go writes it) is still read: the slow way.
    items, head = podproto.PodList(), podproto.ListHead()
    items.items.add().metadata.name = "x"
    head.metadata.continue_token = "late"
    envelope = podproto.Unknown(raw=items.SerializeToString() + head.SerializeToString())
    envelope.typeMeta.kind = "PodList"
    late = podproto.MAGIC + envelope.SerializeToString()
    assert podproto.continue_token(late) == "late" and podproto.pod_page(late)[1] == "late"


def test_an_answer_of_another_kind_is_refused_not_read_as_pods():
    assert podproto.is_protobuf(page([])) and not podproto.is_protobuf(b'{"kind":"PodList"}')
    with pytest.raises(ValueError, match="NodeList"):
        podproto.pod_page(page([("a", "b", "n1")], kind="NodeList"))
    with pytest.raises(ValueError, match="NodeList"):
        podproto.continue_token(page([], kind="NodeList"))


def test_status_reads_each_pods_key_and_node_but_our_slurmd_pods():
    data = (FIXTURES / "podlist.pb").read_bytes()
    views, _ = podproto.pod_page(data)
    keys, token = podproto.pod_keys_page(data)
    assert token is None and keys == [(v.node, v.key) for v in views if not v.slurmd]
    assert ("bp-00001", "podproto-fixture/slurmd-bp-00001") not in keys and len(keys) == 6


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def test_a_whole_list_read_as_it_comes_is_the_list_in_batches_however_it_is_cut():
    data = (FIXTURES / "podlist.pb").read_bytes()
    views, _ = podproto.pod_page(data)
    to_views = lambda raw: podproto.pod_views(podproto.PodList.FromString(raw))  # noqa: E731
    for size in (1, 3, 7, 100, 4096, len(data)):
        for batch in (1, 2, 3, 7, 100):
            pages = list(podproto.stream_pages(chunked(data, size), batch, to_views))
            assert [v for page in pages for v in page] == views, (size, batch)
            assert [len(p) for p in pages] == [min(batch, 7 - i) for i in range(0, 7, batch)], (size, batch)
    keys = [k for page in podproto.stream_pages(chunked(data, 50), 3, lambda raw: podproto.pod_keys(podproto.PodList.FromString(raw)))
            for k in page]
    assert keys == podproto.pod_keys_page(data)[0]
    assert list(podproto.stream_pages([page([])], 10, to_views)) == []  # an empty list: no batch


def test_a_list_cut_short_or_not_a_list_is_an_error_not_fewer_pods():
    data = (FIXTURES / "podlist.pb").read_bytes()
    to_views = lambda raw: podproto.pod_views(podproto.PodList.FromString(raw))  # noqa: E731
    with pytest.raises(ValueError, match="ended before"):
        list(podproto.stream_pages(chunked(data[:-10], 100), 2, to_views))
    with pytest.raises(ValueError, match="not a protobuf"):
        list(podproto.stream_pages([b'{"kind":"PodList"}'], 2, to_views))
    with pytest.raises(ValueError, match="NodeList"):
        list(podproto.stream_pages([page([("a", "b", "n1")], kind="NodeList")], 2, to_views))


def test_a_refusal_in_protobuf_reads_as_the_json_status_the_plugin_reports():
    """The apiserver answers a refusal in the encoding asked for: the lab's 403 to a user with no
    rights, as the plugin's error line and the e2e role tests read it."""
    from kubernetes.client.rest import ApiException

    from slurmpool.cli import api
    from tests.test_cli import Answer, core_calls

    data = (FIXTURES / "forbidden.pb").read_bytes()
    status = json.loads(podproto.status_json(data))
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    assert status["message"] == 'pods is forbidden: User "nobody" cannot list resource "pods" in API group "" at the cluster scope'
    assert json.loads(api._error_body(data)) == status
    assert api._error_body(b'{"kind":"Status"}') == '{"kind":"Status"}'
    assert api._error_body(podproto.MAGIC + b"\xff\xff") == (podproto.MAGIC + b"\xff\xff").decode("utf-8", "replace")
    # As CoreCalls raises it: the client's exception, with that JSON as its body.
    core, _ = core_calls(status=403)
    core.api.call_api = lambda *args, **kwargs: Answer(403, data)
    with pytest.raises(ApiException) as refused:
        core.list_pod_for_all_namespaces(limit=5, _preload_content=False)
    assert json.loads(refused.value.body) == status and refused.value.status == 403
