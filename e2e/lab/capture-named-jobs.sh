#!/usr/bin/env bash
# e2e/lab/capture-named-jobs.sh OUT_DIR - capture how this Slurm prints what pending jobs ask of
# nodes (issue 39): the nodes they name (-w: squeue %n, REST required_nodes), the reason listing
# the UnavailableNodes, and whole-node jobs (--exclusive: squeue %h, REST shared), for
# tests/fixtures/named_jobs/. Needs a Slurm client env (SLURM_CONF, sbatch/squeue/scontrol in
# PATH); with LAB_SLURMRESTD_URL and LAB_SLURM_JWT also the REST job list (REST_VERSION). The
# partition's last two nodes are drained as slurmpool parks them, the others filled. Cancels its
# jobs and resumes the nodes at the end. Writes squeue.txt (the bridge's squeue format), squeue-old.txt
# (the format before issue 39), scontrol-jobs.txt, jobs.json (REST) and notes.txt.
set -euo pipefail
out=$1
part=${PARTITION:-gpu}
mkdir -p "$out"
mapfile -t nodes < <(sinfo -h -N -p "$part" -o %N | sort -u)
n=${#nodes[@]}
[ "$n" -ge 4 ] || { echo "need at least 4 nodes in $part" >&2; exit 1; }
parked="${nodes[n-2]},${nodes[n-1]}"
ids=()
sub() { ids+=("$(sbatch --parsable -p "$part" -o /dev/null "$@")"); }
cleanup() { [ ${#ids[@]} -gt 0 ] && scancel "${ids[@]}" 2>/dev/null || true; scontrol update NodeName="$parked" State=RESUME 2>/dev/null || true; }
trap cleanup EXIT
scontrol update NodeName="$parked" State=DRAIN Reason="capture: parked"
sub -J fill -N $((n - 2)) --exclusive --gres=gpu:8 --time=5 --wrap "sleep 600"
sleep 2
sub -J pinned-gres -N2 -w "$parked" --exclusive --gres=gpu:8 --time=2 --wrap "sleep 15"
sub -J pinned-excl -N2 -w "$parked" --exclusive --time=2 --wrap "sleep 15"
sub -J pinned-one -N1 -w "${nodes[n-1]}" --time=2 --wrap "sleep 15"
sub -J excl -N1 --exclusive --time=2 --wrap "sleep 15"
sub -J shared -N1 --time=2 --wrap "sleep 15"
sub -J excluding -N1 -x "${nodes[0]}" --gres=gpu:8 --time=2 --wrap "sleep 15"
for _ in $(seq 1 60); do
  squeue -h -t PD -o %r | grep -q "None" || break
  sleep 1
done
sleep "${SETTLE:-35}"
sep='|~slurmbridge~|'
fmt() { local f=""; for x in "$@"; do f+="$x$sep"; done; printf '%s' "$f"; }
squeue -h -a -o "$(fmt %i %T %P %u %D %N %b %S %e %r %n %h %j)" > "$out/squeue.txt"
squeue -h -a -o "$(fmt %i %T %P %u %D %N %b %S %e %r %j)" > "$out/squeue-old.txt"
scontrol -o show job > "$out/scontrol-jobs.txt"
if [ -n "${LAB_SLURMRESTD_URL:-}" ] && [ -n "${LAB_SLURM_JWT:-}" ]; then
  ver=${REST_VERSION:-v0.0.42}
  curl -sf -H "X-SLURM-USER-NAME: ${LAB_SLURM_JWT_USER:-root}" -H "X-SLURM-USER-TOKEN: $LAB_SLURM_JWT" \
    "$LAB_SLURMRESTD_URL/slurm/$ver/jobs" > "$out/jobs-$ver.json"
fi
{ echo "captured $(date -u +%FT%TZ) with $(scontrol --version)"; echo "nodes: ${nodes[*]}; parked (drained): $parked"; } >> "$out/notes.txt"
