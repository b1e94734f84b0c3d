"""``python -m hpc_ray``: what the script changed in ``os.environ`` before ``init()``.

Worker ranks never run the script in this mode, so the variables it sets or
deletes before ``init()`` (``OMP_NUM_THREADS``, a setting its tasks read) would
not reach its tasks and actors, as they do in every other launch mode (there
each rank runs the script, or the spawned workers inherit the driver's
environment). Rank 0 notes its environment before the script runs; ``init()``
sends what changed with the session's config, and each worker rank applies it
to its own ``os.environ`` before it starts executors (whose environment is the
rank's) or actors:

    rank 0:     snapshot()  ── script runs ──  init(): cfg["environ"] = changes()
    rank 0 ──bcast(cfg)──▶ ranks 1..N-1: apply(cfg["environ"])   (launch.setup_world)

Changes made after ``init()`` are not sent, as in the other modes.
"""
from __future__ import annotations

import os

#: Variables a launcher sets per rank, node or job step (rank numbers, the PMI
#: connection, Slurm's task ids and bindings), and MPI settings that the ranks'
#: running MPI no longer reads: never sent, so no rank takes rank 0's.
PER_RANK_PREFIXES = ("PMI_", "PMIX_", "HYDI_", "HYDRA_", "MPI_LOCAL", "MPIR_", "MPICH_",
                     "OMPI_", "PRTE_", "OPAL_", "PALS_", "I_MPI_", "SLURM_", "SLURMD_")

#: Rank 0's environment before the script ran (None: not ``python -m hpc_ray``).
_before: dict[str, str] | None = None


def snapshot() -> None:
    """Note the environment the script starts with (``python -m hpc_ray``, rank 0)."""
    global _before
    _before = dict(os.environ)


def changes() -> dict | None:
    """What the script set or changed (``set``) and deleted (``unset``) since
    ``snapshot``, leaving out the per-rank variables; None if nothing (or no snapshot)."""
    if _before is None:
        return None
    now = dict(os.environ)
    changed = {k: v for k, v in now.items()
               if _before.get(k) != v and not k.startswith(PER_RANK_PREFIXES)}
    deleted = sorted(k for k in _before
                     if k not in now and not k.startswith(PER_RANK_PREFIXES))
    return {"set": changed, "unset": deleted} if changed or deleted else None


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
