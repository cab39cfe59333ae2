#!/usr/bin/env bash
# Build the lab's Kubernetes control plane, kubectl, the kubelet (real nodes: real-nodes.sh) and etcd
# from Go modules, once.
# Binaries are cached outside the checkout under a key of every input, so a fresh clone
# on the same machine reuses them; Go's module and build caches are outside it too.
# Prints the directory that holds the binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}
key=$(cat "$here"/k8s/go.mod "$here"/k8s/go.sum "$here"/k8s/cmd/*/main.go \
          "$here"/etcd/go.mod "$here"/etcd/go.sum "$here"/etcd/main.go "$0" | sha256sum | cut -c1-16)
out=$cache/bin-$key
bins=(kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet etcd)
complete() { local b; for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if complete; then echo "$out"; exit 0; fi

command -v go >/dev/null || { echo "build.sh: Go is required (https://go.dev)" >&2; exit 1; }
mkdir -p "$cache"
# One build at a time (labs started side by side on a cold machine): the others wait, then find it.
exec 9>"$cache/.build-bin-$key.lock"
flock 9
if complete; then echo "$out"; exit 0; fi
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
flags=(-trimpath -ldflags='-s -w')
# The Kubernetes binaries report the version they are built from (else v0.0.0-master).
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$here/k8s/go.mod")
[[ "$k8s_version" =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "build.sh: no k8s.io/kubernetes version in k8s/go.mod" >&2; exit 1; }
vpkg=k8s.io/component-base/version
k8s_flags=(-trimpath -ldflags="-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=${BASH_REMATCH[1]} -X $vpkg.gitMinor=${BASH_REMATCH[2]} -X $vpkg.gitTreeState=clean")
# -p 2 keeps memory in check on a 2-core machine; the link steps are the heavy part.
(cd "$here/etcd" && go build "${flags[@]}" -o "$tmp/etcd" .) >&2
(cd "$here/k8s" && go build "${k8s_flags[@]}" -o "$tmp/" ./cmd/...) >&2
rm -rf "$out"; mv "$tmp" "$out"; trap - EXIT
echo "build.sh: built ${bins[*]} in $(( $(date +%s) - t0 )) s" >&2
echo "$out"
