"""Tasks that wait for tasks: fib(12) and a 5-deep, 4-wide tree, on two worker CPUs.

Each task waits in ``get`` for its subtasks, so the pool of two CPUs runs only
because a waiting task lends its CPU (hpc_ray: nested on the waiting executor's
stack, and in spare executors at the nesting limit; Ray: a blocked worker's CPU
goes to another worker process). fib(12) is 465 tasks, tree(5, 4) 1,365.

For each system the parent runs one child per round, one after the other:

    hpc_ray:      python benchmarks/nested_tasks.py --child hpc_ray      (init(num_cpus=2))
    hpc_ray_mpi:  mpiexec -n 3 python benchmarks/nested_tasks.py --child hpc_ray
    hpc_ray_base: as hpc_ray, with another checkout first on PYTHONPATH (--base DIR)
    ray:          --ray-python's interpreter, ray.init(num_cpus=2)

A child warms up with fib(8), then times ``--reps`` runs of each workload and
prints one ``@@nested {json}`` line: tasks/s of each run. The table gives the
median over all rounds' runs.

    python benchmarks/nested_tasks.py --systems hpc_ray,hpc_ray_mpi --rounds 3
    python benchmarks/nested_tasks.py --systems hpc_ray,hpc_ray_base --base /tmp/base
    python benchmarks/nested_tasks.py --systems hpc_ray,ray --ray-python /tmp/rayvenv/bin/python
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

MARK = "@@nested "
#: name -> (tasks made by one run, expected result)
WORKLOADS = {"fib(12)": (465, 144), "tree(5, 4)": (1365, 1024)}


def child(system: str, reps: int) -> None:
    if system == "ray":
        import ray
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    else:
        import hpc_ray as ray
        ray.init(num_cpus=2) if os.environ.get("NESTED_EMBEDDED") else ray.init()

    @ray.remote
    def fib(n):
        if n < 2:
            return n
        return sum(ray.get([fib.remote(n - 1), fib.remote(n - 2)]))

    @ray.remote
    def tree(depth, width):
        if depth == 0:
            return 1
        return sum(ray.get([tree.remote(depth - 1, width) for _ in range(width)]))

    calls = {"fib(12)": lambda: fib.remote(12), "tree(5, 4)": lambda: tree.remote(5, 4)}
    ray.get(fib.remote(8))
    out = {}
    for name, (tasks, want) in WORKLOADS.items():
        rates = []
        for _ in range(reps):
            t = time.perf_counter()
            got = ray.get(calls[name](), timeout=600)
            rates.append(tasks / (time.perf_counter() - t))
            if got != want:
                raise SystemExit(f"{name} returned {got}, not {want}")
        out[name] = rates
    print(MARK + json.dumps(out), flush=True)
    ray.shutdown()


def run_child(system: str, args) -> dict:
    env = dict(os.environ)
    here = os.path.abspath(__file__)
    cmd = [sys.executable, here, "--child", "hpc_ray", "--reps", str(args.reps)]
    if system == "ray":
        cmd = [args.ray_python] + cmd[1:3] + ["ray", "--reps", str(args.reps)]
    elif system == "hpc_ray_mpi":
        cmd = [shutil.which("mpiexec") or "mpiexec", "-n", "3"] + cmd
    else:
        env["NESTED_EMBEDDED"] = "1"
    cwd = None
    if system == "hpc_ray_base":
        # Run from there too: executors start as ``python -m``, with the cwd first.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.base, env.get("PYTHONPATH")]))
        cwd = args.base
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    raise SystemExit(f"{system}: no result (exit {proc.returncode})\n{proc.stderr[-3000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--systems", default="hpc_ray,hpc_ray_mpi")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--base", help="another checkout's root, for hpc_ray_base")
    p.add_argument("--ray-python", default=sys.executable)
    args = p.parse_args()
    if args.child:
        child(args.child, args.reps)
        return
    systems = args.systems.split(",")
    rates = {s: {w: [] for w in WORKLOADS} for s in systems}
    for r in range(args.rounds):
        for s in systems:
            for w, got in run_child(s, args).items():
                rates[s][w] += got
            print(f"round {r + 1}: {s} done", file=sys.stderr, flush=True)
    first = systems[0]
    print(f"| workload | " + " | ".join(systems) + " | " +
          " | ".join(f"{first}/{s}" for s in systems[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(systems) - 1))
    for w in WORKLOADS:
        med = {s: statistics.median(rates[s][w]) for s in systems}
        print(f"| {w} tasks/s | " + " | ".join(f"{med[s]:,.0f}" for s in systems) + " | " +
              " | ".join(f"{med[first] / med[s]:.2f}x" for s in systems[1:]) + " |")


if __name__ == "__main__":
    main()
