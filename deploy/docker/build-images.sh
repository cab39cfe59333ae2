#!/usr/bin/env bash
# build-images.sh [--import] - the operator image and the slurmd image as OCI archives, built on
# this machine without a container engine or a registry, from a Debian base made by debootstrap.
#
#   base      debootstrap --variant=minbase $IMAGE_SUITE (default bookworm), cached
#   slurmpool the steps of deploy/docker/Dockerfile on that base: a wheel of operator/ and bridge/,
#             a virtualenv /opt/slurmpool with it and constraints.txt (Debian's python3 instead of the
#             python image), uid 65532, ENTRYPOINT slurmpool, CMD run ...
#   slurmd    one per Slurm in SLURMD_VERSIONS (default 22.05; the lab offers 22.05 24.11 26.05),
#             with munge and deploy/docker/slurmd/entrypoint.sh as /usr/local/bin/slurmd-entrypoint,
#             labelled with what its tree holds (deploy/docker/slurmd/contents.py: the Slurm version and
#             the plugins among NVML, NVIDIA, PMIx and pyxis it can load; docs/slurmd-pod.md):
#               22.05  deploy/docker/slurmd/Dockerfile's steps on bookworm: Debian 12's slurmd
#               24.11  the same steps on trixie (a second base, Debian 13): Debian 13's slurmd
#               26.05  what Dockerfile.source makes, without compiling again: the lab's build of the
#                      vendored tarball (e2e/lab/build-slurm.sh, cached) copied in at its own prefix
#                      (compiled into the binaries), on bookworm with the libraries it links to
#             and its -pyxis variant (SLURMD_PYXIS=1, the default; 0: none): the same image with
#             NVIDIA's pyxis and enroot built for that Slurm from ../shared/vendor (add_pyxis),
#             tagged <version>-pyxis. `make images SLURM="24.11 26.05"` sets SLURMD_VERSIONS. Only 22.05 is built unless
#             asked, so `make test` (its real nodes run 22.05) pays for no other.
#
# Archives and the base are cached under ~/.cache/slurmpool/images (SLURMPOOL_CACHE), keyed by their
# inputs, so an unchanged image is not rebuilt. Prints "NAME=ARCHIVE" for each image.
# --slurmd-only: the slurmd images only (e2e/test_slurmd_image.py).
# --import: also import them all into the lab's real nodes (e2e/lab/real-nodes.sh import).
# Image names: OPERATOR_IMAGE (default slurmpool.local/slurmpool:<version>), SLURMD_REPO
# (default slurmpool.local/slurmd, tagged with the Slurm major.minor). To push to a registry, load an archive with
# any OCI tool, e.g. `skopeo copy oci-archive:ARCHIVE docker://REGISTRY/slurmpool:TAG` (README).
# Needs root (debootstrap, chroot) and network to the Debian mirror and PyPI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}/images
SUITE=${IMAGE_SUITE:-bookworm}   # the operator's base
SLURMD_VERSIONS=${SLURMD_VERSIONS:-22.05}
SLURMD_REPO=${SLURMD_REPO:-slurmpool.local/slurmd}
SLURMD_PYXIS=${SLURMD_PYXIS:-1}   # 0: no -pyxis variants
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
# One build at a time (two labs of make test, or a user's make images beside them): the base and the
# archives are written in place once built.
exec 9>"$cache/.build-images.lock"
flock 9
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
# ensure_base SUITE: sets base (its directory) and base_key; built once per suite
ensure_base() {
  local suite=$1 t
  base_key=$(printf '%s\n' "$suite" "$MIRROR" "$SECURITY_MIRROR" "$(sed -n '/^# ---- base begin/,/^# ---- base end/p' "$0")" | sha256sum | cut -c1-16)
  base=$cache/base-$suite-$base_key
# ---- base begin
  [ ! -e "$base/.complete" ] || return 0
  t=$(date +%s%N)
  rm -rf "$base" "$base.tmp"
  debootstrap --variant=minbase "$suite" "$base.tmp" "$MIRROR" > "$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; die "debootstrap $suite failed"; }
  cat > "$base.tmp/etc/apt/sources.list" <<EOF
deb $MIRROR $suite main
deb $MIRROR $suite-updates main
deb $SECURITY_MIRROR $suite-security main
EOF
  # no daemon starts while packages install
  printf '#!/bin/sh\nexit 101\n' > "$base.tmp/usr/sbin/policy-rc.d"; chmod 755 "$base.tmp/usr/sbin/policy-rc.d"
  in_root "$base.tmp" sh -c 'apt-get update -qq && apt-get upgrade -y -qq >/dev/null'
  finish "$base.tmp"
  touch "$base.tmp/.complete"; mv "$base.tmp" "$base"
  log "base $suite (debootstrap minbase) in $(ms "$t")ms: $(du -sh "$base" | cut -f1)"
# ---- base end
}
# new_rootfs DIR: a copy of the base to build an image in
new_rootfs() {
  cp -a "$base" "$1"; rm -f "$1/.complete"
  printf '#!/bin/sh\nexit 101\n' > "$1/usr/sbin/policy-rc.d"; chmod 755 "$1/usr/sbin/policy-rc.d"
}
tree_hash() { (cd "$repo" && find "$@" -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16; }

# ---------------------------------------------------------------- slurmd
# slurmd_suite VERSION: the Debian its image is built on
slurmd_suite() {
  case $1 in 22.05|26.05) echo bookworm ;; 24.11) echo trixie ;;
    *) die "SLURMD_VERSIONS: $1 is not a Slurm the lab offers (22.05 24.11 26.05)" ;; esac
}
# build_slurmd VERSION [pyxis]: sets slurmd_tar, the image's archive (built once per key); with
# pyxis, the -pyxis variant: the same image plus pyxis and enroot (add_pyxis)
build_slurmd() {
  local want=$1 variant=${2:-} suite prefix="" key r t v name pmix
  suite=$(slurmd_suite "$want")
  ensure_base "$suite"
  # 26.05: the lab's build, whose directory name carries the key of its inputs (script, tarball)
  [ "$want" != 26.05 ] || prefix=$("$repo/e2e/lab/build-slurm.sh") || die "e2e/lab/build-slurm.sh failed"
  key=$(printf '%s\n' "$base_key" "$want" "$variant" "$prefix" "$SLURMD_REPO" "$(tree_hash deploy/docker/slurmd e2e/lab/oci.py ${variant:+e2e/lab/build-pyxis.sh})" "$(sed -n '/^# ---- slurmd begin/,/^# ---- slurmd end/p' "$0")" | sha256sum | cut -c1-16)
  slurmd_tar=$cache/slurmd-$suite-$key-$want${variant:+-$variant}.tar
# ---- slurmd begin
  [ ! -s "$slurmd_tar" ] || return 0
  t=$(date +%s%N)
  r=$work/slurmd-$want
  new_rootfs "$r"
  if [ -z "$prefix" ]; then
    # 22.05: Debian 12's mpi_pmix.so dlopens the unversioned pmix2/lib/libpmix.so, which only
    # libpmix-dev installs (srun --mpi=pmix; issue 41). 24.11's opens libpmix.so.2 (libpmix2t64, a dependency).
    pmix=""; [ "$want" != 22.05 ] || pmix=libpmix-dev
    in_root "$r" sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends slurmd munge $pmix >/dev/null"
    v=$(chroot "$r" dpkg-query -W -f='${Version}' slurmd)
  else
    install_built_slurm "$r" "$prefix"
    v=$(basename "$prefix" | sed 's/^slurm-\([0-9.]*\)-.*/\1/')
  fi
  case $v in "$want".*) ;; *) die "the $suite image got Slurm $v, not $want" ;; esac
  install -m 0755 "$repo/deploy/docker/slurmd/entrypoint.sh" "$r/usr/local/bin/slurmd-entrypoint"
  [ -z "$variant" ] || add_pyxis "$r" "$want" "$v" "$prefix"
  finish "$r"
  name=$SLURMD_REPO:$want${variant:+-$variant}
  # what the tree holds (io.slurmpool.slurm.version, io.slurmpool.slurm.plugins), read from its files
  mapfile -t contents < <(python3 "$repo/deploy/docker/slurmd/contents.py" "$r" "$v")
  [ ${#contents[@]} = 2 ] || die "deploy/docker/slurmd/contents.py $r $v failed"
  python3 "$repo/e2e/lab/oci.py" --rootfs "$r" --name "$name" --out "$slurmd_tar.tmp" \
    --entrypoint '["/usr/local/bin/slurmd-entrypoint"]' --env SLURM_AUTH_DIR=/etc/slurm-auth \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label org.opencontainers.image.title=slurmpool-slurmd --label "org.opencontainers.image.version=$v" \
    --label "${contents[0]}" --label "${contents[1]}" >/dev/null
  mv "$slurmd_tar.tmp" "$slurmd_tar"
  echo "$name" > "$slurmd_tar.name"
  rm -rf "$r"
  log "slurmd image $name (Slurm $v, $suite; ${contents[1]}) in $(ms "$t")ms: $(du -h "$slurmd_tar" | cut -f1)"
}
# add_pyxis ROOTFS WANT VERSION PREFIX: pyxis built against this image's Slurm (spank.h of its
# libslurm-dev, of the very version its slurmd has; 26.05: the build's own include/), enroot with what
# it runs, enroot.conf, and the plugstack configuration at Slurm's default PlugStackConfig
# (/etc/slurm/plugstack.conf: sysconfdir of Debian's packages, and of the 26.05 build through its link).
# The build: e2e/lab/build-pyxis.sh (cached); deploy/docker/slurmd/Dockerfile.pyxis does the same.
add_pyxis() {
  local r=$1 want=$2 v=$3 prefix=$4 include out so stage
  if [ -n "$prefix" ]; then include=$prefix/include
  else
    in_root "$r" sh -c "cd /tmp && apt-get download -qq libslurm-dev=$v"
    mkdir -p "$work/hdr-$want"; dpkg-deb -x "$r"/tmp/libslurm-dev_*.deb "$work/hdr-$want"; rm -f "$r"/tmp/libslurm-dev_*.deb
    include=$work/hdr-$want/usr/include
  fi
  out=$("$repo/e2e/lab/build-pyxis.sh" --image "$include") || die "e2e/lab/build-pyxis.sh failed"
  so=$(sed -n 's/^PYXIS_SO=//p' <<< "$out"); stage=$(sed -n 's/^ENROOT_IMAGE_STAGE=//p' <<< "$out")
  # what enroot runs (pyxis unpacks images with unsquashfs; curl, jq, parallel, pigz, zstd: pulls)
  in_root "$r" sh -c 'apt-get install -y -qq --no-install-recommends bash ca-certificates curl gawk jq squashfs-tools \
    parallel pigz zstd libcap2-bin findutils >/dev/null'
  tar -C "$stage" --exclude=./.complete -cf - . | tar -C "$r" -xf -
  install -D -m 0644 "$repo/deploy/docker/slurmd/enroot.conf" "$r/etc/enroot/enroot.conf"
  install -D -m 0644 "$so" "$r/usr/local/lib/slurm/spank_pyxis.so"
  mkdir -p "$r/etc/slurm/plugstack.conf.d" "$r/etc/enroot/user"
  printf '# slurmpool -pyxis image: one file per SPANK plugin in plugstack.conf.d\ninclude /etc/slurm/plugstack.conf.d/*.conf\n' \
    > "$r/etc/slurm/plugstack.conf"
  echo "required /usr/local/lib/slurm/spank_pyxis.so" > "$r/etc/slurm/plugstack.conf.d/pyxis.conf"
  in_root "$r" /usr/local/bin/enroot version
}
# install_built_slurm ROOTFS PREFIX: a Slurm built on this (bookworm) machine, put in the image at
# the same PREFIX (compiled into its binaries: rpath, plugin directory, sysconfdir), with munge and
# the Debian packages of the libraries it links to (found by ldd, named by dpkg -S). Its sysconfdir
# is a link to /etc/slurm (where slurm.conf, slurm.key and gres.conf go, as with Debian's packages)
# and its commands are linked into /usr/local/{s,}bin.
install_built_slurm() {
  local r=$1 prefix=$2 f l pkgs
  pkgs=$(for f in "$prefix"/sbin/* "$prefix"/bin/* "$prefix"/lib/*.so* "$prefix"/lib/slurm/*.so; do ldd "$f" 2>/dev/null; done |
    awk '/=> \// {print $3}' | grep -v "^$prefix/" | sort -u | while read -r l; do
      dpkg -S "$l" 2>/dev/null || dpkg -S "/usr$l" 2>/dev/null || dpkg -S "$(readlink -f "$l")" 2>/dev/null ||
        echo "install_built_slurm: no package has $l" >&2
    done | cut -d: -f1 | sort -u | tr '\n' ' ')
  # mpi_pmix.so opens libpmix.so.2 at run time (no ldd line): Debian 12's libpmix2 (build-slurm.sh)
  [ ! -e "$prefix/lib/slurm/mpi_pmix.so" ] || pkgs="$pkgs libpmix2"
  in_root "$r" sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends munge $pkgs >/dev/null"
  mkdir -p "$r$prefix" "$r/etc/slurm"
  # what slurmd and the clients need: no headers, libtool files, man pages or other daemons
  tar -C "$prefix" --exclude=./include --exclude=./share --exclude='*.la' --exclude=./sbin/slurmctld \
    --exclude=./sbin/slurmdbd --exclude=./sbin/slurmrestd -cf - . | tar -C "$r$prefix" -xf -
  rm -rf "${r:?}$prefix/etc"; ln -s /etc/slurm "$r$prefix/etc"
  for f in "$r$prefix"/sbin/* "$r$prefix"/bin/*; do
    case $f in */sbin/*) l=/usr/local/sbin ;; *) l=/usr/local/bin ;; esac
    ln -sf "${f#"$r"}" "$r$l/$(basename "$f")"
  done
}
# ---- slurmd end

# ---------------------------------------------------------------- the slurmd images
slurmd_tars=()
for want in ${SLURMD_VERSIONS//,/ }; do
  build_slurmd "$want"; slurmd_tars+=("$slurmd_tar")
  [ "$SLURMD_PYXIS" = 0 ] || { build_slurmd "$want" pyxis; slurmd_tars+=("$slurmd_tar"); }
done

only_slurmd=0; [ "${1:-}" != --slurmd-only ] || only_slurmd=1
if [ $only_slurmd = 1 ]; then
  for t in "${slurmd_tars[@]}"; do echo "$(cat "$t.name")=$t"; done
  log "done"; exit 0
fi

# ---------------------------------------------------------------- slurmpool (the operator)
ensure_base "$SUITE"
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
for t in "${slurmd_tars[@]}"; do echo "$(cat "$t.name")=$t"; done
if [ "${1:-}" = --import ]; then
  "$repo/e2e/lab/real-nodes.sh" import "$op_tar" "${slurmd_tars[@]}" >&2
fi
log "done"
