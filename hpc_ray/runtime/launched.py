"""Whether a launcher (mpiexec, srun with an MPI plugin) started this process.

A launcher gives each rank variables (``PMI_*``, ``PMIX_*``,
``OMPI_COMM_WORLD_*``) that the MPI library reads to join the job. A process a
rank starts inherits them: a ``multiprocessing`` pool's spawned children
re-importing a script that calls ``init()`` at module level, or a driver that
runs another hpc_ray script with ``subprocess``. Taken at their word, such a
child's MPI_Init tried to join the job as a rank and aborted (a pool replaced
its dead workers for ever). So a launched rank notes its pid in its environment
(``RANK_PID_ENV``, at import); a process whose variables came down from a rank
that is its ancestor, with no launcher process between them, is not a rank:
it starts MPI on its own, as a plain ``python driver.py`` does (embedded mode),
without the inherited variables.
"""
from __future__ import annotations

import functools
import os
import subprocess

#: The pid of the launched rank whose environment this is.
RANK_PID_ENV = "HPC_RAY_LAUNCHED_PID"

#: The variables a launcher gives each rank.
RANK_PREFIXES = ("PMI_", "PMIX_", "OMPI_COMM_WORLD_")

#: Every variable of the MPI launcher that a process which is not one of its
#: ranks must not see: with them, MPI_Init (``import mpi4py.MPI``) would try to
#: join the job as a rank. Executors start without them too.
LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPIR_", "MPICH_INTERFACE",
                     "PALS_", "I_MPI_HYDRA")

#: Parts of the names of the processes that start ranks: MPICH's hydra and its
#: proxies, Open MPI's prte/orte, Slurm, Intel MPI, Cray PALS and ALPS, LSF, Flux.
_LAUNCHER_NAMES = ("mpiexec", "mpirun", "hydra", "pmi_proxy", "srun", "slurmstepd", "prte",
                   "orte", "pals", "aprun", "jsrun", "flux")


def under_launcher() -> bool:
    """Whether a launcher started this process: it has the variables a launcher
    gives each rank (not settings such as ``OMPI_MCA_*``, which
    ``launch.confine_network`` sets, or a user's ``HYDRA_*`` for mpiexec), and
    they are its own, not inherited from a rank it descends from."""
    return _has_rank_variables() and not _inherited_from_a_rank()


def _has_rank_variables() -> bool:
    return any(k.startswith(RANK_PREFIXES) for k in os.environ)


def _inherited_from_a_rank() -> bool:
    marked = os.environ.get(RANK_PID_ENV)
    if marked is None or marked == str(os.getpid()):
        return False
    import psutil
    try:
        rank = int(marked)
        proc = psutil.Process().parent()
        while proc is not None and proc.pid != rank:
            # (A launch started below the rank gives its ranks their own variables.)
            if any(part in proc.name() for part in _LAUNCHER_NAMES):
                return False
            proc = proc.parent()
    except (ValueError, psutil.Error):
        return False
    return proc is not None


def mark_rank() -> None:
    """Note in a launched rank's environment that its variables are its own."""
    if under_launcher():
        os.environ[RANK_PID_ENV] = str(os.getpid())


def drop_inherited() -> None:
    """In a process that is no rank (``under_launcher`` said no) but has a rank's
    variables, inherited: remove the launcher's variables, or embedded mode's
    MPI_Init would join the job of the rank above. Nothing where it has none (a
    plain ``python``: its ``OMPI_MCA_*`` settings stay)."""
    if not _has_rank_variables():
        return
    for name in [k for k in os.environ if k.startswith(LAUNCHER_PREFIXES)]:
        del os.environ[name]


@functools.lru_cache(maxsize=None)
def mpi_flavor(mpiexec: str) -> str:
    """``"openmpi"``, ``"mpich"`` (any Hydra: MPICH, Intel MPI, MVAPICH) or ``"unknown"``."""
    try:
        proc = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = proc.stdout + proc.stderr
    if "Open MPI" in text or "OpenRTE" in text or "open-mpi.org" in text:
        return "openmpi"
    if "HYDRA" in text or "Intel(R) MPI" in text or "MPICH" in text:
        return "mpich"
    return "unknown"
