#!/bin/bash
# slurmd-entrypoint: runs slurmd for the Kubernetes node this pod runs on (the slurmd image).
#
# Environment (all optional except NODE_NAME, which slurmpool's slurmd pod sets from spec.nodeName):
#   NODE_NAME           the Slurm node name (Kubernetes node name == Slurm node name)
#   SLURMD_MODE         static (default): `slurmd -D -N $NODE_NAME`, the node is in slurm.conf;
#                       dynamic: `slurmd -D -N $NODE_NAME -Z --conf "$SLURMD_NODE_CONF"` (Slurm 22.05+)
#   SLURMD_NODE_CONF    dynamic nodes: the node's line, e.g. "Gres=gpu:h100:8 Features=h100 CPUs=96"
#   SLURM_CONF_SERVER   configless: slurmctld host[:port][,host2[:port]] (`--conf-server`; slurm.conf
#                       then needs SlurmctldParameters=enable_configless); else SLURM_CONF or
#                       /etc/slurm/slurm.conf (e.g. a ConfigMap volume) is read
#   SLURM_AUTH_DIR      where the auth Secret is mounted (default /etc/slurm-auth): munge.key
#                       (auth/munge: a munged is started here) or slurm.key (auth/slurm, 23.11+:
#                       copied to /run/slurmd-auth and named by SLURM_SACK_KEY)
#   MUNGE_SOCKET        munged's socket (default: slurm.conf's AuthInfo socket=, else
#                       /run/munge/munge.socket.2)
#   SLURMD_ARGS         more slurmd arguments (word-split); the container's args are appended too
#   SLURMD_CGROUPS      auto (default), yes or no: prepare the container for Slurm's cgroups (below)
#   SLURMD_PORT         the node's slurmd port, when neither its node line's Port= nor slurm.conf's
#                       SlurmdPort (nor 6818) is it: slurmd starts only once nothing answers there.
#                       Needed where Port= is on a hostlist line (NodeName=gpu[01-64] Port=...) or
#                       slurmd runs configless (no slurm.conf here): only NodeName=$NODE_NAME is read
#
# SIGTERM (pod deletion, eviction, drain): slurmd is stopped only once no job step runs on this node.
# The node's state in Slurm is never changed here: no `scontrol update state=down` (which kills
# jobs, as a preStop hook that does it would). slurmpool drains the node in Slurm and waits for its
# jobs before it deletes this pod; a pod deleted early keeps serving its running jobs until they end
# or the pod's terminationGracePeriodSeconds runs out (then the kubelet kills the container).
# GPUs: request nvidia.com/gpu like any pod; the device plugin gives the container the devices,
# and gres.conf (File=/dev/nvidia[0-7]; AutoDetect=nvidia from 24.11) tells slurmd about them.
# AutoDetect=nvml only with an image whose io.slurmpool.slurm.plugins label lists gpu/nvml
# (none of the shipped ones: docs/slurmd-pod.md).
set -euo pipefail
log() { echo "slurmd-entrypoint: $*" >&2; }
: "${NODE_NAME:?NODE_NAME must be set (slurmpool sets it from spec.nodeName)}"
mode=${SLURMD_MODE:-static}
auth_dir=${SLURM_AUTH_DIR:-/etc/slurm-auth}
conf=${SLURM_CONF:-/etc/slurm/slurm.conf}

# --- auth material from the Secret volume
munged_pid=""
conf_value() {  # conf_value KEY: KEY=value from slurm.conf (case-insensitive, last wins)
  [ -r "$conf" ] || return 0
  sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\([^[:space:]#]*\).*/\1/Ip" "$conf" | tail -n1
}
if [ -r "$auth_dir/munge.key" ]; then
  socket=${MUNGE_SOCKET:-}
  if [ -z "$socket" ]; then
    socket=$(conf_value AuthInfo | tr ',' '\n' | sed -n 's/^socket=//p')
    socket=${socket:-/run/munge/munge.socket.2}
  fi
  mkdir -p /etc/munge "$(dirname "$socket")" /var/lib/munge /var/log/munge
  install -o munge -g munge -m 0400 "$auth_dir/munge.key" /etc/munge/munge.key
  chown munge:munge "$(dirname "$socket")" /var/lib/munge /var/log/munge
  chmod 0755 "$(dirname "$socket")"
  setpriv --reuid=munge --regid=munge --init-groups munged -F --socket="$socket" \
    --key-file=/etc/munge/munge.key --pid-file=/run/munged.pid --log-file=/var/log/munge/munged.log &
  munged_pid=$!
  for _ in $(seq 1 100); do [ -S "$socket" ] && break; sleep 0.05; done
  [ -S "$socket" ] || { log "munged did not start"; exit 1; }
  log "munged on $socket"
elif [ -r "$auth_dir/slurm.key" ]; then
  # A private copy (a Secret volume's file is a world-readable link), named by SLURM_SACK_KEY, which
  # Slurm reads before its default, slurm.key beside slurm.conf: that works with configless (no
  # slurm.conf yet) and with slurm.conf on a read-only ConfigMap volume.
  install -d -m 0700 /run/slurmd-auth
  install -m 0600 "$auth_dir/slurm.key" /run/slurmd-auth/slurm.key
  export SLURM_SACK_KEY=/run/slurmd-auth/slurm.key
  log "auth/slurm key from $auth_dir"
else
  log "no munge.key or slurm.key in $auth_dir: mount the auth Secret there (or set SLURM_AUTH_DIR)"
  exit 1
fi

# --- directories slurm.conf names that do not exist in the container yet
for key in SlurmdSpoolDir SlurmdLogFile SlurmdPidFile; do
  v=$(conf_value "$key"); [ -n "$v" ] || continue
  v=${v//%n/$NODE_NAME}; v=${v//%h/$(hostname)}
  case $key in SlurmdSpoolDir) mkdir -p "$v" ;; *) mkdir -p "$(dirname "$v")" ;; esac
done

# enroot (the -pyxis images): its directories, on the pod's node-local volumes (docs/install.md),
# writable by every job's user (each gets a subdirectory of its own; enroot.conf)
if [ -r /etc/enroot/enroot.conf ]; then
  for d in /run/enroot /var/lib/enroot/data /var/lib/enroot/cache /var/lib/enroot/tmp; do mkdir -p "$d"; chmod 1777 "$d"; done
fi

# auth/slurm's socket for slurmstepd, and configless slurmd's copy of the configuration (/run/slurm/conf)
mkdir -p /run/slurm

# --- Slurm's cgroups (proctrack/cgroup, task/cgroup; docs/slurmd-pod.md). A container sees its own
# cgroup at /sys/fs/cgroup, read-only, and on cgroup v1 through the host's cgroup namespace. slurmd
# makes its jobs' cgroups below the container's: the view is made writable, and slurmd runs in a
# cgroup namespace rooted at the container's cgroup, so the paths it reads from /proc/*/cgroup are the
# ones it sees under /sys/fs/cgroup. Both need CAP_SYS_ADMIN (so does writing a job's device rules).
# SLURMD_CGROUPS: auto (default: when slurm.conf's ProctrackType or TaskPlugin names cgroup), yes
# (e.g. configless, where slurm.conf comes later), no.
wants_cgroups() {
  case ${SLURMD_CGROUPS:-auto} in
    yes) return 0 ;;
    no) return 1 ;;
    auto) [[ "$(conf_value ProctrackType) $(conf_value TaskPlugin)" == *cgroup* ]] ;;
    *) log "SLURMD_CGROUPS must be auto, yes or no, not ${SLURMD_CGROUPS}"; exit 1 ;;
  esac
}
in_cgroup_ns=()
if wants_cgroups; then
  if (( (0x$(awk '/^CapEff:/ {print $2}' /proc/self/status) >> 21) & 1 )); then
    # every read-only cgroup mount under /sys/fs/cgroup (the field after "-" is the fs type)
    awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { fs = $(i + 1); break } }
         fs ~ /^cgroup2?$/ && $5 ~ /^\/sys\/fs\/cgroup/ && $6 ~ /(^|,)ro(,|$)/ { print $5 }' /proc/self/mountinfo |
      while read -r m; do mount -o remount,bind,rw "$m" || { log "cannot make $m writable"; exit 1; }; done
    # cgroup v1: Slurm allows a job its GPUs as "rwm", and a cgroup may allow only what its parent
    # does; device plugins give a container its devices as "rw" (NVIDIA's, the lab's). Add "m"
    # (mknod) for those devices only: without it every step given a GPU fails ("could not execve").
    if [ -w /sys/fs/cgroup/devices/devices.allow ]; then
      for rule in $(awk '$1 == "c" && $3 !~ /m/ && $2 !~ /\*/ { print $2 }' /sys/fs/cgroup/devices/devices.list); do
        echo "c $rule m" > /sys/fs/cgroup/devices/devices.allow || { log "cannot allow mknod of device $rule"; exit 1; }
      done
    fi
    # cgroup v1 under containerd: the host's namespace (v2 gives a container its own)
    if grep -qv ':/$' /proc/self/cgroup; then in_cgroup_ns=(unshare --cgroup --); fi
    log "cgroups: /sys/fs/cgroup writable${in_cgroup_ns:+, slurmd in a cgroup namespace of its own}"
  elif grep -q '[[:space:]]/sys/fs/cgroup[^[:space:]]*[[:space:]]ro,' /proc/self/mountinfo; then
    log "slurm.conf uses cgroups (or SLURMD_CGROUPS=yes), but /sys/fs/cgroup is read-only here and the container lacks" \
        "CAP_SYS_ADMIN: add it to the slurmd pod's securityContext.capabilities (docs/slurmd-pod.md)"
    exit 1
  fi
fi

# --- slurmd's command line
args=(-D -N "$NODE_NAME")
if [ -n "${SLURM_CONF_SERVER:-}" ]; then
  args+=(--conf-server "$SLURM_CONF_SERVER")
  # configless with munge: slurmd talks to slurmctld before it has slurm.conf's AuthInfo
  [ -z "$munged_pid" ] || [ "$socket" = /run/munge/munge.socket.2 ] || args+=(--authinfo "socket=$socket")
elif [ ! -r "$conf" ]; then log "no $conf and no SLURM_CONF_SERVER"; exit 1
else export SLURM_CONF=$conf
fi
case $mode in
  static) ;;
  dynamic) args+=(-Z); [ -z "${SLURMD_NODE_CONF:-}" ] || args+=(--conf "$SLURMD_NODE_CONF") ;;
  *) log "SLURMD_MODE must be static or dynamic, not $mode"; exit 1 ;;
esac
# shellcheck disable=SC2206
[ -z "${SLURMD_ARGS:-}" ] || args+=($SLURMD_ARGS)
args+=("$@")

job_steps() {  # PIDs of slurmstepd in this container (its own PID namespace)
  local d; for d in /proc/[0-9]*; do [ "$(cat "$d/comm" 2>/dev/null)" = slurmstepd ] && echo "${d#/proc/}"; done; return 0
}
stopping=0
on_term() { stopping=1; }
trap on_term TERM INT

# A slurmd started outside Kubernetes (systemd on the host, a node being adopted: docs/adopting.md)
# may still hold the node's port: slurmd starts only once nothing answers there, so two never serve
# one node (a slurmd started anyway could not bind the port and would exit). The port: SLURMD_PORT,
# else Port= of the node's own line (SLURMD_NODE_CONF, or slurm.conf's NodeName=$NODE_NAME line),
# else slurm.conf's SlurmdPort, else 6818.
slurmd_port() {
  local file=${SLURM_CONF:-} line
  [ -z "${SLURMD_PORT:-}" ] || { echo "$SLURMD_PORT"; return; }
  line=${SLURMD_NODE_CONF:-}
  [ -n "$line" ] || [ ! -r "$file" ] || line=$(grep -E "^[[:space:]]*NodeName=$NODE_NAME([[:space:]]|$)" "$file" | head -n1 || true)
  if [[ " $line" =~ [[:space:]]Port=([0-9]+) ]]; then echo "${BASH_REMATCH[1]}"; return; fi
  line=""
  [ ! -r "$file" ] || line=$(sed -n 's/^[[:space:]]*SlurmdPort[[:space:]]*=[[:space:]]*\([0-9][0-9]*\).*/\1/ip' "$file" | head -n1 || true)
  echo "${line:-6818}"
}
port=$(slurmd_port)
said=0
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
  [ $said = 1 ] || log "port $port answers (a slurmd outside Kubernetes?): slurmd starts once it is free"
  said=1
  [ $stopping = 0 ] || exit 0
  sleep 1
done

log "slurmd ${args[*]}"
"${in_cgroup_ns[@]}" slurmd "${args[@]}" &
slurmd_pid=$!
# wait returns when slurmd exits or a trapped signal arrives
rc=0
while :; do
  wait "$slurmd_pid" && rc=0 || rc=$?
  [ $stopping = 1 ] && break
  kill -0 "$slurmd_pid" 2>/dev/null || { log "slurmd exited with $rc"; break; }
done
if [ $stopping = 1 ]; then
  steps=$(job_steps | tr '\n' ' ')
  if [ -n "${steps// /}" ]; then
    log "SIGTERM with job steps running (slurmstepd $steps): slurmd keeps serving them; the node's Slurm state is left alone"
    while [ -n "$(job_steps)" ] && kill -0 "$slurmd_pid" 2>/dev/null; do sleep 1; done
  fi
  log "SIGTERM: stopping slurmd (the node's state in Slurm is unchanged)"
  kill -TERM "$slurmd_pid" 2>/dev/null || true
  wait "$slurmd_pid" || true
  rc=0
fi
if [ -n "$munged_pid" ]; then kill -TERM "$munged_pid" 2>/dev/null || true; wait "$munged_pid" || true; fi
exit "$rc"
