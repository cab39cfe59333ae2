#!/usr/bin/env bash
# health.sh - exit 0 if the lab under $LAB_DIR (default <repo>/.lab) is up and healthy, else
# print what is wrong and exit 1. Used by up.sh (idempotency) and e2e/conftest.py.
# Checks: env file, every daemon's PID alive, apiserver /readyz, all nodes Ready,
# `scontrol ping`, sshd accepting TCP connections.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
LAB_DIR=${LAB_DIR:-$(cd "$here/../.." && pwd)/.lab}
bad() { echo "lab not healthy: $*" >&2; exit 1; }

[ -s "$LAB_DIR/env" ] || bad "$LAB_DIR/env missing (run make lab-up)"
# shellcheck disable=SC1091
. "$LAB_DIR/env"

alive() { [ -r "/proc/$1/stat" ] && ! awk '{exit !($3=="Z")}' "/proc/$1/stat" 2>/dev/null; }
daemons="etcd:etcd kube-apiserver:kube-apiserver kube-scheduler:kube-scheduler
         kube-controller-manager:kube-controller-manager slurmctld:slurmctld sshd:sshd agent:agent.py"
# 22.05 and 24.11 authenticate through munged, 26.05 through auth/slurm; 24.11 and 26.05 serve slurmrestd.
[ "${LAB_SLURM:-22.05}" = 26.05 ] || daemons="$daemons munged:munged"
[ "${LAB_SLURM:-22.05}" = 22.05 ] || daemons="$daemons slurmrestd:slurmrestd"
[ "${LAB_SLURMDBD:-0}" = 0 ] || daemons="$daemons slurmdbd:slurmdbd mariadbd:mariadbd"
for spec in $daemons; do
  name=${spec%%:*} exp=${spec##*:}
  pid=$(cat "$LAB_DIR/run/$name.pid" 2>/dev/null) || bad "no PID file for $name"
  alive "$pid" && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$exp" || bad "$name (pid $pid) is not running"
done

kubectl --request-timeout=5s get --raw /readyz >/dev/null 2>&1 || bad "kube-apiserver /readyz failed"
ready=$(kubectl --request-timeout=5s get nodes -l slurmpool.io/lab=true \
  -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True)
[ "$ready" = "$LAB_NODES" ] || bad "$ready of $LAB_NODES nodes Ready"
if [ "${LAB_SIM_NODES:-0}" -gt 0 ]; then
  sim=$(kubectl --request-timeout=10s get nodes -l slurmpool.io/sim=true \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True)
  [ "$sim" = "$LAB_SIM_NODES" ] || bad "$sim of $LAB_SIM_NODES simulated nodes Ready"
fi
if [ "${LAB_REAL_NODES:-0}" -gt 0 ]; then  # real kubelet nodes (real-nodes.sh)
  real=$(kubectl --request-timeout=5s get nodes -l slurmpool.io/real=true \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True)
  [ "$real" = "$LAB_REAL_NODES" ] || bad "$real of $LAB_REAL_NODES real nodes Ready"
fi
timeout 5 scontrol ping >/dev/null 2>&1 || bad "scontrol ping failed"
timeout 2 bash -c "exec 3<>/dev/tcp/$LAB_SSH_HOST/$LAB_SSH_PORT" 2>/dev/null || bad "sshd not accepting on $LAB_SSH_HOST:$LAB_SSH_PORT"
if [ -n "${LAB_SLURMRESTD_URL:-}" ]; then
  hp=${LAB_SLURMRESTD_URL#http://}
  timeout 2 bash -c "exec 3<>/dev/tcp/${hp%:*}/${hp##*:}" 2>/dev/null || bad "slurmrestd not accepting on $hp"
fi
exit 0
