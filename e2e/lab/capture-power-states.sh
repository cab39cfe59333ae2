#!/usr/bin/env bash
# e2e/lab/capture-power-states.sh OUT_DIR - capture how this lab's Slurm spells power saving's node
# states and what it answers to power requests (issue 39), for tests/fixtures/power_states/.
# Needs a lab up with at least 4 nodes and nothing else on them (. $LAB_DIR/env first): it runs
# slurmd pods itself (as the operator's template makes them) on the last four nodes A B C D and:
#   A B run; C D are drained as slurmpool parks them, their pods deleted, then powered down
#   (POWERING_DOWN, then drain~); D's drain is lifted (idle~); a job pinned to D powers it up
#   (POWERING_UP with a job, CF) and D's pod starts with -b (given back); C is lent, a job pinned to
#   it powers it up and C is drained (declined: the job is requeued); C powered down again; C powered
#   up by hand with no job.
# Each step writes nodes-STEP.txt (`scontrol -o -d show node`, what ScontrolBackend parses) and, with
# slurmrestd (LAB_SLURMRESTD_URL, LAB_SLURM_JWT), nodes-STEP-VERSION.json (GET /nodes/ of every API
# version it serves). answers.txt: every power request repeated where it already holds (scontrol, and
# REST's POST /node/ per version and state name), with exit code and output. config-on.txt and
# config-off.txt: `scontrol show config` with the lab's power-save block and without it (slurmctld
# restarted without it), conf-on/off-VERSION.json (GET /conf/ where served). Leaves the nodes as it
# found them (pods deleted, nodes resumed and powered up) and slurmctld with the block again.
set -uo pipefail
out=$1
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
# the lab's nodes (dynamic ones are not in Slurm before their slurmd registers)
mapfile -t all < <(cut -f1 "$LAB_DIR/etc/nodes.tsv" | grep "^gpu" | sort -u)
n=${#all[@]}
[ "$n" -ge 4 ] || { echo "need at least 4 nodes" >&2; exit 1; }
A=${all[n-4]} B=${all[n-3]} C=${all[n-2]} D=${all[n-1]}
ans=$out/answers.txt
: > "$ans"
versions=()
rest() {  # rest METHOD PATH [BODY]: prints "HTTP <code>" and the body
  local args=(-s -o /tmp/capture-rest.$$ -w '%{http_code}' -X "$1" -H "X-SLURM-USER-NAME: ${LAB_SLURM_JWT_USER:-root}"
              -H "X-SLURM-USER-TOKEN: $LAB_SLURM_JWT")
  [ -z "${3:-}" ] || args+=(-H "Content-Type: application/json" -d "$3")
  local code; code=$(curl "${args[@]}" "$LAB_SLURMRESTD_URL$2"); echo "HTTP $code"; cat /tmp/capture-rest.$$; echo
  rm -f /tmp/capture-rest.$$
}
if [ -n "${LAB_SLURMRESTD_URL:-}" ] && [ -n "${LAB_SLURM_JWT:-}" ]; then
  for v in v0.0.40 v0.0.41 v0.0.42 v0.0.43 v0.0.44 v0.0.45; do
    answer=$(rest GET "/slurm/$v/ping/"); [[ "$answer" == "HTTP 200"* ]] && versions+=("$v")
  done
fi
echo "slurmrestd serves: ${versions[*]:-(no slurmrestd)}" >> "$ans"
snap() {  # snap STEP: every node as each path shows it
  scontrol -o -d show node > "$out/nodes-$1.txt" 2>&1
  local v; for v in "${versions[@]}"; do rest GET "/slurm/$v/nodes/" | tail -n +2 > "$out/nodes-$1-$v.json"; done
  echo "== $1: $(sinfo -h -N -o '%N=%T' | sort -u | tr '\n' ' ')" >> "$ans"
}
try() {  # try CMD...: run a Slurm command, record it with its exit code and output
  local o rc; o=$("$@" 2>&1); rc=$?
  printf '$ %s\nexit %s\n%s\n' "$*" "$rc" "$o" >> "$ans"
}
try_rest() {  # try_rest NODE STATE: POST /node/NODE {"state":[STATE]} on every version
  local v; for v in "${versions[@]}"; do
    # the answer's status and errors (its meta names only the plugin and the version)
    printf '$ POST /slurm/%s/node/%s {"state":["%s"]}\n%s\n' "$v" "$1" "$2" \
      "$(rest POST "/slurm/$v/node/$1" "{\"state\":[\"$2\"]}" | sed '/"meta"/,$d')" >> "$ans"
  done
}
state() { scontrol -o show node "$1" | sed -n 's/.* State=\([^ ]*\).*/\1/p'; }
# settled: powered down with no power request pending (POWER_DOWN, POWERING_*)
settled_down() { local s; s=+$(state "$1")+; [[ $s == *+POWERED_DOWN+* && $s != *+POWER_DOWN+* && $s != *+POWERING_* ]]; }
wait_down() {  # wait_down NODE SECONDS
  local i; for i in $(seq 1 $((${2:-60} * 2))); do settled_down "$1" && return 0; sleep 0.5; done
  echo "timed out waiting for $1 to be powered down (is $(state "$1"))" | tee -a "$ans" >&2; return 1
}
wait_state() {  # wait_state NODE REGEX SECONDS
  local i; for i in $(seq 1 $((${3:-60} * 2))); do [[ "$(state "$1")" =~ $2 ]] && return 0; sleep 0.5; done
  echo "timed out waiting for $1 to match $2 (is $(state "$1"))" | tee -a "$ans" >&2; return 1
}
pod() {  # pod NODE [SLURMD ARGS...]: a slurmd pod as the operator's template makes it
  local node=$1; shift
  local extra=""; for a in "$@"; do extra="$extra, \"$a\""; done
  kubectl apply -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "capture-$node", "namespace": "default", "labels": {"slurmpool.io/component": "slurmd"}},
 "spec": {"nodeName": "$node", "terminationGracePeriodSeconds": 5,
  "containers": [{"name": "slurmd", "image": "slurmd:lab", "command": ["slurmd", "-D", "-N", "$node"$extra]}]}}
EOF
}
unpod() { kubectl delete pod -n default "capture-$1" --wait=true --timeout=60s >/dev/null 2>&1; }
jobs=()
cleanup() {
  [ ${#jobs[@]} -eq 0 ] || scancel "${jobs[@]}" 2>/dev/null
  for x in "$A" "$B" "$C" "$D"; do unpod "$x"; done
  scontrol update NodeName="$A,$B,$C,$D" State=RESUME 2>/dev/null
  scontrol update NodeName="$A,$B,$C,$D" State=POWER_UP 2>/dev/null
}
trap cleanup EXIT

for x in "$A" "$B" "$C" "$D"; do pod "$x"; done
for x in "$A" "$B" "$C" "$D"; do wait_state "$x" '^IDLE(\+DYNAMIC_NORM)?$' 90 || exit 1; done
snap up
try scontrol update NodeName="$A" State=POWER_UP  # already up
try_rest "$A" POWER_UP

# Park C and D held: drain, stop slurmd, power down.
scontrol update NodeName="$C,$D" State=DRAIN Reason="slurmpool: parked for inference"
unpod "$C"; unpod "$D"
try scontrol update NodeName="$C,$D" State=POWER_DOWN
snap powering-down
try scontrol update NodeName="$C" State=POWER_DOWN  # while powering down
wait_down "$C" 60 && wait_down "$D" 60
snap powered-down
# Held: drained again after the power-down (26.05 clears a DRAIN as the power-down starts).
try scontrol update NodeName="$C,$D" State=DRAIN Reason="slurmpool: parked for inference"
snap drain-powered-down
try scontrol update NodeName="$C" State=POWER_DOWN  # already powered down
sleep 1; snap repeated-power-down
wait_down "$C" 60
try scontrol update NodeName="$C" State=DRAIN Reason="slurmpool: parked for inference"
# Lend D: lift the drain.
try scontrol update NodeName="$D" State=RESUME
snap idle-powered-down

# Slurm asks for D back: a job pinned to it.
jobs+=("$(sbatch --parsable -o /dev/null -J pinned -N1 -w "$D" --gres=gpu:8 --time=5 --wrap "sleep 300")")
wait_state "$D" 'POWERING_UP' 30
sleep 1
snap powering-up-job
squeue -h -o '%i %T %r %N' > "$out/squeue-powering-up-job.txt"
T0=$(date +%s%N)
pod "$D" -b
wait_state "$D" '^(MIXED|ALLOCATED)(\+DYNAMIC_NORM)?$' 120
echo "POWERING_UP -> registered with -b: $(( ($(date +%s%N) - T0) / 1000000 )) ms" >> "$ans"
snap given-back
squeue -h -o '%i %T %r %N' > "$out/squeue-given-back.txt"

# Lend C and decline Slurm's request for it: drain it while it powers up (the job is requeued).
try scontrol update NodeName="$C" State=RESUME
jobs+=("$(sbatch --parsable --requeue -o /dev/null -J declined -N1 -w "$C" --gres=gpu:8 --time=5 --wrap "sleep 300")")
wait_state "$C" 'POWERING_UP' 30
try scontrol update NodeName="$C" State=DRAIN Reason="slurmpool: give-back declined"
sleep 2
snap declined
squeue -h -t all -o '%i %T %r %N' > "$out/squeue-declined.txt"
try scontrol update NodeName="$C" State=POWER_DOWN  # powering up, drained: back down?
sleep 15
snap declined-power-down
try scontrol update NodeName="$C" State=POWER_DOWN_FORCE
wait_down "$C" 60
snap declined-powered-down
# A manual power-up with no job (the operator's PoweringUp): first the requeued job goes.
scancel "${jobs[-1]}"; unset 'jobs[-1]'
try scontrol update NodeName="$C" State=RESUME
try scontrol update NodeName="$C" State=POWER_UP
sleep 1
snap powering-up-idle
try scontrol update NodeName="$C" State=POWER_UP  # while powering up
sleep 1
snap repeated-power-up
try scontrol update NodeName="$C" State=POWER_DOWN_FORCE
wait_down "$C" 60
try_rest "$C" POWER_UP
sleep 1
snap rest-power-up
try_rest "$C" POWER_DOWN_FORCE
try_rest "$C" 'POWER_DOWN","POWERED_DOWN'  # the two flags POWER_DOWN_FORCE is made of (v0.0.45)
wait_down "$C" 60
snap rest-power-down-force
try_rest "$C" POWER_DOWN  # already powered down
try_rest "$C" POWER_DOWN_ASAP
try_rest "$C" POWER_DRAIN
sleep 1
snap rest-power-down
try scontrol update NodeName="$C" State=POWER_DOWN_FORCE
wait_down "$C" 60
snap end

scontrol show config > "$out/config-on.txt"
for v in "${versions[@]}"; do rest GET "/slurm/$v/conf" | tail -n +2 > "$out/conf-on-$v.json"; done
# Without the block: slurmctld restarted on a slurm.conf without it, then with it again.
cp "$SLURM_CONF" "$out/.slurm.conf.on"
grep -v '^\(SuspendProgram\|ResumeProgram\|SuspendTime\|SuspendExcParts\|SuspendTimeout\|ResumeTimeout\|SuspendRate\|ResumeRate\|ReconfigFlags\)=' \
  "$out/.slurm.conf.on" > "$SLURM_CONF"
"$here/daemon.sh" restart slurmctld >/dev/null
for _ in $(seq 1 60); do scontrol ping >/dev/null 2>&1 && break; sleep 0.5; done
scontrol show config > "$out/config-off.txt"
for v in "${versions[@]}"; do rest GET "/slurm/$v/conf" | tail -n +2 > "$out/conf-off-$v.json"; done
echo "== without the power-save block" >> "$ans"
try scontrol update NodeName="$B" State=DRAIN Reason="slurmpool: parked"
try scontrol update NodeName="$B" State=POWER_DOWN
try_rest "$B" POWER_DOWN
sleep 1; snap off-power-down
try scontrol update NodeName="$B" State=POWER_UP
try scontrol update NodeName="$B" State=RESUME
cp "$out/.slurm.conf.on" "$SLURM_CONF"; rm -f "$out/.slurm.conf.on"
"$here/daemon.sh" restart slurmctld >/dev/null
for _ in $(seq 1 60); do scontrol ping >/dev/null 2>&1 && break; sleep 0.5; done
{ echo "captured $(date -u +%FT%TZ) with $(scontrol --version); nodes A=$A B=$B C=$C D=$D"; } >> "$out/notes.txt"
