"""Parsers against output captured from a real Slurm 22.05.8 (reference lab, 2 static nodes with
8 fake H100 each), plus property tests for the quoting and hostlist helpers."""

from __future__ import annotations

import dataclasses
import shlex
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from slurmbridge import SlurmNode, validate
from slurmbridge.models import gpu_count
from slurmbridge.parse import (
    DEFAULT_SEP,
    SQUEUE_FIELDS,
    node_fields,
    oversubscribe_tells,
    parse_scontrol_nodes,
    parse_squeue,
    parse_state,
    parse_time,
    squeue_format,
)
from slurmbridge.ssh import remote_command

# ---------------------------------------------------------------- captured `scontrol -o -d show node` lines
IDLE_DRAIN_FEATURES = (
    'NodeName=gpu01 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=1.21 AvailableFeatures=h100,nvlink ActiveFeatures=h100,nvlink Gres=gpu:h100:8 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) NodeAddr=127.0.0.1 NodeHostName=localhost Port=27001 Version=22.05.8 OS=Linux 6.18.44-fc-v857 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=0 FreeMem=22076 Sockets=16 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-29T15:40:59 SlurmdStartTime=2026-11-29T15:46:47 LastBusyTime=2026-11-29T15:55:14 CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=slurmpool: move to inference (pool demo/a) [root@2026-11-29T15:55:26]'
)
IDLE_WITH_COMMENT = (
    'NodeName=gpu02 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=1.21 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) NodeAddr=127.0.0.1 NodeHostName=localhost Port=27002 Version=22.05.8 OS=Linux 6.18.44-fc-v857 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=0 FreeMem=22106 Sockets=16 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-29T15:40:59 SlurmdStartTime=2026-11-29T15:55:19 LastBusyTime=2026-11-29T15:55:14 CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Comment=rack 7, slot=3'
)
MIXED_DRAIN = (
    'NodeName=gpu01 Arch=x86_64 CoresPerSocket=1  CPUAlloc=4 CPUEfctv=16 CPUTot=16 CPULoad=1.18 AvailableFeatures=h100,nvlink ActiveFeatures=h100,nvlink Gres=gpu:h100:8 GresDrain=N/A GresUsed=gpu:h100:7(IDX:0-6) NodeAddr=127.0.0.1 NodeHostName=localhost Port=27001 Version=22.05.8 OS=Linux 6.18.44-fc-v857 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=0 FreeMem=22173 Sockets=16 Boards=1 State=MIXED+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-29T15:40:59 SlurmdStartTime=2026-11-29T15:46:47 LastBusyTime=2026-11-29T15:55:26 CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES=cpu=4 CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=slurmpool: drain for inference; waiting for jobs [root@2026-11-29T15:55:38]'
)
IDLE_PLANNED = (
    'NodeName=gpu02 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=1.18 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) NodeAddr=127.0.0.1 NodeHostName=localhost Port=27002 Version=22.05.8 OS=Linux 6.18.44-fc-v857 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=0 FreeMem=22173 Sockets=16 Boards=1 State=IDLE+PLANNED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-29T15:40:59 SlurmdStartTime=2026-11-29T15:55:19 LastBusyTime=2026-11-29T15:55:14 CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s'
)
COMPLETING_NOT_RESPONDING = (
    'NodeName=gpu02 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=1.22 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) NodeAddr=127.0.0.1 NodeHostName=localhost Port=27002 Version=22.05.8 OS=Linux 6.18.44-fc-v857 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=0 FreeMem=21917 Sockets=16 Boards=1 State=IDLE+COMPLETING+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-29T15:40:59 SlurmdStartTime=2026-11-29T15:55:19 LastBusyTime=2026-11-29T15:56:19 CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s'
)
DOWN_NOT_RESPONDING = (
    'NodeName=gpu02 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=1.22 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) NodeAddr=127.0.0.1 NodeHostName=localhost Port=27002 Version=22.05.8 OS=Linux 6.18.44-fc-v857 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=0 FreeMem=21917 Sockets=16 Boards=1 State=DOWN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-29T15:40:59 SlurmdStartTime=2026-11-29T15:55:19 LastBusyTime=2026-11-29T15:56:19 CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=Not responding [root@2026-11-29T15:56:31]'
)
DOWN_DRAIN_NOT_RESPONDING = (
    'NodeName=gpu02 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=1.22 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) NodeAddr=127.0.0.1 NodeHostName=localhost Port=27002 Version=22.05.8 OS=Linux 6.18.44-fc-v857 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=0 FreeMem=21917 Sockets=16 Boards=1 State=DOWN+DRAIN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-29T15:40:59 SlurmdStartTime=2026-11-29T15:55:19 LastBusyTime=2026-11-29T15:56:19 CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=slurmpool: draining a dead node [root@2026-11-29T15:56:31]'
)
# Reason holding Key=Value and a fake stamp, then Comment (with a fake Reason) and Extra.
TRICKY_REASON = (
    'NodeName=gpu01 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=2.33 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) NodeAddr=127.0.0.1 NodeHostName=localhost Port=27001 Version=22.05.8 OS=Linux 6.18.44-fc-v857 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=0 FreeMem=19327 Sockets=16 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-29T15:40:59 SlurmdStartTime=2026-11-29T15:46:47 LastBusyTime=2026-11-29T15:46:47 CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=slurmpool: moving to inference pool=a State=X [x@y] ;$(id) [root@2026-11-29T15:46:56] Comment=c1 Reason=fake [a@2020-01-01T00:00:00] Extra=e1'
)
# `scontrol show node` without -d (no GresUsed), slurmd dead after RESUME.
IDLE_NOT_RESPONDING = (
    'NodeName=gpu02 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=2.65 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8 NodeAddr=127.0.0.1 NodeHostName=localhost Port=27002 Version=22.05.8 OS=Linux 6.18.44-fc-v857 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=0 FreeMem=17225 Sockets=16 Boards=1 State=IDLE+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=None SlurmdStartTime=2026-11-29T15:46:47 LastBusyTime=2026-11-29T15:49:47 CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s'
)
# squeue -h -a -o squeue_format(DEFAULT_SEP) with pending, running and array jobs.
SQUEUE_JOBS = (
    '9|~slurmbridge~|PENDING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|2|~slurmbridge~||~slurmbridge~|gres:gpu:8|~slurmbridge~|2026-11-29T16:05:33|~slurmbridge~|2026-11-29T16:10:33|~slurmbridge~|Resources|~slurmbridge~|big|~slurmbridge~|\n'
    '10|~slurmbridge~|PENDING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~||~slurmbridge~|gres:gpu:2|~slurmbridge~|2026-11-29T16:55:30|~slurmbridge~|NONE|~slurmbridge~|BeginTime|~slurmbridge~|later|~slurmbridge~|\n'
    '13|~slurmbridge~|PENDING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~||~slurmbridge~|N/A|~slurmbridge~|2026-11-29T17:55:30|~slurmbridge~|2026-11-29T17:56:30|~slurmbridge~|BeginTime|~slurmbridge~|nogpu|~slurmbridge~|\n'
    '8|~slurmbridge~|RUNNING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~|gpu01|~slurmbridge~|gres:gpu:h100:4|~slurmbridge~|2026-11-29T15:55:33|~slurmbridge~|2026-11-29T16:05:33|~slurmbridge~|None|~slurmbridge~|train|x y|~slurmbridge~|\n'
    '12_1|~slurmbridge~|RUNNING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~|gpu01|~slurmbridge~|gres:gpu:h100:1|~slurmbridge~|2026-11-29T15:55:38|~slurmbridge~|2026-11-29T16:00:38|~slurmbridge~|None|~slurmbridge~|arr|~slurmbridge~|\n'
    '12_2|~slurmbridge~|RUNNING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~|gpu01|~slurmbridge~|gres:gpu:h100:1|~slurmbridge~|2026-11-29T15:55:38|~slurmbridge~|2026-11-29T16:00:38|~slurmbridge~|None|~slurmbridge~|arr|~slurmbridge~|\n'
    '12_3|~slurmbridge~|RUNNING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~|gpu01|~slurmbridge~|gres:gpu:h100:1|~slurmbridge~|2026-11-29T15:55:38|~slurmbridge~|2026-11-29T16:00:38|~slurmbridge~|None|~slurmbridge~|arr|~slurmbridge~|\n'
)
# The same capture with job 11, whose name carries a newline and a copy of the separator.
SQUEUE_FORGED = (
    '9|~slurmbridge~|PENDING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|2|~slurmbridge~||~slurmbridge~|gres:gpu:8|~slurmbridge~|2026-11-29T16:05:33|~slurmbridge~|2026-11-29T16:10:33|~slurmbridge~|Resources|~slurmbridge~|big|~slurmbridge~|\n'
    '10|~slurmbridge~|PENDING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~||~slurmbridge~|gres:gpu:2|~slurmbridge~|2026-11-29T16:55:30|~slurmbridge~|NONE|~slurmbridge~|BeginTime|~slurmbridge~|later|~slurmbridge~|\n'
    '11|~slurmbridge~|PENDING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~||~slurmbridge~|N/A|~slurmbridge~|2026-11-29T16:55:30|~slurmbridge~|2026-11-29T16:56:30|~slurmbridge~|BeginTime|~slurmbridge~|evil\n'
    '999|~slurmbridge~|RUNNING|~slurmbridge~|\n'
    '13|~slurmbridge~|PENDING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~||~slurmbridge~|N/A|~slurmbridge~|2026-11-29T17:55:30|~slurmbridge~|2026-11-29T17:56:30|~slurmbridge~|BeginTime|~slurmbridge~|nogpu|~slurmbridge~|\n'
    '8|~slurmbridge~|RUNNING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~|gpu01|~slurmbridge~|gres:gpu:h100:4|~slurmbridge~|2026-11-29T15:55:33|~slurmbridge~|2026-11-29T16:05:33|~slurmbridge~|None|~slurmbridge~|train|x y|~slurmbridge~|\n'
    '12_1|~slurmbridge~|RUNNING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~|gpu01|~slurmbridge~|gres:gpu:h100:1|~slurmbridge~|2026-11-29T15:55:38|~slurmbridge~|2026-11-29T16:00:38|~slurmbridge~|None|~slurmbridge~|arr|~slurmbridge~|\n'
    '12_2|~slurmbridge~|RUNNING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~|gpu01|~slurmbridge~|gres:gpu:h100:1|~slurmbridge~|2026-11-29T15:55:38|~slurmbridge~|2026-11-29T16:00:38|~slurmbridge~|None|~slurmbridge~|arr|~slurmbridge~|\n'
    '12_3|~slurmbridge~|RUNNING|~slurmbridge~|gpu|~slurmbridge~|root|~slurmbridge~|1|~slurmbridge~|gpu01|~slurmbridge~|gres:gpu:h100:1|~slurmbridge~|2026-11-29T15:55:38|~slurmbridge~|2026-11-29T16:00:38|~slurmbridge~|None|~slurmbridge~|arr|~slurmbridge~|\n'
)


def one(line: str) -> SlurmNode:
    nodes = parse_scontrol_nodes(line + "\n")
    assert len(nodes) == 1
    return next(iter(nodes.values()))


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


# ---------------------------------------------------------------- nodes
def test_idle_drain_with_features_and_our_reason():
    n = one(IDLE_DRAIN_FEATURES)
    assert (n.name, n.state, n.flags) == ("gpu01", "IDLE", frozenset({"DRAIN"}))
    assert n.reason == "slurmpool: move to inference (pool demo/a)"
    assert n.features == ("h100", "nvlink")
    assert n.partitions == ("gpu",)
    assert (n.gres, n.gres_used, n.gpus) == ("gpu:h100:8", "gpu:h100:0(IDX:N/A)", 8)
    assert n.drain_set and n.drained and not n.busy and n.responding


def test_reason_stamp_is_kept_apart_from_the_text():
    n = one(IDLE_DRAIN_FEATURES)
    assert (n.reason_user, n.reason_time) == ("root", utc(2026, 11, 29, 15, 55, 26))
    appended = IDLE_DRAIN_FEATURES.replace("State=IDLE+DRAIN", "State=IDLE+DRAIN+INVALID_REG").replace(
        "(pool demo/a) [root@", "(pool demo/a) : gres/gpu count reported lower than configured (7 < 8) [slurm@")
    n = one(appended)
    assert n.reason == "slurmpool: move to inference (pool demo/a) : gres/gpu count reported lower than configured (7 < 8)"
    assert (n.reason_user, n.flags) == ("slurm", frozenset({"DRAIN", "INVALID_REG"}))
    assert one(IDLE_WITH_COMMENT).reason_time is None


def test_the_fields_26_05_prints_after_the_reason_end_it():
    """A dynamic node of 26.05 prints Topology= after the Reason (and ReservationName=, Parameters= ...)."""
    line = IDLE_DRAIN_FEATURES + " ReservationName=maint Topology=default:spine:block-2:rack-4"
    n = one(line)
    assert n.reason == "slurmpool: move to inference (pool demo/a)"
    assert (n.reason_user, n.reason_time) == ("root", utc(2026, 11, 29, 15, 55, 26))


def test_comment_is_not_taken_for_a_reason():
    n = one(IDLE_WITH_COMMENT)
    assert (n.state, n.flags, n.reason, n.features) == ("IDLE", frozenset(), None, ())
    assert not n.drain_set and not n.drained and n.responding


def test_mixed_drain_with_running_jobs_is_busy_not_drained():
    n = one(MIXED_DRAIN)
    assert (n.state, n.flags) == ("MIXED", frozenset({"DRAIN"}))
    assert n.reason == "slurmpool: drain for inference; waiting for jobs"
    assert n.gres_used == "gpu:h100:7(IDX:0-6)"
    assert n.busy and n.drain_set and not n.drained


def test_planned_node_is_idle():
    n = one(IDLE_PLANNED)
    assert (n.state, n.flags) == ("IDLE", frozenset({"PLANNED"}))
    assert not n.busy and n.responding


def test_completing_on_a_dead_node_is_busy_and_not_responding():
    n = one(COMPLETING_NOT_RESPONDING)
    assert (n.state, n.flags) == ("IDLE", frozenset({"COMPLETING", "NOT_RESPONDING"}))
    assert n.busy and not n.drained and not n.responding


def test_down_not_responding_keeps_slurm_reason():
    n = one(DOWN_NOT_RESPONDING)
    assert (n.state, n.flags, n.reason) == ("DOWN", frozenset({"NOT_RESPONDING"}), "Not responding")
    assert not n.responding and not n.drain_set


def test_down_drain_not_responding():
    n = one(DOWN_DRAIN_NOT_RESPONDING)
    assert (n.state, n.flags) == ("DOWN", frozenset({"DRAIN", "NOT_RESPONDING"}))
    assert n.reason == "slurmpool: draining a dead node"
    # drained only looks at DRAIN and busy; the caller combines it with `responding`.
    assert n.drained and not n.responding


def test_idle_not_responding_without_detail_flag():
    n = one(IDLE_NOT_RESPONDING)
    assert (n.state, n.flags, n.gres_used) == ("IDLE", frozenset({"NOT_RESPONDING"}), "")
    assert not n.responding


def test_reason_with_key_value_lookalikes_and_trailing_comment_extra():
    n = one(TRICKY_REASON)
    assert n.state == "IDLE" and n.flags == {"DRAIN"}
    assert n.reason == "slurmpool: moving to inference pool=a State=X [x@y] ;$(id)"
    fields = node_fields(TRICKY_REASON)
    assert fields["OS"] == "Linux 6.18.44-fc-v857 #1 SMP PREEMPT_DYNAMIC @0"
    assert fields["AllocTRES"] == "" and fields["Partitions"] == "gpu"


def test_many_nodes_and_noise_lines():
    text = "\n".join([IDLE_DRAIN_FEATURES, IDLE_PLANNED.replace("gpu02", "gpu03"), "Node gpu09 not found", ""])
    nodes = parse_scontrol_nodes(text)
    assert sorted(nodes) == ["gpu01", "gpu03"]
    assert parse_scontrol_nodes("") == {} and parse_scontrol_nodes("No nodes in the system\n") == {}


def test_a_cache_of_the_last_output_gives_what_parsing_gives():
    cache: dict = {}
    gpu03 = IDLE_PLANNED.replace("gpu02", "gpu03")
    first = parse_scontrol_nodes(f"{IDLE_DRAIN_FEATURES}\n{gpu03}\n", cache=cache)
    assert first == parse_scontrol_nodes(f"{IDLE_DRAIN_FEATURES}\n{gpu03}\n") and len(cache) == 2
    # gpu03 changed, gpu01 did not (the same object is reused), a node left
    changed = gpu03.replace("State=IDLE", "State=MIXED")
    second = parse_scontrol_nodes(f"{IDLE_DRAIN_FEATURES}\n{changed}\n", cache=cache)
    assert second["gpu01"] is first["gpu01"] and second["gpu03"].state == "MIXED" and first["gpu03"].state != "MIXED"
    third = parse_scontrol_nodes(f"{changed}\n", cache=cache)
    assert list(third) == ["gpu03"] and list(cache) == [changed]


@pytest.mark.parametrize(
    "raw, state, flags",
    [
        ("IDLE", "IDLE", set()),
        ("IDLE*", "IDLE", {"NOT_RESPONDING"}),
        ("idle~", "IDLE", {"POWERED_DOWN"}),
        ("MIXED+DRAIN", "MIXED", {"DRAIN"}),
        ("DOWN+DRAIN+NOT_RESPONDING", "DOWN", {"DRAIN", "NOT_RESPONDING"}),
        ("IDLE+DYNAMIC_NORM", "IDLE", {"DYNAMIC_NORM"}),
        ("ALLOCATED+MAINTENANCE+RESERVED", "ALLOCATED", {"MAINTENANCE", "RESERVED"}),
        ("FUTURE", "FUTURE", set()),
        ("DRAINED", "IDLE", {"DRAIN"}),
        ("DRAINING", "MIXED", {"DRAIN"}),  # sinfo spelling: still busy, so never "drained"
        ("", "UNKNOWN", set()),
    ],
)
def test_parse_state(raw, state, flags):
    assert parse_state(raw) == (state, frozenset(flags))


def test_unknown_and_future_nodes_never_respond():
    base = one(IDLE_DRAIN_FEATURES)
    for state in ("DOWN", "UNKNOWN", "FUTURE"):
        node = dataclasses.replace(base, state=state)
        assert not node.responding


@pytest.mark.parametrize(
    "gres, gpus",
    [
        ("gpu:h100:8", 8),
        ("gres:gpu:8", 8),
        ("gres/gpu:h100:4", 4),
        ("gres/gpu=8", 8),
        ("gpu:2,nic:1", 2),
        ("gpu:a100:2(IDX:0-1),gpu:h100:1(IDX:2)", 3),
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu", 1),
        ("gpu:h100", 1),
        ("gres:gpu:h100:4,gres:nic:1", 4),
        ("cpu=16,mem=62.50G,billing=16", 0),
        ("(null)", 0),
        ("N/A", 0),
        ("", 0),
        ("mygpu:2", 0),
    ],
)
def test_gpu_count(gres, gpus):
    assert gpu_count(gres) == gpus


# ---------------------------------------------------------------- squeue
def test_parse_squeue_capture():
    jobs = {j.job_id: j for j in parse_squeue(SQUEUE_JOBS)}
    assert list(jobs) == ["9", "10", "13", "8", "12_1", "12_2", "12_3"]
    big = jobs["9"]
    assert (big.state, big.nodes, big.num_nodes, big.gpus_per_node, big.gpus_wanted) == ("PENDING", (), 2, 8, 16)
    assert big.reason == "Resources" and big.start_time == utc(2026, 11, 29, 16, 5, 33)
    later = jobs["10"]
    assert later.end_time is None and later.reason == "BeginTime" and later.gpus_wanted == 2
    assert jobs["13"].gpus_per_node == 0
    train = jobs["8"]
    assert train.name == "train|x y"  # '|' inside a name cannot shift fields
    assert (train.user, train.state, train.partition, train.nodes) == ("root", "RUNNING", "gpu", ("gpu01",))
    assert (train.gpus_per_node, train.num_nodes) == (4, 1)
    assert train.start_time == utc(2026, 11, 29, 15, 55, 33)
    assert train.end_time == utc(2026, 11, 29, 16, 5, 33)
    assert jobs["12_2"].gpus_per_node == 1 and jobs["12_2"].name == "arr"


def test_forged_record_with_a_known_separator_is_refused_not_believed():
    # Job 11's name is "evil\n999<sep>RUNNING<sep>"-ish: with a guessable separator the output is
    # ambiguous, and the parser must fail rather than report a job 999 that does not exist.
    with pytest.raises(ValueError):
        parse_squeue(SQUEUE_FORGED)


def test_unguessable_separator_keeps_a_hostile_name_verbatim():
    sep = "|3f9c1d2e7a6b|"
    evil = f"evil\n999{DEFAULT_SEP}RUNNING{DEFAULT_SEP}gpu{DEFAULT_SEP}\n"
    row = ["11", "PENDING", "gpu", "root", "1", "", "N/A", "N/A", "NONE", "BeginTime", evil]
    jobs = parse_squeue(sep.join(row) + sep + "\n", sep)
    assert len(jobs) == 1 and jobs[0].job_id == "11" and jobs[0].name == evil


def test_squeue_format_matches_fields():
    fmt = squeue_format("|x|")
    assert fmt.count("|x|") == len(SQUEUE_FIELDS) and fmt.endswith("%j|x|")


def test_parse_squeue_empty_and_truncated():
    assert parse_squeue("") == [] and parse_squeue("\n") == []
    with pytest.raises(ValueError):
        parse_squeue("8|~slurmbridge~|RUNNING\n")


def test_parse_time_zone_and_placeholders():
    assert parse_time("2026-11-29T15:47:39") == utc(2026, 11, 29, 15, 47, 39)
    cest = timezone(timedelta(hours=2))
    assert parse_time("2026-11-29T15:47:39", cest) == utc(2026, 11, 29, 13, 47, 39)
    for text in ("N/A", "Unknown", "NONE", "None", "", "garbage", "INVALID"):
        assert parse_time(text) is None


# ---------------------------------------------------------------- property tests
NAMES = st.from_regex(validate.NAME_RE, fullmatch=True)
REASON_CHARS = st.characters(blacklist_categories=("Cc", "Cs", "Co", "Cn", "Zl", "Zp"))
REASONS = st.text(REASON_CHARS, min_size=1, max_size=validate.MAX_REASON).filter(
    lambda r: r.strip() and r.isprintable()
)


@given(st.lists(NAMES, min_size=1, max_size=40))
def test_hostlist_round_trip_of_valid_names(names):
    assert sorted(validate.expand(validate.compress(names))) == sorted(set(names))


@given(st.text(alphabet="abgpu", min_size=1, max_size=4), st.sets(st.integers(0, 300), min_size=1, max_size=60),
       st.integers(1, 4))
def test_numbered_nodes_compress_to_one_range_expression(prefix, numbers, width):
    names = [f"{prefix}{n:0{width}d}" for n in numbers]
    expr = validate.compress(names)
    assert sorted(validate.expand(expr)) == sorted(set(names))
    if len(set(names)) > 1 and all(len(f"{n}") <= width for n in numbers):
        assert expr.startswith(prefix + "[") and expr.count("[") == 1


@given(REASONS)
def test_reason_survives_ssh_quoting(reason):
    validate.reason(reason)
    argv = ["scontrol", "update", "NodeName=gpu[01-02]", "State=DRAIN", f'Reason="{reason}"']
    words = shlex.split(remote_command(argv, {"SLURM_TIME_FORMAT": "standard"}))
    assert words == ["env", "SLURM_TIME_FORMAT=standard", *argv]
    assert shlex.split(shlex.join(argv)) == argv


@settings(max_examples=300)
@given(REASONS)
def test_reason_reads_back_from_a_node_line(reason):
    # Documented ambiguity: a reason quoting a whole later field cannot be told apart from it.
    assume(" Comment=" not in reason and " Extra=" not in reason)
    line = f"{IDLE_PLANNED} Reason={reason} [root@2026-11-29T15:55:38] Comment=x y"
    n = one(line)
    assert n.reason == reason and n.state == "IDLE"


@given(st.text(min_size=1, max_size=70))
def test_validation_accepts_exactly_the_documented_names(name):
    ok = validate.NAME_RE.fullmatch(name) is not None
    try:
        validate.node_name(name)
        assert ok
    except ValueError:
        assert not ok


def test_slurmd_start_time_is_parsed():
    assert one(IDLE_DRAIN_FEATURES).slurmd_start == utc(2026, 11, 29, 15, 46, 47)
    assert one(IDLE_DRAIN_FEATURES.replace("SlurmdStartTime=2026-11-29T15:46:47", "SlurmdStartTime=None")).slurmd_start is None


# ---------------------------------------------------------------- what jobs ask of nodes (issue 39)
NAMED_JOBS = Path(__file__).parent / "fixtures" / "named_jobs"


def test_squeue_22_05_says_which_nodes_a_job_names_and_whether_it_takes_whole_nodes():
    """Real output (e2e/lab/capture-named-jobs.sh on Debian's 22.05): gpu03 and gpu04 drained as
    slurmpool parks them, gpu01-02 full."""
    jobs = {j.name: j for j in parse_squeue((NAMED_JOBS / "22.05-local" / "squeue.txt").read_text())}
    pinned = jobs["pinned-gres"]
    assert pinned.required_nodes == ("gpu03", "gpu04") and pinned.exclusive is True and pinned.gpus_per_node == 8
    assert pinned.reason == "ReqNodeNotAvail, UnavailableNodes:gpu[03-04]" and pinned.unavailable_nodes == ("gpu03", "gpu04")
    assert (jobs["pinned-excl"].required_nodes, jobs["pinned-excl"].exclusive, jobs["pinned-excl"].gpus_per_node) == (("gpu03", "gpu04"), True, 0)
    assert (jobs["pinned-one"].required_nodes, jobs["pinned-one"].unavailable_nodes, jobs["pinned-one"].exclusive) == (("gpu04",), ("gpu04",), False)
    assert (jobs["excl"].exclusive, jobs["shared"].exclusive, jobs["fill"].exclusive) == (True, False, True)
    assert jobs["excl"].required_nodes == jobs["shared"].required_nodes == jobs["excluding"].required_nodes == ()
    assert jobs["excl"].unavailable_nodes == ()  # Resources lists none


def test_records_in_the_format_before_issue_39_still_parse():
    """squeue-old.txt: the same jobs in the 11-field format (as tests/fixtures/pending_reasons has them)."""
    old = {j.name: j for j in parse_squeue((NAMED_JOBS / "22.05-local" / "squeue-old.txt").read_text())}
    new = {j.name: j for j in parse_squeue((NAMED_JOBS / "22.05-local" / "squeue.txt").read_text())}
    assert old.keys() == new.keys()
    for name, job in old.items():
        assert job.required_nodes == () and job.exclusive is None  # not printed: not known
        assert dataclasses.replace(job, required_nodes=new[name].required_nodes, exclusive=new[name].exclusive) == new[name]


@pytest.mark.parametrize("version, tells", [
    ("slurm 22.05.8", True), ("slurm 24.11.6", True), ("slurm 25.11.0", True), ("slurm 26.05.3", False),
    ("slurm 27.05.0-0rc1", False), ("", False), ("squeue: command not found", False),
])
def test_oversubscribe_says_exclusive_only_before_26_05(version, tells):
    assert oversubscribe_tells(version) is tells


def test_unavailable_nodes_of_a_reason():
    assert validate.unavailable_nodes("ReqNodeNotAvail, UnavailableNodes:gpu[01-02,05]") == ("gpu01", "gpu02", "gpu05")
    assert validate.unavailable_nodes("ReqNodeNotAvail, May be reserved for other job") == ()
    assert validate.unavailable_nodes("ReqNodeNotAvail, UnavailableNodes:gpu[01-") == ()  # unreadable: none
