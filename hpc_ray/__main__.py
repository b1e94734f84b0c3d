"""``mpiexec -n N python -m hpc_ray script.py [args]``: only rank 0 runs the script
(or ``-m module``, ``-c command``, ``-`` for standard input, as with ``python``).

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
import types


USAGE = "usage: mpiexec -n N python -m hpc_ray <script.py | -m module | -c command | -> [args...]\n"


def main() -> None:
    if len(sys.argv) < 2:
        sys.stderr.write(USAGE)
        sys.exit(2)
    if sys.argv[1] in ("-h", "--help"):
        sys.stdout.write(USAGE)     # (asked for: on stdout, status 0, as python -h)
        sys.exit(0)
    first = sys.argv[1]
    if first in ("-m", "-c") and len(sys.argv) < 3:
        sys.stderr.write(f"python -m hpc_ray: argument expected for the {first} option\n{USAGE}")
        sys.exit(2)
    if first not in ("-m", "-c", "-") and not os.path.exists(first):
        sys.stderr.write(f"python -m hpc_ray: no such script: {first}\n")
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
    run_main(sys.argv[1:])


def run_main(args: list[str]) -> None:
    """Run what ``args`` name as ``__main__``, with ``sys.argv`` and ``sys.path[0]``
    as ``python`` itself sets them (and ``python -m mpi4py.futures``): a script
    (``__file__`` absolute, as Python 3.9+ makes it), ``-m module``, ``-c
    command`` or ``-`` (the program on standard input, which the launcher gives
    rank 0)."""
    first = args[0]
    if first == "-m":
        sys.argv = ["-m"] + args[2:]   # run_module puts the module's file first
        sys.path.insert(0, os.getcwd())
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif first in ("-c", "-"):
        source, filename = (args[1], "<string>") if first == "-c" else (sys.stdin.read(), "<stdin>")
        sys.argv = [first] + args[2 if first == "-c" else 1:]
        sys.path.insert(0, "")
        main_module = types.ModuleType("__main__")
        sys.modules["__main__"] = main_module
        exec(compile(source, filename, "exec"), main_module.__dict__)
    else:
        sys.argv = args
        sys.path.insert(0, os.path.dirname(os.path.abspath(first)))
        runpy.run_path(os.path.abspath(first), run_name="__main__")


if __name__ == "__main__":
    main()
