"""A small slurmrestd in-process (aiohttp.web) answering with JSON shaped as Slurm 26.05's data
parsers dump it (src/plugins/data_parser/v0.0.4x/parsers.c, src/slurmrestd/openapi.c): every
answer carries meta, errors and warnings; numbers that may be unset are {"set","infinite","number"};
node and job states are lists of flag names; no token is 401, a bad one 511."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

VERSION_RE = r"v0\.0\.4[0-9]"
# What slurmrestd 26.05 answers (text/plain) for a path it does not serve.
UNKNOWN_URL = ("Unable to find requested URL endpoint. Please query the '/openapi/v3' endpoint or visit "
               "'https://slurm.schedmd.com/rest_api.html' for the OpenAPI specification which includes a list of all "
               "possible slurmrestd endpoints.")


def no_val(number: int | None) -> dict:
    if number is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": number}


def meta(version: str) -> dict:
    return {
        "plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld",
                   "data_parser": f"data_parser/{version}", "accounting_storage": ""},
        "client": {"source": "[127.0.0.1]:40000(fd:9)", "user": "slurm", "group": "slurm"},
        "slurm": {"version": {"major": "26", "micro": "3", "minor": "05"}, "release": "26.05.3", "cluster": "lab"},
    }


def error(description: str, number: int, text: str, source: str) -> dict:
    return {"description": description, "error_number": number, "error": text, "source": source}


def rest_node(name: str, state: list[str], *, reason: str = "", reason_user: str = "", reason_at: int = 0,
              gres: str = "gpu:h100:8", gres_used: str = "gpu:h100:0(IDX:N/A)", features=("gpu", "h100"),
              partitions=("gpu",), slurmd_start: int = 1764547200) -> dict:
    return {
        "architecture": "x86_64", "burstbuffer_network_address": "", "boards": 1,
        "boot_time": no_val(1764540000), "cluster_name": "", "cores": 1, "specialized_cores": 0,
        "cpu_binding": 0, "cpu_load": 12, "free_mem": no_val(1000), "cpus": 4, "effective_cpus": 4,
        "specialized_cpus": "", "energy": {}, "extra": "", "features": list(features),
        "active_features": list(features), "gpu_spec": "", "gres": gres, "gres_drained": "N/A",
        "gres_used": gres_used, "instance_id": "", "instance_type": "", "last_busy": no_val(1764547000),
        "mcs_label": "", "specialized_memory": 0, "name": name, "next_state_after_reboot": ["INVALID"],
        "address": "127.0.0.1", "hostname": "localhost", "state": state, "operating_system": "Linux 6.1",
        "owner": "", "partitions": list(partitions), "port": 6818, "real_memory": 1000,
        "res_cores_per_gpu": 0, "comment": "", "reason": reason, "reason_changed_at": no_val(reason_at),
        "reason_set_by_user": reason_user, "resume_after": no_val(None), "reservation": "",
        "alloc_memory": 0, "alloc_cpus": 0, "alloc_idle_cpus": 4, "tres_used": "", "tres_weighted": 0.0,
        "slurmd_start_time": no_val(slurmd_start), "sockets": 1, "threads": 1, "temporary_disk": 0,
        "weight": 1, "topology": "", "tres": "cpu=4,mem=1000M,billing=4,gres/gpu=8", "version": "26.05.3",
    }


def rest_job(job_id: int, state: list[str], *, name: str = "train", user: str = "alice", partition: str = "gpu",
             nodes: str = "", node_count: int = 1, tres_per_node: str = "gres/gpu:8",
             start: int = 0, end: int = 0, reason: str = "None", array_job_id: int = 0,
             array_task_id: int | None = None, array_task_string: str = "", het_job_id: int = 0,
             het_job_offset: int | None = None) -> dict:
    return {
        "account": "research", "accrue_time": no_val(0), "admin_comment": "", "allocating_node": "login",
        "array_job_id": no_val(array_job_id), "array_task_id": no_val(array_task_id),
        "array_max_tasks": no_val(0), "array_task_string": array_task_string, "association_id": 2,
        "batch_features": "", "batch_flag": True, "batch_host": nodes.split(",")[0] if nodes else "",
        "flags": ["EXACT_TASK_COUNT_REQUESTED"], "burst_buffer": "", "cluster": "lab", "command": "/bin/true",
        "comment": "", "cpus": no_val(1), "end_time": no_val(end), "gres_detail": [],
        "group_id": 1000, "group_name": "alice", "het_job_id": no_val(het_job_id), "het_job_id_set": "",
        "het_job_offset": no_val(het_job_offset), "job_id": job_id, "job_resources": {},
        "job_state": state, "last_sched_evaluation": no_val(0), "name": name, "nodes": nodes,
        "node_count": no_val(node_count), "partition": partition, "priority": no_val(1),
        "requeue": True, "start_time": no_val(start), "state_description": "", "state_reason": reason,
        "submit_time": no_val(1764547000), "time_limit": no_val(60), "tres_per_node": tres_per_node,
        "tres_req_str": "cpu=1,node=1", "tres_alloc_str": "", "user_id": 1000, "user_name": user,
    }


@dataclass
class FakeSlurmrestd:
    versions: tuple[str, ...] = ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
    tokens: set[str] = field(default_factory=lambda: {"good"})
    openapi: bool = True  # serve /openapi/v3 (else the client must probe)
    nodes: list[dict] = field(default_factory=list)
    jobs: list[dict] = field(default_factory=list)
    requests: list[tuple[str, str, dict, Any]] = field(default_factory=list)  # method, path, headers, body
    # (method, path) -> (status, extra top-level fields, errors) to answer instead
    scripted: dict[tuple[str, str], tuple[int, dict, list]] = field(default_factory=dict)
    controller_up: bool = True
    requeue_state: list[str] = field(default_factory=lambda: ["PENDING"])
    signals: list[tuple[str, str, dict]] = field(default_factory=list)  # DELETE /job/{id}: version, id, query
    job_bytes: Callable[[], Iterable[bytes]] | None = None  # GET /jobs/'s list, encoded, streamed (real_size_jobs)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    def answer(self, version: str, http_status: int = 200, errors: list | None = None, **fields) -> web.Response:
        body = {**fields, "meta": meta(version), "errors": errors or [], "warnings": []}
        return web.Response(status=http_status, text=json.dumps(body), content_type="application/json")

    async def stream_jobs(self, request: web.Request, version: str) -> web.StreamResponse:
        """GET /jobs/ written as it is made (chunked), as slurmrestd writes a large answer: the
        fake never holds it (100,000 jobs are 600 MB)."""
        assert self.job_bytes is not None
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b'{"jobs":[')
        block = bytearray()
        for i, job in enumerate(self.job_bytes()):
            block += (b"," if i else b"") + job
            if len(block) > 1 << 20:
                await response.write(bytes(block))
                block.clear()
        tail = {"last_backfill": no_val(0), "last_update": no_val(1764547300), "meta": meta(version), "errors": [], "warnings": []}
        await response.write(bytes(block) + b"]," + json.dumps(tail)[1:].encode())
        await response.write_eof()
        return response

    async def handle(self, request: web.Request) -> web.StreamResponse:
        text = await request.text()
        body = json.loads(text) if text else None
        self.requests.append((request.method, request.path, dict(request.headers), body))
        token = request.headers.get("X-SLURM-USER-TOKEN")
        bearer = request.headers.get("Authorization", "")
        if bearer.startswith("Bearer "):
            token = bearer[len("Bearer "):]
        if token is None:
            return web.Response(status=401, text="Authentication failure")
        path = request.path
        version = path.split("/")[2] if path.startswith("/slurm/") else self.versions[-1]
        if token not in self.tokens and path.endswith("/ping/") and version >= "v0.0.42":
            # slurmrestd 26.05 pings slurmctld with the token: refused, but the answer is a 200
            return self.answer(version, pings=[{"hostname": "ctl", "responding": False, "latency": 10833,
                                                "primary": True, "status": "Protocol authentication error"}])
        if token not in self.tokens:
            return self.answer(version, 511, [error("Unable to authenticate", 1007,
                                                    "Protocol authentication error", "slurm_rest_auth")])
        if path == "/openapi/v3":
            if not self.openapi:
                return web.Response(status=404, text=UNKNOWN_URL)
            paths = {}
            for v in self.versions:
                for p in ("ping/", "nodes/", "node/{node_name}", "jobs/", "job/{job_id}"):
                    paths[f"/slurm/{v}/{p}"] = {}
                if v == "v0.0.45":
                    paths[f"/slurm/{v}/job/{{job_id}}/requeue"] = {}
                paths[f"/slurmdb/{v}/jobs/"] = {}
            return web.json_response({"openapi": "3.0.2", "info": {"title": "Slurm REST API"}, "paths": paths})
        if not path.startswith("/slurm/") or version not in self.versions:
            return web.Response(status=404, text=UNKNOWN_URL)
        rest = path[len(f"/slurm/{version}"):]
        if (request.method, rest) in self.scripted:
            status, extra, errors = self.scripted[(request.method, rest)]
            return self.answer(version, status, errors, **extra)
        if rest == "/ping/":
            if version >= "v0.0.42":
                ping = {"hostname": "ctl", "responding": self.controller_up, "latency": 100, "primary": "PRIMARY"}
            else:
                ping = {"hostname": "ctl", "pinged": "UP" if self.controller_up else "DOWN", "latency": 100,
                        "mode": "primary"}
            return self.answer(version, pings=[ping])
        if rest == "/nodes/" and request.method == "GET":
            return self.answer(version, nodes=self.nodes, last_update=no_val(1764547300))
        if rest == "/jobs/" and request.method == "GET" and self.job_bytes is not None:
            return await self.stream_jobs(request, version)
        if rest == "/jobs/" and request.method == "GET":
            return self.answer(version, jobs=self.jobs, last_backfill=no_val(0), last_update=no_val(1764547300))
        if rest == "/jobs/" and request.method == "DELETE":
            return self.answer(version, status=[])
        if rest.startswith("/node/") and request.method == "POST":
            name = rest[len("/node/"):]
            node = next((n for n in self.nodes if n["name"] == name), None)
            if node is None:
                return self.answer(version, 500, [error("Failure to update node " + name, 2017,
                                                        "Invalid node name specified", "slurm_update_node()")])
            states = body.get("state", [])
            if "DRAIN" in states:
                node["state"] = [node["state"][0], "DRAIN"]
                node["reason"] = body.get("reason", "")
            elif "RESUME" in states:
                if "DRAIN" not in node["state"] and node["state"][0] != "DOWN":
                    return self.answer(version, 500, [error("Failure to update node " + name, 2016,
                                                            "Invalid node state specified", "slurm_update_node()")])
                node["state"] = ["IDLE"]
            return self.answer(version)
        if rest.endswith("/requeue") and request.method == "GET":
            if version != "v0.0.45":
                return web.Response(status=404, text=UNKNOWN_URL)
            job_id = rest.split("/")[2]
            for job in self.jobs:
                if str(job["job_id"]) == job_id or job_id == f"{job['array_job_id']['number']}_{job['array_task_id']['number']}" \
                        or (job["het_job_id"]["number"] and str(job["het_job_id"]["number"]) == job_id):
                    job["job_state"] = list(self.requeue_state)
            return self.answer(version, status=[{"job_id": int(job_id.split("_")[0]), "step_id": job_id,
                                                 "error": "No error", "error_code": 0, "why": ""}])
        if rest.startswith("/job/") and request.method == "DELETE":  # openapi/slurmctld _handle_job_delete
            self.signals.append((version, rest[len("/job/"):], dict(request.query)))
            return self.answer(version, status=[])
        if rest.startswith("/job/") and request.method == "POST":
            return self.answer(version, job_id=int(rest.split("/")[2]), step_id=None, job_submit_user_msg="",
                               results=[{"job_id": int(rest.split("/")[2]), "step_id": rest.split("/")[2],
                                         "error": "No error", "error_code": 0, "why": "Job updated"}])
        return web.Response(status=404, text=UNKNOWN_URL)


REAL_JOB = Path(__file__).parent / "fixtures" / "checkpoint" / "26.05-local" / "jobs-v0.0.45.json"


def real_size_jobs(count: int, partitions: int = 10, running_every: int = 20, done_every: int = 5) -> Callable[[], Iterator[bytes]]:
    """`count` jobs of real size (a job slurmrestd 26.05 dumped, some 6 KB), made as they are
    written: pending in p0..p<partitions-1>, every `running_every`-th running, every
    `done_every`-th completed (squeue would not list it)."""
    real = json.loads(REAL_JOB.read_text())["jobs"][0]
    sentinel = 987654321

    def encoded(state: str, partition: str) -> list[bytes]:
        job = {**real, "job_id": sentinel, "job_state": [state], "partition": partition,
               "state_reason": "Resources" if state == "PENDING" else "None"}
        return json.dumps(job).encode().split(str(sentinel).encode())

    kinds = {(s, p): encoded(s, f"p{p}") for s in ("PENDING", "RUNNING", "COMPLETED") for p in range(partitions)}

    def make() -> Iterator[bytes]:
        for i in range(count):
            state = "RUNNING" if i % running_every == 0 else "COMPLETED" if i % done_every == 0 else "PENDING"
            yield str(i + 1).encode().join(kinds[(state, i % partitions)])
    return make
