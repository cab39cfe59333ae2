#!/usr/bin/env bash
# e2e/matrix.sh - run e2e modules on each Slurm version, access path and node model of the lab
# (issue 13). Each row starts from a stopped lab (down.sh), so the lab is brought up with that row's
# LAB_SLURM / LAB_SLURM_NODES / LAB_SLURMDBD by the pytest session, which stops it at the end.
# Prints one line per row: name | settings | modules | exit code | pytest's summary | seconds, and
# exits 1 when a row failed;
# each row's output is in $MATRIX_LOGS/<name>.log (default $LAB_DIR/matrix or <repo>/.lab/matrix),
# and a failed row's daemon and operator logs in <name>.lab-log/.
#
#   e2e/matrix.sh                  # every row below
#   e2e/matrix.sh 26.05-dynamic    # only the rows named
# LAB_PORT_OFFSET and LAB_DIR are passed through as set.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
logs=${MATRIX_LOGS:-${LAB_DIR:-$repo/.lab}/matrix}
mkdir -p "$logs"
core="e2e/test_lab.py e2e/test_operator.py"
# A slurmd that registers short after slurmpool resumed it: Slurm drains it itself (on 24.11 under
# our old Reason), and slurmpool never resumes it nor hands it across (issue 13's acceptance).
short="e2e/test_health.py::test_a_node_slurm_drains_for_missing_gpus_is_unhealthy_never_resumed_never_handed_across"
# The lab's Slurm's slurmd image run for real: dynamic node, configless (26.05: auth/slurm; 24.11:
# munge, the image's own munged), SIGTERM with a job running; from its root filesystem, and
# (LAB_REAL_NODES=1, 26.05) as a pod of a real kubelet. Each image is built once, cached.
image="e2e/test_slurmd_image.py"
requeue="e2e/test_operator.py::test_drain_timeout_requeue_keeps_the_job"
# Power saving through each access path the row has (issue 39): power_save, power_down, power_up.
power="e2e/test_power_real.py"
# Power-save parking and the preemption drill through the operator (issues 39 and 36): parked nodes
# lent and given back, jobs on one switch, a full-pool gang job, a declined give-back, SIGKILLs.
parking="e2e/test_power_save.py e2e/test_parking_jobs.py e2e/test_preemption.py"
# srun --container-image on nodes the operator moved into Slurm (issue 29; needs LAB_PYXIS=1)
pyxis="e2e/test_pyxis.py"

# name | settings | modules. `make test` runs all of e2e/ on 22.05 over SSH, then MATRIX_CI (Makefile).
rows=(
  "22.05|LAB_SLURM=22.05|$core e2e/test_bridge_real.py $short"
  "22.05-slurmdbd|LAB_SLURM=22.05 LAB_SLURMDBD=1|$core $short"
  "24.11|LAB_SLURM=24.11|$core e2e/test_bridge_real.py $power $short"
  # slurmrestd before 26.05 has no requeue (the REST rows skip that policy): CI runs it on 24.11 over
  # SSH, on dynamic nodes, with the 24.11 slurmd image (24.11-dynamic-requeue).
  "24.11-requeue|LAB_SLURM=24.11|$requeue"
  "24.11-rest|LAB_SLURM=24.11 LAB_ACCESS=rest|$core e2e/test_bridge_real.py $power e2e/test_rest_operator.py e2e/test_demand_gang.py e2e/test_handover.py $short"
  # 26.05 with GPUs bound to sockets (gres.conf Cores=: Slurm reports gpu:h100:8(S:0-1), as real GPUs
  # do), and pyxis and enroot (LAB_PYXIS=1): every job of the row's tests runs with the SPANK plugin
  # loaded (its epilog too), and e2e/test_pyxis.py runs container jobs on nodes the operator moved in.
  "26.05|LAB_SLURM=26.05 LAB_GRES_CORES=1 LAB_PYXIS=1|$core e2e/test_bridge_real.py $power e2e/test_demand_gang.py e2e/test_handover.py $short $pyxis $parking"
  # 24.11's dynamic slurmd run one network namespace each (e2e/lab/netns.sh: 24.11 takes no Port= in --conf).
  "24.11-dynamic|LAB_SLURM=24.11 LAB_SLURM_NODES=dynamic|$core $power $image"
  "24.11-dynamic-requeue|LAB_SLURM=24.11 LAB_SLURM_NODES=dynamic|$requeue $image"
  # The same over slurmrestd (v0.0.45: power_save read from /conf, the requeue at the grace's end).
  "26.05-rest-parking|LAB_SLURM=26.05 LAB_ACCESS=rest|$parking e2e/test_parking_giveback.py"
  "26.05-rest|LAB_SLURM=26.05 LAB_ACCESS=rest|$core e2e/test_rest_operator.py e2e/test_demand_gang.py e2e/test_handover.py $short"
  # No $short on dynamic nodes: a dynamic node's configuration is what its slurmd reports
  # (--conf), so it cannot register with fewer GPUs than configured.
  "26.05-dynamic|LAB_SLURM=26.05 LAB_SLURM_NODES=dynamic|$core $power $image"
  "26.05-dynamic-rest|LAB_SLURM=26.05 LAB_SLURM_NODES=dynamic LAB_ACCESS=rest LAB_REAL_NODES=1|$core $power e2e/test_rest_operator.py e2e/test_handover.py $image"
  # pyxis on a real kubelet node: the 22.05-pyxis slurmd image as the slurmd pod of a node the
  # operator moved in, a container job with mounts and GPUs in it (and on the lab's nodes as above),
  # with Slurm's cgroups on (as in e2e-main).
  "22.05-pyxis-real|LAB_SLURM=22.05 LAB_PYXIS=1 LAB_REAL_NODES=1 LAB_CGROUPS=1|$pyxis"
  # Slurm's NodeNames differ from the Node names (sgpu01 for gpu01): moves through spec.slurm.nodeName,
  # and without it nothing drained or moved (SlurmUnlisted).
  "22.05-names|LAB_SLURM=22.05 LAB_SLURM_NAME_PREFIX=s|e2e/test_node_names.py"
  # GPUs isolated by cgroups (LAB_CGROUPS=1: proctrack/cgroup, task/cgroup, ConstrainDevices; each
  # slurmd in a cgroup namespace of its own): the device test on each version, and the move core on
  # 22.05 (CI runs the 24.11 and 26.05 rows; e2e-main runs all of 22.05's modules with cgroups on).
  "22.05-cgroups|LAB_SLURM=22.05 LAB_CGROUPS=1|e2e/test_gpu_isolation.py $core"
  "24.11-cgroups|LAB_SLURM=24.11 LAB_CGROUPS=1|e2e/test_gpu_isolation.py"
  "26.05-cgroups|LAB_SLURM=26.05 LAB_CGROUPS=1|e2e/test_gpu_isolation.py"
)
failed=0
for row in "${rows[@]}"; do
  IFS='|' read -r name settings modules <<< "$row"
  if [ $# -gt 0 ]; then
    want=0; for n in "$@"; do [ "$n" = "$name" ] && want=1; done
    [ $want = 1 ] || continue
  fi
  "$here/lab/down.sh" > /dev/null 2>&1
  t0=$(date +%s)
  # shellcheck disable=SC2086
  env -u LAB_SLURM -u LAB_SLURM_NODES -u LAB_SLURMDBD -u LAB_ACCESS -u LAB_REAL_NODES -u LAB_GRES_CORES -u LAB_PYXIS -u LAB_SLURM_NAME_PREFIX -u LAB_CGROUPS $settings \
    "$repo/.venv/bin/pytest" -q -p no:cacheprovider $modules > "$logs/$name.log" 2>&1
  rc=$?
  # A failed row's log ends in pytest's failures and summary: shown here too (CI keeps no files).
  [ $rc = 0 ] || { failed=1; echo "--- $name: the end of $logs/$name.log"; tail -n 80 "$logs/$name.log"; echo "---"; }
  # The next row's lab starts with fresh daemon logs: a failed row's are kept beside its log.
  [ $rc = 0 ] || { rm -rf "$logs/$name.lab-log"; cp -r "${LAB_DIR:-$repo/.lab}/log" "$logs/$name.lab-log" 2>/dev/null; }
  summary=$(grep -E '(passed|failed|error|skipped)( |,|$)' "$logs/$name.log" | grep -E ' in [0-9.]+s' | tail -1)
  echo "$name | $settings | $modules | rc=$rc | $summary | $(( $(date +%s) - t0 )) s"
done
"$here/lab/down.sh" > /dev/null 2>&1
[ $failed = 0 ] || echo "matrix: a row failed; its log is in $logs" >&2
exit $failed
