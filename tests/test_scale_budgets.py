"""Scale and hostile-input budgets on fakes (issue 37, fault-suite addition 5): counts and memory
limits, never timings (time figures are `make bench`'s)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from aiohttp import web
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmbridge import SlurmJob
from slurmbridge.jsonstream import ListStream
from slurmpool.cli import podproto
from slurmpool.core.decide import decide
from slurmpool.core.demand import Seen, signals
from slurmpool.core.interfaces import PoolRef
from slurmpool.core.placement import SLURM, Side
from slurmpool.core.snapshot import PoolSnapshot
from slurmpool.core.view import ANN_PLACEMENT, NodeView, SlurmView

from .factories import NOW, make_spec, slurm_node
from .restfake import REAL_JOB, FakeSlurmrestd, real_size_jobs

ROOT = Path(__file__).resolve().parent.parent

POOLS, NODES, PENDING = 200, 50, 100_000


class CountedJobs(tuple):
    """A view's jobs that count how often the whole queue is walked."""

    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()


def _pool(i: int):
    body = make_spec(slurm_nodes=NODES).model_dump(by_alias=True, exclude_none=True)
    body["slurm"]["partition"] = f"p{i}"
    body["demand"] = {}
    nodes = [NodeView(f"n{i}-{k}", annotations={ANN_PLACEMENT: SLURM}) for k in range(NODES)]
    return type(make_spec()).model_validate(body), nodes


def test_demand_walks_the_queue_once_per_poll_for_200_pools_with_100000_pending():
    pools = [_pool(i) for i in range(POOLS)]
    states = {n.name: slurm_node(n.name, "ALLOCATED") for _, nodes in pools for n in nodes}
    jobs = CountedJobs(
        SlurmJob(job_id=str(j), name="t", user="u", state="PENDING", partition=f"p{j % POOLS}", nodes=(), gpus_per_node=8,
                 num_nodes=1, start_time=None, end_time=None, reason="Resources")
        for j in range(PENDING))
    view = SlurmView(True, nodes=states, jobs=jobs)
    CountedJobs.walks = 0
    wanted = [signals(Seen(spec, nodes, view, [], now=NOW)) for spec, nodes in pools]
    assert all(s.waiting(Side.SLURM) == PENDING // POOLS for s in wanted)
    assert all(s.nodes(Side.SLURM) == PENDING // POOLS for s in wanted)
    assert CountedJobs.walks <= 2  # once for the pending index, once for the node index: not once per pool
    view = SlurmView(True, nodes=states, jobs=jobs)  # the next poll: every pool's whole pass
    CountedJobs.walks = 0
    for i, (spec, nodes) in enumerate(pools):
        decide(PoolSnapshot(pool=PoolRef("ns", f"pool{i}"), spec=spec, nodes=tuple(nodes), slurm=view, now=NOW))
    assert CountedJobs.walks <= 2


def _fed(chunks, taken: list[int]):
    for chunk in chunks:
        taken.append(len(chunk))
        yield chunk


def _envelope_then(item_head: bytes) -> bytes:
    """A PodList answer whose list opens with `item_head` (the list itself declared 1 GiB long)."""
    kind = b"\x12\x07PodList"
    return podproto.MAGIC + b"\x0a" + bytes([len(kind)]) + kind + b"\x12\x80\x80\x80\x80\x04" + item_head


def test_an_item_declared_longer_than_a_pod_can_be_is_refused_before_its_bytes_are_held():
    taken: list[int] = []
    head = _envelope_then(b"\x12\x80\x80\x80\x80\x10")  # an item of 4 GiB
    endless = (head if i == 0 else b"\x00" * (1 << 20) for i in range(64))
    with pytest.raises(ValueError, match="declared"):
        list(podproto.stream_pages(_fed(endless, taken), 100, bytes))
    assert sum(taken) <= len(head)  # refused on its header, not after 64 MiB of its bytes


def test_a_malformed_varint_is_refused_at_its_eleventh_byte_not_read_on():
    taken: list[int] = []
    run = (_envelope_then(b"\x12") if i == 0 else b"\x80" * 100 for i in range(2000))
    with pytest.raises(ValueError, match="varint"):
        list(podproto.stream_pages(_fed(run, taken), 100, bytes))
    assert len(taken) <= 2  # the run of continuation bytes ends the read within a chunk of it


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=64), st.integers(min_value=1, max_value=5))
def test_the_pod_stream_reader_on_any_bytes_only_reads_or_refuses(data, cut, batch):
    taken: list[int] = []
    for candidate in (data, podproto.MAGIC + data, _envelope_then(data)):
        chunks = [candidate[i:i + cut] for i in range(0, len(candidate), cut)]
        try:
            pages = list(podproto.stream_pages(_fed(chunks, taken), batch, bytes))
        except ValueError:
            continue
        assert all(isinstance(p, bytes) for p in pages)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_a_page_of_any_bytes_reads_or_is_refused(data):
    for candidate in (data, podproto.MAGIC + data, _envelope_then(data)):
        try:
            podproto.continue_token(candidate)
            podproto.pod_page(candidate)
        except (ValueError, DecodeError):
            pass


@pytest.mark.parametrize("count", [20_000, 50_000, 100_000])
async def test_a_real_size_job_queue_over_rest_is_polled_under_512_mib(count):
    """slurmrestd answers every job (~6 KB each: 20,000 are 120 MB, 100,000 600 MB): the poll
    reads it as it comes and keeps the pools' pending jobs and the running ones, under an
    address-space limit of 512 MiB (the chart's memory limit), the poll in a subprocess."""
    fake = FakeSlurmrestd(versions=("v0.0.45",), job_bytes=real_size_jobs(count))
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), str(ROOT / "bridge"), str(ROOT)])}
    try:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "tests.restpoll", url, "512", "p0", "p1",
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=ROOT)
        out, err = await proc.communicate()
    finally:
        await runner.cleanup()
    assert proc.returncode == 0, err.decode()[-2000:]
    polled = json.loads(out)
    running = len(range(0, count, 20))
    pending = sum(1 for i in range(count) if i % 20 and i % 5 and i % 10 in (0, 1))
    assert polled["available"], polled["error"]
    assert polled["jobs"] == {"RUNNING": running, "PENDING": pending}


ANSWER = json.loads(REAL_JOB.read_text())


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=5000), st.booleans())
def test_a_list_read_as_it_comes_is_the_list_however_it_is_cut(cut, indented):
    body = json.dumps(ANSWER, indent=1 if indented else None).encode()
    stream = ListStream("jobs", lambda job: job["job_id"] if job["job_id"] % 2 else None)
    for at in range(0, len(body), cut):
        stream.feed(body[at:at + cut])
    read = stream.close()
    assert read["jobs"] == [j["job_id"] for j in ANSWER["jobs"] if j["job_id"] % 2]
    assert {k: v for k, v in read.items() if k != "jobs"} == {k: v for k, v in ANSWER.items() if k != "jobs"}


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64))
def test_a_list_stream_of_any_bytes_reads_or_refuses(data, cut):
    for candidate in (data, b'{"jobs":[' + data, b'{"errors":[],"jobs":[{"a":1},' + data):
        stream = ListStream("jobs", lambda job: job, max_item=1000)
        try:
            for at in range(0, len(candidate), cut):
                stream.feed(candidate[at:at + cut])
            assert isinstance(stream.close(), dict)
        except ValueError:
            pass


def test_an_item_longer_than_the_bound_is_refused_before_the_answer_ends():
    stream = ListStream("jobs", lambda job: job, max_item=1000)
    with pytest.raises(ValueError, match="longer than"):
        stream.feed(b'{"jobs":[{"x":"' + b"y" * 2000)
