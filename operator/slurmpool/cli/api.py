"""The plugin's I/O: the Kubernetes API through the client's ApiClient (kubeconfig, auth, TLS),
with no client models: the pool, its Nodes by its nodeSelector, and the pods not ended on them,
each parsed by the plugin itself (pages.py, podproto.py). Importing CoreV1Api builds some 250
pydantic models (`CoreCalls`); the client is imported when an `Api` is made, not before."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from slurmpool.cli.pages import Ahead, ahead, json_page, json_pods, list_continue, pod_keys, pod_page, pod_page_head
from slurmpool.cli.views import pool_node_views, with_pods
from slurmpool.core.models import GROUP, PLURAL, VERSION, LabelSelector, SlurmNodePoolSpec
from slurmpool.core.view import NodeView, PodView

T = TypeVar("T")


def label_selector_query(selector: LabelSelector) -> str:
    """The pool's nodeSelector as the API's labelSelector parameter (the apiserver filters)."""
    terms = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for req in selector.match_expressions:
        if req.operator == "In":
            terms.append(f"{req.key} in ({','.join(req.values)})")
        elif req.operator == "NotIn":
            terms.append(f"{req.key} notin ({','.join(req.values)})")
        elif req.operator == "Exists":
            terms.append(req.key)
        else:
            terms.append(f"!{req.key}")
    return ",".join(terms)


class CoreCalls:
    """The three CoreV1Api methods the plugin calls, under their names and with the arguments it
    passes, sent through the client's ApiClient (kubeconfig, auth, TLS; a refusal raises
    ApiException). Importing CoreV1Api builds some 250 pydantic models of Kubernetes objects:
    0.4 s and 21 MiB of a command that parses its answers itself. The on-call role is derived
    from these names (tests/test_oncall_role.py)."""

    QUERY = {"label_selector": "labelSelector", "field_selector": "fieldSelector", "limit": "limit", "_continue": "continue",
             "dry_run": "dryRun", "field_manager": "fieldManager"}

    def __init__(self, api):
        self.api = api

    def list_node(self, **kwargs):
        return self._call("GET", "/api/v1/nodes", **kwargs)

    def list_pod_for_all_namespaces(self, **kwargs):
        return self._call("GET", "/api/v1/pods", **kwargs)

    def patch_node(self, name: str, body: dict, **kwargs):
        return self._call("PATCH", "/api/v1/nodes/{name}", path={"name": name}, body=body, **kwargs)

    def _call(self, method: str, resource: str, path: dict | None = None, body: dict | None = None, _headers: dict | None = None,
              _request_timeout=None, _preload_content: bool = True, _stream: bool = False, **query):
        """The answer as the client's methods give it: parsed, or (`_preload_content=False`)
        the response, whose `data` is the body unparsed; `_stream`: urllib3's response, its body
        not read yet (`stream()` reads it as it comes; the caller closes it)."""
        from kubernetes.client.rest import ApiException

        headers = {"Accept": "application/json", **(_headers or {})}
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json"  # what the body names changes, the rest is kept
        params = [(self.QUERY[k], v) for k, v in query.items() if v is not None]
        request = self.api.param_serialize(method, resource, path_params=path, query_params=params, header_params=headers, body=body,
                                           auth_settings=["BearerToken"])
        response = self.api.call_api(*request, _request_timeout=_request_timeout)
        if _stream and 200 <= response.status <= 299:
            return response.response
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=_error_body(response.data), data=None)
        return response if not _preload_content else json.loads(response.data)


def _error_body(data: bytes) -> str:
    """A refusal's body as JSON text, though the request asked for protobuf first."""
    from slurmpool.cli import podproto

    if podproto.is_protobuf(data):
        try:
            return podproto.status_json(data)
        except Exception:  # noqa: BLE001 - not a Status after all: its bytes, as they came
            pass
    return data.decode("utf-8", "replace")


# The field manager of the plugin's writes: the operator reads it from the Node's managedFields as who
# asked for a move (core/bodies.annotation_writers, status.recentMoves[].by).
FIELD_MANAGER = "kubectl-slurmpool"


class Api:
    def __init__(self, kubeconfig: str | None, context: str | None):
        from kubernetes import client, config

        try:
            config.load_kube_config(config_file=kubeconfig, context=context)
        except config.ConfigException:
            config.load_incluster_config()
        self.api = client.ApiClient()
        self.core = CoreCalls(self.api)
        self.custom: Any = client.CustomObjectsApi(self.api)

    @staticmethod
    def default_namespace(kubeconfig: str | None, context: str | None) -> str:
        from kubernetes import config

        try:
            _, active = config.list_kube_config_contexts(config_file=kubeconfig)
            if context:
                contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
                active = next((c for c in contexts if c["name"] == context), active)
            return (active or {}).get("context", {}).get("namespace") or "default"
        except Exception:  # noqa: BLE001 - no kubeconfig: in-cluster
            return "default"

    def pool(self, namespace: str, name: str) -> dict:
        answer = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, _preload_content=False)
        return json.loads(answer.data)

    PAGE = 500  # Nodes per request: a page of bodies is held at a time
    POD_PAGE = 2000  # pods per request or batch, in protobuf (about 1.3 kB each)
    PODS_BY_NODE_UP_TO = 64  # nodes; a larger pool reads the cluster's pods not ended in one answer (fewer round trips)
    RUNNING = "status.phase!=Succeeded,status.phase!=Failed"

    def _pages(self, list_call: Callable, limit: int, read: Callable[[bytes], tuple[T, str | None]] | None = None,
               head: Callable[[bytes], str | None] = list_continue, **kwargs) -> Ahead[T]:
        """Every page of a list, each parsed once (no client models): by `read`, to what the page
        is reduced and its `continue` (a JSON page, whole, by default), a parsed page let go before
        the next one comes. Two threads: one asks for the next page as soon as this one has come
        (its `continue` read from its head by `head`), one parses: the apiserver prepares a page
        while the one before is parsed and the one before that is used."""
        parse: Callable[[bytes], tuple[Any, str | None]] = read or json_page

        def answers() -> Iterator[tuple[bytes | tuple, str | None]]:
            token = None
            while True:
                data = list_call(limit=limit, _continue=token, _preload_content=False, _request_timeout=(30, 120), **kwargs).data
                try:
                    token = head(data)
                    yield data, token
                except ValueError:  # not written as expected: parsed here, before the next page is asked for
                    page = parse(data)
                    token = page[1]
                    yield page, token
                if not token:
                    return

        def parsed(answers: Ahead[tuple[bytes | tuple, str | None]]) -> Iterator[T]:
            try:
                for data, token in answers:
                    page, parsed_token = data if isinstance(data, tuple) else parse(data)
                    if parsed_token != token:
                        raise ValueError("the list's continue token read from its head is not the one parsed")
                    yield page
            finally:
                answers.close()

        return ahead(parsed(ahead(answers())))

    def _items(self, list_call: Callable, **kwargs) -> Iterator[dict]:
        for items in self._pages(list_call, self.PAGE, **kwargs):
            yield from items

    def nodes(self, label_selector: str) -> Iterator[dict]:
        return self._items(self.core.list_node, label_selector=label_selector)

    # What of each pod is read: its key and node (`status`), its view (`plan`), or its view with
    # what it needs of a node (`plan`, for a move between inference pools).
    KEYS, VIEWS, WHOLE = "keys", "views", "whole"
    _cluster_pods: tuple[str, Ahead[list]] | None = None

    def start_pods(self, read: str = VIEWS) -> None:
        """Start reading the cluster's pods not ended now, while the pool's Nodes are read (the
        apiserver is asked for both at once). `pods_on` keeps those on a large pool's nodes; for a
        small pool it drops this read, of which a batch may have been read (the cost of not waiting
        for the Nodes on a large cluster), and asks node by node."""
        self._cluster_pods = (read, self._cluster_pods_read(read))

    def pods_on(self, node_names: set[str], read: str = VIEWS) -> Iterator:
        """The pods not ended on these nodes only: PodViews, or with KEYS (node, "namespace/name")
        of each but our slurmd pods."""
        started, self._cluster_pods = self._cluster_pods, None
        pages = started[1] if started and started[0] == read else None
        if started and pages is None:
            started[1].close()
        if len(node_names) <= self.PODS_BY_NODE_UP_TO:
            if pages:
                pages.close()

            def on(name: str) -> list:
                return self._pods_of_node(name, read)

            with ThreadPoolExecutor(8) as threads:
                for items in threads.map(on, sorted(node_names)):
                    yield from items
            return
        pages = pages or self._cluster_pods_read(read)
        try:
            if read == self.KEYS:
                for pods in pages:
                    yield from (pod for pod in pods if pod[0] in node_names)
            else:
                for pods in pages:
                    yield from (pod for pod in pods if pod.node in node_names)
        finally:
            pages.close()

    def whole_pods_on(self, node_name: str) -> list[PodView]:
        """The pods not ended on one node, whole (what each needs of a node): `plan`, for a move
        between inference pools."""
        return self._pods_of_node(node_name, self.WHOLE)

    def _pods_of_node(self, node_name: str, read: str) -> list:
        return [pod for pods in self._pod_pages(f"spec.nodeName={node_name},{self.RUNNING}", read) for pod in pods]

    def _cluster_pods_read(self, read: str) -> Ahead[list]:
        """The cluster's pods not ended, in batches: one request, read as it comes (podproto.
        stream_pages). Not in pages: the watch cache serves a whole list, where a page after the
        first was read from etcd again as often as not (the apiserver's CPU for 50,000 pods:
        0.9-1.0 s whole, 2.0-3.5 s in pages of 2,000, with etcd's 0.5 s beside). WHOLE, or a
        server that does not answer in protobuf: in pages of JSON."""
        from slurmpool.cli import podproto

        if read == self.WHOLE:
            return self._pod_pages(self.RUNNING, read)
        convert = podproto.pod_keys if read == self.KEYS else podproto.pod_views

        def batches() -> Iterator[list]:
            answer = self.core.list_pod_for_all_namespaces(field_selector=self.RUNNING, _stream=True, _request_timeout=(30, 300),
                                                           _headers={"Accept": podproto.ACCEPT})
            if not (answer.headers.get("Content-Type") or "").startswith(podproto.PROTOBUF):
                answer.close()
                pages = self._pod_pages(self.RUNNING, read)
                try:
                    yield from pages
                finally:
                    pages.close()
                return
            # Blocks of 1 MiB (urllib3's stream() would hand over each 2 kB chunk of the answer).
            blocks = ahead(iter(lambda: answer.read(1 << 20), b""))
            try:
                yield from podproto.stream_pages(blocks, self.POD_PAGE, lambda raw: convert(podproto.PodList.FromString(raw)))
            finally:
                blocks.close()
                answer.close()

        return ahead(batches())

    def _pod_pages(self, field_selector: str, read: str) -> Ahead[list]:
        """Pages of pods. WHOLE: from JSON, whole (what each needs of a node); else in protobuf
        (podproto.py: the apiserver writes it in a quarter of the time JSON takes), or from JSON
        where the server answers that instead."""
        from slurmpool.cli import podproto

        if read == self.WHOLE:
            return self._pages(self.core.list_pod_for_all_namespaces, self.PAGE, read=json_pods, field_selector=field_selector)
        return self._pages(self.core.list_pod_for_all_namespaces, self.POD_PAGE, read=pod_keys if read == self.KEYS else pod_page,
                           head=pod_page_head, field_selector=field_selector, _headers={"Accept": podproto.ACCEPT})

    def pool_names(self, namespace: str) -> list[str]:
        answer = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _preload_content=False)
        return sorted(item["metadata"]["name"] for item in json.loads(answer.data).get("items") or ())

    def node_names(self) -> list[str]:
        return sorted(item["metadata"]["name"] for item in self._items(self.core.list_node))

    def patch_pool(self, namespace: str, name: str, patch: dict, dry_run: bool = False) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch, field_manager=FIELD_MANAGER,
                                                   dry_run="All" if dry_run else None)

    def patch_node(self, name: str, patch: dict, dry_run: bool = False) -> dict:
        return self.core.patch_node(name, patch, field_manager=FIELD_MANAGER, dry_run="All" if dry_run else None)


def load_pool(api: Api, namespace: str, name: str, whole_pods: bool = False) -> tuple[dict, SlurmNodePoolSpec, list[NodeView]]:
    """The pool, its nodes and the pods on them (plan). `whole_pods`: with what each needs of a node."""
    gc.disable()  # tens of thousands of objects, none in a cycle: the collector would scan them again and again
    try:
        pool, spec, nodes, pods = _pool_nodes_pods(api, namespace, name, Api.WHOLE if whole_pods else Api.VIEWS)
        return pool, spec, with_pods(nodes, pods, in_place=True)  # pool_node_views made them: no one else holds them
    finally:
        gc.enable()


def load_status(api: Api, namespace: str, name: str) -> tuple[dict, list[NodeView], dict[str, list[str]]]:
    """The pool, its nodes, and node -> the keys of the pods not ended on it but our slurmd pods:
    what `status` shows of pods (no PodView is made: 0.2 s of 50,000)."""
    gc.disable()
    try:
        pool, _, nodes, pods = _pool_nodes_pods(api, namespace, name, Api.KEYS)
        keys: dict[str, list[str]] = {n.name: [] for n in nodes}
        for node, key in pods:
            keys[node].append(key)
        return pool, nodes, keys
    finally:
        gc.enable()


def _pool_nodes_pods(api: Api, namespace: str, name: str, read: str) -> tuple[dict, SlurmNodePoolSpec, list[NodeView], Iterator]:
    pool = api.pool(namespace, name)
    spec = SlurmNodePoolSpec.model_validate(pool.get("spec") or {})
    api.start_pods(read)  # while the Nodes are read
    nodes = pool_node_views(spec, api.nodes(label_selector_query(spec.node_selector)))
    return pool, spec, nodes, api.pods_on({n.name for n in nodes}, read)
