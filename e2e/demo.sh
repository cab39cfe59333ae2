#!/usr/bin/env bash
# make demo: on the running lab, install the CRD, start the operator and move nodes:
# 8 Slurm nodes -> 5 (three go to inference) -> one of them moves to a second inference
# pool -> back to 8. The operator keeps running
# afterwards (PID in .lab/run/operator.pid); `make lab-down` stops it with the lab.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
LAB_DIR=${LAB_DIR:-$repo/.lab}
# shellcheck disable=SC1091
. "$LAB_DIR/env"
ns=slurmpool-demo
show() { echo; echo "== $*"; kubectl get snp gpu -n $ns -o wide 2>/dev/null || true; sinfo -N -o '%8N %12T %10G' ; }
wait_split() { # wait_split SLURM INFERENCE
  for _ in $(seq 1 240); do
    got=$(kubectl get snp gpu -n $ns -o jsonpath='{.status.slurm.ready}/{.status.inference.ready}/{.status.moving}' 2>/dev/null || true)
    [ "$got" = "$1/$2/0" ] && return 0
    sleep 0.5
  done
  echo "demo: the split did not reach $1/$2 in 120 s; see $LAB_DIR/log/operator-demo.log" >&2; exit 1
}

kubectl apply --server-side -f "$repo/crds/slurmpool.io_slurmnodepools.yaml" >/dev/null
# Not `kubectl wait`: on a CRD with no condition yet (a busy apiserver) it fails at once.
established() { [ "$(kubectl get crd slurmnodepools.slurmpool.io -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')" = True ]; }
for _ in $(seq 150); do established && break; sleep 0.2; done
established || { echo "demo: the SlurmNodePool CRD was not Established in 30 s" >&2; exit 1; }
kubectl create namespace $ns --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl create secret generic slurm-ssh -n $ns --from-file=ssh-privatekey="$LAB_SSH_KEY" \
  --from-file=known_hosts="$LAB_SSH_KNOWN_HOSTS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null

pidfile=$LAB_DIR/run/operator.pid
metrics_port=$((18080 + ${LAB_PORT_OFFSET:-0}))
if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "demo: operator already running (PID $(cat "$pidfile"))"
else
  # The lab's slurmd image is not under the chart's default registry (docs/rbac.md#pool-policy).
  SLURMPOOL_POOL_POLICY='{"imagePrefixes": ["slurmd:"]}' \
  setsid "$repo/.venv/bin/python" -m slurmpool run --metrics-port "$metrics_port" --metrics-address 127.0.0.1 \
    >> "$LAB_DIR/log/operator-demo.log" 2>&1 < /dev/null &
  echo $! > "$pidfile"
  echo "demo: operator started (PID $!, metrics on http://127.0.0.1:$metrics_port/metrics, log $LAB_DIR/log/operator-demo.log)"
fi
# The lab's Prometheus (LAB_PROMETHEUS=1 make demo) scrapes it as the chart's ServiceMonitor would.
if [ -s "$LAB_DIR/run/prometheus.pid" ] && kill -0 "$(cat "$LAB_DIR/run/prometheus.pid")" 2>/dev/null; then
  "$repo/.venv/bin/python" "$repo/e2e/prometheus.py" register demo "$metrics_port"
  echo "demo: Prometheus scrapes it: $(cat "$LAB_DIR/prometheus/url") (alerts: /api/v1/alerts)"
fi

# The sample names the lab's default sshd port; a lab started with LAB_PORT_OFFSET has another.
sed "s/port: 2222/port: $LAB_SSH_PORT/" "$repo/deploy/samples/lab-pool.yaml" | kubectl apply -f -
t0=$(date +%s)
wait_split 8 0; show "all 8 nodes serve Slurm ($(( $(date +%s) - t0 )) s)"
kubectl scale snp gpu -n $ns --replicas=5
t0=$(date +%s)
wait_split 5 3; show "scaled to 5: three nodes drained in Slurm and serving inference ($(( $(date +%s) - t0 )) s)"
kubectl get nodes -L slurmpool.io/side,slurmpool.io/inference-pool
# A count for the second pool: one llm node moves to batch (relabel, evict misfits, no Slurm step).
kubectl patch snp gpu -n $ns --type=json -p '[{"op": "add", "path": "/spec/inference/pools/1/nodes", "value": 1}]'
t0=$(date +%s)
for _ in $(seq 1 240); do
  [ "$(kubectl get snp gpu -n $ns -o jsonpath='{.status.inference.byPool}/{.status.moving}')" = "llm 2/2, batch 1/1/0" ] && break
  sleep 0.5
done
show "batch pool count 1: one node moved from llm to batch ($(( $(date +%s) - t0 )) s)"
kubectl get nodes -L slurmpool.io/side,slurmpool.io/inference-pool
# Hold the split a moment: moves now take about a second, and people (and the lab Prometheus's
# 1 s scrapes behind e2e/test_dashboard_lab.py) should see the nodes serve inference.
sleep "${DEMO_HOLD_SECONDS:-5}"
kubectl patch snp gpu -n $ns --type=json -p '[{"op": "remove", "path": "/spec/inference/pools/1/nodes"}]'
kubectl scale snp gpu -n $ns --replicas=8
t0=$(date +%s)
wait_split 8 0; show "back to 8 Slurm nodes ($(( $(date +%s) - t0 )) s)"
kubectl get events -n $ns --sort-by=.lastTimestamp | tail -n 12
echo
echo "demo: done. Try: . $LAB_DIR/env; kubectl scale snp gpu -n $ns --replicas=6; kubectl get snp -n $ns -w"
