"""Where rank 0's time goes in a burst of tiny tasks: run under mpiexec.

    mpiexec -n 3 python benchmarks/rank0_waits.py
    mpiexec -n 8 python benchmarks/rank0_waits.py --tasks 100000

Prints one line: tasks/s, how long submitting and then getting took, and, per
task, the CPU time and the run-queue wait (ready to run, no CPU free) of rank 0's
two busiest threads (the driver's and the head's comm thread), and the CPU, the
run-queue wait and the times scheduled of the other ranks and of their executors,
read from ``/proc/<pid>/task/<tid>/schedstat`` before and after the batch (Linux).
"""
from __future__ import annotations

import argparse
import os
import time

import psutil

import hpc_ray as ray


def f(x):
    return x


def _thread_stats(pid: int) -> dict:
    """tid -> (ns on CPU, ns waiting on a run queue, times scheduled)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                out[(pid, tid)] = tuple(int(v) for v in fh.read().split()[:3])
        except (OSError, ValueError):
            pass
    return out


def _roles() -> dict:
    """'rank0', 'ranks', 'executors' -> their pids (ranks are our launcher's children)."""
    me = os.getpid()
    roles = {"rank0": [me], "ranks": [], "executors": []}
    for p in psutil.Process(os.getppid()).children():
        if p.pid == me:
            continue
        roles["ranks"].append(p.pid)
        try:
            roles["executors"] += [k.pid for k in p.children(recursive=True)]
        except psutil.Error:
            pass
    return roles


def _snapshot(roles: dict) -> dict:
    return {role: {k: v for pid in pids for k, v in _thread_stats(pid).items()}
            for role, pids in roles.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=100_000)
    args = ap.parse_args()
    ray.init()
    g = ray.remote(f)
    workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    ray.get([g.remote(i) for i in range(2 * workers)])
    roles = _roles()
    before = _snapshot(roles)
    t0 = time.perf_counter()
    refs = [g.remote(i) for i in range(args.tasks)]
    t1 = time.perf_counter()
    ray.get(refs)
    t2 = time.perf_counter()
    after = _snapshot(roles)
    n = args.tasks

    def per_task(role: str) -> list[tuple]:
        rows = []
        for k, v in after[role].items():
            b = before[role].get(k, (0, 0, 0))
            rows.append(tuple(x - y for x, y in zip(v, b)))
        return rows

    threads = sorted(per_task("rank0"), reverse=True)[:2]
    rank0 = ", ".join(f"{c / n / 1e3:.1f} / {w / n / 1e3:.1f}" for c, w, _ in threads)
    others = []
    for role in ("ranks", "executors"):
        rows = per_task(role)
        cpu, wait, slices = (sum(r[i] for r in rows) for i in range(3))
        others.append(f"{role} {cpu / n / 1e3:.1f} / {wait / n / 1e3:.1f} us, "
                      f"{slices / n:.3f} times scheduled")
    print(f"{len(roles['ranks']) + 1} ranks, {workers} worker CPUs: {n / (t2 - t0):,.0f} tasks/s "
          f"(submit {t1 - t0:.2f} s, get {t2 - t1:.2f} s); per task, CPU / run-queue wait: "
          f"rank 0's threads {rank0} us; " + "; ".join(others))
    ray.shutdown()


if __name__ == "__main__":
    main()
