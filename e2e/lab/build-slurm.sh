#!/usr/bin/env bash
# Build Slurm 26.05.3 from the vendored release tarball, once (issue 13: the lab's Slurm is a choice).
# The prefix is compiled into the binaries (rpath, plugin dir, sysconfdir), so Slurm is configured and
# installed straight into its cache directory, keyed like the Go builds by every input (this script and
# the tarball): ~/.cache/slurmpool/slurm-26.05.3-<key>/{bin,sbin,lib,...}. A `.complete` stamp written
# last marks a finished install; an unfinished one is removed and built again. Prints that directory.
# --cached: print it only if built (exit 3 otherwise), never build.
#
# Flags and build dependencies are the ones measured in the vendor README (shared/vendor/README.md):
# configure ~25 s, make -j2 ~195 s, install ~14 s on 2 cores; 61 MiB installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=26.05.3
tarball=${SLURM_TARBALL:-$(cd "$here/../../.." && pwd)/shared/vendor/slurm-$version.tar.xz}
[ -f "$tarball" ] || tarball=/work/shared/vendor/slurm-$version.tar.xz
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}
[ -f "$tarball" ] || { echo "build-slurm.sh: $tarball not found (set SLURM_TARBALL)" >&2; exit 1; }
key=$(cat "$here/build-slurm.sh" "$tarball" | sha256sum | cut -c1-16)
out=$cache/slurm-$version-$key
complete() { [ -f "$out/.complete" ] && [ -x "$out/sbin/slurmctld" ] && [ -x "$out/sbin/slurmd" ] \
             && [ -x "$out/sbin/slurmrestd" ] && [ -x "$out/bin/scontrol" ]; }
if complete; then echo "$out"; exit 0; fi
[ "${1:-}" = --cached ] && exit 3

# The checksum file next to the tarball, when there is one, must agree before anything is built.
sums=$(dirname "$tarball")/SHA256SUMS
if [ -f "$sums" ]; then
  (cd "$(dirname "$tarball")" && grep " $(basename "$tarball")\$" SHA256SUMS | sha256sum -c --quiet -) >&2 \
    || { echo "build-slurm.sh: $tarball does not match $sums" >&2; exit 1; }
fi

# Build dependencies (Debian 12), installed like install-deps.sh: dpkg first, apt-get only for what is missing.
deps=(build-essential pkg-config libmunge-dev libjson-c-dev libyaml-dev libjwt-dev libhttp-parser-dev
      libhwloc-dev libdbus-1-dev liblz4-dev libpmix-dev xz-utils)
missing=()
for p in "${deps[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "build-slurm.sh: need root to install: ${missing[*]}" >&2; exit 1; }
  echo "build-slurm.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

mkdir -p "$cache"
# One build at a time per cache (two labs starting together wait for one build).
exec 9>"$cache/.build-slurm-$key.lock"
flock 9
if complete; then echo "$out"; exit 0; fi
rm -rf "$out"
src=$(mktemp -d "$cache/build-slurm.XXXXXX")
trap 'rm -rf "$src"' EXIT
t0=$(date +%s)
tar -xJf "$tarball" -C "$src" --strip-components=1
without=()
for w in hdf5 ofed rdkafka lua freeipmi ucx nvml rsmi oneapi s2n; do without+=("--without-$w"); done
# mpi/pmix against Debian 12's PMIx 4 (libpmix-dev; srun --mpi=pmix, issue 41): the plugin opens
# libpmix.so.2 under that directory at run time, so an image of this build needs libpmix2.
(cd "$src" && ./configure --prefix="$out" --sysconfdir="$out/etc" --enable-multiple-slurmd --disable-static \
   --disable-debug --disable-dependency-tracking --disable-x11 --disable-sview "${without[@]}" \
   --with-pmix=/usr/lib/x86_64-linux-gnu/pmix2 >configure.out 2>&1) \
  || { tail -40 "$src/configure.out" >&2; echo "build-slurm.sh: configure failed" >&2; exit 1; }
t1=$(date +%s)
(cd "$src" && make -j"${SLURM_BUILD_JOBS:-2}" >make.out 2>&1) \
  || { tail -60 "$src/make.out" >&2; echo "build-slurm.sh: make failed" >&2; exit 1; }
t2=$(date +%s)
(cd "$src" && make install >install.out 2>&1) \
  || { tail -40 "$src/install.out" >&2; rm -rf "$out"; echo "build-slurm.sh: make install failed" >&2; exit 1; }
# auth/slurm (which is also cred/slurm) is built only when libjwt is found; without it the lab cannot
# run (no munge on 26.05). The install is kept for a look, but not marked complete.
for p in auth_slurm auth_jwt rest_auth_jwt; do
  [ -f "$out/lib/slurm/$p.so" ] || { echo "build-slurm.sh: plugin $p was not built (see $out/lib/slurm)" >&2; exit 1; }
done
mkdir -p "$out/etc"
touch "$out/.complete"
echo "build-slurm.sh: built Slurm $version in $(( $(date +%s) - t0 )) s" \
     "(configure $(( t1 - t0 )) s, make $(( t2 - t1 )) s, install $(( $(date +%s) - t2 )) s)" >&2
echo "$out"
