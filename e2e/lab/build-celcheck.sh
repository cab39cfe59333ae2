#!/usr/bin/env bash
# Build celcheck (e2e/lab/celcheck: the apiserver's validation and type checking of
# ValidatingAdmissionPolicies, from Go modules), once; cached like build-promql.sh under
# ~/.cache/slurmpool/celcheck-<key>/. Its module is the lab's Kubernetes module (e2e/lab/k8s/go.mod
# and go.sum, same versions as the lab's kube-apiserver), so it reuses that build's module and
# build caches. Prints the binary's path.
# --cached: print it only if built (exit 3 otherwise), never build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}
key=$(cat "$here"/k8s/go.mod "$here"/k8s/go.sum "$here"/celcheck/main.go "$0" | sha256sum | cut -c1-16)
out=$cache/celcheck-$key
if [ -x "$out/celcheck" ]; then echo "$out/celcheck"; exit 0; fi
[ "${1:-}" = --cached ] && exit 3
command -v go >/dev/null || { echo "build-celcheck.sh: Go is required (https://go.dev)" >&2; exit 1; }
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build-celcheck.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
mkdir "$tmp/src"
sed 's#^module .*#module slurmpool.io/lab/celcheck#' "$here/k8s/go.mod" > "$tmp/src/go.mod"
cp "$here/k8s/go.sum" "$tmp/src/go.sum"
cp "$here/celcheck/main.go" "$tmp/src/main.go"
(cd "$tmp/src" && go build -trimpath -ldflags='-s -w' -o "$tmp/celcheck" .) >&2
rm -rf "$tmp/src"
rm -rf "$out"; mv "$tmp" "$out"; trap - EXIT
echo "build-celcheck.sh: built celcheck in $(( $(date +%s) - t0 )) s" >&2
echo "$out/celcheck"
