"""One operator poll of a slurmrestd over REST, run alone (a subprocess, by test_scale_budgets.py
and e2e/bench.py): `python -m tests.restpoll URL LIMIT_MIB PARTITION...`. Under an address-space
limit of LIMIT_MIB (0: none), it polls as the operator does (observe_slurm, the partitions'
pending jobs and every running one) and prints one JSON line: the jobs kept, the peak RSS, the
longest stall of the event loop and the poll's time."""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time

STALL_TICK = 0.01


async def poll(url: str, partitions: frozenset[str]) -> dict:
    from slurmbridge.rest import RestAuth, RestBackend
    from slurmpool.adapters.access import observe_slurm

    backend = RestBackend(url, RestAuth("good"), timeout=60.0)
    loop = asyncio.get_running_loop()
    longest, done = 0.0, asyncio.Event()

    async def watch() -> None:  # the event loop's stalls: how late each tick comes
        nonlocal longest
        while not done.is_set():
            before = loop.time()
            await asyncio.sleep(STALL_TICK)
            longest = max(longest, loop.time() - before - STALL_TICK)

    watcher = asyncio.create_task(watch())
    began = time.perf_counter()
    view = await observe_slurm(backend, pending=partitions)
    took = time.perf_counter() - began
    done.set()
    await watcher
    await backend.close()
    states: dict[str, int] = {}
    for job in view.jobs:
        states[job.state] = states.get(job.state, 0) + 1
    return {"available": view.available, "error": view.error, "jobs": states,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "longest_stall_s": round(longest, 3), "poll_s": round(took, 2)}


def main() -> None:
    url, limit = sys.argv[1], int(sys.argv[2])
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit << 20, limit << 20))
    print(json.dumps(asyncio.run(poll(url, frozenset(sys.argv[3:])))))


if __name__ == "__main__":
    main()
