#!/usr/bin/env bash
# Build Prometheus and promtool (github.com/prometheus/prometheus cmd/prometheus and cmd/promtool,
# pinned by the `tool` directives in prometheus/go.mod: the same module version as the PromQL
# parser of e2e/lab/promql), once. Cached like build-helm.sh under a key of every input
# (~/.cache/slurmpool/prometheus-<key>/{prometheus,promtool}). Prints that directory.
# --cached: print it only if built (exit 3 otherwise), never build (the unit tests use it).
#
# Built with `-tags remove_all_sd`: only file and HTTP service discovery (the lab uses file_sd),
# not the cloud SDKs of the other mechanisms; PromQL, rules, TSDB and the HTTP API are whole.
# No web UI assets (the `builtinassets` tag needs the npm build): the API is what the tests use.
# A Prometheus upgrade: cd e2e/lab/prometheus && go get -tool github.com/prometheus/prometheus/cmd/{prometheus,promtool}@vX
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}
key=$(cat "$here"/prometheus/go.mod "$here"/prometheus/go.sum "$0" | sha256sum | cut -c1-16)
out=$cache/prometheus-$key
if [ -x "$out/prometheus" ] && [ -x "$out/promtool" ]; then echo "$out"; exit 0; fi
[ "${1:-}" = --cached ] && exit 3

command -v go >/dev/null || { echo "build-prometheus.sh: Go is required (https://go.dev)" >&2; exit 1; }
modv=$(awk '$1 == "github.com/prometheus/prometheus" {print $2}' "$here/prometheus/go.mod")
[ -n "$modv" ] || { echo "build-prometheus.sh: github.com/prometheus/prometheus is not required in $here/prometheus/go.mod" >&2; exit 1; }
# Module v0.316.0 is Prometheus 3.16.0 (the Go module keeps a v0 major; its VERSION file has the release).
version=$(cd "$here/prometheus" && cat "$(go list -m -f '{{.Dir}}' github.com/prometheus/prometheus)/VERSION")
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build-prometheus.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
# As Prometheus' own promu build: static, stripped, the version stamped in.
v=github.com/prometheus/common/version
(cd "$here/prometheus" && CGO_ENABLED=0 go build -trimpath -tags remove_all_sd \
  -ldflags="-s -w -X $v.Version=$version -X $v.Revision=$modv -X $v.Branch=module -X $v.BuildUser=slurmpool" \
  -o "$tmp/" github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool) >&2
rm -rf "$out"; mv "$tmp" "$out"; trap - EXIT
echo "build-prometheus.sh: built prometheus and promtool $version in $(( $(date +%s) - t0 )) s" >&2
echo "$out"
