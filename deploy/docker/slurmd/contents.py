#!/usr/bin/env python3
"""What a slurmd image holds, read from its root filesystem at build time: the image's labels.

    contents.py ROOTFS SLURM_VERSION    prints KEY=VALUE lines, one per label:
      io.slurmpool.slurm.version=22.05.8              (the upstream part of SLURM_VERSION)
      io.slurmpool.slurm.plugins=gpu/nvidia,mpi/pmix  (those of PLUGINS the image can load; may be empty)

deploy/docker/build-images.sh runs it on each slurmd image's tree before packing it, so a label never
says more than the files do: a plugin counts only with what it needs to load. Debian 12's mpi_pmix.so,
for instance, dlopens the unversioned libpmix.so that only libpmix-dev installs (the 22.05 image
installs it: without it the plugin is there but not listed). docs/slurmd-pod.md#what-each-image-holds
tabulates the result.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

VERSION_LABEL = "io.slurmpool.slurm.version"
PLUGINS_LABEL = "io.slurmpool.slurm.plugins"
# The plugins a site asks about, by Slurm's own names (type/name)
PLUGINS = ("gpu/nvml", "gpu/nvidia", "mpi/pmix", "spank/pyxis")
# Where Slurm's plugins are
# (Debian's packages; a build's <prefix>/lib/slurm, wherever its prefix is; pyxis's /usr/local/lib/slurm)
PLUGIN_DIR_GLOBS = ("usr/lib/*/slurm-wlm", "**/lib/slurm")
LIBRARY_DIRS = ("lib", "usr/lib", "usr/local/lib", "lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu",
                "lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu")


def plugin_files(rootfs: Path, name: str) -> list[Path]:
    """The files called NAME in the tree's Slurm plugin directories."""
    dirs = {d for pattern in PLUGIN_DIR_GLOBS for d in rootfs.glob(pattern) if not d.is_symlink()}
    return sorted(f for d in dirs if (f := d / name).is_file())


def in_tree(rootfs: Path, path: str) -> bool:
    """PATH (absolute in the image) is a file of the tree, links followed inside the tree (an
    absolute link target is the image's, not this machine's)."""
    current = rootfs / path.lstrip("/")
    for _ in range(16):
        if not current.is_symlink():
            return current.is_file()
        target = os.readlink(current)
        current = rootfs / target.lstrip("/") if target.startswith("/") else current.parent / target
    return False


def _strings(path: Path) -> list[str]:
    return [s.decode() for s in re.findall(rb"[\x20-\x7e]{4,}", path.read_bytes())]


def pmix_loadable(rootfs: Path, plugin: Path) -> bool:
    """mpi_pmix.so opens libpmix at run time (mpi_pmix.c: _libpmix_open): by the name compiled in
    (libpmix.so, or libpmix.so.2 since 23.11), under the directory configure found (PMIXP_LIBPATH),
    if any. It loads only if that file is in the image."""
    strings = _strings(plugin)
    names = sorted({s for s in strings if re.fullmatch(r"libpmix\.so(\.\d+)*", s)})
    dirs = [s for s in strings if re.fullmatch(r"/[\w./+-]*pmix[\w./+-]*/lib", s)] or list(LIBRARY_DIRS)
    return any(in_tree(rootfs, f"{d}/{n}") for d in dirs for n in names)


def pyxis_loaded(rootfs: Path) -> bool:
    """A plugstack file of the image names spank_pyxis.so and the file it names is there (slurmd
    loads SPANK plugins only from PlugStackConfig, /etc/slurm/plugstack.conf, and what it includes;
    a relative path is looked up in the plugin directory)."""
    stack = [rootfs / "etc/slurm/plugstack.conf", *sorted((rootfs / "etc/slurm/plugstack.conf.d").glob("*.conf"))]
    named = [m.group(1) for f in stack if f.is_file()
             for m in re.finditer(r"^\s*(?:required|optional)\s+(\S*spank_pyxis\.so)", f.read_text(), re.M)]
    return any(in_tree(rootfs, p) if p.startswith("/") else plugin_files(rootfs, p) for p in named)


def plugins(rootfs: Path) -> list[str]:
    """Those of PLUGINS the tree's slurmd can load, in PLUGINS' order."""
    present = {
        "gpu/nvml": bool(plugin_files(rootfs, "gpu_nvml.so")),  # libnvidia-ml.so.1 comes with the driver at run time
        "gpu/nvidia": bool(plugin_files(rootfs, "gpu_nvidia.so")),  # AutoDetect=nvidia (24.11+): needs no library
        "mpi/pmix": any(pmix_loadable(rootfs, p) for p in plugin_files(rootfs, "mpi_pmix.so")),
        "spank/pyxis": pyxis_loaded(rootfs),
    }
    return [p for p in PLUGINS if present[p]]


def upstream_version(version: str) -> str:
    """22.05.8-4+deb12u3 (a Debian package's version) -> 22.05.8; 26.05.3 stays."""
    match = re.match(r"\d+\.\d+(\.\d+)?", version)
    if not match:
        raise ValueError(f"not a Slurm version: {version!r}")
    return match.group(0)


def labels(rootfs: Path, version: str) -> dict[str, str]:
    return {VERSION_LABEL: upstream_version(version), PLUGINS_LABEL: ",".join(plugins(rootfs))}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    for key, value in labels(Path(argv[0]), argv[1]).items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
