#!/bin/sh
# cgexec.sh CGROUP CMD...: run CMD as a container runtime runs a pod's process on a cgroup v1 host:
# in CGROUP (created if needed) of the devices and freezer hierarchies, and in a cgroup namespace
# rooted there with its own view of /sys/fs/cgroup (a private mount namespace). LAB_CGROUPS=1:
# each simulated node's slurmd, so Slurm's proctrack/cgroup and task/cgroup (ConstrainDevices) of
# eight slurmd on one host, and of several labs, never share a job's cgroup (Slurm names them
# /slurm/uid_U/job_J/step_S). No fork: unshare execs, so the PID stays the caller's.
set -eu
cg=$1; shift
for c in devices freezer; do
  mkdir -p "/sys/fs/cgroup/$c/$cg"
  echo $$ > "/sys/fs/cgroup/$c/$cg/cgroup.procs"
done
exec unshare -C -m --propagation private -- sh -c '
  set -e
  mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
  for c in devices freezer; do mkdir "/sys/fs/cgroup/$c"; mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c"; done
  exec "$@"' sh "$@"
