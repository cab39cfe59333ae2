"""Parking by power saving on the real lab (issue 39): a `PowerSave` pool moves a node to
inference, where Slurm shows it `drain~` (drained and powered down: capacity it knows, never
scheduled), and back, powered up with its slurmd started `-b`, then running a job. Needs the lab's
slurm.conf power-save block and a slurmd that accepts `-b` (e2e/lab/up.sh)."""

from __future__ import annotations

import time

import pytest

from harness import (
    NAMESPACE,
    posted_at,
    Operator,
    apply,
    condition,
    ensure_namespace_and_secret,
    events,
    install_crd,
    job_state,
    node_placements,
    now_rfc3339,
    pool_manifest,
    pool_status,
    reset_lab,
    sbatch,
    slurm_states,
    slurmd_pods,
    wait,
)

pytestmark = pytest.mark.e2e
POOL = "gpu"


@pytest.fixture(scope="module")
def op(lab):
    install_crd(lab)
    ensure_namespace_and_secret(lab)
    operator = Operator(lab).start()
    yield operator
    # Every node back in Slurm through the operator (powered up, slurmd -b): a node left powered
    # down would be no lab node for the modules after this one.
    try:
        if operator.proc is None or operator.proc.poll() is not None:  # a failed crash test may have left it stopped
            operator.start()
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"slurmNodes":8,"minInferenceNodes":0}}',
                    check=False)
        wait(settled(lab, 8), 120, what="every node back in Slurm")
    finally:
        operator.stop()
        print(operator.log_tail(20))
        reset_lab(lab)


def settled(lab, slurm: int):
    def check():
        s = pool_status(lab, POOL)
        ready = s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == 8 - slurm and s.get("moving") == 0
        return s if ready else None

    return check


def sinfo_state(lab, node: str) -> str:
    """sinfo's short state with its suffix: `idle`, `drain~` (powered down), `drain%` (powering down), `mix#`."""
    return lab.slurm("sinfo", "-h", "-N", "-n", lab.slurm_name(node), "-o", "%t").stdout.strip()


def test_a_power_save_pool_parks_a_node_drained_and_powered_down_and_brings_it_back(lab, op):
    # The inference floor holds the parked node (never lent to Slurm): it shows drain~.
    apply(lab, pool_manifest(lab, POOL, 8, minInferenceNodes=0, slurm={"parking": "PowerSave"}))
    ready = wait(lambda: (c := condition(lab, POOL, "PowerSaveReady")).get("status") in ("True", "False") and c, 60,
                 what="the PowerSaveReady condition")
    assert ready["status"] == "True", f"the lab's Slurm is not configured for power saving: {ready}"
    wait(settled(lab, 8), 120, what="status 8/0")

    since = now_rfc3339()
    t0 = time.monotonic()
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"slurmNodes":7,"minInferenceNodes":1}}')
    wait(settled(lab, 7), 90, what="status 7/1")
    (node,) = [n for n, p in node_placements(lab).items() if p == "inference:llm"]
    wait(lambda: sinfo_state(lab, node) == "drain~", 60, what=f"{node} drain~ in sinfo")
    parked_in = time.monotonic() - t0
    state = slurm_states(lab)[node]
    assert {"DRAIN", "POWERED_DOWN"} <= set(state.split("+")), state
    assert "Reason=slurmpool:" in lab.slurm("scontrol", "-o", "show", "node", lab.slurm_name(node)).stdout
    assert any("StoppingSlurmd -> PoweringDown" in m and node in m for m in events_nodes(lab, node, since)), "no PoweringDown"
    assert not [p for p in slurmd_pods(lab) if p["spec"]["nodeName"] == node]

    since = now_rfc3339()
    t0 = time.monotonic()
    lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"slurmNodes":8,"minInferenceNodes":0}}')
    wait(settled(lab, 8), 120, what="status 8/0, the node powered up and back in Slurm")
    back_in = time.monotonic() - t0
    wait(lambda: sinfo_state(lab, node) == "idle", 30, what=f"{node} idle in sinfo")
    assert slurm_states(lab)[node] == "IDLE"
    assert any("-> PoweringUp" in m and node in m for m in events_nodes(lab, node, since)), "no PoweringUp"
    (pod,) = [p for p in slurmd_pods(lab) if p["spec"]["nodeName"] == node]
    assert pod["spec"]["containers"][0].get("args", [])[-1:] == ["-b"], pod["spec"]["containers"][0]
    job = sbatch(lab, node, 5, 2)
    wait(lambda: job_state(lab, job) in ("RUNNING", "COMPLETED"), 30, what=f"job {job} on {node}")
    print(f"POWER SAVE | parked drain~ in {parked_in:.1f} s | back in Slurm, slurmd -b registered, in {back_in:.1f} s")
    assert not events(lab, "MoveRolledBack", since)


@pytest.mark.parametrize("phase,split", [("PoweringDown", '{"spec":{"slurmNodes":7,"minInferenceNodes":1}}'),
                                         ("PoweringUp", '{"spec":{"slurmNodes":8,"minInferenceNodes":0}}')])
def test_sigkill_in_a_power_phase_resumes_the_move(lab, op, phase, split):
    """The operator kills itself (SIGKILL) right after recording `phase` on the node, before asking
    Slurm for the power change; a fresh operator re-reads the move and finishes it."""
    slurm = 7 if phase == "PoweringDown" else 8
    if pool_status(lab, POOL).get("slurm", {}).get("ready") == slurm:  # run alone (-k): make room for the move
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p",
                    '{"spec":{"slurmNodes":8,"minInferenceNodes":0}}' if slurm == 7 else '{"spec":{"slurmNodes":7,"minInferenceNodes":1}}')
        wait(settled(lab, 15 - slurm), 120, what="room for the move")
    op.stop()
    crashing = Operator(lab, "operator-crash.log", {"SLURMPOOL_CRASH_AFTER_PHASE": phase}).start()
    try:
        lab.kubectl("patch", "snp", POOL, "-n", NAMESPACE, "--type=merge", "-p", split)
        crashing.proc.wait(60)
    finally:
        crashing.stop()
    assert crashing.proc.returncode == -9, crashing.log_tail()
    op.start()
    wait(settled(lab, slurm), 120, what=f"the move resumed after a crash in {phase}")
    want = {"slurm": "idle", "inference:llm": "drain~"}
    wait(lambda: all(sinfo_state(lab, n) == want[p] for n, p in node_placements(lab).items()), 60,
         what="every node idle in Slurm or drain~ parked")


def events_nodes(lab, node: str, since: str) -> list[str]:
    """MovePhase Events (posted on the Node only) about `node`, since `since`."""
    items = lab.kubectl_json("get", "events", "-A", "--field-selector", f"reason=MovePhase,involvedObject.name={node}")["items"]
    return [e.get("message") or "" for e in items if posted_at(e) >= since]
