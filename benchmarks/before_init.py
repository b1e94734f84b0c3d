"""What the worker ranks of ``mpiexec -n N python -m hpc_ray script.py`` cost while
the script runs on rank 0 before its ``init()``, and how long that ``init()`` takes.

A job script often loads data or computes before it starts the session; meanwhile
the other ranks wait for rank 0's set-up. Rank 0 here computes (a busy loop) for
SETTLE + WINDOW seconds, then calls ``init()``. Measured, per run:

    waiting CPU    CPU seconds per second of each waiting rank, over WINDOW s
                   (the ranks' process trees, rank 0's own work left out)
    init           wall seconds of the ``init()`` call after that wait

Ray has no counterpart (its workers start at ``init()``): the figures compare
trees, e.g. the main of today against an earlier one by PYTHONPATH (every rank
under mpiexec imports hpc_ray from there):

    python benchmarks/before_init.py --ranks 2 --reps 3
    python benchmarks/before_init.py --ranks 2 --reps 3 --tree /path/to/old/checkout
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

WINDOW = 3.0
#: Seconds from rank 0's start to the measurement (the other ranks' imports).
SETTLE = 1.0


def child() -> None:
    print("STARTED", flush=True)
    end = time.monotonic() + SETTLE + WINDOW + 0.5
    while time.monotonic() < end:   # the script's own work before init()
        pass
    import hpc_ray as ray
    t = time.perf_counter()
    ray.init()
    took = time.perf_counter() - t
    ray.get(ray.remote(lambda: 1).remote())
    print(f"INIT {took:.4f}", flush=True)
    ray.shutdown()


def _cpu(pids: list[int]) -> float:
    import psutil
    total = 0.0
    for pid in pids:
        try:
            for p in [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True):
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            pass
    return total


def one_run(ranks: int, tree: str | None) -> tuple[float, float]:
    import psutil
    # ``python -m`` puts the working directory first on sys.path, ahead of PYTHONPATH.
    tree = os.path.abspath(tree or os.path.join(os.path.dirname(__file__), ".."))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [tree, os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([shutil.which("mpiexec") or "mpiexec", "-n", str(ranks),
                             sys.executable, "-m", "hpc_ray", os.path.abspath(__file__),
                             "--child"], stdout=subprocess.PIPE,
                            text=True, env=env, cwd=tree, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "STARTED"
        time.sleep(SETTLE)
        waiting = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)
                   if p.name().startswith("python") and p.environ().get("PMI_RANK") != "0"]
        assert len(waiting) == ranks - 1, waiting
        before = {pid: _cpu([pid]) for pid in waiting}
        time.sleep(WINDOW)
        cpu = statistics.mean((_cpu([pid]) - c) / WINDOW for pid, c in before.items())
        line = proc.stdout.readline()
        proc.wait(timeout=60)
        return cpu, float(line.split()[1])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tree", default=None, help="a checkout to take hpc_ray from")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        child()
        return
    runs = [one_run(args.ranks, args.tree) for _ in range(args.reps)]
    cpu = statistics.median(r[0] for r in runs)
    init = statistics.median(r[1] for r in runs)
    print(f"tree={args.tree or 'this checkout'} ranks={args.ranks} reps={args.reps}: "
          f"waiting CPU {cpu:.3f} CPU-s/s per rank, init {init * 1e3:.0f} ms (medians)")


if __name__ == "__main__":
    main()
