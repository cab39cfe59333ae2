#!/usr/bin/env bash
# Build promql-check (e2e/lab/promql: Prometheus' PromQL parser, from Go modules), once; cached
# like build-helm.sh under ~/.cache/slurmpool/promql-<key>/. Prints the binary's path.
# --cached: print it only if built (exit 3 otherwise), never build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}
key=$(cat "$here"/promql/go.mod "$here"/promql/go.sum "$here"/promql/main.go "$0" | sha256sum | cut -c1-16)
out=$cache/promql-$key
if [ -x "$out/promql-check" ]; then echo "$out/promql-check"; exit 0; fi
[ "${1:-}" = --cached ] && exit 3
command -v go >/dev/null || { echo "build-promql.sh: Go is required (https://go.dev)" >&2; exit 1; }
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build-promql.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
(cd "$here/promql" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/promql-check" .) >&2
rm -rf "$out"; mv "$tmp" "$out"; trap - EXIT
echo "build-promql.sh: built promql-check in $(( $(date +%s) - t0 )) s" >&2
echo "$out/promql-check"
