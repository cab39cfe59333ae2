#!/usr/bin/env bash
# Build the root filesystem that runs the lab's Slurm 24.11 (LAB_SLURM=24.11): Debian 13 (trixie)
# with Debian's own Slurm 24.11 and munge, made by debootstrap (minbase; debootstrap installs no
# Recommends), once. Cached outside the checkout under a key of this script:
# ~/.cache/slurmpool/rootfs-trixie-slurm-<key>/ (a `.complete` stamp marks a finished one). Prints it.
# --cached: print it only if built (exit 3 otherwise), never build.
#
# The lab runs its daemons and clients in it by chroot, each in its own mount namespace
# (up.sh: `unshare -m` + bind mounts of $LAB_DIR, /proc, /dev), so nothing is ever mounted on the
# host and the cache can be deleted with rm -rf once no lab runs from it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}
key=$(cat "$here/build-rootfs-2411.sh" | sha256sum | cut -c1-16)
out=$cache/rootfs-trixie-slurm-$key
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
[ "${1:-}" = --cached ] && exit 3

[ "$(id -u)" = 0 ] || { echo "build-rootfs-2411.sh: needs root (debootstrap)" >&2; exit 1; }
if ! command -v debootstrap >/dev/null; then
  echo "build-rootfs-2411.sh: installing debootstrap" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends debootstrap >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
fi
mkdir -p "$cache"
exec 9>"$cache/.build-rootfs-$key.lock"
flock 9
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
# A half-made root filesystem from an interrupted run: debootstrap mounts /proc and /sys in it
# while it works; never delete through a mount.
for d in "$cache"/build-rootfs.*; do
  [ -d "$d" ] || continue
  if grep -q " $d/" /proc/self/mountinfo; then echo "build-rootfs-2411.sh: $d still has mounts; leaving it" >&2; continue; fi
  rm -rf "$d"
done
tmp=$(mktemp -d "$cache/build-rootfs.XXXXXX")
cleanup() {
  local m
  for m in $(awk -v p="$tmp/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r); do umount -l "$m" || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
t0=$(date +%s)
debootstrap --variant=minbase --include=slurmctld,slurmd,slurm-client,slurmrestd,slurm-wlm-jwt-plugin,munge \
  trixie "$tmp/root" http://deb.debian.org/debian >"$tmp/debootstrap.log" 2>&1 ||
  { tail -30 "$tmp/debootstrap.log" >&2; echo "build-rootfs-2411.sh: debootstrap failed" >&2; exit 1; }
# Nothing of the packages' own services runs here, and no apt caches are kept.
rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
version=$(chroot "$tmp/root" dpkg-query -W -f='${Version}' slurmctld)
case $version in 24.11.*) ;; *) echo "build-rootfs-2411.sh: trixie gave slurmctld $version, not 24.11" >&2; exit 1 ;; esac
echo "$version" > "$tmp/root/.slurm-version"
awk -v p="$tmp/" 'index($5, p) == 1 {exit 1}' /proc/self/mountinfo || { echo "build-rootfs-2411.sh: mounts left in $tmp" >&2; exit 1; }
rm -rf "$out"; mv "$tmp/root" "$out"; touch "$out/.complete"
echo "build-rootfs-2411.sh: Debian 13 with Slurm $version in $(( $(date +%s) - t0 )) s, $(du -sm "$out" | cut -f1) MB" >&2
echo "$out"
