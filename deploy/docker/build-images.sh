#!/usr/bin/env bash
# build-images.sh [--import] - the operator image and the slurmd image as OCI archives, built on
# this machine without a container engine or a registry, from a Debian base made by debootstrap.
#
#   base      debootstrap --variant=minbase $IMAGE_SUITE (default bookworm), cached
#   slurmpool the steps of deploy/docker/Dockerfile on that base: a wheel of operator/ and bridge/,
#             a virtualenv /opt/slurmpool with it and constraints.txt (Debian's python3 instead of the
#             python image), uid 65532, ENTRYPOINT slurmpool, CMD run ...
#   slurmd    deploy/docker/slurmd/Dockerfile's steps: Debian's slurmd and munge (bookworm: Slurm
#             22.05), deploy/docker/slurmd/entrypoint.sh as /usr/local/bin/slurmd-entrypoint
#
# Archives and the base are cached under ~/.cache/slurmpool/images (SLURMPOOL_CACHE), keyed by their
# inputs, so an unchanged image is not rebuilt. Prints "NAME=ARCHIVE" for each image.
# --import: also import both into the lab's real nodes (e2e/lab/real-nodes.sh import).
# Image names: OPERATOR_IMAGE (default slurmpool.local/slurmpool:<version>), SLURMD_IMAGE
# (default slurmpool.local/slurmd:<Slurm major.minor>). To push to a registry, load an archive with
# any OCI tool, e.g. `skopeo copy oci-archive:ARCHIVE docker://REGISTRY/slurmpool:TAG` (README).
# Needs root (debootstrap, chroot) and network to the Debian mirror and PyPI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}/images
SUITE=${IMAGE_SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
T0=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - ${1:-$T0}) / 1000000 )); }
log() { echo "[build-images +$(ms)ms] $*" >&2; }
die() { echo "[build-images] ERROR: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (debootstrap and chroot)"
for b in debootstrap unshare chroot tar python3; do command -v "$b" >/dev/null || die "'$b' not found (make deps)"; done
mkdir -p "$cache"
work=$(mktemp -d "$cache/work.XXXXXX")
trap 'rm -rf "$work"' EXIT

# in_root ROOTFS CMD...: CMD chrooted into ROOTFS, in a private mount namespace (its /proc and /dev
# mounts vanish with it), with the host's resolver and CA bundle for apt and pip.
in_root() {
  local r=$1; shift
  cp /etc/resolv.conf "$r/etc/resolv.conf"
  [ -r /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$r/tmp/host-ca.crt"
  unshare --mount --propagation private -- bash -c '
    r=$1; shift
    mount -t proc proc "$r/proc"
    mount --bind /dev "$r/dev"
    exec chroot "$r" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive PIP_CERT=/tmp/host-ca.crt \
      PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"' _ "$r" "$@" >> "$work/chroot.log" 2>&1 ||
    { tail -n 30 "$work/chroot.log" >&2; die "in $r: $* failed"; }
}
# finish ROOTFS: what an image must not carry from its build
finish() {
  rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb \
    "$1"/tmp/* "$1"/usr/sbin/policy-rc.d "$1"/var/log/apt/* "$1"/var/log/dpkg.log
  : > "$1/etc/resolv.conf"
}

# ---------------------------------------------------------------- base: debootstrap minbase
base_key=$(printf '%s\n' "$SUITE" "$MIRROR" "$SECURITY_MIRROR" "$(sed -n '/^# ---- base begin/,/^# ---- base end/p' "$0")" | sha256sum | cut -c1-16)
base=$cache/base-$SUITE-$base_key
# ---- base begin
if [ ! -e "$base/.complete" ]; then
  t=$(date +%s%N)
  rm -rf "$base" "$base.tmp"
  debootstrap --variant=minbase "$SUITE" "$base.tmp" "$MIRROR" > "$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
  cat > "$base.tmp/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
EOF
  # no daemon starts while packages install
  printf '#!/bin/sh\nexit 101\n' > "$base.tmp/usr/sbin/policy-rc.d"; chmod 755 "$base.tmp/usr/sbin/policy-rc.d"
  in_root "$base.tmp" sh -c 'apt-get update -qq && apt-get upgrade -y -qq >/dev/null'
  finish "$base.tmp"
  touch "$base.tmp/.complete"; mv "$base.tmp" "$base"
  log "base $SUITE (debootstrap minbase) in $(ms "$t")ms: $(du -sh "$base" | cut -f1)"
fi
# ---- base end
# new_rootfs DIR: a copy of the base to build an image in
new_rootfs() {
  cp -a "$base" "$1"; rm -f "$1/.complete"
  printf '#!/bin/sh\nexit 101\n' > "$1/usr/sbin/policy-rc.d"; chmod 755 "$1/usr/sbin/policy-rc.d"
}
tree_hash() { (cd "$repo" && find "$@" -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16; }

# ---------------------------------------------------------------- slurmd
slurmd_key=$(printf '%s\n' "$base_key" "${SLURMD_IMAGE:-}" "$(tree_hash deploy/docker/slurmd e2e/lab/oci.py)" "$(sed -n '/^# ---- slurmd begin/,/^# ---- slurmd end/p' "$0")" | sha256sum | cut -c1-16)
# ---- slurmd begin
slurmd_tar=$(ls "$cache"/slurmd-"$SUITE"-"$slurmd_key"-*.tar 2>/dev/null | head -n1 || true)
if [ -z "$slurmd_tar" ]; then
  t=$(date +%s%N)
  r=$work/slurmd
  new_rootfs "$r"
  in_root "$r" sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends slurmd munge >/dev/null'
  slurm_version=$(chroot "$r" dpkg-query -W -f='${Version}' slurmd | cut -d. -f1,2)
  install -m 0755 "$repo/deploy/docker/slurmd/entrypoint.sh" "$r/usr/local/bin/slurmd-entrypoint"
  finish "$r"
  name=${SLURMD_IMAGE:-slurmpool.local/slurmd:$slurm_version}
  slurmd_tar=$cache/slurmd-$SUITE-$slurmd_key-$slurm_version.tar
  python3 "$repo/e2e/lab/oci.py" --rootfs "$r" --name "$name" --out "$slurmd_tar" \
    --entrypoint '["/usr/local/bin/slurmd-entrypoint"]' --env SLURM_AUTH_DIR=/etc/slurm-auth \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label org.opencontainers.image.title=slurmpool-slurmd --label "org.opencontainers.image.version=$slurm_version" >/dev/null
  echo "$name" > "$slurmd_tar.name"
  rm -rf "$r"
  log "slurmd image $name (Slurm $slurm_version) in $(ms "$t")ms: $(du -h "$slurmd_tar" | cut -f1)"
fi
# ---- slurmd end

# ---------------------------------------------------------------- slurmpool (the operator)
version=$(python3 -c 'import tomllib,sys; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml")
op_name=${OPERATOR_IMAGE:-slurmpool.local/slurmpool:$version}
# the Dockerfile's build stage COPYs exactly these (check.sh verifies the same list)
mapfile -t sources < <(awk '/^FROM .* AS build/{b=1; next} /^FROM /{b=0} b && /^COPY / {for (i=2; i<NF; i++) if ($i !~ /^--/) print $i}' "$here/Dockerfile")
op_key=$(printf '%s\n' "$base_key" "$op_name" "$(tree_hash "${sources[@]}" deploy/docker/Dockerfile e2e/lab/oci.py)" "$(sed -n '/^# ---- operator begin/,/^# ---- operator end/p' "$0")" | sha256sum | cut -c1-16)
op_tar=$cache/slurmpool-$op_key.tar
# ---- operator begin
if [ ! -s "$op_tar" ]; then
  t=$(date +%s%N)
  r=$work/slurmpool
  new_rootfs "$r"
  in_root "$r" sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null'
  # build stage: the wheel from the COPY sources, then the virtualenv with its pinned dependencies
  mkdir -p "$r/tmp/src"
  for s in "${sources[@]}"; do mkdir -p "$r/tmp/src/$(dirname "$s")"; cp -r "$repo/$s" "$r/tmp/src/$s"; done
  find "$r/tmp/src" -name __pycache__ -prune -exec rm -rf {} +
  in_root "$r" sh -c 'set -e; python3 -m venv /opt/slurmpool
    /opt/slurmpool/bin/pip wheel -q --no-deps --wheel-dir /tmp/wheels /tmp/src
    /opt/slurmpool/bin/pip install -q --constraint /tmp/src/deploy/docker/constraints.txt /tmp/wheels/slurmpool-*.whl
    /opt/slurmpool/bin/pip check >/dev/null
    /opt/slurmpool/bin/slurmpool crd > /dev/null'
  finish "$r"
  python3 "$repo/e2e/lab/oci.py" --rootfs "$r" --name "$op_name" --out "$op_tar" \
    --entrypoint '["slurmpool"]' --cmd '["run", "--metrics-port=8080", "--liveness=http://0.0.0.0:8081/healthz"]' \
    --env PATH=/opt/slurmpool/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 --env HOME=/tmp --env USER=slurmpool --user 65532:65532 \
    --label org.opencontainers.image.title=slurmpool --label "org.opencontainers.image.version=$version" \
    --label org.opencontainers.image.licenses=Apache-2.0 >/dev/null
  echo "$op_name" > "$op_tar.name"
  rm -rf "$r"
  log "operator image $op_name in $(ms "$t")ms: $(du -h "$op_tar" | cut -f1)"
fi
# ---- operator end

echo "$op_name=$op_tar"
echo "$(cat "$slurmd_tar.name")=$slurmd_tar"
if [ "${1:-}" = --import ]; then
  "$repo/e2e/lab/real-nodes.sh" import "$op_tar" "$slurmd_tar" >&2
fi
log "done"
