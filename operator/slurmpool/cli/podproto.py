"""Lists of pods as the apiserver encodes them in protobuf, its own encoding (what the kubelet and
the controllers ask for): `kubectl slurmpool status` and `plan` read the cluster's pods this way.

Measured on 50,000 pods (the lab of e2e/bench.py, part plugin): the apiserver spent 1.0 s of CPU
writing them as protobuf, 3.8 s as a Table of rows with their metadata, 4.4 s as JSON. The
parser is upb's (C); it is described only the fields read below, and skips every other field by
its length without decoding it: 0.1 s for the 64 MiB, and 0.2-0.3 s more to read the fields.

The field numbers are Kubernetes' own (k8s.io/api core/v1 and k8s.io/apimachinery
generated.proto, proto2), which Kubernetes never renumbers: a field's number is its wire name."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from slurmpool.core.view import LABEL_COMPONENT, LABEL_POOL, PodView

MAGIC = b"k8s\x00"  # ahead of every protobuf answer: then a runtime.Unknown wrapping the object
PROTOBUF = "application/vnd.kubernetes.protobuf"
ACCEPT = f"{PROTOBUF}, application/json;q=0.5"  # JSON if the server has no protobuf for it
MIRROR = "kubernetes.io/config.mirror"
# A pod is at most etcd's 1.5 MiB request: an item (or an envelope's field) declared longer is not
# the apiserver's, and is refused before its bytes are waited for and held.
MAX_ITEM = 8 * 1024 * 1024
MAX_VARINT = 10  # bytes: a 64-bit varint; a longer run of continuation bytes is malformed
T = TypeVar("T")

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_STR, _MSG, _BYTES, _INT64 = _F.TYPE_STRING, _F.TYPE_MESSAGE, _F.TYPE_BYTES, _F.TYPE_INT64
_PKG = "slurmpool.k8s"

# message: [(field, number, type, label, message type)], from the generated.proto files named above.
_MESSAGES: dict[str, list[tuple[str, int, int, int, str | None]]] = {
    "TypeMeta": [("kind", 2, _STR, _OPT, None)],  # runtime
    "Unknown": [("typeMeta", 1, _MSG, _OPT, "TypeMeta"), ("raw", 2, _BYTES, _OPT, None)],  # runtime
    "ListMeta": [("continue_token", 3, _STR, _OPT, None)],  # meta/v1: `continue`
    "Time": [("seconds", 1, _INT64, _OPT, None)],  # meta/v1
    "OwnerReference": [("kind", 1, _STR, _OPT, None)],  # meta/v1
    "ObjectMeta": [  # meta/v1
        ("name", 1, _STR, _OPT, None), ("namespace", 3, _STR, _OPT, None), ("uid", 5, _STR, _OPT, None),
        ("deletionTimestamp", 9, _MSG, _OPT, "Time"),
        ("labels", 11, _MSG, _REP, "ObjectMeta.LabelsEntry"), ("annotations", 12, _MSG, _REP, "ObjectMeta.AnnotationsEntry"),
        ("ownerReferences", 13, _MSG, _REP, "OwnerReference"),
    ],
    "PodSpec": [("nodeName", 10, _STR, _OPT, None)],  # core/v1
    "PodStatus": [("phase", 1, _STR, _OPT, None)],  # core/v1
    "Pod": [("metadata", 1, _MSG, _OPT, "ObjectMeta"), ("spec", 2, _MSG, _OPT, "PodSpec"), ("status", 3, _MSG, _OPT, "PodStatus")],
    "PodList": [("metadata", 1, _MSG, _OPT, "ListMeta"), ("items", 2, _MSG, _REP, "Pod")],
    "ListHead": [("metadata", 1, _MSG, _OPT, "ListMeta")],  # a PodList read for its `continue` only
    "Status": [  # meta/v1: what a refusal answers, in the encoding asked for
        ("status", 2, _STR, _OPT, None), ("message", 3, _STR, _OPT, None), ("reason", 4, _STR, _OPT, None),
        ("code", 6, _F.TYPE_INT32, _OPT, None),
    ],
}
_MAPS = {"ObjectMeta": ("LabelsEntry", "AnnotationsEntry")}


def _classes() -> dict[str, Any]:  # message classes made at run time: no stubs to type them
    file = descriptor_pb2.FileDescriptorProto(name="slurmpool/k8s-pods.proto", package=_PKG, syntax="proto2")
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        for entry in _MAPS.get(name, ()):
            nested = message.nested_type.add(name=entry)
            nested.field.add(name="key", number=1, type=_STR, label=_OPT)
            nested.field.add(name="value", number=2, type=_STR, label=_OPT)
            nested.options.map_entry = True
        for field, number, type_, label, of in fields:
            added = message.field.add(name=field, number=number, type=type_, label=label)
            if of:
                added.type_name = f".{_PKG}.{of}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PKG}.{name}")) for name in _MESSAGES}


_CLASSES = _classes()
Unknown, TypeMeta, ListMeta = _CLASSES["Unknown"], _CLASSES["TypeMeta"], _CLASSES["ListMeta"]
PodList, ListHead, Status = _CLASSES["PodList"], _CLASSES["ListHead"], _CLASSES["Status"]


def is_protobuf(data: bytes) -> bool:
    return data[:4] == MAGIC


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    read = _varint_in(data, at)
    if read is None:
        raise ValueError("a protobuf answer cut short")
    return read


def _fields(data: memoryview, at: int = 0):
    """The length-delimited fields of a message, as (number, its bytes): those a list's envelope
    and head hold. A field of another wire type ends the walk (none is expected there)."""
    while at < len(data):
        key, at = _varint(data, at)
        if key & 7 != 2:
            return
        size, at = _varint(data, at)
        yield key >> 3, data[at:at + size]
        at += size


def _raw(data: bytes, kind: str) -> memoryview:
    """The object in an answer's runtime.Unknown, as a view of the answer's own bytes: parsed by
    hand, since upb would copy `raw` (megabytes a page) out of it."""
    found, raw = "", None
    for number, value in _fields(memoryview(data)[4:]):
        if number == 1:
            found = TypeMeta.FromString(value).kind
        elif number == 2:
            raw = value
    if found != kind or raw is None:
        raise ValueError(f"a protobuf answer of kind {found!r} where a {kind} was asked for")
    return raw


def status_json(data: bytes) -> str:
    """A refusal answered in protobuf (a meta/v1 Status), as the JSON the apiserver would have
    written: what ApiException's body and the plugin's error line read."""
    status = Status.FromString(_raw(data, "Status"))
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": status.status, "message": status.message,
                       "reason": status.reason, "code": status.code})


def continue_token(data: bytes) -> str | None:
    """A PodList page's `continue`, from its ListMeta: its first field, ahead of the items, as
    Go writes fields in their order (else upb reads the list's head, skipping each item)."""
    raw = _raw(data, "PodList")
    first = next(_fields(raw), None)
    if first is not None and first[0] == 1:
        return ListMeta.FromString(first[1]).continue_token or None
    return ListHead.FromString(raw).metadata.continue_token or None


def pod_page(data: bytes) -> tuple[list[PodView], str | None]:
    """A page of a PodList answer: its pods as views (pod_views), and its `continue`."""
    page = PodList.FromString(_raw(data, "PodList"))
    return pod_views(page), page.metadata.continue_token or None


def pod_views(page) -> list[PodView]:
    """A parsed PodList's pods as views, read as the plugin needs them:
    not what a pod needs of a node (`plan` reads whole pods where a move needs that), nor its
    readiness, the kubelet's reason and message, or its creation time (each read costs: 0.1 s
    of 50,000 pods apiece)."""
    intern = sys.intern
    views = []
    for pod in page.items:
        meta = pod.metadata
        labels, owners = meta.labels, meta.ownerReferences
        views.append(PodView(
            namespace=intern(meta.namespace),
            name=meta.name,
            uid=meta.uid,
            owner_kinds=tuple([intern(o.kind) for o in owners]) if owners else (),
            phase=pod.status.phase or "Pending",
            deleting=meta.HasField("deletionTimestamp"),
            slurmd=labels.get(LABEL_COMPONENT) == "slurmd",
            mirror=MIRROR in meta.annotations,
            node=intern(pod.spec.nodeName),
            pool=labels.get(LABEL_POOL, ""),
        ))
    return views


def pod_keys_page(data: bytes) -> tuple[list[tuple[str, str]], str | None]:
    """A page of a PodList answer: pod_keys of its pods, and its `continue`."""
    page = PodList.FromString(_raw(data, "PodList"))
    return pod_keys(page), page.metadata.continue_token or None


def pod_keys(page) -> list[tuple[str, str]]:
    """(node, "namespace/name") of each pod but our slurmd pods: all `status` shows of pods,
    read without a view of each."""
    keys = []
    for pod in page.items:
        meta = pod.metadata
        if meta.labels.get(LABEL_COMPONENT) != "slurmd":
            keys.append((pod.spec.nodeName, f"{meta.namespace}/{meta.name}"))
    return keys


def _header_in(buf: bytearray, at: int, inside: bool = True) -> tuple[int, int, int] | None:
    """(number, start, size) of the length-delimited field at `at`, once its key and its length
    have come (None before). `inside`: within the list (an item), not in its envelope."""
    key = _varint_in(buf, at)
    size = _varint_in(buf, key[1]) if key else None
    if not key or not size:
        return None
    if key[0] & 7 != 2:
        raise ValueError(f"a protobuf field of wire type {key[0] & 7} where a list's envelope or item was expected")
    number = key[0] >> 3
    if size[0] > MAX_ITEM and not (number == 2 and inside is False):  # the envelope's raw is the whole list
        raise ValueError(f"a protobuf field declared {size[0]} bytes long, more than an item can be ({MAX_ITEM})")
    return number, size[1], size[0]


def _varint_in(buf: bytearray | memoryview, at: int) -> tuple[int, int] | None:
    """A varint at `at` of what has come so far; None if it has not all come yet. More than
    MAX_VARINT bytes is malformed: refused at once, never read on (each chunk that came would
    read the run again, and shift a growing number: quadratic)."""
    value = shift = 0
    while at < len(buf):
        if shift >= 7 * MAX_VARINT:
            raise ValueError(f"a protobuf varint longer than {MAX_VARINT} bytes")
        byte = buf[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7
    return None


def stream_pages(chunks: Iterable[bytes], batch: int, convert: Callable[[bytes], T]) -> Iterator[T]:
    """A whole PodList answer read as it comes, `convert`ed (from a PodList's bytes) `batch`
    items at a time. The answer is cut between its items (each carries its length), and a run of
    whole items is itself the encoding of a PodList of them: so one request reads every pod, and
    no more than `batch` items and a read's bytes are held at once."""
    buf, chunks = bytearray(), iter(chunks)
    at, first, count, raw_end = 4, 4, 0, None  # raw_end: where the list ends, once inside it

    def more() -> bool:
        chunk = next(chunks, b"")
        buf.extend(chunk)
        return bool(chunk)

    while len(buf) < 4 and more():
        pass
    if buf[:4] != MAGIC:
        raise ValueError("not a protobuf answer")
    while raw_end is None or at < raw_end:
        header = _header_in(buf, at, raw_end is not None)
        if header is None or (header[1] + header[2] > len(buf) and (raw_end is not None or header[0] != 2)):
            if not more():
                raise ValueError("the list's answer ended before its last item")
            continue
        number, start, size = header
        if raw_end is None:  # the envelope, a runtime.Unknown
            if number == 2:  # raw: the list; its items are read as they come
                raw_end, at, first = start + size, start, start
                continue
            if number == 1 and (kind := TypeMeta.FromString(bytes(buf[start:start + size])).kind) != "PodList":
                raise ValueError(f"a protobuf answer of kind {kind!r} where a PodList was asked for")
            at = start + size
            continue
        at, count = start + size, count + (number == 2)
        if count >= batch:
            yield convert(bytes(buf[first:at]))
            del buf[:at]
            raw_end, at, first, count = raw_end - at, 0, 0, 0
    if count or first < at:
        yield convert(bytes(buf[first:at]))
