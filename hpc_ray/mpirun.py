"""Build an ``mpiexec`` command line for the MPI found on PATH.

``hpc-ray run`` and the tests use :func:`mpiexec_argv`.  The flags differ by MPI:

    Open MPI  refuses more ranks than cores (--oversubscribe) and refuses root
              (--allow-run-as-root)
    MPICH     (Hydra; also Intel MPI and MVAPICH) needs neither
"""
from __future__ import annotations

import os
import shutil

from . import _config
from .runtime.launched import mpi_flavor

__all__ = ["mpiexec_argv", "mpi_flavor", "find_mpiexec", "MPIExecNotFoundError"]


class MPIExecNotFoundError(RuntimeError):
    """No ``mpiexec`` on PATH (and none named by ``HPC_RAY_MPIEXEC``)."""


def find_mpiexec() -> str:
    """The mpiexec to use: ``HPC_RAY_MPIEXEC``, else the first ``mpiexec`` on PATH."""
    name = _config.os_environ_get("MPIEXEC", "mpiexec")
    path = shutil.which(name)
    if path is None:
        raise MPIExecNotFoundError(
            f"no {name!r} on PATH: install an MPI (`pip install mpich`, or your site's "
            "`module load openmpi`), or set HPC_RAY_MPIEXEC to its mpiexec")
    return path


def mpiexec_argv(n: int, argv: list[str], *, mpiexec: str | None = None) -> list[str]:
    """``mpiexec -n N [flags] *argv``, with the flags the local MPI needs.

    Args:
        n: the number of ranks.
        argv: the command every rank runs, e.g. ``[sys.executable, "-m",
            "hpc_ray", "driver.py"]``.
        mpiexec: the launcher; default :func:`find_mpiexec`.

    Raises:
        ValueError: ``n`` < 1 or ``argv`` empty.
        MPIExecNotFoundError: no mpiexec.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n!r}")
    if not argv:
        raise ValueError("argv must name the program every rank runs")
    exe = mpiexec or find_mpiexec()
    flags: list[str] = []
    if mpi_flavor(exe) == "openmpi":
        flags.append("--oversubscribe")
        if os.geteuid() == 0:
            flags.append("--allow-run-as-root")
    return [exe, "-n", str(n), *flags, *argv]
