#!/usr/bin/env bash
# build-pyxis.sh INCLUDE_DIR - NVIDIA's enroot and pyxis (srun --container-image) for the lab, built
# offline from ../shared/vendor (issue 29), once, cached like build-slurm.sh under ~/.cache/slurmpool:
#   enroot-4.1.2-<key>/      enroot installed at this prefix (bin/enroot, etc/enroot/enroot.conf ...),
#                            with the lab's enroot.conf (below); the same for every Slurm
#   pyxis-0.24.0-<key>/      spank_pyxis.so built against INCLUDE_DIR/slurm/spank.h: a SPANK plugin
#                            must be built with the Slurm it is loaded by (22.05: Debian's
#                            libslurm-dev, /usr/include; 26.05: the lab's build, <prefix>/include)
# Prints "ENROOT_PREFIX=DIR" and "PYXIS_SO=FILE"; with --image also "ENROOT_IMAGE_STAGE=DIR", enroot
# for the slurmd images (below). The slurmd images build the same sources in
# their own Debian (deploy/docker/build-images.sh).
#
# The lab's enroot.conf puts every path under /run/slurm: the agent runs each lab slurmd in a mount
# namespace of its own with a per-node directory there (--slurmd-run-dir), and slurmstepd and enroot
# inherit it. All lab nodes share one host, and enroot's default paths collide between nodes of one
# job ("unsquashfs: failed to make directory ... File exists"; shared/reference/pyxis-enroot-notes.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
image_stage=0; [ "${1:-}" != --image ] || { image_stage=1; shift; }
include=${1:?usage: build-pyxis.sh [--image] INCLUDE_DIR (where slurm/spank.h is)}
[ -f "$include/slurm/spank.h" ] || { echo "build-pyxis.sh: no $include/slurm/spank.h" >&2; exit 1; }
vendor=$(cd "$here/../../.." && pwd)/shared/vendor
[ -d "$vendor" ] || vendor=/work/shared/vendor
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}
enroot_tar=$vendor/enroot-4.1.2-with-deps.tar.xz
pyxis_tar=$vendor/pyxis-0.24.0.tar.xz

# Build dependencies and what enroot runs (Debian 12; shared/reference/pyxis-enroot-notes.md).
deps=(build-essential libcap2-bin libtool automake libmd-dev curl gawk jq squashfs-tools parallel zstd
      bsdmainutils pigz busybox-static)
missing=()
for p in "${deps[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "build-pyxis.sh: need root to install: ${missing[*]}" >&2; exit 1; }
  echo "build-pyxis.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi
(cd "$vendor" && grep -E " (enroot-4.1.2-with-deps|pyxis-0.24.0).tar.xz\$" SHA256SUMS | sha256sum -c --quiet -) >&2 \
  || { echo "build-pyxis.sh: the vendored tarballs do not match $vendor/SHA256SUMS" >&2; exit 1; }

mkdir -p "$cache"
exec 9>"$cache/.build-pyxis.lock"
flock 9
work=$(mktemp -d "$cache/build-pyxis.XXXXXX")
trap 'rm -rf "$work"' EXIT

# keyed by the tarball and the enroot section of this script (a change elsewhere builds nothing again)
ekey=$( (cat "$enroot_tar"; sed -n '/^# ---- enroot begin/,/^# ---- enroot end/p' "$0") | sha256sum | cut -c1-16)
# ---- enroot begin
enroot=$cache/enroot-4.1.2-$ekey
if [ ! -f "$enroot/.complete" ]; then
  rm -rf "$enroot"; t=$(date +%s%N)
  mkdir -p "$work/enroot" && tar -xJf "$enroot_tar" -C "$work/enroot" --strip-components=1
  (cd "$work/enroot" && make -j2 prefix="$enroot" sysconfdir="$enroot/etc" >make.out 2>&1 &&
    make install prefix="$enroot" sysconfdir="$enroot/etc" >>make.out 2>&1) \
    || { tail -40 "$work/enroot/make.out" >&2; echo "build-pyxis.sh: enroot failed" >&2; exit 1; }
  # $(...) and ${UID} are evaluated by enroot at every run (it evals its configuration)
  cat > "$enroot/etc/enroot/enroot.conf" <<'EOF'
# The lab's enroot configuration (e2e/lab/build-pyxis.sh): /run/slurm is per node in the lab (each
# slurmd runs in a mount namespace with its node's directory there), so these paths are per node.
ENROOT_RUNTIME_PATH /run/slurm/enroot/runtime/user-$(id -u)
ENROOT_CACHE_PATH   /run/slurm/enroot/cache/group-$(id -g)
ENROOT_DATA_PATH    /run/slurm/enroot/data/user-$(id -u)
ENROOT_TEMP_PATH    /run/slurm/enroot/tmp
ENROOT_SQUASH_OPTIONS -comp lzo -noD
EOF
  touch "$enroot/.complete"
  echo "build-pyxis.sh: enroot 4.1.2 in $(( ($(date +%s%N) - t) / 1000000 )) ms" >&2
fi

# The slurmd images' enroot (deploy/docker/build-images.sh): prefix /usr/local, configuration in
# /etc/enroot, staged in a tree to copy into an image (the `dist` way: the stage's path taken out of
# the files that name it). Its enroot.conf: deploy/docker/slurmd/enroot.conf.
stage=$cache/enroot-4.1.2-image-$ekey
if [ "$image_stage" = 1 ] && [ ! -f "$stage/.complete" ]; then
  rm -rf "$stage" "$work/enroot"; t=$(date +%s%N)
  mkdir -p "$work/enroot" && tar -xJf "$enroot_tar" -C "$work/enroot" --strip-components=1
  (cd "$work/enroot" && make -j2 prefix=/usr/local sysconfdir=/etc DESTDIR="$stage" >make.out 2>&1 &&
    make install prefix=/usr/local sysconfdir=/etc DESTDIR="$stage" >>make.out 2>&1) \
    || { tail -40 "$work/enroot/make.out" >&2; echo "build-pyxis.sh: enroot (image) failed" >&2; exit 1; }
  sed -i "s;$stage;;g" "$stage/usr/local/bin/enroot" "$stage/etc/enroot/enroot.conf"
  touch "$stage/.complete"
  echo "build-pyxis.sh: enroot 4.1.2 for the images in $(( ($(date +%s%N) - t) / 1000000 )) ms" >&2
fi
# ---- enroot end

pkey=$(cat "$pyxis_tar" "$include/slurm/spank.h" "$include/slurm/slurm_version.h" 2>/dev/null |
  sha256sum | cut -c1-16)
pyxis=$cache/pyxis-0.24.0-$pkey
if [ ! -f "$pyxis/.complete" ]; then
  rm -rf "$pyxis"; t=$(date +%s%N)
  mkdir -p "$work/pyxis" "$pyxis" && tar -xJf "$pyxis_tar" -C "$work/pyxis" --strip-components=1
  (cd "$work/pyxis" && CPPFLAGS="-I$include" make >make.out 2>&1) \
    || { tail -40 "$work/pyxis/make.out" >&2; echo "build-pyxis.sh: pyxis failed" >&2; exit 1; }
  install -m 644 "$work/pyxis/spank_pyxis.so" "$pyxis/spank_pyxis.so"
  grep -h "define SLURM_VERSION_STRING" "$include/slurm/slurm_version.h" > "$pyxis/built-against" || true
  touch "$pyxis/.complete"
  echo "build-pyxis.sh: pyxis 0.24.0 against $include in $(( ($(date +%s%N) - t) / 1000000 )) ms" >&2
fi
[ "$image_stage" = 0 ] || echo "ENROOT_IMAGE_STAGE=$stage"
echo "ENROOT_PREFIX=$enroot"
echo "PYXIS_SO=$pyxis/spank_pyxis.so"
