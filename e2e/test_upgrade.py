"""Upgrades as a tested path (docs/upgrading.md), on real kubelet nodes (LAB_REAL_NODES, as
e2e/test_real_nodes.py): the operator runs as the chart's Deployment, its image imported into the
nodes' containerd; the pool moves the lab's gpu nodes.

1. `helm install` of the previous release: the chart and operator image of the commit pinned in
   e2e/lab/previous-release, built by e2e/lab/previous-release.sh; its CRD applied by hand first, as
   that release's docs said (its chart had the CRD in crds/).
2. Three moves held in flight: one to inference in Draining (a Slurm job that ends only when the test
   opens its gate), two to Slurm in Evicting (each node's server evicted and kept Terminating by a
   finalizer); jobs running on two nodes that stay in Slurm.
3. `helm upgrade` to this chart and image (the CRD upgraded with it, taken over from the hand-applied
   one), the moves still in flight. Then the holds let go: each move completes exactly once (the
   same move id in its MoveStarted and MoveCompleted Events, no node moved twice), the split is
   reached, the gated job completed by itself and the others still run.
4. Two new moves held the same way under the new operator, then `helm rollback` to the previous
   release: the CRD stays (kept by Helm, still the newer one) and the old operator finishes the
   moves the new one started, each exactly once, with no job lost.

Skipped, with the reason, without real nodes or without the pinned commit in this clone.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

import harness
from harness import (
    held_server,
    release_held_servers,
    NAMESPACE,
    apply,
    ensure_namespace_and_secret,
    events,
    install_crd,
    job_state,
    node_json,
    node_placements,
    now_rfc3339,
    pods_json,
    pool_manifest,
    pool_status,
    reset_lab,
    settle_sides,
    wait,
    wait_crd_established,
)
from identity import OPERATOR_NAMESPACE, apply_admission_policies, apply_operator_rbac, chart_values

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "slurmpool"
LAB = REPO / "e2e" / "lab"
CRD = "slurmnodepools.slurmpool.io"
RELEASE = "slurmpool"
POOL = "upgrade"
GATES = ("upgrade", "rollback")  # the gated jobs' files in the lab directory, one per phase
HELM_TIMEOUT = "300s"  # --wait for the operator's pod, on a loaded machine


# ---------------------------------------------------------------- the two releases


def helm_bin() -> str:
    return subprocess.run([str(LAB / "build-helm.sh")], check=True, capture_output=True, text=True).stdout.strip()





def crd_fields(crd: dict) -> set[str]:
    """The CRD's spec and status fields, two levels deep ("spec.handover.leadTime"): what tells one
    release's CRD from another's."""
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    out = set()
    for top in ("spec", "status"):
        for name, sub in props[top].get("properties", {}).items():
            out.add(f"{top}.{name}")
            out |= {f"{top}.{name}.{k}" for k in (sub.get("properties") or {})}
    return out


def helm(lab, *args: str, values: dict | None = None) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(values or {}, f)
        f.flush()
        p = subprocess.run([helm_bin(), *args, "-n", OPERATOR_NAMESPACE, *(["-f", f.name] if values else [])],
                           env=lab.env, capture_output=True, text=True, timeout=420)
    assert p.returncode == 0, f"helm {' '.join(args)}:\n{p.stdout}{p.stderr}"
    return p.stdout


def operator_pods(lab) -> list[dict]:
    return [p for p in pods_json(lab, OPERATOR_NAMESPACE, f"app.kubernetes.io/instance={RELEASE}")
            if not p["metadata"].get("deletionTimestamp")]


def running_image(lab, image: str) -> str:
    """Wait until the only operator pod is Ready and runs `image`; its name."""
    def one_ready():
        pods = operator_pods(lab)
        return (len(pods) == 1 and pods[0]["status"].get("containerStatuses")
                and pods[0]["status"]["containerStatuses"][0]["image"] == image
                and pods[0]["status"]["containerStatuses"][0]["ready"] and pods[0]["metadata"]["name"])
    return wait(one_ready, 180, interval=1, what=f"one Ready operator pod running {image}")


@pytest.fixture(scope="module")
def real(lab) -> list[str]:
    n = int(lab.env.get("LAB_REAL_NODES", "0"))
    if n == 0:
        pytest.skip("LAB_REAL_NODES=0: this lab has no real kubelet nodes (bring it up with LAB_REAL_NODES=2 make lab-up)")
    names = [f"real{i:02d}" for i in range(1, n + 1)]

    def ready(name):  # e2e/test_real_nodes_cleanup.py, before this module, restarts them
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node_json(lab, name)["status"]["conditions"])
    wait(lambda: all(ready(x) for x in names), 120, interval=1, what="real nodes Ready")
    return names


@pytest.fixture(scope="module")
def releases(lab, real) -> dict:
    """Both operator images imported into the real nodes; the previous release's chart and CRD."""
    p = subprocess.run([str(LAB / "previous-release.sh")], env=lab.env, capture_output=True, text=True, timeout=1800)
    if p.returncode == 3:
        pytest.skip(p.stderr.strip())
    assert p.returncode == 0, p.stderr[-3000:]
    previous = dict(line.split("=", 1) for line in p.stdout.split())
    old_image, old_archive = previous["IMAGE"].split("=", 1)
    cur = subprocess.run([str(REPO / "deploy" / "docker" / "build-images.sh"), "--import"], env={**lab.env, "SLURMD_PYXIS": "0"},
                         capture_output=True, text=True, timeout=1800)
    assert cur.returncode == 0, cur.stderr[-3000:]
    new_image = next(n.split("=", 1)[0] for n in cur.stdout.split() if "/slurmpool:" in n)
    imp = subprocess.run([str(LAB / "real-nodes.sh"), "import", old_archive], env=lab.env, capture_output=True, text=True, timeout=600)
    assert imp.returncode == 0, imp.stderr[-3000:]
    assert old_image != new_image, (old_image, new_image)
    chart = Path(previous["CHART"])
    old_crd = chart / "crds" / "slurmpool.io_slurmnodepools.yaml"
    new_fields = crd_fields(yaml.safe_load((REPO / "crds" / "slurmpool.io_slurmnodepools.yaml").read_text()))
    # the CRD checks below can tell the two apart
    assert crd_fields(yaml.safe_load(old_crd.read_text())) != new_fields, "the previous release has this CRD"
    return {"commit": previous["COMMIT"], "old_chart": chart, "old_crd": old_crd, "new_fields": new_fields,
            "old_image": old_image, "new_image": new_image}


@pytest.fixture(scope="module")
def installed(lab, releases):
    """The previous release as its users have it: its CRD applied by hand (server-side, as its docs
    said), then `helm install` of its chart, taking over the RBAC objects the suite applied. At the
    end the release goes, the CRD is the generated one again without Helm's marks, and the suite's
    RBAC and admission policies are applied again for the other modules."""
    lab.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(releases["old_crd"]))
    wait_crd_established(lab)
    ensure_namespace_and_secret(lab)
    apply_operator_rbac(lab)
    # hostNetwork is outside the Pod Security level "restricted" of the release namespace
    lab.kubectl("label", "namespace", OPERATOR_NAMESPACE, "pod-security.kubernetes.io/enforce=privileged", "--overwrite")
    uninstall(lab)  # a release an interrupted session left
    try:
        helm(lab, "install", RELEASE, str(releases["old_chart"]), "--take-ownership", "--force-conflicts", "--wait",
             "--timeout", HELM_TIMEOUT, values=chart_values(lab, releases["old_image"], pool_policy=False))
        yield releases
    finally:
        release_held_servers(lab)
        open_gates(lab)
        uninstall(lab)
        reset_lab(lab)
        for name in GATES:
            gate(lab, name).unlink(missing_ok=True)
        lab.kubectl("annotate", "crd", CRD, "helm.sh/resource-policy-", "meta.helm.sh/release-name-",
                    "meta.helm.sh/release-namespace-", check=False)
        lab.kubectl("label", "crd", CRD, "app.kubernetes.io/managed-by-", "app.kubernetes.io/instance-",
                    "app.kubernetes.io/name-", "app.kubernetes.io/version-", "app.kubernetes.io/part-of-",
                    "helm.sh/chart-", check=False)
        install_crd(lab)
        apply_operator_rbac(lab)
        harness._SA_KUBECONFIGS.clear()
        apply_admission_policies(lab)


def uninstall(lab) -> None:
    subprocess.run([helm_bin(), "uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--ignore-not-found", "--wait",
                    "--timeout", "120s"], env=lab.env, capture_output=True, text=True, timeout=180)


# ---------------------------------------------------------------- holding moves in a phase


def gate(lab, name: str) -> Path:
    return Path(lab.dir) / f"upgrade-gate-{name}"


def gated_job(lab, node: str, name: str) -> str:
    """A Slurm job on `node` that runs until the test opens its gate, then completes by itself."""
    g = gate(lab, name)
    g.unlink(missing_ok=True)
    out = lab.slurm("sbatch", "--parsable", "-w", node, "--gres=gpu:8", "--time=60", "-o", "/dev/null",
                    "--wrap", f"while [ ! -e {g} ]; do sleep 1; done").stdout
    return out.strip().split(";")[0]


def open_gates(lab) -> None:
    for name in GATES:
        gate(lab, name).touch()


def long_job(lab, node: str) -> str:
    return lab.slurm("sbatch", "--parsable", "-w", node, "--gres=gpu:8", "--time=60", "-o", "/dev/null",
                     "--wrap", "sleep 3600").stdout.strip().split(";")[0]


def restarts(lab, job_id: str) -> int:
    """Times Slurm requeued the job (scontrol's Restarts=); a requeue by a drain would show here."""
    out = lab.slurm("scontrol", "-o", "show", "job", job_id).stdout
    return int(next(w.split("=", 1)[1] for w in out.split() if w.startswith("Restarts=")))


def records(lab) -> dict[str, dict]:
    """node -> its move record (phase, id ...) for nodes with a move in flight."""
    out = {}
    for name in node_placements(lab):
        rec = (node_json(lab, name)["metadata"].get("annotations") or {}).get("slurmpool.io/move")
        if rec:
            out[name] = json.loads(rec)
    return out


def phases(lab) -> dict[str, str]:
    return {n: r.get("phase") for n, r in records(lab).items()}


def settled(lab, slurm: int) -> bool:
    s = pool_status(lab, POOL)
    return (s.get("slurm", {}).get("ready") == slurm and s.get("inference", {}).get("ready") == 8 - slurm
            and s.get("moving") == 0 and not records(lab))


def moves(lab, reason: str, since: str) -> list[tuple[str, str]]:
    """(node, move id) of each Event with this reason since `since`, e.g. "gpu03: slurm -> inference:llm
    (move-now, move 1a2b)" and "gpu03 now serves inference:llm (move 1a2b)"."""
    return sorted((m.split(" ", 1)[0].rstrip(":"), m.rsplit("move ", 1)[-1].rstrip(")")) for m in events(lab, reason, since))


def hold_moves(lab, staying: list[str], gate_name: str) -> tuple[dict[str, str], str]:
    """With slurmNodes 7: the first Slurm node not in `staying` moved to inference (move-now), held in
    Draining by a gated job; every inference node rebalanced to Slurm in its place, held in Evicting
    by its server. From 6/2 that is three moves, from 7/1 two. Returns the phases and the job."""
    placements = node_placements(lab)
    inference = sorted(n for n, p in placements.items() if p.startswith("inference:"))
    leaving = next(n for n, p in sorted(placements.items()) if p == "slurm" and n not in staying)
    for node in inference:
        apply(lab, held_server(node))
    wait(lambda: [p["status"].get("phase") for p in pods_json(lab, NAMESPACE, "app=held-server")] == ["Running"] * len(inference),
         60, what="a server running on each inference node")
    job = gated_job(lab, leaving, gate_name)
    wait(lambda: job_state(lab, job) == "RUNNING", 60, what="the gated job running")
    lab.kubectl("annotate", "node", leaving, "slurmpool.io/move-now=inference", "--overwrite")
    lab.kubectl("scale", "snp", POOL, "-n", NAMESPACE, "--replicas=7")
    want = {leaving: "Draining", **{n: "Evicting" for n in inference}}
    wait(lambda: phases(lab) == want and all(p["metadata"].get("deletionTimestamp") for p in pods_json(lab, NAMESPACE, "app=held-server")),
         180, what=f"moves held in flight: {want}")
    return want, job


def finish_and_check(lab, held: dict[str, dict], since: str, slurm: int, running: list[str], gated: str, gate_name: str) -> list:
    """Let the held moves go; each completes once with the id it had in flight; the split is reached;
    the gated job completed by itself, the others still run; nothing is left stranded."""
    assert release_held_servers(lab), "the held servers are still there"
    gate(lab, gate_name).touch()
    wait(lambda: settled(lab, slurm), 240, interval=1, what=f"{slurm}/{8 - slurm} with every move done")
    in_flight = sorted((node, rec["id"]) for node, rec in held.items())
    wait(lambda: len(moves(lab, "MoveCompleted", since)) >= len(in_flight), 60, what="MoveCompleted Events posted")
    started, completed = moves(lab, "MoveStarted", since), moves(lab, "MoveCompleted", since)
    assert started == in_flight, (started, in_flight)  # each started once, before the upgrade/rollback
    assert completed == in_flight, (completed, in_flight)  # each completed once, with the same id
    assert job_state(lab, gated) == "COMPLETED", job_state(lab, gated)
    lost = [j for j in running if job_state(lab, j) != "RUNNING"] + [j for j in [*running, gated] if restarts(lab, j)]
    left = settle_sides(lab, POOL)
    assert not lost and not left, (lost, left)
    return completed


# ---------------------------------------------------------------- the test


def test_upgrade_then_rollback_with_moves_in_flight(lab, real, installed):
    r = installed
    running_image(lab, r["old_image"])
    apply(lab, pool_manifest(lab, POOL, 6, drain={"timeout": "60m"}))
    wait(lambda: settled(lab, 6), 240, interval=1, what="6/2 under the previous release")
    slurm_nodes = sorted(n for n, p in node_placements(lab).items() if p == "slurm")
    staying = slurm_nodes[:2]
    running = [long_job(lab, n) for n in staying]
    wait(lambda: all(job_state(lab, j) == "RUNNING" for j in running), 60, what="jobs running on nodes that stay in Slurm")

    # --- upgrade with three moves in flight
    since = now_rfc3339()
    want, gated = hold_moves(lab, staying, "upgrade")
    held = records(lab)
    helm(lab, "upgrade", RELEASE, str(CHART), "--reset-then-reuse-values", "--take-ownership", "--force-conflicts",
         "--wait", "--timeout", HELM_TIMEOUT, values=chart_values(lab, r["new_image"], pool_policy=True))
    new_pod = running_image(lab, r["new_image"])
    crd = lab.kubectl_json("get", "crd", CRD)
    assert crd["metadata"]["annotations"].get("helm.sh/resource-policy") == "keep", crd["metadata"]
    assert crd["metadata"]["annotations"].get("meta.helm.sh/release-name") == RELEASE, crd["metadata"]
    assert crd_fields(crd) == r["new_fields"]  # upgraded with the chart
    assert {n: rec["id"] for n, rec in records(lab).items()} == {n: rec["id"] for n, rec in held.items()}, records(lab)
    done = finish_and_check(lab, held, since, 7, running, gated, "upgrade")
    print(f"upgraded {r['commit'][:12]} -> this tree ({new_pod}) with moves in flight {want}; each completed once: {done}")

    # --- rollback with two new moves in flight, started by the new operator
    since = now_rfc3339()
    want, gated = hold_moves(lab, staying, "rollback")
    held = records(lab)
    helm(lab, "rollback", RELEASE, "1", "--wait", "--timeout", HELM_TIMEOUT)
    old_pod = running_image(lab, r["old_image"])
    crd = lab.kubectl_json("get", "crd", CRD)  # kept by Helm, and still the newer one
    assert crd_fields(crd) == r["new_fields"] and crd["metadata"]["annotations"].get("helm.sh/resource-policy") == "keep"
    assert {n: rec["id"] for n, rec in records(lab).items()} == {n: rec["id"] for n, rec in held.items()}, records(lab)
    done = finish_and_check(lab, held, since, 7, running, gated, "rollback")
    print(f"rolled back to {r['commit'][:12]} ({old_pod}) with moves in flight {want}; each completed once: {done}")
    lab.slurm("scancel", *running)
