#!/usr/bin/env bash
# Build Helm from Go modules (helm.sh/helm/v4/cmd/helm, pinned by the `tool` directive in
# helm/go.mod), once. Like build.sh, the binary is cached outside the checkout under a key of
# every input (~/.cache/slurmpool/helm-<key>/helm), so later runs take milliseconds; Go's module
# and build caches are outside it too. Prints the path of the helm binary.
# The key covers helm/go.mod and go.sum: a Helm upgrade is `cd e2e/lab/helm && go get -tool helm.sh/helm/v4/cmd/helm@vX`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}
key=$(cat "$here"/helm/go.mod "$here"/helm/go.sum "$0" | sha256sum | cut -c1-16)
out=$cache/helm-$key
if [ -x "$out/helm" ]; then echo "$out/helm"; exit 0; fi
# --cached: only say where a built helm is (exit 3 if none), never build (the unit tests use it).
[ "${1:-}" = --cached ] && exit 3

command -v go >/dev/null || { echo "build-helm.sh: Go is required (https://go.dev)" >&2; exit 1; }
version=$(awk '$1 == "helm.sh/helm/v4" {print $2}' "$here/helm/go.mod")
[ -n "$version" ] || { echo "build-helm.sh: helm.sh/helm/v4 is not required in $here/helm/go.mod" >&2; exit 1; }
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build-helm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
# As helm's own Makefile: static, stripped, the version stamped in.
v=helm.sh/helm/v4/internal/version
(cd "$here/helm" && CGO_ENABLED=0 go build -trimpath \
  -ldflags="-s -w -X $v.version=$version -X $v.metadata= -X $v.gitTreeState=clean" \
  -o "$tmp/helm" helm.sh/helm/v4/cmd/helm) >&2
rm -rf "$out"; mv "$tmp" "$out"; trap - EXIT
echo "build-helm.sh: built helm $version in $(( $(date +%s) - t0 )) s" >&2
echo "$out/helm"
