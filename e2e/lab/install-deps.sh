#!/usr/bin/env bash
# install-deps.sh - make sure the system packages the lab runs on are present (Debian 12).
# Idempotent and fast when everything is installed: dpkg is consulted first, and apt-get
# (including `apt-get update`) runs only for what is missing.
set -euo pipefail

# python3-venv: `make venv` (the node agent runs in the repo's virtualenv)
# containerd, runc, containernetworking-plugins: the real kubelet nodes (real-nodes.sh, LAB_REAL_NODES);
# debootstrap: the images' Debian base (deploy/docker/build-images.sh); curl: health checks
# libslurm-dev: spank.h of the host's 22.05, which e2e/lab/build-pyxis.sh builds pyxis against (LAB_PYXIS=1)
# libpmix-dev: srun --mpi=pmix (e2e/test_pmix.py): srun loads mpi/pmix too, and Debian 12's mpi_pmix.so
# dlopens the unversioned pmix2/lib/libpmix.so that only libpmix-dev installs
pkgs=(slurmctld slurmd slurm-client munge openssh-server openssh-client openssl iproute2 procps util-linux
      python3-venv containerd runc containernetworking-plugins debootstrap curl libslurm-dev libpmix-dev)

# LAB_SLURMDBD=1: accounting on (slurmdbd with MariaDB from Debian)
[ "${LAB_SLURMDBD:-0}" = 0 ] || pkgs+=(slurmdbd mariadb-server mariadb-client)

missing=()
for p in "${pkgs[@]}"; do
  # "install ok installed" is the only status that means the package is usable.
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
  command -v apt-get >/dev/null || { echo "install-deps: apt-get not found; install by hand: ${missing[*]}" >&2; exit 1; }
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Try without refreshing the index first (fast on a machine with fresh lists), then update.
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

command -v go >/dev/null || {
  echo "install-deps: 'go' is not on PATH; Go is required to build the lab's control plane (https://go.dev/dl/)" >&2; exit 1; }
