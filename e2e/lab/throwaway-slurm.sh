#!/bin/bash
# e2e/lab/throwaway-slurm.sh up|down - a throwaway Slurm 26.05 for captures that need no Kubernetes
# (e2e/lab/capture-checkpoint.sh): slurmctld, two static slurmd (c1, c2) and slurmrestd (JWT, as
# daemon) on 127.0.0.1 ports 18817, 18851-2, 18830, files under D (default /tmp/ckpt-slurm), each
# daemon in its own mount namespace (auth/slurm's sockets, as e2e/lab/up.sh does), the build from
# the lab's cache (e2e/lab/build-slurm.sh). `down` stops only the daemons it started (their PID files).
set -euo pipefail
P=${P:-$(ls -d "$HOME"/.cache/slurmpool/slurm-26.05.3-* | head -1)}
D=${D:-/tmp/ckpt-slurm}
if [ "${1:-}" = down ]; then
  for f in restd c1 c2 ctld; do [ -s "$D/$f.pid" ] && kill "$(cat "$D/$f.pid")" 2>/dev/null || true; rm -f "$D/$f.pid"; done
  exit 0
fi
mkdir -p $D/etc $D/state/ctld $D/state/c1 $D/state/c2 $D/log $D/sack/ctld $D/sack/c1 $D/sack/c2 $D/restd-prefix
[ -s $D/etc/slurm.key ] || (umask 077; head -c 1024 /dev/urandom > $D/etc/slurm.key)
[ -s $D/etc/jwt.key ] || (umask 077; head -c 32 /dev/urandom > $D/etc/jwt.key)
chmod 755 $D/sack $D/sack/ctld
cat > $D/etc/slurm.conf <<CONF
ClusterName=ckpt
SlurmctldHost=localhost
SlurmctldPort=18817
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/slurm
CredType=cred/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$D/etc/jwt.key
TaskPlugin=task/affinity
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$D/state/ctld
SlurmdSpoolDir=$D/state/%n
SlurmctldPidFile=$D/state/slurmctld.pid
SlurmdPidFile=$D/state/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MpiDefault=none
SchedulerType=sched/backfill
MailProg=/bin/true
NodeName=c1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=18851 CPUs=4 RealMemory=4000 State=UNKNOWN
NodeName=c2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=18852 CPUs=4 RealMemory=4000 State=UNKNOWN
PartitionName=gpu Nodes=c1,c2 Default=YES MaxTime=INFINITE State=UP
CONF
export PATH=$P/sbin:$P/bin:$PATH SLURM_CONF=$D/etc/slurm.conf
setsid unshare -m --propagation private -- sh -c 'mount --bind "$0" /run/slurmctld && exec "$@"' $D/sack/ctld \
  slurmctld -D -i > $D/log/ctld.out 2>&1 < /dev/null & echo $! > $D/ctld.pid
for n in c1 c2; do
  setsid unshare -m --propagation private -- sh -c 'mount --bind "$0" /run/slurm && exec "$@"' $D/sack/$n \
    env SLURM_SACK_KEY=$D/etc/slurm.key slurmd -D -N $n > $D/log/$n.out 2>&1 < /dev/null & echo $! > $D/$n.pid
done
export SLURM_SACK_SOCKET=$D/sack/ctld/sack.socket
for i in $(seq 1 30); do scontrol ping >/dev/null 2>&1 && break; sleep 1; done
scontrol ping
setsid unshare -m --propagation private -- sh -c \
  'mount --bind "$0" "$1" && mount -t tmpfs -o mode=755 ckpt "$2" && mkdir -p "$0" && mount --bind "$1" "$0" && shift 2 && exec "$@"' \
  "$P" "$D/restd-prefix" "$HOME" env -u SLURM_SACK_KEY SLURM_JWT=daemon SLURM_CONF=$D/etc/slurm.conf slurmrestd -u daemon -g daemon -a rest_auth/jwt 127.0.0.1:18830 \
  > $D/log/restd.out 2>&1 < /dev/null & echo $! > $D/restd.pid
