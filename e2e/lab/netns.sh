#!/usr/bin/env bash
# netns.sh start N|add NODE|stop|addr|ctld-addr - one network namespace per dynamic slurmd (LAB_SLURM=24.11
# LAB_SLURM_NODES=dynamic; e2e/lab/README.md#dynamic-nodes-on-2411).
#
# Why: 24.11's slurmd -Z takes no Port= in --conf (its man page: "NodeName and Port are not
# supported"), and slurmctld records a dynamic node's address from the connection it registered on
# and reaches it on SlurmdPort. Eight dynamic slurmd on one address would all listen on one port, so
# each runs in a network namespace of its own, with its own address, as in a pod.
#
# Per lab (K = LAB_PORT_OFFSET/100, so labs with other offsets never collide):
#   bridge   sp${K}d with 10.252.K.1/24: slurmctld's address (SlurmctldHost=localhost(10.252.K.1)),
#            reached from this machine as a local address and from the namespaces over the bridge;
#            no gateway, no forwarding, no iptables rule (nothing leaves the bridge)
#   node i   namespace slurmpool-lab$K-gpuXX (/run/netns), lo and eth0 with 10.252.K.(10+i)/24,
#            its host end sp${K}d$i on the bridge
#   add NODE one more namespace, for a node outside gpu01..N (e2e/test_slurmd_image.py's imgtest01):
#            address 10.252.K.250, host end sp${K}d240
#   stop     removes exactly those (the offset recorded at start in $LAB_DIR/netns/port-offset)
#   addr / ctld-addr print the pattern of the namespace files (%s: the node) / slurmctld's address.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LAB_DIR=${LAB_DIR:-$(cd "$here/../.." && pwd)/.lab}
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
OFF=${LAB_PORT_OFFSET:-0}
[ "${1:-}" != stop ] || [ ! -s "$LAB_DIR/netns/port-offset" ] || OFF=$(cat "$LAB_DIR/netns/port-offset")
[ $(( OFF % 100 )) -eq 0 ] && [ "$OFF" -ge 0 ] && [ "$OFF" -le 25500 ] ||
  { echo "[netns] ERROR: LAB_PORT_OFFSET must be a multiple of 100 (0..25500) with 24.11's dynamic nodes" >&2; exit 1; }
K=$(( OFF / 100 ))
BR=sp${K}d
CTLD_IP=10.252.$K.1
ns_of() { echo "slurmpool-lab$K-$1"; }

start() {
  local n=$1 i node ns
  stop >/dev/null 2>&1 || true
  mkdir -p "$LAB_DIR/netns"
  echo "$OFF" > "$LAB_DIR/netns/port-offset"
  ip link add name "$BR" type bridge
  ip addr add "$CTLD_IP/24" dev "$BR"
  ip link set "$BR" up
  for i in $(seq 1 "$n"); do namespace "gpu$(printf %02d "$i")" "$i"; done
}

namespace() {  # namespace NODE I: NODE's namespace, address 10.252.K.(10+I), on the bridge
  local node=$1 i=$2 ns
  ns=$(ns_of "$node")
  ip netns add "$ns"
  ip link add "sp${K}d$i" type veth peer name "sp${K}p$i"
  ip link set "sp${K}p$i" netns "$ns"
  ip link set "sp${K}d$i" master "$BR" up
  ip -n "$ns" link set "sp${K}p$i" name eth0
  ip -n "$ns" addr add "10.252.$K.$((10 + i))/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
}

add() {
  local node=$1
  [[ "$node" =~ ^[a-z][a-z0-9-]{0,30}$ ]] || { echo "[netns] ERROR: bad node name $node" >&2; exit 2; }
  ip link show "$BR" >/dev/null 2>&1 || { echo "[netns] ERROR: no bridge $BR (netns.sh start first)" >&2; exit 1; }
  [ -e "/run/netns/$(ns_of "$node")" ] || namespace "$node" 240
}

stop() {
  local ns v
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^slurmpool-lab$K-[a-z][a-z0-9-]*$"); do ip netns del "$ns" || true; done
  if ip link show "$BR" >/dev/null 2>&1; then
    for v in $(ip -o link show master "$BR" | awk -F': ' '{print $2}' | cut -d@ -f1); do ip link del "$v" 2>/dev/null || true; done
    ip link del "$BR"
  fi
  rm -f "$LAB_DIR/netns/port-offset"
}

case ${1:-} in
  start) [[ "${2:-}" =~ ^[0-9]+$ ]] || { echo "usage: $0 start N" >&2; exit 2; }; start "$2" ;;
  add) add "${2:?usage: $0 add NODE}" ;;
  stop) stop ;;
  addr) echo "/run/netns/$(ns_of %s)" ;;
  ctld-addr) echo "$CTLD_IP" ;;
  *) echo "usage: $0 start N|add NODE|stop|addr|ctld-addr" >&2; exit 2 ;;
esac
