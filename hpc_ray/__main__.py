"""``mpiexec -n N python -m hpc_ray script.py [args]``: only rank 0 runs the script.

Like ``python -m mpi4py.futures``: worker ranks go straight into the worker loop
and never import the script; rank 0 runs it as ``__main__`` (its ``init()``
call starts the head). A script that ends without starting a session (argparse's
``--help``, an exception before ``init()``, no ``init()`` at all) lets the
worker ranks go at exit, so the job ends with the script's own status. What the
script sets in ``os.environ`` before ``init()`` reaches the worker ranks with
the session's config (``runtime/script_env.py``).
"""
from __future__ import annotations

import os
import runpy
import sys


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: mpiexec -n N python -m hpc_ray script.py [args...]\n")
        sys.exit(2)
    script = sys.argv[1]
    if not os.path.exists(script):
        sys.stderr.write(f"python -m hpc_ray: no such script: {script}\n")
        sys.exit(2)
    from . import launch
    MPI = launch.mpi()
    world = MPI.COMM_WORLD
    if world.Get_size() > 1:
        # Every rank has mapped the MPI library's /dev/shm segment once all are
        # past MPI_Init: unlinked now, it goes even if rank 0 is killed, or leaves
        # with os._exit, before its init() (init() would unlink it too).
        world.Barrier()
        launch.unlink_mapped_shm()
    if world.Get_size() > 1 and world.Get_rank() != 0:
        gone = launch.run_worker(world)
        launch.worker_exit(gone)
    if world.Get_size() > 1:
        from .api import _park_workers
        _park_workers(world)
    from .runtime import script_env
    script_env.snapshot()
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
