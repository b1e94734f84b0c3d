"""Chained actor calls: the sync parameter server of the Ray docs, hpc_ray beside Ray.

    python benchmarks/chained_calls.py                    # hpc_ray and ray, a table
    python benchmarks/chained_calls.py --systems hpc_ray --iterations 100

Each step: every worker actor computes a gradient from the server's last weights
(a ref to the server's pending result), and the server applies them all (refs to
the workers' pending results): ``w = ps.apply.remote(*[wk.grad.remote(w) for wk in
workers])``. Nothing is got until the end, so each step is three actor calls
whose arguments are results of the step before: what a step costs is how fast a
result reaches the next call. The weights are a numpy array of ``--floats``
float64s. Each system runs in a child process (2 CPUs, 2 workers); the table
shows the best of ``--reps`` runs of ``--iterations`` steps, after 20 untimed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(system: str, iterations: int, floats: int, reps: int) -> dict:
    import numpy as np
    if system == "ray":
        import ray
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    else:
        import hpc_ray as ray
        ray.init(num_cpus=2)

    @ray.remote
    class Server:
        def __init__(self, n):
            self.w = np.zeros(n)

        def weights(self):
            return self.w

        def apply(self, *grads):
            self.w = self.w - 0.01 * np.mean(grads, axis=0)
            return self.w

    @ray.remote
    class Worker:
        def grad(self, w):
            return w * 0.5 + 1.0

    server = Server.remote(floats)
    workers = [Worker.remote() for _ in range(2)]
    w = server.weights.remote()

    def steps(n):
        nonlocal w
        for _ in range(n):
            w = server.apply.remote(*[wk.grad.remote(w) for wk in workers])
        return ray.get(w)

    steps(20)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        steps(iterations)
        times.append((time.perf_counter() - t) / iterations * 1e3)
    ray.shutdown()
    return {"system": system, "ms_per_step": min(times), "all": times}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--systems", default="hpc_ray,ray")
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--floats", type=int, default=1000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print("@@result " + json.dumps(child(args.child, args.iterations, args.floats,
                                             args.reps)), flush=True)
        return 0
    rows = []
    for system in args.systems.split(","):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", system,
                              "--iterations", str(args.iterations), "--floats",
                              str(args.floats), "--reps", str(args.reps)],
                             capture_output=True, text=True, timeout=600)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("@@result ")]
        if out.returncode or not lines:
            print(f"{system}: failed (rc {out.returncode})\n{out.stderr[-2000:]}",
                  file=sys.stderr)
            return 1
        rows.append(json.loads(lines[-1][len("@@result "):]))
    base = next((r["ms_per_step"] for r in rows if r["system"] == "ray"), None)
    print(f"Sync parameter server, 2 workers, {args.floats} float64s, best of {args.reps} "
          f"runs of {args.iterations} steps (lower is better)")
    print("| system | ms per step | steps/s | vs ray |")
    print("|---|--:|--:|--:|")
    for r in rows:
        ratio = f"{base / r['ms_per_step']:.2f}x" if base else ""
        print(f"| {r['system']} | {r['ms_per_step']:.2f} | {1e3 / r['ms_per_step']:,.0f} "
              f"| {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
