"""Sync actor calls that return numpy arrays of 16 KiB to 64 MiB, one size at a time.

An actor on the driver's host is called over its socket (direct calls); a
result larger than ``peer_calls.LARGE_RESULT`` sends that method's later calls
through the head, whose large results go through the node's store. This times
``ray.get(actor.make.remote(n))`` per size, with a new actor for each size whose
socket is up, after two warm-up calls of that size (here, the first one of a
large size is the direct call that moves the method to the head).

    hpc_ray:       this checkout, init(num_cpus=2)
    hpc_ray_head:  the same with HPC_RAY_DIRECT_CALLS=0 (every call through the head)
    hpc_ray_base:  another checkout first on PYTHONPATH (--base DIR)
    ray:           --ray-python's interpreter, ray.init(num_cpus=2)

Each child prints one ``@@results {json}`` line: seconds of each timed call per
size. The table gives the median over all rounds' calls, in ms.

    python benchmarks/actor_results.py --systems hpc_ray,hpc_ray_head,hpc_ray_base \\
        --base /tmp/base --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MARK = "@@results "
SIZES = [16 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def child(system: str, reps: int) -> None:
    import numpy as np
    if system == "ray":
        import ray
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    else:
        import hpc_ray as ray
        ray.init(num_cpus=2)

    @ray.remote
    class Source:
        def make(self, nbytes):
            return np.ones(nbytes // 8)

    out = {}
    for size in SIZES:
        source = Source.remote()
        ray.get(source.make.remote(16))
        time.sleep(0.3)     # (its socket is up: calls go direct from here)
        for _ in range(2):
            ray.get(source.make.remote(size))
        times = []
        for _ in range(reps if size < 16 << 20 else max(3, reps // 4)):
            t = time.perf_counter()
            got = ray.get(source.make.remote(size))
            times.append(time.perf_counter() - t)
            if got.nbytes != size // 8 * 8 or got[-1] != 1.0:
                raise SystemExit(f"{size}: wrong result")
            del got
        out[size] = times
        del source
    print(MARK + json.dumps(out), flush=True)
    ray.shutdown()


def run_child(system: str, args) -> dict:
    env = dict(os.environ)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "hpc_ray",
           "--reps", str(args.reps)]
    cwd = None
    if system == "ray":
        cmd = [args.ray_python] + cmd[1:3] + ["ray", "--reps", str(args.reps)]
    elif system == "hpc_ray_head":
        env["HPC_RAY_DIRECT_CALLS"] = "0"
    elif system == "hpc_ray_base":
        # Run from there too: executors start as ``python -m``, with the cwd first.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.base, env.get("PYTHONPATH")]))
        cwd = args.base
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return {int(k): v for k, v in json.loads(line[len(MARK):]).items()}
    raise SystemExit(f"{system}: no result (exit {proc.returncode})\n{proc.stderr[-3000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--systems", default="hpc_ray,hpc_ray_head")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--base", help="another checkout's root, for hpc_ray_base")
    p.add_argument("--ray-python", default=sys.executable)
    args = p.parse_args()
    if args.child:
        child(args.child, args.reps)
        return
    systems = args.systems.split(",")
    times = {s: {n: [] for n in SIZES} for s in systems}
    for r in range(args.rounds):
        for s in systems:
            for n, got in run_child(s, args).items():
                times[s][n] += got
            print(f"round {r + 1}: {s} done", file=sys.stderr, flush=True)
    first = systems[0]
    print("| result | " + " | ".join(f"{s} ms" for s in systems) + " | " +
          " | ".join(f"{s}/{first}" for s in systems[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(systems) - 1))
    for n in SIZES:
        med = {s: statistics.median(times[s][n]) * 1e3 for s in systems}
        label = f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
        print(f"| {label} | " + " | ".join(f"{med[s]:.2f}" for s in systems) + " | " +
              " | ".join(f"{med[s] / med[first]:.2f}x" for s in systems[1:]) + " |")


if __name__ == "__main__":
    main()
