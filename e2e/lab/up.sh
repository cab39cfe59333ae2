#!/usr/bin/env bash
# up.sh - bring up the slurmpool lab on this machine (`make lab-up`). See e2e/lab/README.md.
#
#   etcd + kube-apiserver + kube-scheduler + kube-controller-manager (built by build.sh),
#   Slurm (LAB_SLURM=22.05: Debian's packages with munged; 26.05: built by build-slurm.sh, configless,
#   auth/slurm, slurmrestd with JWT), nodes gpu01..gpuNN (LAB_SLURM_NODES=static: listed in slurm.conf;
#   dynamic: registered by their slurmd, 24.11 (one network namespace per node: netns.sh) and 26.05),
#   no slurmd yet,
#   sshd on 127.0.0.1:2222, and the node agent (agent.py) that stands in for the kubelet.
#
# Everything lives under $LAB_DIR (default <repo>/.lab). Each daemon runs in the foreground
# under setsid with its PID in $LAB_DIR/run/<name>.pid; down.sh stops exactly those.
# Idempotent: if the lab is already up and healthy this prints so and exits 0.
# Knobs: LAB_DIR, LAB_NODES (default 8, max 99), LAB_SLURMD_TIMEOUT (default 10 s),
# LAB_SIM_NODES (default 0, max 999: extra nodes sim001.. for load tests; see README),
# LAB_PROMETHEUS=1 (also start Prometheus on 127.0.0.1:19090+LAB_PORT_OFFSET: prometheus.sh),
# LAB_SLURM (22.05 default, 24.11, 26.05), LAB_SLURM_NODES (static default, dynamic: 24.11 and 26.05),
# LAB_PYXIS=1 (pyxis and enroot: srun --container-image, PlugStackConfig=; 22.05 and 26.05; README),
# LAB_SLURM_NAME_PREFIX (e.g. s: Slurm's names of the nodes are sgpu01.., the Nodes stay gpu01..),
# LAB_CGROUPS=1 (Slurm isolates GPUs by cgroups: proctrack/cgroup, task/cgroup, ConstrainDevices;
# static nodes on a cgroup v1 host; README).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export LAB_DIR=${LAB_DIR:-$repo/.lab}
LAB_NODES=${LAB_NODES:-8}
LAB_SIM_NODES=${LAB_SIM_NODES:-0}
LAB_SIM_GROUP=${LAB_SIM_GROUP:-25}
SLURMD_TIMEOUT=${LAB_SLURMD_TIMEOUT:-10}
PY=${LAB_PYTHON:-$repo/.venv/bin/python}
LAB_SLURM=${LAB_SLURM:-22.05}
LAB_SLURM_NODES=${LAB_SLURM_NODES:-static}
LAB_SLURMDBD=${LAB_SLURMDBD:-0}
# LAB_GRES_CORES=1: two sockets of 8 cores and a gres.conf with Cores=, so that Slurm reports GPUs
# with socket affinity as on real hardware (Gres=gpu:h100:8(S:0-1)).
LAB_GRES_CORES=${LAB_GRES_CORES:-0}
LAB_PYXIS=${LAB_PYXIS:-0}
LAB_CGROUPS=${LAB_CGROUPS:-0}
# LAB_SLURM_NAME_PREFIX=s: Slurm names the lab's nodes s+gpuXX (sgpu01..) while the Kubernetes Nodes
# stay gpu01..: a site whose NodeNames differ from its Node names (spec.slurm.nodeName; e2e/test_node_names.py).
LAB_SLURM_NAME_PREFIX=${LAB_SLURM_NAME_PREFIX:-}

# Ports (all on 127.0.0.1). slurmd of node gpuXX listens on SLURMD_BASE_PORT+XX.
# LAB_PORT_OFFSET (e.g. 100) shifts them all, so two labs (two LAB_DIRs) can run side by side.
OFF=${LAB_PORT_OFFSET:-0}
ETCD_PORT=$((12379 + OFF)) ETCD_PEER_PORT=$((12380 + OFF)) API_PORT=$((16443 + OFF)) CTLD_PORT=$((16817 + OFF))
SLURMD_BASE_PORT=$((17000 + OFF)) SSH_PORT=$((2222 + OFF)) RESTD_PORT=$((16830 + OFF))
DBD_PORT=$((16819 + OFF)) MARIADB_PORT=$((13306 + OFF))
# slurmd of simulated node simNNN: SIM_BASE_PORT+NNN (offsets 0..900 in steps of 100 stay apart).
SIM_BASE_PORT=$((20000 + 10 * OFF))

T0=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - ${1:-$T0}) / 1000000 )); }
log() { echo "[lab-up +$(ms)ms] $*"; }
die() { echo "[lab-up] ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (slurmd, munged and sshd need it)"
[[ "$LAB_NODES" =~ ^[0-9]+$ ]] && [ "$LAB_NODES" -ge 1 ] && [ "$LAB_NODES" -le 99 ] || die "LAB_NODES must be 1..99"
[[ "$LAB_SIM_NODES" =~ ^[0-9]+$ ]] && [ "$LAB_SIM_NODES" -le 999 ] || die "LAB_SIM_NODES must be 0..999"
[[ "$LAB_SIM_GROUP" =~ ^[0-9]+$ ]] && [ "$LAB_SIM_GROUP" -ge 1 ] || die "LAB_SIM_GROUP must be at least 1"
case $LAB_SLURM in
  22.05|24.11|26.05) ;;
  *) die "LAB_SLURM must be 22.05, 24.11 or 26.05 (got '$LAB_SLURM')" ;;
esac
case $LAB_SLURM_NODES in
  static) ;;
  dynamic) [ "$LAB_SLURM" != 22.05 ] || die "LAB_SLURM_NODES=dynamic needs LAB_SLURM=24.11 or 26.05" ;;
  *) die "LAB_SLURM_NODES must be static or dynamic (got '$LAB_SLURM_NODES')" ;;
esac
case $LAB_SLURMDBD in
  0) ;;
  1) [ "$LAB_SLURM" = 22.05 ] || die "LAB_SLURMDBD=1 is only built for LAB_SLURM=22.05 so far" ;;
  *) die "LAB_SLURMDBD must be 0 or 1" ;;
esac
case $LAB_PYXIS in
  0) ;;
  1) [ "$LAB_SLURM" != 24.11 ] || die "LAB_PYXIS=1 is built for LAB_SLURM=22.05 and 26.05 (24.11: the slurmd image)" ;;
  *) die "LAB_PYXIS must be 0 or 1" ;;
esac
[[ "$LAB_SLURM_NAME_PREFIX" =~ ^[a-z]{0,8}$ ]] || die "LAB_SLURM_NAME_PREFIX must be 0-8 lowercase letters"
case $LAB_CGROUPS in
  0) ;;
  1) [ "$LAB_SLURM_NODES" = static ] || die "LAB_CGROUPS=1 is built for static nodes so far"
     [ -e /sys/fs/cgroup/devices/cgroup.procs ] && [ -e /sys/fs/cgroup/freezer/cgroup.procs ] ||
       die "LAB_CGROUPS=1 needs cgroup v1's devices and freezer hierarchies at /sys/fs/cgroup (this host: $(stat -fc %T /sys/fs/cgroup)); cgroup v2 is not built yet" ;;
  *) die "LAB_CGROUPS must be 0 or 1" ;;
esac
# 24.11's dynamic slurmd each run in a network namespace of their own (netns.sh): the 8 lab nodes only.
NETNS=0
if [ "$LAB_SLURM" = 24.11 ] && [ "$LAB_SLURM_NODES" = dynamic ]; then
  NETNS=1
  [ "$LAB_SIM_NODES" -eq 0 ] || die "LAB_SIM_NODES needs static nodes with LAB_SLURM=24.11 (dynamic ones need a network namespace each)"
  [ $(( OFF % 100 )) -eq 0 ] || die "LAB_SLURM=24.11 LAB_SLURM_NODES=dynamic needs a LAB_PORT_OFFSET that is a multiple of 100"
fi
[ -x "$PY" ] || die "$PY not found: run 'make venv' first (the node agent needs the repo's virtualenv)"
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

# ---------------------------------------------------------------- one lab-up/lab-down at a time
# Several people (and pytest sessions) may share one LAB_DIR: serialize up and down, so a second
# up waits for the first and then finds the lab healthy. LAB_LOCKED=1: the caller holds the lock.
mkdir -p "$LAB_DIR"
if [ -z "${LAB_LOCKED:-}" ]; then
  exec 9>>"$LAB_DIR/lock"
  flock -w 600 9 || die "timed out waiting for $LAB_DIR/lock (another lab-up or lab-down is running)"
  export LAB_LOCKED=1
fi

# ---------------------------------------------------------------- already up?
# healthy: like health.sh, but a lab whose daemons all run gets a few tries, so a slow answer
# under load does not make us restart a lab someone is using.
healthy() {
  local i
  [ -s "$LAB_DIR/env" ] || return 1
  for i in 1 2 3; do
    "$here/health.sh" >/dev/null 2>&1 && return 0
    "$here/health.sh" 2>&1 | grep -q "is not running\|PID file" && return 1
    sleep 2
  done
  return 1
}
if healthy; then
  running=$(. "$LAB_DIR/env" && echo "$LAB_NODES ${LAB_SIM_NODES:-0} ${LAB_SIM_GROUP:-25} ${LAB_SLURM:-22.05} ${LAB_SLURM_NODES:-static} ${LAB_SLURMDBD:-0} ${LAB_REAL_NODES:-0} ${LAB_PYXIS:-0} ${LAB_SLURM_NAME_PREFIX:--}")
  if [ "$running" = "$LAB_NODES $LAB_SIM_NODES $LAB_SIM_GROUP $LAB_SLURM $LAB_SLURM_NODES $LAB_SLURMDBD ${LAB_REAL_NODES:-0} $LAB_PYXIS ${LAB_SLURM_NAME_PREFIX:--}" ]; then
    log "lab already up and healthy ($LAB_NODES nodes, $LAB_SIM_NODES simulated, ${LAB_REAL_NODES:-0} real, Slurm $LAB_SLURM $LAB_SLURM_NODES); use: . $LAB_DIR/env"
    [ "${LAB_PROMETHEUS:-0}" != 1 ] || "$here/prometheus.sh" start
    exit 0
  fi
  log "lab is up with nodes/simulated/group/slurm/node model/slurmdbd/real/pyxis/name prefix $running but wanted $LAB_NODES $LAB_SIM_NODES $LAB_SIM_GROUP $LAB_SLURM $LAB_SLURM_NODES $LAB_SLURMDBD ${LAB_REAL_NODES:-0} $LAB_PYXIS ${LAB_SLURM_NAME_PREFIX:--}: restarting it"
fi
# Anything left from a previous (partial) run is stopped first, by its PID files.
if compgen -G "$LAB_DIR/run/*.pid" >/dev/null || [ -d "$LAB_DIR/run/pods" ]; then
  log "stopping leftovers of a previous lab"
  "$here/down.sh" | sed 's/^/  /'
fi

# The lab's Slurm binaries come first in PATH (SLURM_PATH; empty for 22.05, whose are in /usr):
# 26.05 is built once from the vendored tarball (cached outside the checkout); 24.11 is Debian 13's,
# in a cached root filesystem, run through wrappers in $LAB_DIR/slurm-bin (chroot, below).
SLURM_PREFIX="" SLURM_PATH="" ROOTFS=""
case $LAB_SLURM in
  26.05)
    SLURM_PREFIX=$("$here/build-slurm.sh") || die "e2e/lab/build-slurm.sh failed"
    SLURM_PATH=$SLURM_PREFIX/sbin:$SLURM_PREFIX/bin
    log "Slurm 26.05: $SLURM_PREFIX"
    needed=(slurmctld slurmd scontrol sinfo slurmrestd unshare mount sshd ssh ssh-keygen openssl setpriv ss) ;;
  24.11)
    ROOTFS=$("$here/build-rootfs-2411.sh") || die "e2e/lab/build-rootfs-2411.sh failed"
    SLURM_PATH=$LAB_DIR/slurm-bin
    # Every program runs by chroot in its own mount namespace, where /proc, /dev, /sys, /tmp, the
    # checkout, LAB_DIR and /etc/hosts are bound at their own paths (so configs, sockets, logs and job output
    # paths are the same inside and out); nothing is mounted on the host. The mount points are
    # made once in the cached root filesystem.
    mkdir -p "$ROOTFS$repo" "$ROOTFS$LAB_DIR" "$SLURM_PATH"
    [ -e "$ROOTFS/etc/hosts" ] || touch "$ROOTFS/etc/hosts"   # this machine's is bound on it (localhost)
    rm -f "$SLURM_PATH"/*
    {
      echo '#!/bin/bash'
      echo "# Generated by e2e/lab/up.sh (LAB_SLURM=24.11): run a program of $ROOTFS"
      echo '# by chroot, in its own mount namespace. Every step execs: the PID stays the program'"'"'s.'
      echo '# Inside, PATH is the root filesystem'"'"'s own (not these wrappers, which cannot nest).'
      printf 'exec unshare -m --propagation private -- /bin/sh -c %q sh %q %q %q %q "$PWD" "$@"\n' \
        'R=$1 repo=$2 lab=$3 tmp=$4 cwd=$5; shift 5
for d in /proc /dev /sys "$tmp" "$repo" "$lab"; do mount --rbind "$d" "$R$d" || exit 1; done
mount --bind /etc/hosts "$R/etc/hosts" || exit 1
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin exec chroot "$R" /bin/sh -c '"'"'cd "$0" 2>/dev/null || cd /; exec "$@"'"'"' "$cwd" "$@"' \
        "$ROOTFS" "$repo" "$LAB_DIR" /tmp
    } > "$SLURM_PATH/.inroot"
    chmod 755 "$SLURM_PATH/.inroot"
    for b in slurmctld slurmd slurmrestd scontrol sinfo squeue sbatch srun salloc scancel sacct sdiag sprio \
             sshare strigger sattach sbcast munged munge unmunge mungekey; do
      printf '#!/bin/bash\nexec %q %q "$@"\n' "$SLURM_PATH/.inroot" "$b" > "$SLURM_PATH/$b"; chmod 755 "$SLURM_PATH/$b"
    done
    log "Slurm $(cat "$ROOTFS/.slurm-version"): $ROOTFS (by chroot)"
    needed=(slurmctld slurmd scontrol sinfo slurmrestd munged unshare mount chroot sshd ssh ssh-keygen openssl setpriv ss) ;;
  *)
    needed=(slurmctld slurmd scontrol sinfo munged mungekey sshd ssh ssh-keygen openssl setpriv ss) ;;
esac
[ -z "$SLURM_PATH" ] || PATH=$SLURM_PATH:$PATH
[ "$LAB_SLURMDBD" = 0 ] || needed+=(slurmdbd sacctmgr mariadbd mariadb-install-db mariadb)
for b in "${needed[@]}"; do
  command -v "$b" >/dev/null || die "'$b' not found: run 'make deps' (e2e/lab/install-deps.sh)"
done
BIN=$("$here/build.sh") || die "e2e/lab/build.sh failed"
for b in etcd kube-apiserver kube-scheduler kube-controller-manager kubectl; do
  [ -x "$BIN/$b" ] || die "$BIN/$b missing: build.sh did not produce it"
done
log "binaries: $BIN"

NN=$(printf %02d "$LAB_NODES")
ports=($ETCD_PORT $ETCD_PEER_PORT $API_PORT $CTLD_PORT $SSH_PORT)
[ "$LAB_SLURM" = 22.05 ] || ports+=($RESTD_PORT)
[ "$LAB_SLURMDBD" = 0 ] || ports+=($DBD_PORT $MARIADB_PORT)
for i in $(seq 1 "$LAB_NODES"); do ports+=($((SLURMD_BASE_PORT + i))); done
for i in $(seq 1 "$LAB_SIM_NODES"); do ports+=($((SIM_BASE_PORT + i))); done
listening=" $(ss -Htln | awk '{n = split($4, a, ":"); printf "%s ", a[n]}') "
busy=()
for p in "${ports[@]}"; do
  [[ "$listening" == *" $p "* ]] && busy+=("$p")
done
[ ${#busy[@]} -eq 0 ] || die "TCP port(s) ${busy[*]} already in use (another lab? run 'make lab-down' or stop it)"

# If anything below fails, stop what was started so a retry starts clean.
started=0
on_exit() {
  local rc=$?
  if [ $rc -ne 0 ] && [ $started = 1 ] && [ "${LAB_KEEP_ON_FAILURE:-0}" != 1 ]; then
    echo "[lab-up] failed (rc=$rc); logs are in $LAB_DIR/log; stopping what was started" >&2
    "$here/down.sh" >&2 || true
  fi
}
trap on_exit EXIT

# ---------------------------------------------------------------- directories
# State is wiped at each up (etcd data, Slurm state, logs); keys and certificates are kept.
rm -rf "$LAB_DIR"/{etcd,state,log,run,env}
# A lab brought up here belongs to whoever ran up.sh; the pytest fixture marks its own afterwards.
rm -f "$LAB_DIR/users/started-by-pytest"
mkdir -p "$LAB_DIR"/{etc,pki,ssh,munge,fakedev,etcd,state/ctld,log/pods,run/pods}
chmod 700 "$LAB_DIR/etcd"
for i in $(seq 1 "$LAB_NODES"); do mkdir -p "$LAB_DIR/state/${LAB_SLURM_NAME_PREFIX}gpu$(printf %02d "$i")"; done
for i in $(seq 1 "$LAB_SIM_NODES"); do mkdir -p "$LAB_DIR/state/sim$(printf %03d "$i")"; done

# ---------------------------------------------------------------- certificates (envtest style)
# EC P-256 keys: generating them takes milliseconds (RSA would dominate a warm start).
P=$LAB_DIR/pki
if [ ! -e "$P/.complete" ]; then
  t=$(date +%s%N)
  rm -f "$P"/*
  cat > "$P/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
EOF
  newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$P/$1.key" 2>/dev/null; }
  newkey ca
  openssl req -x509 -new -config "$P/openssl.cnf" -extensions ca -key "$P/ca.key" \
    -subj "/CN=slurmpool-lab-ca" -days 3650 -out "$P/ca.crt"
  # sign NAME SUBJECT EXTENSIONS
  sign() {
    newkey "$1"
    openssl req -new -config "$P/openssl.cnf" -key "$P/$1.key" -subj "$2" -out "$P/$1.csr"
    openssl x509 -req -in "$P/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
      -days 3650 -extfile "$P/openssl.cnf" -extensions "$3" -out "$P/$1.crt" 2>/dev/null
    rm -f "$P/$1.csr"
  }
  sign apiserver "/CN=kube-apiserver" server
  sign admin "/O=system:masters/CN=lab-admin" client
  sign scheduler "/CN=system:kube-scheduler" client
  sign controller-manager "/CN=system:kube-controller-manager" client
  newkey sa && openssl pkey -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
  chmod 600 "$P"/*.key
  touch "$P/.complete"
  log "certificates generated in $(ms "$t")ms"
fi

# kubeconfig FILE CERT_NAME (credentials embedded, so the file is self-contained)
kubeconfig() {
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$P/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$P/$2.crt")
    client-key-data: $(base64 -w0 "$P/$2.key")
contexts:
- name: lab
  context:
    cluster: lab
    user: $2
current-context: lab
EOF
  chmod 600 "$1"
}
kubeconfig "$LAB_DIR/kubeconfig" admin
kubeconfig "$LAB_DIR/etc/scheduler.kubeconfig" scheduler
kubeconfig "$LAB_DIR/etc/controller-manager.kubeconfig" controller-manager

# ---------------------------------------------------------------- munge (lab-private key; 22.05, 24.11)
if [ "$LAB_SLURM" != 26.05 ]; then
if [ ! -s "$LAB_DIR/munge/munge.key" ]; then
  mungekey --create --keyfile="$LAB_DIR/munge/munge.key"
fi
# munged runs as user munge, whose ids differ between this machine and 24.11's root filesystem.
if [ "$LAB_SLURM" = 24.11 ]; then
  munge_ids=$(awk -F: '$1 == "munge" {print $3 ":" $4}' "$ROOTFS/etc/passwd")
else
  munge_ids=$(id -u munge):$(id -g munge)
fi
chown -R "$munge_ids" "$LAB_DIR/munge"
chmod 755 "$LAB_DIR/munge"             # munged wants o+x on its socket directory
chmod 400 "$LAB_DIR/munge/munge.key"
setpriv --reuid="${munge_ids%:*}" --regid="${munge_ids#*:}" --clear-groups test -r "$LAB_DIR/munge/munge.key" ||
  die "user munge cannot read $LAB_DIR/munge/munge.key: every directory above LAB_DIR=$LAB_DIR must be world-searchable (o+x)"
fi

# ---------------------------------------------------------------- Slurm config
# Fake GPUs: gres/gpu in 22.05 drops file-less GPUs and warns on regular files, so each GPU is
# a character device with /dev/null's numbers. LAB_CGROUPS=1: NVIDIA's major (195) and minor i, as
# /dev/nvidiaI: the device cgroup lets a job open only its GPUs ("No such device or address": no
# driver here) and refuses the others ("Operation not permitted"), which /dev/null's numbers could not show.
for i in 0 1 2 3 4 5 6 7; do
  f=$LAB_DIR/fakedev/nvidia$i
  if [ "$LAB_CGROUPS" = 1 ]; then want="c3 $(printf %x "$i")" numbers="195 $i"; else want="1 3" numbers="1 3"; fi
  [ -c "$f" ] && [ "$(stat -c '%t %T' "$f")" = "$want" ] || { rm -f "$f"; mknod -m 666 "$f" c $numbers; }
done
# LAB_CGROUPS=1: NVIDIA's control device too (195:255), which every CUDA process opens and no job's
# GPUs name (gres.conf's nvidia[0-7] leave it out): Slurm's device cgroup leaves it open to every step.
f=$LAB_DIR/fakedev/nvidiactl
if [ "$LAB_CGROUPS" = 1 ]; then
  [ -c "$f" ] && [ "$(stat -c '%t %T' "$f")" = "c3 ff" ] || { rm -f "$f"; mknod -m 666 "$f" c 195 255; }
else rm -f "$f"
fi
export SLURM_CONF=$LAB_DIR/etc/slurm.conf
# What differs between the versions: authentication, the plugins 26.05 dropped (task/none,
# switch/none, jobacct_gather/none: no line is "none" there; an empty AccountingStorageType= is a
# parse error), configless.
SACK_DIR=$LAB_DIR/state/sack
if [ "$LAB_SLURM" = 22.05 ]; then
  version_conf="AuthType=auth/munge
AuthInfo=socket=$LAB_DIR/munge/munge.socket
CredType=cred/munge
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none"
  if [ "$LAB_SLURMDBD" = 1 ]; then
    # Accounting on, as most production sites run it: slurmdbd on MariaDB (both lab daemons).
    version_conf="$version_conf
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# the munge socket for slurmdbd connections (22.05 reads it from here, not AuthInfo)
AccountingStoragePass=$LAB_DIR/munge/munge.socket"
    cat > "$LAB_DIR/etc/slurmdbd.conf" <<EOF
# Generated by e2e/lab/up.sh (LAB_SLURMDBD=1).
AuthType=auth/munge
AuthInfo=socket=$LAB_DIR/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$LAB_DIR/log/slurmdbd-daemon.log
PidFile=$LAB_DIR/state/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MARIADB_PORT
StorageUser=slurm
StoragePass=lab
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$LAB_DIR/etc/slurmdbd.conf"
  else
    version_conf="$version_conf
AccountingStorageType=accounting_storage/none"
  fi
  unset SLURM_SACK_SOCKET SLURM_SACK_KEY
  rm -f "$LAB_DIR/etc/cgroup.conf"  # 26.05's (CgroupPlugin=disabled) is a fatal error for 22.05's slurmd
else
  # 24.11 and 26.05: slurmrestd's JWTs (scontrol token makes them; the key stays with slurmctld);
  # no cgroup setup here (proctrack/linuxproc, task/affinity): 24.11's slurmd needs it said.
  [ -s "$LAB_DIR/etc/jwt.key" ] || { (umask 077 && head -c 32 /dev/urandom > "$LAB_DIR/etc/jwt.key"); }
  chmod 600 "$LAB_DIR/etc/jwt.key"
  cat > "$LAB_DIR/etc/cgroup.conf" <<EOF
# No cgroup setup here: proctrack/linuxproc, task/affinity.
CgroupPlugin=disabled
EOF
  common_conf="AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$LAB_DIR/etc/jwt.key
TaskPlugin=task/affinity"
fi
if [ "$LAB_SLURM" = 24.11 ]; then
  version_conf="AuthType=auth/munge
AuthInfo=socket=$LAB_DIR/munge/munge.socket
CredType=cred/munge
$common_conf"
  [ "$LAB_SLURM_NODES" = static ] || version_conf="$version_conf
# slurmd of dynamic nodes fetch slurm.conf, gres.conf, topology.conf ... from slurmctld
SlurmctldParameters=enable_configless
# the lab's nodes and e2e/test_slurmd_image.py's node
MaxNodeCount=$((LAB_NODES + 1))
# Every dynamic slurmd listens on this port, each in its own network namespace (netns.sh).
SlurmdPort=$SLURMD_BASE_PORT"
  unset SLURM_SACK_SOCKET SLURM_SACK_KEY
elif [ "$LAB_SLURM" = 26.05 ]; then
  # auth/slurm with a lab-private key (no munge). Its daemons serve tokens to local clients on
  # host-wide sockets (/run/slurmctld/sack.socket, /run/slurm/sack.socket): slurmctld and each slurmd
  # run in their own mount namespace with a directory of this lab on /run/slurmctld (or /run/slurm),
  # and the lab's clients find slurmctld's socket through SLURM_SACK_SOCKET, so labs do not meet.
  [ -s "$LAB_DIR/etc/slurm.key" ] || { (umask 077 && head -c 1024 /dev/urandom > "$LAB_DIR/etc/slurm.key"); }
  chmod 600 "$LAB_DIR/etc/slurm.key"
  mkdir -p "$SACK_DIR/ctld" "$SACK_DIR/slurmd" /run/slurmctld /run/slurm
  chmod 755 "$SACK_DIR" "$SACK_DIR/ctld"
  # Not exported: SLURM_SACK_KEY in a process' environment makes it use auth/slurm as a daemon would
  # (slurmrestd would then refuse the JWTs); slurmctld reads the key next to slurm.conf, and the
  # agent gives it to slurmd (configless slurmd have no slurm.conf of their own).
  export SLURM_SACK_SOCKET=$SACK_DIR/ctld/sack.socket
  SLURM_SACK_KEY=$LAB_DIR/etc/slurm.key
  version_conf="AuthType=auth/slurm
CredType=cred/slurm
$common_conf
# slurmd of dynamic nodes fetch slurm.conf, gres.conf, topology.conf ... from slurmctld
SlurmctldParameters=enable_configless"
  # the lab's nodes (real ones are static lines, counted too) and e2e/test_slurmd_image.py's node
  [ "$LAB_SLURM_NODES" = static ] || version_conf="$version_conf
MaxNodeCount=$((LAB_NODES + LAB_SIM_NODES + ${LAB_REAL_NODES:-0} + 1))"
fi
# Where slurmctld listens: loopback, or (24.11's dynamic nodes) the address of this lab's bridge,
# which the slurmd in their network namespaces reach (netns.sh).
if [ "$NETNS" = 1 ]; then
  CTLD_ADDR=$("$here/netns.sh" ctld-addr)
  ctld_conf="SlurmctldHost=localhost($CTLD_ADDR)
SlurmctldPort=$CTLD_PORT
# slurmctld listens on every address: with NoCtldInAddrAny it binds localhost's (127.0.0.1), which
# the namespaces cannot reach. Each slurmd has only its namespace's addresses."
else
  CTLD_ADDR=127.0.0.1
  ctld_conf="SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
# Loopback only: slurmctld binds SlurmctldHost's address (localhost) and each slurmd its
# NodeAddr, not every interface.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny"
fi
# The Slurm client environment, for down.sh and daemon.sh also when up fails before the env file.
cat > "$LAB_DIR/slurm.env" <<EOF
export SLURM_CONF=$SLURM_CONF
$([ -z "$SLURM_PATH" ] || echo "export PATH=$SLURM_PATH:\$PATH")
$([ "$LAB_SLURM" != 26.05 ] || echo "export SLURM_SACK_SOCKET=$SLURM_SACK_SOCKET")
EOF
if [ "$LAB_SLURM_NODES" = static ]; then
  nodes_comment="# Static nodes: every gpuXX is defined here, and comes into service
# when a slurmd pod on the Kubernetes node of the same name runs 'slurmd -N gpuXX' (its own port)."
else
  nodes_comment="# Dynamic nodes: no gpuXX is defined here; each is created when its slurmd registers
# ('slurmd -Z -N gpuXX --conf-server ... --conf \"...\"', started by the node's slurmd pod)."
fi
cat > "$SLURM_CONF" <<EOF
# Generated by e2e/lab/up.sh for Slurm $LAB_SLURM.
$nodes_comment
ClusterName=lab
$ctld_conf
$version_conf
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$LAB_DIR/state/ctld
SlurmdSpoolDir=$LAB_DIR/state/%n
SlurmctldPidFile=$LAB_DIR/state/slurmctld.pid
SlurmdPidFile=$LAB_DIR/state/slurmd-%n.pid
SlurmctldLogFile=$LAB_DIR/log/slurmctld.log
SlurmdLogFile=$LAB_DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
# slurmd reports the configured CPUs/memory/GPUs, not this machine's.
SlurmdParameters=config_overrides
# A DOWN node returns to service when its slurmd registers again (a new slurmd pod); a DRAIN
# set by the operator stays until the operator resumes the node.
ReturnToService=2
# How long a node whose slurmd is gone stays "responding": short, so the lab shows it soon.
SlurmdTimeout=$SLURMD_TIMEOUT
KillWait=2
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=5
MailProg=/bin/true
EOF
# Power saving (issue 39, docs/slurm-admin.md), in every row, so Drain and PowerSave pools both run
# here. /bin/true for both programs: slurmpool, not a program, powers nodes down and brings them
# back; automatic power save must still be "on" (both programs valid, a SuspendTime), or Slurm never
# resumes a powered-down node for a job (and 22.05 and 24.11 refuse a manual power-down).
# SuspendExcParts: Slurm never powers an idle node down by itself (a manual power-down still works).
# ResumeTimeout: a move to Slurm (evictions, the slurmd pod's start, registration) fits in it.
cat >> "$SLURM_CONF" <<EOF
SuspendProgram=/bin/true
ResumeProgram=/bin/true
SuspendTime=3600
SuspendExcParts=gpu
SuspendTimeout=5
ResumeTimeout=300
SuspendRate=0
ResumeRate=0
EOF
# LAB_CGROUPS=1: Slurm tracks and confines jobs by cgroups, as GPU sites run it (each slurmd in a
# cgroup namespace of its own: cgexec.sh, given by the agent).
if [ "$LAB_CGROUPS" = 1 ]; then
  sed -i -e 's|^ProctrackType=.*|ProctrackType=proctrack/cgroup|' -e 's|^TaskPlugin=.*|TaskPlugin=task/cgroup|' "$SLURM_CONF"
  grep -q '^TaskPlugin=' "$SLURM_CONF" || echo "TaskPlugin=task/cgroup" >> "$SLURM_CONF"
  printf '%s\n' "# Generated by e2e/lab/up.sh (LAB_CGROUPS=1): a job sees only the GPU devices it was given." \
    "CgroupPlugin=cgroup/v1" "ConstrainDevices=yes" > "$LAB_DIR/etc/cgroup.conf"
fi
# 23.02+: `scontrol reconfigure` keeps SuspendExc* as scontrol changed them (22.05 has no such flag).
[ "$LAB_SLURM" = 22.05 ] || echo "ReconfigFlags=KeepPowerSaveSettings" >> "$SLURM_CONF"
# Each node's slurmd port, and (dynamic nodes) the --conf line its slurmd registers with: the agent
# reads this file (NAME<TAB>PORT<TAB>CONF). The topology unit of a dynamic node is its path in the
# tree of topology.conf ("default" is topology.conf's name): spine:block-k:rack-r, as static nodes.
: > "$LAB_DIR/etc/nodes.tsv"
if [ "$LAB_GRES_CORES" = 1 ]; then CPU_CONF="Sockets=2 CoresPerSocket=8 ThreadsPerCore=1"; else CPU_CONF="CPUs=16"; fi
node_line() {  # NAME PORT TOPOLOGY_PATH [SLURM_NAME]: nodes.tsv is keyed by the Kubernetes Node (the agent's)
  if [ "$LAB_SLURM_NODES" = static ]; then
    echo "NodeName=${4:-$1} NodeHostname=localhost NodeAddr=127.0.0.1 Port=$2 $CPU_CONF RealMemory=65536 Gres=gpu:h100:8 State=UNKNOWN" >> "$SLURM_CONF"
    printf '%s\t%s\t\n' "$1" "$2" >> "$LAB_DIR/etc/nodes.tsv"
  elif [ "$NETNS" = 1 ]; then  # 24.11: no Port= nor Topology= in --conf; the node's namespace has the port
    printf '%s\t%s\t%s\n' "$1" "$SLURMD_BASE_PORT" "$CPU_CONF RealMemory=65536 Gres=gpu:h100:8" >> "$LAB_DIR/etc/nodes.tsv"
  else
    printf '%s\t%s\t%s\n' "$1" "$2" "$CPU_CONF RealMemory=65536 Gres=gpu:h100:8 Port=$2 Topology=default:$3" >> "$LAB_DIR/etc/nodes.tsv"
  fi
}
for i in $(seq 1 "$LAB_NODES"); do
  node_line "gpu$(printf %02d "$i")" $((SLURMD_BASE_PORT + i)) "spine:block-$(( (i + 3) / 4 )):rack-$(( (i + 1) / 2 ))" \
    "${LAB_SLURM_NAME_PREFIX}gpu$(printf %02d "$i")"
done
# Simulated nodes (load tests): Slurm lists them (static); a slurmd runs only while one serves Slurm.
# Static ones are one line of ranges, as sites write slurm.conf: every scontrol and squeue parses
# the whole file, and 500 NodeName lines cost each of them ~45 ms of CPU (regexes), against ~6 ms.
for i in $(seq 1 "$LAB_SIM_NODES"); do
  if [ "$LAB_SLURM_NODES" = static ]; then
    printf '%s\t%s\t\n' "sim$(printf %03d "$i")" $((SIM_BASE_PORT + i)) >> "$LAB_DIR/etc/nodes.tsv"
  else
    node_line "sim$(printf %03d "$i")" $((SIM_BASE_PORT + i)) "spine:sim"
  fi
done
if [ "$LAB_SIM_NODES" -gt 0 ] && [ "$LAB_SLURM_NODES" = static ]; then
  last=$(printf %03d "$LAB_SIM_NODES")
  echo "NodeName=sim[001-$last] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((SIM_BASE_PORT + 1))-$((SIM_BASE_PORT + LAB_SIM_NODES))] $CPU_CONF RealMemory=65536 Gres=gpu:h100:8 State=UNKNOWN" >> "$SLURM_CONF"
fi
echo "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$SLURM_CONF"
if [ "$LAB_GRES_CORES" = 1 ]; then  # four GPUs on each socket
  gres_lines="Name=gpu Type=h100 File=$LAB_DIR/fakedev/nvidia[0-3] Cores=0-7
Name=gpu Type=h100 File=$LAB_DIR/fakedev/nvidia[4-7] Cores=8-15"
else
  gres_lines="Name=gpu Type=h100 File=$LAB_DIR/fakedev/nvidia[0-7]"
fi
cat > "$LAB_DIR/etc/gres.conf" <<EOF
AutoDetect=off
$gres_lines
EOF
# topology.conf mirrors the Kubernetes labels: racks of 2 nodes, blocks of 4, one spine. Dynamic
# nodes are not named here: each joins its rack (and the switches above it) by its --conf Topology=
# (26.05; 24.11 has no Topology= there and runs topology/default with dynamic nodes, below).
leaf() { [ "$LAB_SLURM_NODES" = dynamic ] || echo " Nodes=$1"; }
{
  for r in $(seq 1 $(( (LAB_NODES + 1) / 2 ))); do
    lo=$(( 2 * r - 1 )); hi=$(( 2 * r < LAB_NODES ? 2 * r : LAB_NODES ))
    p=$LAB_SLURM_NAME_PREFIX
    echo "SwitchName=rack-$r$(leaf "${p}gpu$(printf %02d $lo)$([ $hi -gt $lo ] && printf ",${p}gpu%02d" $hi)")"
  done
  blocks=$(( (LAB_NODES + 3) / 4 ))
  for b in $(seq 1 $blocks); do
    r1=$(( 2 * b - 1 )); r2=$(( 2 * b ))
    [ $(( 2 * r2 - 1 )) -le "$LAB_NODES" ] && echo "SwitchName=block-$b Switches=rack-$r1,rack-$r2" || echo "SwitchName=block-$b Switches=rack-$r1"
  done
  spine="block-[1-$blocks]"
  if [ "$LAB_SIM_NODES" -gt 0 ]; then
    echo "SwitchName=sim$(leaf "sim[001-$(printf %03d "$LAB_SIM_NODES")]")"; spine="$spine,sim"
  fi
  echo "SwitchName=spine Switches=$spine"
} > "$LAB_DIR/etc/topology.conf"
if [ "$NETNS" = 1 ]; then
  # 24.11's dynamic nodes join no switch of topology/tree (sbatch -w then says "Requested topology
  # configuration is not available"): no Slurm topology there (the Kubernetes labels still have it).
  echo "TopologyPlugin=topology/default" >> "$SLURM_CONF"
else
  echo "TopologyPlugin=topology/tree" >> "$SLURM_CONF"
fi
# LAB_PYXIS=1: pyxis (SPANK) and enroot, built for this Slurm (build-pyxis.sh, cached); a small
# squashfs image made offline from busybox; every enroot and pyxis path is under /run/slurm, which is
# per node (each slurmd in its own mount namespace, see the agent below): lab nodes share one host.
PYXIS_IMAGE=""
# Slurm reads <slurm.conf's dir>/plugstack.conf even without PlugStackConfig= (and serves it to
# configless slurmd): one left by an earlier LAB_PYXIS=1 lab in this LAB_DIR would load pyxis here.
rm -f "$LAB_DIR/etc/plugstack.conf"
if [ "$LAB_PYXIS" = 1 ]; then
  case $LAB_SLURM in 22.05) spank_include=/usr/include ;; *) spank_include=$SLURM_PREFIX/include ;; esac
  pyxis_build=$("$here/build-pyxis.sh" "$spank_include") || die "e2e/lab/build-pyxis.sh failed"
  ENROOT_PREFIX=$(sed -n 's/^ENROOT_PREFIX=//p' <<< "$pyxis_build")
  PYXIS_SO=$(sed -n 's/^PYXIS_SO=//p' <<< "$pyxis_build")
  # runtime_path: pyxis's own state (per node, like enroot's)
  echo "required $PYXIS_SO runtime_path=/run/slurm/pyxis" > "$LAB_DIR/etc/plugstack.conf"
  echo "PlugStackConfig=$LAB_DIR/etc/plugstack.conf" >> "$SLURM_CONF"
  PYXIS_IMAGE=$LAB_DIR/pyxis/lab-image.sqsh
  if [ ! -s "$PYXIS_IMAGE" ]; then
    r=$LAB_DIR/pyxis/rootfs; rm -rf "$r"; mkdir -p "$r"/{bin,etc,tmp,proc,sys,dev,root,run}
    cp /bin/busybox "$r/bin/busybox"
    for b in sh cat env ls mount grep id true sleep; do ln -s busybox "$r/bin/$b"; done
    printf 'NAME="slurmpool lab image"\nID=slurmpool-lab\nPRETTY_NAME="slurmpool lab image (busybox)"\n' > "$r/etc/os-release"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' > "$r/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
    mksquashfs "$r" "$PYXIS_IMAGE.tmp" -comp lzo -noappend -quiet >/dev/null && mv "$PYXIS_IMAGE.tmp" "$PYXIS_IMAGE"
    rm -rf "$r"
  fi
  mkdir -p "$LAB_DIR/pyxis/mnt"
  log "pyxis: $PYXIS_SO, enroot $ENROOT_PREFIX, image $PYXIS_IMAGE"
fi
"$here/real-nodes.sh" slurm-conf   # LAB_REAL_NODES: Slurm nodes real01.. (served by the slurmd image)

# ---------------------------------------------------------------- sshd config
S=$LAB_DIR/ssh
chmod 700 "$S"
# 26.05: the built clients first in PATH, and slurmctld's auth socket of this lab.
ssh_env="SLURM_CONF=$SLURM_CONF"
[ "$LAB_SLURM" != 26.05 ] || ssh_env="$ssh_env SLURM_SACK_SOCKET=$SLURM_SACK_SOCKET"
[ -z "$SLURM_PATH" ] || ssh_env="$ssh_env PATH=$SLURM_PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
[ -s "$S/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C slurmpool-lab-host -f "$S/ssh_host_ed25519_key"
[ -s "$S/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C slurmpool-lab-client -f "$S/id_ed25519"
cp "$S/id_ed25519.pub" "$S/authorized_keys"; chmod 600 "$S/authorized_keys"
echo "[127.0.0.1]:$SSH_PORT $(cut -d' ' -f1,2 "$S/ssh_host_ed25519_key.pub")" > "$S/known_hosts"
cat > "$S/sshd_config" <<EOF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $S/ssh_host_ed25519_key
PidFile none
AuthorizedKeysFile $S/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
# the key files live under LAB_DIR, which need not be root-only
StrictModes no
# remote commands (scontrol over SSH, as in production) talk to the lab's slurmctld
SetEnv $ssh_env
LogLevel INFO
EOF
mkdir -p /run/sshd && chmod 755 /run/sshd   # privilege-separation directory sshd insists on
sshd -t -f "$S/sshd_config" || die "sshd rejected $S/sshd_config"

# ---------------------------------------------------------------- start everything
# start_daemon NAME CMD...: setsid'd (own session, survives this script), stdin /dev/null,
# output to log/NAME.log, PID of the daemon itself (bash execs it) in run/NAME.pid.
start_daemon() {
  local name=$1; shift
  # 9>&-: the daemon must not inherit (and so keep holding) the lab lock
  # The command line as given (daemon.sh restarts from it: a wrapper such as unshare execs away)
  printf '%s\0' "$@" > "$LAB_DIR/run/$name.argv"
  setsid bash -c 'echo $$ > "$0"; exec "$@"' "$LAB_DIR/run/$name.pid" "$@" \
    > "$LAB_DIR/log/$name.log" 2>&1 < /dev/null 9>&- &
  local i
  for i in $(seq 1 200); do [ -s "$LAB_DIR/run/$name.pid" ] && return 0; sleep 0.01; done
  die "$name did not start"
}
# wait_for SECONDS DESC CMD...: poll CMD until it succeeds.
wait_for() {
  local t=$1 desc=$2 s; s=$(date +%s%N); shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $(( ($(date +%s%N) - s) / 1000000000 )) -ge "$t" ]; then
      die "timeout (${t}s) waiting for $desc; see $LAB_DIR/log/"
    fi
    sleep 0.1
  done
  log "$desc ready (+$(ms "$s")ms)"
}
started=1
[ "$NETNS" = 0 ] || { "$here/netns.sh" start "$LAB_NODES" || die "e2e/lab/netns.sh start failed"; log "network namespaces of $LAB_NODES nodes, slurmctld on $CTLD_ADDR"; }
KUBECTL=("$BIN/kubectl" --kubeconfig "$LAB_DIR/kubeconfig")

# Components that retry their upstreams start at once, in parallel; only munged must be up
# before slurmctld (which exits if it cannot reach munge).
start_daemon etcd "$BIN/etcd" --name lab --data-dir "$LAB_DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "lab=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
# 24.11: `munged` is the root filesystem's (its wrapper), and so is the setpriv that names user munge.
[ "$LAB_SLURM" = 26.05 ] || start_daemon munged ${ROOTFS:+"$SLURM_PATH/.inroot"} setpriv --reuid=munge --regid=munge --init-groups \
  munged -F --socket="$LAB_DIR/munge/munge.socket" --key-file="$LAB_DIR/munge/munge.key" \
  --log-file="$LAB_DIR/log/munged.log" --pid-file="$LAB_DIR/munge/munged.pid" --seed-file="$LAB_DIR/munge/munged.seed"
# sshd in a mount namespace of its own where root's ~/.bashrc is an empty file. bash sources
# ~/.bashrc for every command sshd runs (Debian builds it with SSH_SOURCE_BASHRC), and this
# machine's root one runs `pyenv init`: ~70 ms a command idle, seconds under load. A Slurm
# host's service account has a plain one (docs/install.md: keep it so). The lab's own file only.
root_rc=$(getent passwd root | cut -d: -f6)/.bashrc
: > "$S/bashrc"
if [ -e "$root_rc" ]; then
  start_daemon sshd unshare -m --propagation private -- sh -c 'mount --bind "$0" "$1" && shift && exec "$@"' \
    "$S/bashrc" "$root_rc" "$(command -v sshd)" -D -e -f "$S/sshd_config"
else
  start_daemon sshd "$(command -v sshd)" -D -e -f "$S/sshd_config"
fi
start_daemon kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address=127.0.0.1 \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
  --client-ca-file="$P/ca.crt" \
  --authorization-mode=RBAC \
  --feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1beta1=true \
  --service-cluster-ip-range=10.0.0.0/24 \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --allow-privileged=true \
  --enable-priority-and-fairness=false --profiling=false \
  --endpoint-reconciler-type=none --kubelet-preferred-address-types=InternalIP,Hostname \
  --cert-dir="$LAB_DIR/state/apiserver-certs"
agent_slurm=(--node-conf "$LAB_DIR/etc/nodes.tsv" --slurm-path "$SLURM_PATH")
[ "$LAB_SLURM" != 26.05 ] || agent_slurm+=(--slurm-env "SLURM_SACK_KEY=$SLURM_SACK_KEY"
  --slurm-env "SLURM_SACK_SOCKET=$SLURM_SACK_SOCKET" --slurmd-run-dir "$SACK_DIR/slurmd" --conf-server "127.0.0.1:$CTLD_PORT")
# LAB_PYXIS=1: enroot on slurmd's PATH (pyxis runs it from slurmstepd), and on 22.05 each slurmd in a
# mount namespace of its own with its node's directory on /run/slurm too (26.05's are already).
if [ "$LAB_PYXIS" = 1 ]; then
  agent_slurm[3]=$ENROOT_PREFIX/bin${SLURM_PATH:+:$SLURM_PATH}
  [ "$LAB_SLURM" = 26.05 ] || agent_slurm+=(--slurmd-run-dir "$LAB_DIR/state/noderun")
fi
if [ "$LAB_CGROUPS" = 1 ]; then  # down.sh removes them by this prefix
  echo "slurmpool-lab$(( OFF / 100 ))-slurmd-" > "$LAB_DIR/run/cgroup-prefix"
  agent_slurm+=(--slurmd-cgroup-prefix "$(cat "$LAB_DIR/run/cgroup-prefix")")
fi
# 24.11's dynamic slurmd: each in its node's network namespace; munge's socket named before the
# configuration (and its AuthInfo) is fetched.
[ "$NETNS" = 0 ] || agent_slurm+=(--conf-server "$CTLD_ADDR:$CTLD_PORT" --slurmd-netns "$("$here/netns.sh" addr)"
  --dynamic-arg=--authinfo --dynamic-arg="socket=$LAB_DIR/munge/munge.socket")
start_daemon agent "$PY" "$here/agent.py" --lab-dir "$LAB_DIR" --kubeconfig "$LAB_DIR/kubeconfig" \
  --nodes "$LAB_NODES" --sim-nodes "$LAB_SIM_NODES" --sim-group "$LAB_SIM_GROUP" --slurm-conf "$SLURM_CONF" "${agent_slurm[@]}"

if [ "$LAB_SLURMDBD" = 1 ]; then
  # MariaDB for slurmdbd: its own data directory (made anew at each up), TCP on 127.0.0.1 only.
  DB=$LAB_DIR/state/mariadb
  mkdir -p "$DB"
  mariadb-install-db --no-defaults --datadir="$DB/data" --user=root --auth-root-authentication-method=socket \
    --skip-test-db > "$LAB_DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: $LAB_DIR/log/mariadb-install.log"
  start_daemon mariadbd mariadbd --no-defaults --datadir="$DB/data" --user=root --bind-address=127.0.0.1 \
    --port="$MARIADB_PORT" --socket="$DB/mariadb.sock" --pid-file="$DB/mariadbd.pid" --skip-name-resolve \
    --innodb-buffer-pool-size=32M --innodb-log-file-size=8M --performance-schema=OFF
  wait_for 30 mariadbd mariadb --no-defaults --socket="$DB/mariadb.sock" -e "SELECT 1"
  mariadb --no-defaults --socket="$DB/mariadb.sock" -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'lab';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "MariaDB: cannot create the slurm user"
fi
if [ "$LAB_SLURM" != 26.05 ]; then
  wait_for 10 munged bash -c "munge -n -S '$LAB_DIR/munge/munge.socket' | unmunge -S '$LAB_DIR/munge/munge.socket'"
  if [ "$LAB_SLURMDBD" = 1 ]; then
    start_daemon slurmdbd env SLURM_CONF="$SLURM_CONF" slurmdbd -D
    wait_for 60 slurmdbd sacctmgr -n show cluster
    sacctmgr -i add cluster lab >/dev/null || die "sacctmgr add cluster lab failed"
  fi
  start_daemon slurmctld slurmctld -D -i   # 24.11: the wrapper in SLURM_PATH
else
  # Its own mount namespace: this lab's directory on /run/slurmctld (the auth/slurm socket).
  start_daemon slurmctld unshare -m --propagation private -- \
    sh -c 'mount --bind "$0" /run/slurmctld && exec "$@"' "$SACK_DIR/ctld" slurmctld -D -i
fi
wait_for 30 slurmctld scontrol ping
if [ "$LAB_SLURM" != 22.05 ]; then
  # slurmrestd with JWT (rest_auth/jwt): it refuses to run as root, so as daemon. The token is
  # root's (the operator's SSH path is root too), valid 24 h.
  # It loads its plugins after dropping to daemon, who cannot search a cache under a private home
  # (/root is 0700): then it runs in its own mount namespace where a tmpfs covers that directory and
  # the prefix is bound back at its own path. Nothing on the host changes.
  restd=(env -u SLURM_SACK_KEY SLURM_JWT=daemon slurmrestd -u daemon -g daemon -a rest_auth/jwt "127.0.0.1:$RESTD_PORT")
  # 24.11 needs its OpenAPI plugin named; it runs by chroot, so its own files are all it reads.
  [ "$LAB_SLURM" != 24.11 ] || restd=(env SLURM_JWT=daemon slurmrestd -u daemon -g daemon -s openapi/slurmctld -a rest_auth/jwt "127.0.0.1:$RESTD_PORT")
  blocked="" d=$SLURM_PREFIX
  while [ -n "$d" ] && [ "$d" != / ]; do
    d=$(dirname "$d")
    setpriv --reuid=daemon --regid=daemon --clear-groups test -x "$d" || blocked=$d
  done
  if [ -n "$blocked" ]; then
    mkdir -p "$LAB_DIR/state/restd-prefix"
    start_daemon slurmrestd unshare -m --propagation private -- sh -c \
      'mount --bind "$0" "$1" && mount -t tmpfs -o mode=755 lab "$2" && mkdir -p "$0" && mount --bind "$1" "$0" && shift 2 && exec "$@"' \
      "$SLURM_PREFIX" "$LAB_DIR/state/restd-prefix" "$blocked" "${restd[@]}"
  else
    start_daemon slurmrestd "${restd[@]}"
  fi
  LAB_SLURM_JWT=$(scontrol token username=root lifespan=86400 | sed -n 's/^SLURM_JWT=//p')
  [ -n "$LAB_SLURM_JWT" ] || die "scontrol token gave no token"
  wait_for 20 slurmrestd bash -c "exec 3<>/dev/tcp/127.0.0.1/$RESTD_PORT"
fi
wait_for 10 sshd bash -c "exec 3<>/dev/tcp/127.0.0.1/$SSH_PORT"
wait_for 60 kube-apiserver "${KUBECTL[@]}" get --raw /readyz
# The controller-manager gives up if the apiserver is not healthy within seconds: start it now.
# GenericWorkload (beta, off by default in 1.37): PodGroups (scheduling.k8s.io/v1beta1) and the
# scheduler's gang scheduling, for group demand (issue 40).
start_daemon kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig="$LAB_DIR/etc/scheduler.kubeconfig" --leader-elect=false --secure-port=0 --feature-gates=GenericWorkload=true
# use-service-account-credentials: each controller acts as its own ServiceAccount, as in
# kubeadm clusters (the controller-manager's own role does not cover every controller).
# node-monitor-period=1s: new nodes lose their not-ready taint within a second, not five.
# Hundreds of simulated nodes: the default 20 requests/s would take minutes to untaint them.
cm_qps=""; [ "$LAB_SIM_NODES" -eq 0 ] || cm_qps="--kube-api-qps=200 --kube-api-burst=400"
start_daemon kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig="$LAB_DIR/etc/controller-manager.kubeconfig" --leader-elect=false --secure-port=0 \
  --use-service-account-credentials=true --feature-gates=GenericWorkload=true \
  --node-monitor-period=1s $cm_qps \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
  --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key"

# Ready nodes with the node lifecycle controller's not-ready taint gone (else nothing schedules).
nodes_ready() {
  local n
  n=$("${KUBECTL[@]}" get nodes -l slurmpool.io/lab=true -o go-template='{{range .items}}{{$tainted := false}}{{range .spec.taints}}{{if eq .key "node.kubernetes.io/not-ready"}}{{$tainted = true}}{{end}}{{end}}{{range .status.conditions}}{{if and (eq .type "Ready") (eq .status "True") (not $tainted)}}x{{end}}{{end}}{{end}}')
  [ "${#n}" -eq "$LAB_NODES" ]
}
wait_for 60 "$LAB_NODES Ready nodes" nodes_ready
sim_ready() {
  local n
  n=$("${KUBECTL[@]}" get nodes -l slurmpool.io/sim=true -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)
  [ "$n" -eq "$LAB_SIM_NODES" ]
}
[ "$LAB_SIM_NODES" -eq 0 ] || wait_for 180 "$LAB_SIM_NODES simulated Ready nodes" sim_ready
wait_for 60 "default ServiceAccount" "${KUBECTL[@]}" -n default get serviceaccount default
# The DeviceClass NVIDIA's DRA driver installs (its whole GPUs); the agent publishes each inference
# node's ResourceSlice as that driver does (agent.py: dra_loop), so the real scheduler allocates claims.
"${KUBECTL[@]}" apply -f - >/dev/null <<'DEVICECLASS'
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}
DEVICECLASS
LAB_SSH="ssh -p $SSH_PORT -i $S/id_ed25519 -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=$S/known_hosts root@127.0.0.1"
wait_for 10 "ssh scontrol" $LAB_SSH scontrol ping

# ---------------------------------------------------------------- env file
cat > "$LAB_DIR/env" <<EOF
# Generated by e2e/lab/up.sh: source it (. $LAB_DIR/env) to use the lab by hand.
export LAB_DIR=$LAB_DIR
export LAB_NODES=$LAB_NODES
export LAB_SIM_NODES=$LAB_SIM_NODES
export LAB_SIM_GROUP=$LAB_SIM_GROUP
export LAB_BIN=$BIN
export KUBECONFIG=$LAB_DIR/kubeconfig
export SLURM_CONF=$SLURM_CONF
case ":\$PATH:" in *":$BIN:"*) ;; *) export PATH="$BIN:/usr/sbin:\$PATH" ;; esac
export LAB_SSH_HOST=127.0.0.1
export LAB_SSH_PORT=$SSH_PORT
export LAB_SSH_USER=root
export LAB_SSH_KEY=$S/id_ed25519
export LAB_SSH_KNOWN_HOSTS=$S/known_hosts
export LAB_SSH="$LAB_SSH"
export LAB_APISERVER=https://127.0.0.1:$API_PORT
export LAB_SLURMD_TIMEOUT=$SLURMD_TIMEOUT
export LAB_SLURM=$LAB_SLURM
export LAB_SLURM_NODES=$LAB_SLURM_NODES
export LAB_SLURMCTLD_PORT=$CTLD_PORT
export LAB_SLURMCTLD_ADDR=$CTLD_ADDR
export LAB_SLURMDBD=$LAB_SLURMDBD
export LAB_GRES_CORES=$LAB_GRES_CORES
export LAB_PYXIS=$LAB_PYXIS
export LAB_CGROUPS=$LAB_CGROUPS
$([ -z "$PYXIS_IMAGE" ] || echo "export LAB_PYXIS_IMAGE=$PYXIS_IMAGE")
export LAB_SLURM_NAME_PREFIX=$LAB_SLURM_NAME_PREFIX
EOF
if [ "$LAB_SLURM" != 22.05 ]; then
  cat >> "$LAB_DIR/env" <<EOF
case ":\$PATH:" in *":$SLURM_PATH:"*) ;; *) export PATH="$SLURM_PATH:\$PATH" ;; esac
$([ -z "$SLURM_PREFIX" ] || echo "export LAB_SLURM_PREFIX=$SLURM_PREFIX")
$([ -z "$ROOTFS" ] || echo "export LAB_SLURM_ROOTFS=$ROOTFS")
$([ "$LAB_SLURM" != 26.05 ] || echo "export SLURM_SACK_SOCKET=$SLURM_SACK_SOCKET")
export LAB_SLURMRESTD_URL=http://127.0.0.1:$RESTD_PORT
export LAB_SLURM_JWT=$LAB_SLURM_JWT
export LAB_SLURM_JWT_USER=root
EOF
fi
"$here/real-nodes.sh" start   # LAB_REAL_NODES=N real kubelet nodes (default 0: none)
# LAB_PROMETHEUS=1: Prometheus scraping the operator with the chart's ServiceMonitor and rules.
[ "${LAB_PROMETHEUS:-0}" != 1 ] || "$here/prometheus.sh" start
trap - EXIT
log "lab up: $LAB_NODES nodes ($LAB_SIM_NODES simulated) in $(ms)ms. Use it with: . $LAB_DIR/env"
