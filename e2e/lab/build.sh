#!/usr/bin/env bash
# Build the lab's Kubernetes control plane, kubectl and etcd from Go modules, once.
# Binaries are cached outside the checkout under a key of every input, so a fresh clone
# on the same machine reuses them; Go's module and build caches are outside it too.
# Prints the directory that holds the binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}
key=$(cat "$here"/k8s/go.mod "$here"/k8s/go.sum "$here"/k8s/cmd/*/main.go \
          "$here"/etcd/go.mod "$here"/etcd/go.sum "$here"/etcd/main.go "$0" | sha256sum | cut -c1-16)
out=$cache/bin-$key
bins=(kube-apiserver kube-scheduler kube-controller-manager kubectl etcd)
complete() { local b; for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if complete; then echo "$out"; exit 0; fi

command -v go >/dev/null || { echo "build.sh: Go is required (https://go.dev)" >&2; exit 1; }
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
flags=(-trimpath -ldflags='-s -w')
# -p 2 keeps memory in check on a 2-core machine; the link steps are the heavy part.
(cd "$here/etcd" && go build "${flags[@]}" -o "$tmp/etcd" .) >&2
(cd "$here/k8s" && go build "${flags[@]}" -o "$tmp/" ./cmd/...) >&2
rm -rf "$out"; mv "$tmp" "$out"; trap - EXIT
echo "build.sh: built ${bins[*]} in $(( $(date +%s) - t0 )) s" >&2
echo "$out"
