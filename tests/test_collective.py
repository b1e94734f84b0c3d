"""Issue 6 collectives (``hpc_ray.collective``): every op and dtype against numpy
references in in-rank and ordinary actors, several groups at once, errors; and
existing mpi4py code on a group's communicator (examples/mpi_solver.py).
Issue 12: ordinary actors with tensors of several MB by both routes to the rank,
more dtypes, two members on one rank (refused at once), and members that die
while the others wait.

The rank scripts are tests/mpi_scripts/collective_ops.py and collective_ordinary.py."""
from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest

from conftest import REPO_ROOT

pytestmark = pytest.mark.mpi

HAVE_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize("mode,n", [
    ("embedded", 3),
    ("mpiexec", 4),
    ("mpiexec", 5),
    ("module", 3),
])
def test_collective_ops(run, mode, n):
    # Torch tensors once (importing torch on every rank is slow).
    args = ("--torch",) if mode == "embedded" else ()
    result = run("collective_ops.py", n, *args, mode=mode, timeout=120)
    values = result.assert_ok("collective_ops")
    assert values["with_torch"] == (HAVE_TORCH and bool(args))
    assert values["mixed"] is True
    # Per kind of actor: 4 groups' results, 37 arrays per member.
    workers = n - 1
    half = max(1, workers // 2)
    assert values["compared"] == 2 * 37 * (2 * workers + half + (workers - half))


@pytest.mark.parametrize("mode,n,shm", [("embedded", 3, "1"), ("mpiexec", 4, "1"),
                                        ("mpiexec", 5, "1"), ("mpiexec", 4, "0")])
def test_collective_ordinary_actors(run, mode, n, shm):
    # shm "0": HPC_RAY_COLLECTIVE_SHM=0, every operation through the ranks. Embedded
    # with 3 ranks: 2 members (collective_shm reduces a large chunk's halves
    # differently with two).
    result = run("collective_ordinary.py", n, mode=mode, timeout=120,
                 env={"HPC_RAY_COLLECTIVE_SHM": shm})
    values = result.assert_ok("collective_ordinary")
    assert values["route"] == ("shm" if shm == "1" else "rank")
    assert values["dtypes"] == 7
    assert values["collective_calls"] == 40
    assert values["same_rank_refused"] is True
    # Each death leaves one member fewer, down to a group of one.
    expected = {f"survived_{how}": n - 2 - i for i, how in enumerate(("exit", "segv", "kill"))
                if n - 2 - i >= 1}
    assert {k: v for k, v in values.items() if k.startswith("survived_")} == expected


@pytest.mark.parametrize("mode,n", [("embedded", 4), ("mpiexec", 4)])
def test_mpi_solver_example(run, tmp_path, mode, n):
    out = tmp_path / "solution.h5"
    args = ["--n", "48", "--out", str(out)]
    if mode == "embedded":
        args += ["--ranks", str(n - 1)]
    result = run(REPO_ROOT / "examples" / "mpi_solver.py", n, *args, mode=mode,
                 timeout=90)
    text = result.stdout
    assert f"ranks {n - 1}, grid 48x48" in text, result.output()
    found = re.search(r"CG iterations (\d+), relative residual (\S+), max error vs exact "
                      r"(\S+),", text)
    assert found, result.output()
    assert int(found.group(1)) > 10
    assert float(found.group(2)) < 1e-8
    assert float(found.group(3)) < 1e-8
    h5py = pytest.importorskip("h5py")
    with h5py.File(out, "r") as f:
        u = f["u"][()]
    grid = np.arange(1, 49) / 49
    q = grid * (1 - grid)
    np.testing.assert_allclose(u, np.outer(q, q), atol=1e-8)
