"""PMIx across slurmd pods (issue 41, item 3): `srun --mpi=pmix` over two real kubelet nodes the
operator moved into Slurm, each served by a slurmd pod of the 22.05 slurmd image.

Debian 12's mpi_pmix.so (22.05) dlopens the unversioned pmix2/lib/libpmix.so, which only libpmix-dev
installs: the image installs it (build-images.sh; its io.slurmpool.slurm.plugins label then lists
mpi/pmix), and so does the lab host (e2e/lab/install-deps.sh), whose srun loads the plugin too. Two
slurmds on one host share `/tmp`, where the plugin puts each step's directory
(`/tmp/spmix_appdir_<uid>_<job>.<step>`: "File exists" on the second node); in a pod each slurmd has
the container's own `/tmp`, as on separate hosts.

The job runs e2e/pmix_exchange.c (built here against libpmix-dev, the image's libpmix2, and mounted
into the pods by a hostPath volume): PMIx_Init with the slurmstepd's PMIx server, the job size, a value
put by each rank, a fence collecting them across both pods, and each rank reading the other's: what an
MPI library does at MPI_Init. No MPI program runs: job steps run in the slurmd container, so an MPI
library would have to be in the slurmd image (Debian's OpenMPI with its PMIx component and
dependencies); docs/slurmd-pod.md says how a site adds it.

Needs a 22.05 lab with two real nodes and without pyxis (`make e2e`'s, the e2e-main lane's:
LAB_REAL_NODES=2); skipped elsewhere, saying why.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import imported_slurmd_image, module_operator, real_nodes_in_slurm, srun_pmix, two_real_nodes

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]
POOL = "real-pmix"


@pytest.fixture(scope="module")
def pair(lab) -> list[str]:
    return two_real_nodes(lab)


@pytest.fixture(scope="module")
def image(lab, pair) -> str:
    """The 22.05 slurmd image (cached when unchanged), imported into the real nodes; its plugins label
    lists mpi/pmix, as docs/slurmd-pod.md's table says."""
    name, archive = imported_slurmd_image(lab, "22.05")
    sys.path.insert(0, str(REPO / "tests"))
    from test_slurmd_contents import docs_table
    from test_slurmd_image import image_labels

    plugins = image_labels(archive).get("io.slurmpool.slurm.plugins", "").split(",")
    assert "mpi/pmix" in plugins and plugins == docs_table()["22.05"][1], plugins
    return name


@pytest.fixture(scope="module")
def program(lab) -> Path:
    """e2e/pmix_exchange.c built against the host's libpmix-dev, in a directory of the lab the pods mount."""
    cc, pkg = shutil.which("cc"), shutil.which("pkg-config")
    assert cc and pkg, "needs a C compiler and pkg-config (make deps)"
    flags = subprocess.run([pkg, "--cflags", "--libs", "pmix"], capture_output=True, text=True)
    assert flags.returncode == 0, f"no pmix.pc: libpmix-dev is missing (make deps): {flags.stderr}"
    out = Path(lab.env["LAB_DIR"]) / "pmix" / "pmix_exchange"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([cc, "-O2", "-Wall", "-Werror", "-o", str(out), str(REPO / "e2e" / "pmix_exchange.c"),
                    *flags.stdout.split()], check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="module")
def op(lab, pair):
    yield from module_operator(lab)


@pytest.fixture(scope="module")
def moved(lab, op, pair, image, program) -> list[str]:
    """The two real nodes moved into Slurm by the operator, each served by a slurmd pod of the image,
    the program's directory mounted (harness.real_nodes_in_slurm). Yields the nodes' Slurm names."""
    with real_nodes_in_slurm(lab, POOL, pair, image, dirs={"pmix": str(program.parent)}) as names:
        yield names


def test_srun_mpi_pmix_gives_each_pod_a_rank_of_one_namespace(lab, moved):
    """The PMIx server of each node's slurmstepd hands its rank the job's PMIx identity; both ranks run
    in the slurmd pods (the image's entrypoint is there, not on the host)."""
    assert not Path("/usr/local/bin/slurmd-entrypoint").exists()  # so the check below sees the pod's tree
    lines = srun_pmix(lab, moved, "bash", "-c",
                 'echo "$PMIX_RANK $PMIX_NAMESPACE $SLURMD_NODENAME $(test -x /usr/local/bin/slurmd-entrypoint && echo pod)"')
    rows = [line.split() for line in lines]
    assert len(rows) == 2 and all(len(r) == 4 for r in rows), lines
    assert {r[0] for r in rows} == {"0", "1"}, lines
    assert len({r[1] for r in rows}) == 1 and rows[0][1].startswith("slurm."), lines  # one job namespace
    assert {r[2] for r in rows} == set(moved), lines
    assert {r[3] for r in rows} == {"pod"}, lines
    print(f"srun -N2 --mpi=pmix on {moved}: {lines}")


def test_pmix_fence_exchanges_values_between_the_two_pods(lab, moved, program):
    """A PMIx client per rank: init, put, a fence collecting the data across both nodes, and a get of
    the other rank's value (the wire-up an MPI library does at MPI_Init)."""
    lines = srun_pmix(lab, moved, str(program))
    fields = [dict(kv.split("=", 1) for kv in line.split()) for line in lines]
    assert sorted(f.get("rank") for f in fields) == ["0", "1"], lines
    assert {f["size"] for f in fields} == {"2"}, lines
    assert len({f["nspace"] for f in fields}) == 1, lines
    assert {f["node"] for f in fields} == set(moved), lines
    by_rank = {f["rank"]: f["node"] for f in fields}
    expected = f"{by_rank['0']}:0,{by_rank['1']}:1"  # each rank saw both values, its peer's from the other pod
    assert all(f["peers"] == expected for f in fields), lines
    print(f"PMIx fence across {moved}: {lines}")

