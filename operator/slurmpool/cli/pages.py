"""The plugin's reads, page by page: each list answer reduced as it comes (a JSON page, or pods in
the apiserver's protobuf: podproto.py), the next page asked for while one is parsed (`Ahead`)."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Generator, Iterator
from typing import Generic, TypeVar

from slurmpool.core.view import PodView

T = TypeVar("T")


def list_continue(data: bytes) -> str | None:
    """The `continue` token of a list's answer, read from its head: the list's metadata comes
    before its items or rows (Go's field order), so the next page can be asked for before this one
    is parsed. ValueError if the head is not that."""
    at = data.find(b'"metadata":', 0, 256)
    if at < 0:
        raise ValueError("a list's answer without its metadata ahead of its items")
    meta, _ = json.JSONDecoder().raw_decode(data[at + 11:at + 11 + 8192].decode("utf-8", "replace"))
    token = meta.get("continue") if isinstance(meta, dict) else None
    return token or None


def json_page(data: bytes) -> tuple[list[dict], str | None]:
    """A JSON list's items and its `continue`."""
    page = json.loads(data)
    return page.get("items") or [], (page.get("metadata") or {}).get("continue") or None


def json_pods(data: bytes) -> tuple[list[PodView], str | None]:
    from slurmpool.core.bodies import pod_view

    items, token = json_page(data)
    return [pod_view(body) for body in items], token


def pod_page(data: bytes) -> tuple[list[PodView], str | None]:
    from slurmpool.cli import podproto

    return podproto.pod_page(data) if podproto.is_protobuf(data) else json_pods(data)


def pod_keys(data: bytes) -> tuple[list[tuple[str, str]], str | None]:
    from slurmpool.cli import podproto

    if podproto.is_protobuf(data):
        return podproto.pod_keys_page(data)
    views, token = json_pods(data)
    return [(v.node, v.key) for v in views if not v.slurmd], token


def pod_page_head(data: bytes) -> str | None:
    from slurmpool.cli import podproto

    return podproto.continue_token(data) if podproto.is_protobuf(data) else list_continue(data)


class Ahead(Generic[T]):
    """`items`, each made in a thread while the consumer uses the one before: one waits, at most.
    The thread starts at once (the first item is made before it is asked for). An error in the
    thread is raised here; `close()`, or the consumer stopping early, stops the thread, and the
    thread closes `items` (a chain of them stops from its end)."""

    _DONE = object()

    def __init__(self, items: Iterator[T]):
        self._handoff: queue.Queue = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        threading.Thread(target=self._run, args=(items,), daemon=True, name="slurmpool-pages").start()
        self._items = self._consume()

    def __iter__(self) -> Ahead[T]:
        return self

    def __next__(self) -> T:
        return next(self._items)

    def close(self) -> None:
        self._stop.set()
        self._items.close()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._handoff.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, items: Iterator[T]) -> None:
        try:
            for item in items:
                if not self._put((item, None)):
                    return
            self._put((self._DONE, None))
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, raised there
            self._put((self._DONE, err))
        finally:
            close = getattr(items, "close", None)  # a generator's, or another Ahead's
            if close is not None:
                close()

    def _consume(self) -> Generator[T, None, None]:
        try:
            while True:
                item, err = self._handoff.get()
                if err is not None:
                    raise err
                if item is self._DONE:
                    return
                yield item
        finally:
            self._stop.set()


def ahead(items: Iterator[T]) -> Ahead[T]:
    return Ahead(items)
