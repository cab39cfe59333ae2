#!/usr/bin/env bash
# e2e/lab/capture-pending-reasons.sh OUT_DIR - capture how this Slurm spells pending jobs' reasons
# (issue 24), for tests/fixtures/pending_reasons/. Needs a lab's Slurm client env (. $LAB_DIR/env):
# SLURM_CONF and sbatch/squeue/scontrol in PATH; with LAB_SLURMRESTD_URL and LAB_SLURM_JWT also
# the REST job list. Nodes: the partition's last two are drained as slurmpool parks them, the
# others filled, then jobs that wait for different reasons are submitted. Cancels its jobs and
# resumes the nodes at the end. RUN="$LAB_SSH" runs every Slurm command over SSH (the SSH path). Writes squeue.txt (the bridge's squeue format, DEFAULT_SEP),
# scontrol-jobs.txt (`scontrol -o show job`), jobs.json (REST, when configured), and notes.txt.
set -euo pipefail
out=$1
part=${PARTITION:-gpu}
mkdir -p "$out"
# Run a Slurm command here, or over $RUN (ssh ... host) with its arguments quoted for the remote shell.
q() { if [ -n "${RUN:-}" ]; then $RUN "$(printf '%q ' "$@")"; else "$@"; fi; }
mapfile -t nodes < <(q sinfo -h -N -p "$part" -o %N | sort -u)
n=${#nodes[@]}
[ "$n" -ge 4 ] || { echo "need at least 4 nodes in $part" >&2; exit 1; }
parked="${nodes[n-2]},${nodes[n-1]}"
free=$((n - 2))
ids=()
sub() { ids+=("$(q sbatch --parsable -p "$part" -o /dev/null "$@")"); }
cleanup() { [ ${#ids[@]} -gt 0 ] && q scancel "${ids[@]}" 2>/dev/null || true; q scontrol update NodeName="$parked" State=RESUME 2>/dev/null || true; }
trap cleanup EXIT
q scontrol update NodeName="$parked" State=DRAIN Reason="capture: parked"
sub -J fill -N "$free" --exclusive --gres=gpu:8 --time=5 --wrap "sleep 600"
sleep 2
sub -J gang -N "$n" --exclusive --gres=gpu:8 --time=2 --wrap "sleep 20"
sub -J pinned -N1 -w "${nodes[n-1]}" --gres=gpu:8 --time=2 --wrap "sleep 20"
sub -J one -N1 --gres=gpu:8 --time=2 --wrap "sleep 20"
sub -J two -N1 --gres=gpu:8 --time=2 --wrap "sleep 20"
sub -J held -H -N1 --gres=gpu:8 --time=2 --wrap "sleep 20"
sub -J later --begin=now+3600 -N1 --gres=gpu:8 --time=2 --wrap "sleep 20"
sub -J after --dependency=afterok:"${ids[0]}" -N1 --gres=gpu:8 --time=2 --wrap "sleep 20"
# Jobs Slurm accepts but that no split of the pool could start, where Slurm accepts them at all.
q sbatch --parsable -p "$part" -o /dev/null -J toomany -N $((n + 4)) --gres=gpu:8 --wrap "sleep 1" >> "$out/notes.txt" 2>&1 && ids+=("$(tail -1 "$out/notes.txt")") || true
q sbatch --parsable -p "$part" -o /dev/null -J feature -C nosuchfeature -N1 --wrap "sleep 1" >> "$out/notes.txt" 2>&1 && ids+=("$(tail -1 "$out/notes.txt")") || true
# Let the main and the backfill scheduler see every job (bf_interval defaults to 30 s).
for _ in $(seq 1 60); do
  q squeue -h -t PD -o %r | grep -q "None" || break
  sleep 1
done
sleep "${SETTLE:-35}"
sep='|~slurmbridge~|'
fmt=$(printf '%s' "%i $sep%T$sep%P$sep%u$sep%D$sep%N$sep%b$sep%S$sep%e$sep%r$sep%j$sep" | sed "s/%i /%i/")
q squeue -h -a -o "$fmt" > "$out/squeue.txt"
q scontrol -o show job > "$out/scontrol-jobs.txt"
if [ -n "${LAB_SLURMRESTD_URL:-}" ] && [ -n "${LAB_SLURM_JWT:-}" ]; then
  ver=${REST_VERSION:-v0.0.42}  # served by 24.11 and 26.05
  curl -sf -H "X-SLURM-USER-NAME: ${LAB_SLURM_JWT_USER:-root}" -H "X-SLURM-USER-TOKEN: $LAB_SLURM_JWT" \
    "$LAB_SLURMRESTD_URL/slurm/$ver/jobs" > "$out/jobs.json"
fi
{ echo "captured $(date -u +%FT%TZ) with $(q scontrol --version)"; echo "nodes: ${nodes[*]}; parked (drained): $parked"; } >> "$out/notes.txt"
