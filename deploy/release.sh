#!/usr/bin/env bash
# release.sh [--no-images] - the release artifacts of the version in pyproject.toml, in dist/<version>/:
#   slurmpool-<version>-py3-none-any.whl    the operator and the kubectl plugin (pip install it)
#   slurmpool-<version>.tgz                  the Helm chart (helm install slurmpool ./slurmpool-<version>.tgz)
#   slurmpool-<version>.oci.tar              the operator image, an OCI archive (deploy/docker/build-images.sh)
#   slurmd-<slurm>.oci.tar                   a slurmd image per Slurm in SLURMD_VERSIONS (default 22.05)
#   SHA256SUMS                               `sha256sum -c SHA256SUMS` checks them
# Image names: IMAGE_REPO (default slurmpool.local/slurmpool) and SLURMD_REPO, as build-images.sh;
# push an archive with e.g. `skopeo copy oci-archive:ARCHIVE docker://REGISTRY/slurmpool:<version>`.
# Refuses to run when the chart's version or appVersion is not pyproject's (one version, one place).
# `make release` runs it; --no-images skips the images (they need root and the Debian mirror).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
chart=$here/helm/slurmpool
die() { echo "release: $*" >&2; exit 1; }
version=$(python3 -c 'import tomllib,sys; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml")
for field in version appVersion; do
  chart_value=$(sed -n "s/^$field: *\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "$chart/Chart.yaml")
  [ "$chart_value" = "$version" ] || die "Chart.yaml $field is '$chart_value', pyproject.toml says '$version': set both"
done
grep -q "^## \[$version\]" "$repo/CHANGELOG.md" || die "CHANGELOG.md has no section '## [$version]'"
out=${RELEASE_DIR:-$repo/dist/$version}
rm -rf "$out" && mkdir -p "$out"
py=${PYTHON:-$repo/.venv/bin/python}

# the wheel, built from a clean copy of what it packages (no egg-info or caches of the checkout)
src=$(mktemp -d) && trap 'rm -rf "$src"' EXIT
cp -r "$repo/pyproject.toml" "$repo/README.md" "$repo/LICENSE" "$repo/operator" "$repo/bridge" "$src/"
find "$src" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
"$py" -m pip wheel -q --no-deps --wheel-dir "$out" "$src" > "$src/wheel.log" 2>&1 ||
  { cat "$src/wheel.log" >&2; die "the wheel did not build"; }

helm=${HELM:-$("$repo/e2e/lab/build-helm.sh")}
# linted with the two values that have no default (the installer sets them: docs/install.md)
"$helm" lint --strict "$chart" --set image.repository=registry.example.com/hpc/slurmpool \
  --set 'poolPolicy.imagePrefixes={registry.example.com/hpc/}' >/dev/null
"$helm" package "$chart" --destination "$out" >/dev/null

if [ "${1:-}" != --no-images ]; then
  while IFS='=' read -r name archive; do
    case $name in
      */slurmd:*) cp "$archive" "$out/slurmd-${name##*:}.oci.tar" ;;
      *) cp "$archive" "$out/slurmpool-$version.oci.tar" ;;
    esac
    echo "$name" >&2
  done < <(OPERATOR_IMAGE="${IMAGE_REPO:-slurmpool.local/slurmpool}:$version" "$here/docker/build-images.sh")
fi

(cd "$out" && sha256sum -- * > SHA256SUMS)
echo "release $version in $out:" >&2
cat "$out/SHA256SUMS"
