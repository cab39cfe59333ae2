#!/usr/bin/env bash
# down.sh - stop the lab started by up.sh (`make lab-down`). Idempotent.
#
# Stops ONLY processes this lab started: the PIDs in $LAB_DIR/run/*.pid (daemons of up.sh and
# slurmd processes of the node agent) after checking /proc/PID/cmdline still names the expected
# program, processes the agent started (they carry SLURMPOOL_LAB_DIR=$LAB_DIR in their
# environment), and stray slurmstepd of this lab (SLURM_CONF=$LAB_DIR/... in their environment)
# with their descendants. Jobs are cancelled first, while slurmctld still runs.
# Keys, certificates and logs stay; state is wiped by the next up.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
LAB_DIR=${LAB_DIR:-$(cd "$here/../.." && pwd)/.lab}
export SLURM_CONF=$LAB_DIR/etc/slurm.conf
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
# The lab's Slurm clients (26.05: the built ones and this lab's auth socket), written by up.sh.
# shellcheck disable=SC1091
[ -s "$LAB_DIR/slurm.env" ] && . "$LAB_DIR/slurm.env"
T0=$(date +%s%N)
log() { echo "[lab-down +$(( ($(date +%s%N) - T0) / 1000000 ))ms] $*"; }
RUN=$LAB_DIR/run

# One lab-up/lab-down at a time (see up.sh); LAB_LOCKED=1: the caller holds the lock.
if [ -z "${LAB_LOCKED:-}" ] && [ -d "$LAB_DIR" ]; then
  exec 9>>"$LAB_DIR/lock"
  flock -w 600 9 || { echo "[lab-down] ERROR: timed out waiting for $LAB_DIR/lock" >&2; exit 1; }
fi
if [ ! -d "$RUN" ]; then log "nothing to stop ($RUN does not exist)"; exit 0; fi

# A zombie counts as dead: our daemons are reparented to PID 1, which may reap them late.
alive() { [ -r "/proc/$1/stat" ] && ! awk '{exit !($3=="Z")}' "/proc/$1/stat" 2>/dev/null; }
cmdline_has() { { tr "\0" " " < "/proc/$1/cmdline"; } 2>/dev/null | grep -q -- "$2"; }
environ_has() { { tr "\0" "\n" < "/proc/$1/environ"; } 2>/dev/null | grep -qxF -- "$2"; }

stopped=()
# stop_pids LABEL PID...: SIGTERM, wait up to 10 s, then SIGKILL.
stop_pids() {
  local label=$1 pid i k; shift
  stopped+=("$@")
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null
  for i in $(seq 1 100); do
    k=0; for pid in "$@"; do alive "$pid" && k=1; done
    [ $k = 0 ] && break; sleep 0.1
  done
  for pid in "$@"; do
    if alive "$pid"; then kill -KILL "$pid" 2>/dev/null; log "$label $pid: SIGKILLed after 10 s"; fi
  done
  log "stopped $label: $*"
}
# stop_group NAME:EXPECTED_CMDLINE_WORD ...: daemons by PID file, in parallel.
stop_group() {
  local spec name exp f pid pids=() names=()
  for spec in "$@"; do
    name=${spec%%:*} exp=${spec##*:} f=$RUN/$name.pid
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    if alive "$pid" && cmdline_has "$pid" "$exp"; then pids+=("$pid"); names+=("$name"); fi
    rm -f "$f"
  done
  [ ${#pids[@]} -gt 0 ] && stop_pids "${names[*]}" "${pids[@]}"
}
# PIDs of processes the agent started (slurmd pods), from its PID files and its env marker.
agent_children() {
  local f pid d
  for f in "$RUN"/slurmd-*.pid "$RUN"/pods/*.pid; do
    [ -s "$f" ] || continue
    pid=$(cat "$f"); alive "$pid" && environ_has "$pid" "SLURMPOOL_LAB_DIR=$LAB_DIR" && echo "$pid"
  done
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    environ_has "$pid" "SLURMPOOL_LAB_DIR=$LAB_DIR" && alive "$pid" && echo "$pid"
  done
}

# 0. the operator `make demo` started, so it does not act on a lab going away; Prometheus
stop_group operator:slurmpool prometheus:prometheus slurmrestd:slurmrestd

"$here/real-nodes.sh" stop   # real kubelet nodes: their pods, kubelet, containerd, cgroups, addresses
# 1. the agent first, so it does not restart the slurmd processes stopped below
stop_group agent:agent.py

# 2. cancel jobs while slurmctld (and the slurmds) still run, so job steps end cleanly
if [ -s "$RUN/slurmctld.pid" ] && alive "$(cat "$RUN/slurmctld.pid")" && timeout 5 scontrol ping >/dev/null 2>&1; then
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null
    for _ in $(seq 1 50); do [ -z "$(squeue -h -t R,CG -o %i 2>/dev/null)" ] && break; sleep 0.1; done
    log "cancelled jobs: $jobs"
  fi
fi

# 3. what is left of jobs: slurmstepd of this lab (steps outlive slurmd by design) with their
#    descendants, and job processes orphaned by a dead slurmstepd (their environment names this
#    lab's slurm.conf and a job id). SIGKILL, as slurmstepd itself would after KillWait.
descendants() {
  ps -e -o pid=,ppid= | awk -v p="$1" '$2==p {print $1}' | while read -r c; do descendants "$c"; echo "$c"; done
}
lab_job_pids() {
  local d pid
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    case "$(readlink "$d/exe" 2>/dev/null)" in
      *slurmstepd*)
        if environ_has "$pid" "SLURM_CONF=$SLURM_CONF" || environ_has "$pid" "SLURMPOOL_LAB_DIR=$LAB_DIR"; then
          descendants "$pid"; echo "$pid"
        fi ;;
      *)
        environ_has "$pid" "SLURM_CONF=$SLURM_CONF" &&
          { tr '\0' '\n' < "$d/environ"; } 2>/dev/null | grep -q '^SLURM_JOB_ID=' && echo "$pid" ;;
    esac
  done
}
mapfile -t jobpids < <(lab_job_pids | sort -un)
if [ ${#jobpids[@]} -gt 0 ]; then
  kill -KILL "${jobpids[@]}" 2>/dev/null
  stopped+=("${jobpids[@]}")
  log "killed leftover job processes (slurmstepd and jobs): ${jobpids[*]}"
fi

# 4. slurmd processes the agent started; then the rest of Slurm, Kubernetes and sshd
mapfile -t kids < <(agent_children | sort -un)
[ ${#kids[@]} -gt 0 ] && stop_pids "agent-started processes" "${kids[@]}"
rm -f "$RUN"/slurmd-*.pid "$RUN"/pods/*.pid
# LAB_CGROUPS=1: the slurmd cgroups (cgexec.sh) and what Slurm made in them, deepest first; their
# processes are gone above.
if [ -s "$RUN/cgroup-prefix" ]; then
  prefix=$(cat "$RUN/cgroup-prefix")
  for c in devices freezer; do
    for d in /sys/fs/cgroup/$c/"$prefix"*; do [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  done
  rm -f "$RUN/cgroup-prefix"
  log "removed the slurmd cgroups $prefix*"
fi
stop_group sshd:sshd slurmctld:slurmctld kube-scheduler:kube-scheduler kube-controller-manager:kube-controller-manager
stop_group kube-apiserver:kube-apiserver
stop_group etcd:etcd

# 5. slurmdbd (LAB_SLURMDBD=1) after slurmctld, then its MariaDB; munged last: everything above
#    authenticates through it
stop_group slurmdbd:slurmdbd
stop_group mariadbd:mariadbd
stop_group munged:munged
# 6. the network namespaces of 24.11's dynamic slurmd and their bridge (netns.sh), once nothing runs in them
[ ! -s "$LAB_DIR/netns/port-offset" ] || { "$here/netns.sh" stop && log "removed the network namespaces"; }

# Our daemons were reparented to PID 1, which reaps them a little later: wait (briefly) so that
# nothing, not even a zombie, is left when this returns.
for _ in $(seq 1 50); do
  k=0; for pid in "${stopped[@]}"; do [ -e "/proc/$pid" ] && k=1 && break; done
  [ $k = 0 ] && break; sleep 0.1
done
rm -rf "$RUN" "$LAB_DIR/env" "$LAB_DIR/users/started-by-pytest"
log "lab down"
