#!/usr/bin/env bash
# real-nodes.sh start|stop|status|slurm-conf|import FILE... - real kubelet nodes in the lab (LAB_REAL_NODES=N).
#
# Beside the agent's simulated gpuXX nodes, nodes real01..realNN run a real kubelet (built by
# build.sh from the control plane's k8s version) with Debian's containerd, runc and CNI plugins.
# Everything follows ../shared/reference/real-kubelet-notes.md (the settings measured on this kind
# of machine); e2e/lab/README.md#real-nodes says what each node gets and why.
#
# Per node NAME (i = 1..N, K = LAB_PORT_OFFSET/100, so labs with other offsets never collide):
#   address    10.250.K.i/32 on an alias of lo labelled lo:spKrI (the kubelet refuses a loopback
#              node IP; nothing binds the outside interface); kubelet :10250, healthz :10248 there
#   pods       bridge spKrI (no gateway, no masquerade: no forwarding sysctl, no iptables rule),
#              subnet 10.251.K.(16i)/28; most pods here use hostNetwork
#   cgroups    /slurmpool-labK-NAME in every v1 hierarchy: runtime/ (namespace holder, containerd,
#              its shims, kubelet) and the kubelet's cgroupRoot (kubepods/...), so stop kills by cgroup
#   mounts     a private mount namespace (held by a sleep), in which: tmpfs on /run (containerd's
#              shim sockets, netns mounts), the node's own /var/lib (device-plugins socket,
#              kubelet root) and /var/log (containers/), and plain files over the three sysctls
#              the kubelet writes (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops)
#   state      $LAB_DIR/real/NAME (containerd root/state, kubelet, CNI, pod logs), removed by stop
#   Kubernetes client certificate system:node:NAME, a ClusterRoleBinding of system:node for it
#              (the lab's apiserver is RBAC-only), registration taint slurmpool.io/real-node=true:NoSchedule,
#              labels like the simulated GPU nodes (topology block "real", racks of 2) plus
#              slurmpool.io/real=true (not slurmpool.io/lab: the tests of gpuXX never see them),
#              and capacity nvidia.com/gpu: 8 by a status patch (see README), or with LAB_CGROUPS=1
#              from the lab's device plugin (gpu-plugin/), which gives a pod the GPU stand-ins
# Images: containerd's sandbox image is a static Go pause (pause/), packed by oci.py and imported at
# start; `import FILE...` imports OCI archives (deploy/docker/build-images.sh) into every node.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export LAB_DIR=${LAB_DIR:-$repo/.lab}
N=${LAB_REAL_NODES:-0}
OFF=${LAB_PORT_OFFSET:-0}
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}
T0=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - ${1:-$T0}) / 1000000 )); }
log() { echo "[real-nodes +$(ms)ms] $*"; }
die() { echo "[real-nodes] ERROR: $*" >&2; exit 1; }

# stop, status and import use the offset the nodes were started with
[ "${1:-}" = start ] || [ ! -s "$LAB_DIR/real/port-offset" ] || OFF=$(cat "$LAB_DIR/real/port-offset")
[ $(( OFF % 100 )) -eq 0 ] && [ "$OFF" -ge 0 ] && [ "$OFF" -le 25500 ] || die "LAB_PORT_OFFSET must be a multiple of 100 (0..25500) with real nodes"
K=$(( OFF / 100 ))
[[ "$N" =~ ^[0-9]+$ ]] && [ "$N" -le 9 ] || die "LAB_REAL_NODES must be 0..9"
REAL=$LAB_DIR/real
RUN=$LAB_DIR/run
CG_PREFIX=slurmpool-lab$K-
CGROUPS=/sys/fs/cgroup
PAUSE_IMAGE=slurmpool.local/pause:1
TAINT=slurmpool.io/real-node=true:NoSchedule

name_of() { printf 'real%02d' "$1"; }
ip_of() { echo "10.250.$K.$1"; }
subnet_of() { echo "10.251.$K.$(( 16 * $1 ))/28"; }
bridge_of() { echo "sp${K}r$1"; }
hierarchies() {
  [ -e "$CGROUPS/cgroup.controllers" ] && { echo "$CGROUPS"; return 0; }  # cgroup v2 only
  local d; for d in "$CGROUPS"/*/; do d=${d%/}; [ -e "$d/cgroup.procs" ] && [ "${d##*/}" != unified ] && echo "$d"; done; }
# ...and, for finding and removing, the cgroup v2 hierarchy of a hybrid layout too (the kubelet
# creates its kubepods tree there as well).
all_hierarchies() { hierarchies; [ -e "$CGROUPS/unified/cgroup.procs" ] && echo "$CGROUPS/unified"; return 0; }
alive() { [ -r "/proc/$1/stat" ] && ! awk '{exit !($3=="Z")}' "/proc/$1/stat" 2>/dev/null; }

# ---------------------------------------------------------------- helpers for start
kubectl_() { "$BIN/kubectl" --kubeconfig "$LAB_DIR/kubeconfig" --request-timeout=20s "$@"; }

# cgroup_make PATH: create PATH (relative to each hierarchy root) everywhere; cpuset needs cpus/mems.
cgroup_make() {
  local h p acc
  for h in $(hierarchies); do
    acc=$h
    for p in ${1//\// }; do
      acc=$acc/$p
      if [ ! -d "$acc" ]; then
        mkdir "$acc"
        if [ -e "$acc/cpuset.cpus" ]; then
          cat "$(dirname "$acc")/cpuset.cpus" > "$acc/cpuset.cpus"
          cat "$(dirname "$acc")/cpuset.mems" > "$acc/cpuset.mems"
        fi
      fi
    done
  done
}

# start_in NAME CGROUP PIDFILE CMD...: a daemon in its own session, in CGROUP of every hierarchy,
# output to log/NAME.log; PID in PIDFILE.
start_in() {
  local name=$1 cg=$2 pidfile=$3; shift 3
  local procs=() h
  for h in $(hierarchies); do procs+=("$h/$cg/cgroup.procs"); done
  setsid bash -c 'pidfile=$1; shift; n=$1; shift; for ((j = 0; j < n; j++)); do echo $$ > "$1"; shift; done
                  echo $$ > "$pidfile"; exec "$@"' _ "$pidfile" "${#procs[@]}" "${procs[@]}" "$@" \
    > "$LAB_DIR/log/$name.log" 2>&1 < /dev/null 9>&- &
  local i
  for i in $(seq 1 200); do [ -s "$pidfile" ] && return 0; sleep 0.01; done
  die "$name did not start"
}

wait_until() {  # wait_until SECONDS DESC CMD...
  local t=$1 desc=$2 s; s=$(date +%s%N); shift 2
  until "$@" >/dev/null 2>&1; do
    [ $(( ($(date +%s%N) - s) / 1000000000 )) -lt "$t" ] || die "timeout (${t}s) waiting for $desc; see $LAB_DIR/log/"
    sleep 0.1
  done
  log "$desc (+$(ms "$s")ms)"
}

# The pause image, cached like the other built artefacts (key: its source and oci.py).
pause_archive() {
  local key out tmp
  key=$(cat "$here/pause/main.go" "$here/pause/go.mod" "$here/oci.py" | sha256sum | cut -c1-16)
  out=$cache/images/pause-$key.tar
  if [ ! -s "$out" ]; then
    mkdir -p "$cache/images"
    tmp=$(mktemp -d "$cache/images/pause.XXXXXX")
    (cd "$here/pause" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/rootfs/pause" .) >&2
    python3 "$here/oci.py" --rootfs "$tmp/rootfs" --name "$PAUSE_IMAGE" --out "$tmp/pause.tar" \
      --entrypoint '["/pause"]' --user 65535:65535 >/dev/null
    mv "$tmp/pause.tar" "$out"   # whole or not at all: another lab's real nodes may read it at once
    rm -rf "$tmp"
  fi
  echo "$out"
}

# The lab's GPU device plugin (gpu-plugin/, LAB_CGROUPS=1), cached like the pause image.
gpu_plugin_bin() {
  local key out tmp
  key=$(cat "$here/gpu-plugin/main.go" "$here/gpu-plugin/go.mod" "$here/gpu-plugin/go.sum" | sha256sum | cut -c1-16)
  out=$cache/bin-gpu-plugin-$key
  if [ ! -x "$out" ]; then
    mkdir -p "$cache"
    tmp=$(mktemp "$cache/gpu-plugin.XXXXXX")
    (cd "$here/gpu-plugin" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp" .) >&2
    chmod 755 "$tmp" && mv "$tmp" "$out"
  fi
  echo "$out"
}

node_kubeconfig() {  # node_kubeconfig NAME: client certificate system:node:NAME signed by the lab CA
  local name=$1 d=$REAL/$1 P=$LAB_DIR/pki
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$d/kubelet-client.key" 2>/dev/null
  openssl req -new -key "$d/kubelet-client.key" -subj "/O=system:nodes/CN=system:node:$name" -out "$d/kubelet-client.csr"
  openssl x509 -req -in "$d/kubelet-client.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days 30 -extfile "$P/openssl.cnf" -extensions client -out "$d/kubelet-client.crt" 2>/dev/null
  rm -f "$d/kubelet-client.csr"; chmod 600 "$d/kubelet-client.key"
  cat > "$d/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: $LAB_APISERVER
    certificate-authority: $P/ca.crt
users:
- name: $name
  user:
    client-certificate: $d/kubelet-client.crt
    client-key: $d/kubelet-client.key
contexts:
- name: lab
  context: {cluster: lab, user: $name}
current-context: lab
EOF
  chmod 600 "$d/kubeconfig"
}

write_configs() {  # write_configs NAME I
  local name=$1 i=$2 d=$REAL/$1 ip; ip=$(ip_of "$i")
  mkdir -p "$d"/{containerd/root,containerd/state,runc,cni/net.d,cni/data,cni/cache,pod-logs,var-lib/kubelet,var-log,sysctl}
  # The values the machine has now: the kubelet may "set" them; only these files change.
  cat /proc/sys/vm/overcommit_memory > "$d/sysctl/overcommit_memory"
  cat /proc/sys/kernel/panic > "$d/sysctl/panic"
  cat /proc/sys/kernel/panic_on_oops > "$d/sysctl/panic_on_oops"
  cat > "$d/containerd/config.toml" <<EOF
# Generated by e2e/lab/real-nodes.sh for node $name.
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
# /opt/containerd otherwise; tracing needs no exporter here
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$d/containerd.sock"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This environment cannot set negative OOM scores: without this every sandbox fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni/net.d"
EOF
  cat > "$d/cni/net.d/10-lab.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "slurmpool-lab$K-$name",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$(bridge_of "$i")",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$(subnet_of "$i")"}]],
        "dataDir": "$d/cni/data"
      }
    }
  ]
}
EOF
  cat > "$d/kubelet.yaml" <<EOF
# Generated by e2e/lab/real-nodes.sh for node $name (see real-kubelet-notes.md for each setting).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $ip
healthzPort: 10248
# The apiserver calls the kubelet without a client certificate (the lab's apiserver has none for
# kubelets): anonymous and AlwaysAllow, on an address of lo only. A lab setting, never production.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
# 1.37 refuses cgroup v1 by default; this machine has v1.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /${CG_PREFIX}$name
cgroupsPerQOS: true
failSwapOn: false
containerRuntimeEndpoint: unix://$d/containerd.sock
podLogsDir: $d/pod-logs
# no iptables chains (KUBE-IPTABLES-HINT, KUBE-FIREWALL ...) on the machine
makeIPTablesUtilChains: false
# the sysctls the kubelet would set are files in its mount namespace; it must not refuse them
protectKernelDefaults: false
oomScoreAdj: 0
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
registerWithTaints:
- {key: slurmpool.io/real-node, value: "true", effect: NoSchedule}
maxPods: 30
# a small, shared disk must not evict pods or collect images
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
nodeStatusReportFrequency: 10s
EOF
}

# The mount namespace's set-up, run by its holder before it sleeps.
NS_SETUP='set -e; d=$1
mount -t tmpfs -o mode=755 lab-run /run
mkdir -p /run/containerd /run/netns /run/lock
mount --bind "$d/var-lib" /var/lib
mount --bind "$d/var-log" /var/log
mkdir -p /var/log/containers /var/lib/kubelet/device-plugins
mount --bind "$d/sysctl/overcommit_memory" /proc/sys/vm/overcommit_memory
mount --bind "$d/sysctl/panic" /proc/sys/kernel/panic
mount --bind "$d/sysctl/panic_on_oops" /proc/sys/kernel/panic_on_oops
touch "$d/ns-ready"
exec sleep infinity'

start_node() {  # start_node I
  local i=$1 name d ip holder t; name=$(name_of "$i"); d=$REAL/$name; ip=$(ip_of "$i")
  t=$(date +%s%N)
  write_configs "$name" "$i"
  node_kubeconfig "$name"
  ip addr add "$ip/32" dev lo label "lo:$(bridge_of "$i")" 2>/dev/null || ip -br addr show dev lo | grep -qw "$ip" ||
    die "cannot add $ip to lo"
  cgroup_make "${CG_PREFIX}$name/runtime"
  start_in "$name-ns" "${CG_PREFIX}$name/runtime" "$RUN/$name-ns.pid" \
    unshare --mount --propagation private -- bash -c "$NS_SETUP" _ "$d"
  holder=$(cat "$RUN/$name-ns.pid")
  wait_until 10 "$name: mount namespace" test -e "$d/ns-ready"
  start_in "$name-containerd" "${CG_PREFIX}$name/runtime" "$RUN/$name-containerd.pid" \
    nsenter --mount="/proc/$holder/ns/mnt" -- containerd --config "$d/containerd/config.toml"
  wait_until 20 "$name: containerd" ctr --address "$d/containerd.sock" version
  ctr --address "$d/containerd.sock" -n k8s.io images import --all-platforms "$PAUSE" >/dev/null
  kubectl_ apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: slurmpool-lab-node-$name
  labels: {slurmpool.io/real-node: "true"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:node:$name"}
EOF
  local labels="slurmpool.io/real=true,nvidia.com/gpu.present=true"
  labels+=",topology.slurmpool.io/block=block-real,topology.slurmpool.io/rack=rack-real-$(( (i + 1) / 2 ))"
  start_in "$name-kubelet" "${CG_PREFIX}$name/runtime" "$RUN/$name-kubelet.pid" \
    nsenter --mount="/proc/$holder/ns/mnt" -- "$BIN/kubelet" --config "$d/kubelet.yaml" \
      --kubeconfig "$d/kubeconfig" --hostname-override "$name" --node-ip "$ip" \
      --node-labels "$labels" --v=1
  wait_until 30 "$name: kubelet healthz" curl -sf "http://$ip:10248/healthz"
  wait_until 30 "$name: Node registered" kubectl_ get node "$name"
  # nvidia.com/gpu: a status patch (as the simulated nodes have); the kubelet derives allocatable
  # from it. LAB_CGROUPS=1: the lab's device plugin instead, so a pod given GPUs gets the stand-ins
  # in its device cgroup, as NVIDIA's plugin gives real ones (else the pod could open none).
  if [ "$GPU_PLUGIN" ]; then
    start_in "$name-gpu-plugin" "${CG_PREFIX}$name/runtime" "$RUN/$name-gpu-plugin.pid" \
      nsenter --mount="/proc/$holder/ns/mnt" -- "$GPU_PLUGIN" "$LAB_DIR/fakedev" 8
  else
    kubectl_ patch node "$name" --subresource=status --type=merge \
      -p '{"status":{"capacity":{"nvidia.com/gpu":"8"}}}' >/dev/null
  fi
  node_ready() {
    local out
    out=$(kubectl_ get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.allocatable.nvidia\.com/gpu} {.spec.taints[*].key}')
    # the kubelet's first status updates can drop a capacity patched in between: patch again
    [[ "$out" == *" 8 "* ]] || [ "$GPU_PLUGIN" ] || kubectl_ patch node "$1" --subresource=status --type=merge \
      -p '{"status":{"capacity":{"nvidia.com/gpu":"8"}}}' >/dev/null 2>&1
    [[ "$out" == "True 8 "* ]] && [[ "$out" != *node.kubernetes.io/not-ready* ]]
  }
  wait_until 60 "$name: Ready with 8 GPUs" node_ready "$name"
  log "$name ($ip) joined in $(ms "$t")ms"
}

start() {
  # the tests read it from the env file
  [ ! -s "$LAB_DIR/env" ] || grep -q '^export LAB_REAL_NODES=' "$LAB_DIR/env" || echo "export LAB_REAL_NODES=$N" >> "$LAB_DIR/env"
  [ "$N" -gt 0 ] || return 0
  [ "$(id -u)" = 0 ] || die "run as root"
  [ -s "$LAB_DIR/env" ] || [ -n "${LAB_APISERVER:-}" ] || die "the lab is not up ($LAB_DIR/env missing)"
  # shellcheck disable=SC1091
  [ -n "${LAB_APISERVER:-}" ] || . "$LAB_DIR/env"
  local b
  for b in containerd containerd-shim-runc-v2 runc ctr unshare nsenter curl /usr/lib/cni/bridge /usr/lib/cni/host-local; do
    command -v "$b" >/dev/null || [ -x "$b" ] || die "'$b' not found: run 'make deps' (e2e/lab/install-deps.sh)"
  done
  BIN=$("$here/build.sh") || die "build.sh failed"
  [ -x "$BIN/kubelet" ] || die "$BIN/kubelet missing"
  PAUSE=$(pause_archive)
  GPU_PLUGIN=""
  ! grep -qx 'export LAB_CGROUPS=1' "$LAB_DIR/env" || GPU_PLUGIN=$(gpu_plugin_bin)
  mkdir -p "$REAL" "$RUN" "$LAB_DIR/log"
  echo "$OFF" > "$REAL/port-offset"
  local i
  for i in $(seq 1 "$N"); do start_node "$i"; done
  echo "$N" > "$REAL/count"
  log "$N real node(s) up: $(for i in $(seq 1 "$N"); do printf '%s=%s ' "$(name_of "$i")" "$(ip_of "$i")"; done)"
}

# ---------------------------------------------------------------- stop: leave the machine as found
# Every node of this lab that has state, a cgroup, an alias or a bridge, whatever N says now.
our_nodes() {
  {
    [ -d "$REAL" ] && ls "$REAL" | grep -E '^real[0-9]{2}$'
    local h; for h in $(all_hierarchies); do ls -d "$h/$CG_PREFIX"real* 2>/dev/null | sed "s|.*/$CG_PREFIX||"; done
    ip -o addr show dev lo | grep -oE "lo:sp${K}r[0-9]+" | sed "s/lo:sp${K}r//" | while read -r i; do name_of "$i"; echo; done
  } | grep -E '^real[0-9]{2}$' | sort -u
}

# cgroup_pids PATH: every process in PATH or below, in any hierarchy.
cgroup_pids() {
  local h; for h in $(all_hierarchies); do
    [ -d "$h/$1" ] && find "$h/$1" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -un
}

stop_pidfile() {  # stop_pidfile FILE EXPECTED_WORD: SIGTERM, 10 s, SIGKILL
  local f=$1 pid i
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if alive "$pid" && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$f"
}

stop_node() {  # stop_node NAME
  local name=$1 d=$REAL/$1 i pids cg=/${CG_PREFIX}$1 h
  i=$((10#${name#real}))
  local api=0
  if [ -s "$LAB_DIR/kubeconfig" ] && [ -n "${BIN:-}" ] && kubectl_ get --raw /readyz >/dev/null 2>&1; then api=1; fi
  # 1. pods go through the kubelet (it stops their containers and sandboxes) while it runs
  if [ $api = 1 ] && [ -s "$RUN/$name-kubelet.pid" ] && alive "$(cat "$RUN/$name-kubelet.pid")"; then
    kubectl_ delete pods -A --field-selector "spec.nodeName=$name" --wait=false >/dev/null 2>&1 || true
    for _ in $(seq 1 150); do
      [ -z "$(kubectl_ get pods -A --field-selector "spec.nodeName=$name" -o name 2>/dev/null)" ] && break; sleep 0.2
    done
    # and the sandboxes (the pause containers) with them
    for _ in $(seq 1 50); do
      [ -z "$(crictl_ps "$d")" ] && break; sleep 0.2
    done
  fi
  # 2. the kubelet, then its Node (a running kubelet registers it again) and binding
  stop_pidfile "$RUN/$name-gpu-plugin.pid" gpu-plugin
  stop_pidfile "$RUN/$name-kubelet.pid" kubelet
  if [ $api = 1 ]; then
    kubectl_ delete node "$name" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    kubectl_ delete clusterrolebinding "slurmpool-lab-node-$name" --ignore-not-found >/dev/null 2>&1 || true
  fi
  # 3. containerd, then whatever is left in the node's cgroups (shims, containers, the holder)
  stop_pidfile "$RUN/$name-containerd.pid" containerd
  rm -f "$RUN/$name-ns.pid"
  for _ in $(seq 1 3); do
    mapfile -t pids < <(cgroup_pids "$cg")
    [ ${#pids[@]} -eq 0 ] && break
    kill -KILL "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 50); do [ -z "$(cgroup_pids "$cg")" ] && break; sleep 0.1; done
  done
  [ -z "$(cgroup_pids "$cg")" ] || echo "[real-nodes] WARNING: processes left in $cg: $(cgroup_pids "$cg" | tr '\n' ' ')" >&2
  # 4. cgroups (deepest first), the lo alias, the bridge (and any veth still on it), state
  for h in $(all_hierarchies); do
    [ -d "$h$cg" ] && find "$h$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
    [ -d "$h$cg" ] && echo "[real-nodes] WARNING: cgroup $h$cg could not be removed" >&2
  done
  ip addr del "$(ip_of "$i")/32" dev lo 2>/dev/null || true
  local br; br=$(bridge_of "$i")
  if ip link show "$br" >/dev/null 2>&1; then
    for v in $(ip -o link show master "$br" | awk -F': ' '{print $2}' | cut -d@ -f1); do ip link del "$v" 2>/dev/null || true; done
    ip link del "$br" 2>/dev/null || true
  fi
  # containers' overlay mounts lived in the node's mount namespace, which is gone: nothing is mounted
  if grep -qF " $d/" /proc/self/mountinfo; then
    grep -F " $d/" /proc/self/mountinfo | awk '{print $5}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  fi
  rm -rf "$d"
  log "$name stopped and removed"
}
crictl_ps() { [ -S "$1/containerd.sock" ] && ctr --address "$1/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null; }

stop() {
  local names; names=$(our_nodes)
  [ -n "$names" ] || { rm -rf "$REAL"; return 0; }
  BIN=""
  if [ -s "$LAB_DIR/env" ]; then BIN=$(. "$LAB_DIR/env" && echo "$LAB_BIN"); fi
  [ -n "$BIN" ] || BIN=$("$here/build.sh" 2>/dev/null) || BIN=""
  local n; for n in $names; do stop_node "$n"; done
  rm -rf "$REAL"
}

# slurm-conf: up.sh calls it once slurm.conf and topology.conf are written, before slurmctld starts.
# Each real node is a static Slurm node of the same name, served by the slurmd image in a pod on it
# (host network). Under the lab's CommunicationParameters=NoInAddrAny slurmd binds the address its
# host name resolves to, 127.0.0.1 (not the node's lo alias), so the real nodes get 127.0.0.1 and
# ports 17000 + offset + 90 + i, the top of the lab's slurmd block (gpuXX use +XX: LAB_NODES <= 90).
slurm_conf() {
  [ "$N" -gt 0 ] || return 0
  : "${SLURM_CONF:?}"
  [ "${LAB_NODES:-8}" -le 90 ] || die "LAB_NODES must be at most 90 with real nodes (their slurmd ports follow the gpu nodes')"
  local i etc; etc=$(dirname "$SLURM_CONF")
  {
    echo "# Real kubelet nodes (e2e/lab/real-nodes.sh): served by the slurmd image in a pod on each."
    for i in $(seq 1 "$N"); do
      echo "NodeName=$(name_of "$i") NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((17000 + OFF + 90 + i)) CPUs=16 RealMemory=65536 Gres=gpu:h100:8 State=UNKNOWN"
    done
  } >> "$SLURM_CONF"
  echo "SwitchName=real Nodes=real[01-$(printf %02d "$N")]" >> "$etc/topology.conf"
}

status() {
  local n; for n in $(our_nodes); do
    printf '%s ip=%s kubelet=%s containerd=%s\n' "$n" "$(ip_of "$((10#${n#real}))")" \
      "$(cat "$RUN/$n-kubelet.pid" 2>/dev/null || echo -)" "$(cat "$RUN/$n-containerd.pid" 2>/dev/null || echo -)"
  done
}

import() {  # import FILE...: OCI archives into every running real node's containerd (skipped when there)
  local f n ref digest have
  for n in $(our_nodes); do
    [ -S "$REAL/$n/containerd.sock" ] || continue
    for f in "$@"; do
      read -r ref digest < <(tar -xOf "$f" index.json | python3 -c 'import json,sys; m=json.load(sys.stdin)["manifests"][0]; print(m["annotations"]["io.containerd.image.name"], m["digest"])')
      have=$(ctr --address "$REAL/$n/containerd.sock" -n k8s.io images ls "name==$ref" 2>/dev/null | awk 'NR > 1 {print $3}')
      if [ "$have" = "$digest" ]; then log "$n: $ref already there"; continue; fi
      ctr --address "$REAL/$n/containerd.sock" -n k8s.io images import "$f" >/dev/null
      log "$n: imported $ref ($digest)"
    done
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  slurm-conf) slurm_conf ;;
  import) shift; import "$@" ;;
  *) echo "usage: $0 start|stop|status|slurm-conf|import FILE..." >&2; exit 2 ;;
esac
