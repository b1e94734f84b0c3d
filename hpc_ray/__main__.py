"""``mpiexec -n N python -m hpc_ray script.py [args]``: only rank 0 runs the script.

Like ``python -m mpi4py.futures``: worker ranks go straight into the worker loop
and never import the script; rank 0 runs it as ``__main__`` (its ``init()``
call starts the head).
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
    if world.Get_size() > 1 and world.Get_rank() != 0:
        gone = launch.run_worker(world)
        launch.worker_exit(gone)
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
