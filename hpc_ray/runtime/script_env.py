"""What the driver's script changed in ``os.environ`` before ``init()``, for worker
ranks that did not run it.

Under ``python -m hpc_ray`` the worker ranks never run the script, and workers
that ``init()`` spawns through a running launcher (``mpiexec -n 1 python
driver.py``) get the environment the launcher started with. Either way the
variables the script set or deleted before ``init()`` (``OMP_NUM_THREADS``, a
setting its tasks read) would not reach its tasks and actors, as they do where
each rank runs the script or the spawned workers inherit the driver's
environment. So ``init()`` sends what changed with the session's config, and
each worker rank applies it to its own ``os.environ`` before it starts
executors (whose environment is the rank's) or actors:

    -m, rank 0:  snapshot()  ── script runs ──  init(): cfg["environ"] = changes()
    spawning:    init(): cfg["environ"] = changes(spawning=True)   (since exec)
    rank 0 ──bcast(cfg)──▶ ranks 1..N-1: apply(cfg["environ"])   (launch.setup_world)

Changes made after ``init()`` are not sent, as in the other modes.
"""
from __future__ import annotations

import os

#: Variables a launcher sets per rank, node or job step (rank numbers, the PMI
#: connection, Slurm's task ids and bindings), and MPI settings that the ranks'
#: running MPI no longer reads (an embedded driver's ``confine_network`` sets
#: UCX_ and FI_ ones): never sent, so no rank takes rank 0's.
PER_RANK_PREFIXES = ("PMI_", "PMIX_", "HYDI_", "HYDRA_", "MPI_LOCAL", "MPIR_", "MPICH_",
                     "OMPI_", "PRTE_", "OPAL_", "PALS_", "I_MPI_", "SLURM_", "SLURMD_",
                     "UCX_", "FI_")

#: Rank 0's environment before the script ran (None: not ``python -m hpc_ray``).
_before: dict[str, str] | None = None


def snapshot() -> None:
    """Note the environment the script starts with (``python -m hpc_ray``, rank 0)."""
    global _before
    _before = dict(os.environ)


def changes(spawning: bool = False) -> dict | None:
    """What the script set or changed (``set``) and deleted (``unset``) since
    ``snapshot`` (``spawning``, without one: since this process started), leaving
    out the per-rank variables; None if nothing (or nothing to compare with)."""
    before = _before if _before is not None else (_at_exec() if spawning else None)
    if before is None:
        return None
    now = dict(os.environ)
    changed = {k: v for k, v in now.items()
               if before.get(k) != v and not k.startswith(PER_RANK_PREFIXES)}
    deleted = sorted(k for k in before
                     if k not in now and not k.startswith(PER_RANK_PREFIXES))
    return {"set": changed, "unset": deleted} if changed or deleted else None


def _at_exec() -> dict[str, str] | None:
    """This process's environment as it was started with: ``/proc/self/environ``
    keeps the block exec gave it, which ``os.environ``'s changes do not touch."""
    try:
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
    except OSError:
        return None
    pairs = (item.partition(b"=") for item in block.split(b"\0") if item)
    return {os.fsdecode(k): os.fsdecode(v) for k, sep, v in pairs if sep}


def apply(changes: dict | None) -> None:
    """Make ``changes`` (from rank 0's ``changes()``) in this rank's ``os.environ``."""
    if not changes:
        return
    for key in changes.get("unset", ()):
        if not key.startswith(PER_RANK_PREFIXES):
            os.environ.pop(key, None)
    for key, value in changes.get("set", {}).items():
        if not key.startswith(PER_RANK_PREFIXES):
            os.environ[key] = value
