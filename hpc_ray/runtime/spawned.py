"""Entry point of a worker rank started by ``MPI_Comm_spawn`` (embedded mode)."""
from __future__ import annotations


def main() -> None:
    import os
    from . import launch
    if os.path.basename(os.environ.get("HWLOC_XMLFILE", "")) == launch.NO_TOPOLOGY_FILE:
        del os.environ["HWLOC_XMLFILE"]   # the launcher's only (see launch.py)
    MPI = launch.mpi()
    parent = MPI.Comm.Get_parent()
    comm = parent.Merge(high=True)
    if launch.run_worker(comm):
        launch.worker_exit(driver_gone=True)
    try:
        comm.Free()
        parent.Disconnect()
    finally:
        launch.worker_exit()


if __name__ == "__main__":
    main()
