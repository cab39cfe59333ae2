#!/bin/bash
# e2e/lab/capture-checkpoint.sh OUT_DIR - capture how Slurm shows a job's own --signal and --no-requeue,
# and what a signal (scancel, slurmrestd's DELETE with flags) and a refused requeue answer (issue 36),
# for tests/fixtures/checkpoint/. Made for a throwaway Slurm 26.05 of two static nodes c1, c2 in
# partition gpu (slurmctld, slurmd, slurmrestd on 127.0.0.1:18830 with JWT) whose files are under
# D (default /tmp/ckpt-slurm: etc/slurm.conf, sack/ctld/sack.socket) and whose build is P.
# Start it with e2e/lab/throwaway-slurm.sh up (and stop it with down). Submits three jobs, signals them, tries the requeues, then cancels them.
# Another Slurm (the lab's 24.11, whose slurmd run for two nodes): SLURM_BIN (its programs' PATH),
# SLURM_CONF, REST_URL, REST_VERSIONS (the versions it serves, newest last), NODES (sbatch -w, two nodes).
set -uo pipefail
P=${P:-$(ls -d "$HOME"/.cache/slurmpool/slurm-26.05.3-* | head -1)}
D=${D:-/tmp/ckpt-slurm}
OUT=$1
REST_URL=${REST_URL:-http://127.0.0.1:18830}
REST_VERSIONS=${REST_VERSIONS:-v0.0.42 v0.0.43 v0.0.44 v0.0.45}
NEWEST=${REST_VERSIONS##* }
W=${NODES:+-w $NODES}
mkdir -p $OUT $D/out; chmod 1777 $D/out; rm -f $D/out/*
export PATH=${SLURM_BIN:-$P/sbin:$P/bin}:$PATH SLURM_CONF=${SLURM_CONF:-$D/etc/slurm.conf} SLURM_SACK_SOCKET=$D/sack/ctld/sack.socket
cat > $D/train.sh <<S
#!/bin/bash
trap 'echo "USR1 \$(date +%s.%N)" >> $D/out/\$SLURM_JOB_ID.sig' USR1
trap 'echo "USR2 \$(date +%s.%N)" >> $D/out/\$SLURM_JOB_ID.sig' USR2
echo "start \${SLURM_RESTART_COUNT:-0}" >> $D/out/\$SLURM_JOB_ID.start
while true; do sleep 1 & wait \$!; done
S
a=$(sbatch --parsable $W -J warned -N2 -n2 --requeue --signal=B:USR1@300 --time=30 -o /dev/null $D/train.sh)
b=$(sbatch --parsable ${NODES:+-w ${NODES%%,*}} -J norequeue -N1 -n1 --no-requeue --signal=USR2@120 --time=30 -o /dev/null $D/train.sh)
c=$(sbatch --parsable ${NODES:+-w ${NODES##*,}} -J plain -N1 -n1 --time=30 -o /dev/null $D/train.sh)
for i in $(seq 1 30); do [ "$(squeue -h -t R | wc -l)" = 3 ] && break; sleep 1; done
sleep 2
sep='|~slurmbridge~|'
fmt=$(printf '%s' "%i $sep%T$sep%P$sep%u$sep%D$sep%N$sep%b$sep%S$sep%e$sep%r$sep%j$sep" | sed "s/%i /%i/")
squeue -h -a -o "$fmt" > $OUT/squeue.txt
squeue -h -a -O "JobID:|,Requeue:|" > $OUT/squeue-O-requeue.txt 2>&1
scontrol -o show job > $OUT/scontrol-jobs.txt
TOKEN=$(scontrol token username=root lifespan=600 | sed -n 's/^SLURM_JWT=//p')
H=(-H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $TOKEN")
for v in $REST_VERSIONS; do curl -s "${H[@]}" $REST_URL/slurm/$v/jobs/ > $OUT/jobs-$v.json; done
{
echo "jobs: warned=$a (-N2 --requeue --signal=B:USR1@300) norequeue=$b (--no-requeue --signal=USR2@120) plain=$c"
echo "== scancel --signal=USR1 --batch $a"; scancel --signal=USR1 --batch $a; echo "exit $?"
sleep 2; echo "markers of $a: $(cat $D/out/$a.sig 2>/dev/null | awk '{print $1}' | tr '\n' ' ')"
echo "== DELETE /slurm/$NEWEST/job/$b?signal=USR1&flags=BATCH_JOB"
curl -s -w ' HTTP %{http_code}\n' -X DELETE "${H[@]}" "$REST_URL/slurm/$NEWEST/job/$b?signal=USR1&flags=BATCH_JOB" | python3 -c 'import sys,json; t=sys.stdin.read(); j,_,code=t.rpartition(" HTTP "); d=json.loads(j); print("errors", d.get("errors"), "warnings", d.get("warnings"), "status", d.get("status"), "HTTP", code.strip())'
echo "== DELETE /slurm/v0.0.42/job/$c?signal=USR2&flags=FULL_JOB"
curl -s -w ' HTTP %{http_code}\n' -X DELETE "${H[@]}" "$REST_URL/slurm/v0.0.42/job/$c?signal=USR2&flags=FULL_JOB" | python3 -c 'import sys,json; t=sys.stdin.read(); j,_,code=t.rpartition(" HTTP "); d=json.loads(j); print("errors", d.get("errors"), "warnings", d.get("warnings"), "status", d.get("status"), "HTTP", code.strip())'
sleep 2
echo "markers of $b: $(cat $D/out/$b.sig 2>/dev/null | awk '{print $1}' | tr '\n' ' ')"
echo "markers of $c: $(cat $D/out/$c.sig 2>/dev/null | awk '{print $1}' | tr '\n' ' ')"
echo "states: $(squeue -h -o '%i=%T' | tr '\n' ' ')"
echo "== scontrol requeue $b (--no-requeue)"; scontrol requeue $b 2>&1; echo "exit $?"
echo "== GET /slurm/$NEWEST/job/$b/requeue (--no-requeue)"
curl -s -w ' HTTP %{http_code}\n' "${H[@]}" "$REST_URL/slurm/$NEWEST/job/$b/requeue" | python3 -c '
import sys, json
t = sys.stdin.read(); j, _, code = t.rpartition(" HTTP ")
try:
    d = json.loads(j)
except ValueError:  # no such endpoint before v0.0.45 (Slurm 26.05): not JSON
    print("not JSON:", repr(j[:80]), "HTTP", code.strip()); sys.exit()
print("errors", [(e.get("error"), e.get("error_number"), e.get("description")) for e in d.get("errors", [])], "HTTP", code.strip())'
echo "== scancel --signal=USR1 --batch 999999 (gone)"; scancel --signal=USR1 --batch 999999 2>&1; echo "exit $?"
echo "== scontrol requeue $a"; scontrol requeue $a 2>&1; echo "exit $?"
sleep 3; echo "states after: $(squeue -h -o '%i=%T:%r' | tr '\n' ' ')"
echo "captured $(date -u +%FT%TZ) with $(scontrol --version), 2 static nodes ($(scontrol show config | awk '$1 == "AuthType" {print $3}'), slurmrestd JWT)"
} > $OUT/notes.txt 2>&1
scancel $a $b $c
