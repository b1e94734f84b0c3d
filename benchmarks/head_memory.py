"""Rank 0's memory over a long job: RSS after 10^4 and after 10^6 tiny tasks.

The head keeps finished tasks, timeline events, signals and dead actors within a
memory budget (``HPC_RAY_HEAD_HISTORY_BYTES``, default 64 MiB), and frees
objects and task records as soon as nothing holds them, so rank 0's RSS must
level off: issue 9 asks that RSS after 10^6 tasks be within 100 MB of RSS after
10^4. Run it as a user would:

    python benchmarks/head_memory.py                       # embedded, 10^6 tasks
    mpiexec -n 3 python benchmarks/head_memory.py          # under mpiexec
    python benchmarks/head_memory.py --tasks 200000        # shorter

It prints one line per checkpoint (tasks done, seconds, tasks/s, RSS in MB) and
a final verdict line.
"""
from __future__ import annotations

import argparse
import os
import time

import psutil

import hpc_ray as ray


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=10_000)
    args = ap.parse_args()
    ray.init()

    @ray.remote
    def tiny(i):
        return i

    proc = psutil.Process()
    rss = {}
    done = 0
    t0 = time.perf_counter()
    checkpoints = {10_000, 100_000, 1_000_000, args.tasks}
    while done < args.tasks:
        n = min(args.batch, args.tasks - done)
        out = ray.get([tiny.remote(done + i) for i in range(n)])
        assert out[-1] == done + n - 1
        done += n
        if done in checkpoints:
            mb = proc.memory_info().rss / 1e6
            rss[done] = mb
            dt = time.perf_counter() - t0
            print(f"{done:>9,} tasks  {dt:7.1f} s  {done / dt:8,.0f} tasks/s  "
                  f"rank 0 RSS {mb:7.1f} MB", flush=True)
    growth = rss[max(rss)] - rss[10_000]
    history = ray.tasks()
    print(f"RSS growth from 10^4 to {max(rss):,} tasks: {growth:+.1f} MB "
          f"({'within' if growth <= 100 else 'MORE than'} the 100 MB bound); "
          f"tasks() keeps {len(history):,} records, {history.truncated:,} dropped",
          flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
