"""The slurmd images' labels (deploy/docker/slurmd/contents.py, run by build-images.sh on each image's
tree) and the table of docs/slurmd-pod.md that says what each image holds: the computation reads the
files a plugin needs to load, and the table names exactly the images the build script makes, with
plugins the computation knows."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("slurmd_contents", REPO / "deploy" / "docker" / "slurmd" / "contents.py")
assert _spec and _spec.loader
contents = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(contents)

DEBIAN_PLUGINS = "usr/lib/x86_64-linux-gnu/slurm-wlm"
PMIX_DIR = "/usr/lib/x86_64-linux-gnu/pmix2/lib"


def put(root: Path, path: str, data: bytes = b"\x7fELF") -> Path:
    f = root / path.lstrip("/")
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(data)
    return f


def pmix_plugin(root: Path, library: str, libdir: str | None = PMIX_DIR, plugins: str = DEBIAN_PLUGINS) -> None:
    """An mpi_pmix.so that opens LIBRARY (under LIBDIR when configure compiled one in), as Slurm's does."""
    strings = [b"pmixp_libpmix_init", library.encode(), *([libdir.encode()] if libdir else [])]
    put(root, f"{plugins}/mpi_pmix.so", b"\x7fELF\0" + b"\0".join(strings) + b"\0")


def test_debian_22_05_pmix_plugin_without_the_unversioned_library_is_not_listed(tmp_path):
    pmix_plugin(tmp_path, "libpmix.so")
    put(tmp_path, f"{PMIX_DIR}/libpmix.so.2.6.2")
    (tmp_path / PMIX_DIR.lstrip("/") / "libpmix.so.2").symlink_to("libpmix.so.2.6.2")
    assert contents.plugins(tmp_path) == []
    (tmp_path / PMIX_DIR.lstrip("/") / "libpmix.so").symlink_to("libpmix.so.2")  # what libpmix-dev adds
    assert contents.plugins(tmp_path) == ["mpi/pmix"]


def test_pmix_library_found_by_name_alone_in_the_library_directories(tmp_path):
    pmix_plugin(tmp_path, "libpmix.so.2", libdir=None, plugins="opt/slurm/lib/slurm")
    assert contents.plugins(tmp_path) == []
    put(tmp_path, "/usr/lib/x86_64-linux-gnu/libpmix.so.2")
    assert contents.plugins(tmp_path) == ["mpi/pmix"]


def test_an_absolute_link_is_followed_inside_the_image_not_on_this_machine(tmp_path):
    pmix_plugin(tmp_path, "libpmix.so.2")
    lib = tmp_path / PMIX_DIR.lstrip("/") / "libpmix.so.2"
    lib.parent.mkdir(parents=True)
    lib.symlink_to("/usr/lib/x86_64-linux-gnu/libpmix.so.2.13.7")  # absent from the tree
    assert contents.plugins(tmp_path) == []
    put(tmp_path, "/usr/lib/x86_64-linux-gnu/libpmix.so.2.13.7")
    assert contents.plugins(tmp_path) == ["mpi/pmix"]


def test_gpu_plugins_in_a_built_prefix_and_in_debian_s_directory(tmp_path):
    put(tmp_path, "/root/.cache/slurmpool/slurm-26.05.3-abc/lib/slurm/gpu_nvidia.so")
    assert contents.plugins(tmp_path) == ["gpu/nvidia"]
    put(tmp_path, f"{DEBIAN_PLUGINS}/gpu_nvml.so")
    assert contents.plugins(tmp_path) == ["gpu/nvml", "gpu/nvidia"]


def test_pyxis_counts_only_when_plugstack_names_the_file_that_is_there(tmp_path):
    put(tmp_path, "/usr/local/lib/slurm/spank_pyxis.so")
    assert contents.plugins(tmp_path) == []  # no plugstack: slurmd never loads it
    put(tmp_path, "/etc/slurm/plugstack.conf", b"include /etc/slurm/plugstack.conf.d/*.conf\n")
    put(tmp_path, "/etc/slurm/plugstack.conf.d/pyxis.conf", b"# pyxis\nrequired /usr/local/lib/slurm/spank_pyxis.so\n")
    assert contents.plugins(tmp_path) == ["spank/pyxis"]
    (tmp_path / "usr/local/lib/slurm/spank_pyxis.so").unlink()
    assert contents.plugins(tmp_path) == []


def test_labels_carry_the_upstream_version():
    assert contents.upstream_version("22.05.8-4+deb12u3") == "22.05.8"
    assert contents.upstream_version("26.05.3") == "26.05.3"
    with pytest.raises(ValueError):
        contents.upstream_version("unknown")


def test_main_prints_both_labels_even_when_no_plugin_is_there(tmp_path, capsys):
    assert contents.main([str(tmp_path), "24.11.5-4+deb13u1"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{contents.VERSION_LABEL}=24.11.5", f"{contents.PLUGINS_LABEL}="]


# ---------------------------------------------------------------- the docs' table


def docs_table() -> dict[str, tuple[str, list[str]]]:
    """tag -> (version label, plugins label) from docs/slurmd-pod.md's marked table."""
    text = (REPO / "docs" / "slurmd-pod.md").read_text()
    block = text.split("<!-- slurmd-images-table -->")[1].split("<!-- end slurmd-images-table -->")[0]
    rows = {}
    for line in block.strip().splitlines()[2:]:
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        rows[cells[0]] = (cells[1], [p for p in cells[2].split(",") if p])
    return rows


def build_script_versions() -> set[str]:
    """The Slurm versions build-images.sh makes slurmd images of (its slurmd_suite case)."""
    script = (REPO / "deploy" / "docker" / "build-images.sh").read_text()
    body = script.split("slurmd_suite() {")[1].split("\n}")[0]
    return {v for arm in re.findall(r"(\d+\.\d+(?:\|\d+\.\d+)*)\)", body) for v in arm.split("|")}


def test_the_table_lists_each_image_the_build_script_makes_with_and_without_pyxis():
    versions = build_script_versions()
    assert versions == {"22.05", "24.11", "26.05"}
    assert set(docs_table()) == versions | {f"{v}-pyxis" for v in versions}


def test_the_table_names_only_plugins_the_label_computation_knows_in_its_order():
    for tag, (version, plugins) in docs_table().items():
        assert version.startswith(tag.split("-")[0] + "."), tag
        assert plugins == [p for p in contents.PLUGINS if p in plugins], (tag, plugins)


def test_a_pyxis_variant_is_its_image_plus_spank_pyxis():
    table = docs_table()
    for tag, (version, plugins) in table.items():
        if tag.endswith("-pyxis"):
            base_version, base_plugins = table[tag.removesuffix("-pyxis")]
            assert version == base_version
            assert plugins == [p for p in contents.PLUGINS if p in {*base_plugins, "spank/pyxis"}]
        else:
            assert "spank/pyxis" not in plugins, tag


def test_the_26_05_row_has_the_tarball_s_version():
    tarball = re.search(r"^version=(26\.05\.\d+)$", (REPO / "e2e" / "lab" / "build-slurm.sh").read_text(), re.M)
    assert tarball and docs_table()["26.05"][0] == tarball.group(1)


def test_no_sample_or_entrypoint_recommends_nvml_while_no_image_has_it():
    if any("gpu/nvml" in plugins for _, plugins in docs_table().values()):
        pytest.skip("an image has NVML: AutoDetect=nvml may be recommended for it")
    for path in [*(REPO / "deploy" / "samples").glob("*.yaml"), REPO / "deploy" / "docker" / "slurmd" / "entrypoint.sh"]:
        for line in path.read_text().splitlines():
            if "AutoDetect=nvml" in line:
                assert re.search(r"\bnot AutoDetect=nvml|AutoDetect=nvml only", line, re.I), f"{path.name}: {line.strip()}"
