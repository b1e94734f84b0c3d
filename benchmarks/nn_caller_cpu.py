"""Where the CPU of n:n sync actor calls goes, by role.

Two caller tasks make sync calls to their own actor (``ray.get(a.m.remote())``
in a loop), embedded (``init()``: one worker rank per CPU), in batches. Prints
the median calls/s and the CPU microseconds per call of the worker ranks'
loops, rank 0's comm thread (the head) and all executors (callers and actors).
Direct calls bypass the ranks and the head: their share is polling and
bookkeeping that the calls themselves do not need.

    python benchmarks/nn_caller_cpu.py
    cd /tmp && PYTHONPATH=<checkout> python <checkout>/benchmarks/nn_caller_cpu.py  # A/B

(Run an A/B from outside both checkouts: ranks and executors start with
``python -m`` in the driver's directory, and a checkout there comes first.)
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time

import psutil

import hpc_ray as ray


@ray.remote
class Echo:
    def m(self):
        return b"ok"


@ray.remote
def caller(actor, calls: int) -> None:
    for _ in range(calls):
        ray.get(actor.m.remote())


def _cpu(proc: psutil.Process) -> float:
    try:
        t = proc.cpu_times()
        return t.user + t.system
    except psutil.Error:
        return 0.0


def _snapshot(head_tid: int) -> tuple[float, float, float]:
    """CPU seconds so far: worker ranks, the head's thread, executors."""
    me = psutil.Process()
    procs = me.children(recursive=True)
    ranks = [p for p in procs if "hpc_ray.runtime.spawned" in p.cmdline()]
    executors = [p for p in procs if "hpc_ray.runtime.executor" in p.cmdline()]
    head = next(t.user_time + t.system_time for t in me.threads() if t.id == head_tid)
    return sum(map(_cpu, ranks)), head, sum(map(_cpu, executors))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000, help="per caller task and batch")
    ap.add_argument("--batches", type=int, default=6)
    args = ap.parse_args()
    ray.init()
    actors = [Echo.remote() for _ in range(2)]
    ray.get([a.m.remote() for a in actors])
    head_tid = next(t.native_id for t in threading.enumerate() if t.name == "hpc_ray-head")
    time.sleep(1.0)
    rows = []
    for _ in range(args.batches):
        before = _snapshot(head_tid)
        t = time.perf_counter()
        ray.get([caller.remote(a, args.calls) for a in actors])
        seconds = time.perf_counter() - t
        after = _snapshot(head_tid)
        calls = 2 * args.calls
        rows.append([calls / seconds] + [(b - a) / calls * 1e6 for a, b in zip(before, after)])
    med = [statistics.median(r[i] for r in rows) for i in range(4)]
    print(f"calls/s {med[0]:.0f} | us/call: worker ranks {med[1]:.1f}, "
          f"head thread {med[2]:.1f}, executors {med[3]:.1f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
