"""The Ray docs' "Passing Around Actor Handles" loop, in hpc_ray and Ray side by side.

Four tasks call ``counter.inc.remote()`` forever while the driver asks the
counter for its value every half second (the docs' program, with timings). It
reports how long the driver's ``get`` takes during the flood, the calls the
counter ran per second, how long a new actor takes to answer, how much the
driver's process grew, and how long ``shutdown`` takes:

    python benchmarks/actor_flood.py                     # hpc_ray embedded, mpiexec -n 3, Ray
    python benchmarks/actor_flood.py --systems hpc_ray   # one system
    python benchmarks/actor_flood.py --save              # also benchmarks/results/actor-flood-*.md

Each system runs in its own process with 2 CPUs (2 worker ranks under mpiexec).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEMS = ("hpc_ray", "hpc_ray_mpi", "ray")


def child(system: str, rounds: int) -> None:
    import psutil
    if system == "ray":
        import ray
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    else:
        import hpc_ray as ray
        ray.init() if system == "hpc_ray_mpi" else ray.init(num_cpus=2)

    @ray.remote
    class Counter(object):
        def __init__(self):
            self.counter = 0

        def inc(self):
            self.counter += 1

        def get_counter(self):
            return self.counter

    @ray.remote
    def f(counter):
        while True:
            counter.inc.remote()

    @ray.remote
    class Other:
        def ping(self):
            return "pong"

    counter = Counter.remote()
    ray.get(counter.get_counter.remote())
    proc = psutil.Process()
    loops = [f.remote(counter) for _ in range(4)]
    gets, counts, rss = [], [], []
    t0 = time.perf_counter()
    for _ in range(rounds):
        time.sleep(0.5)
        t = time.perf_counter()
        counts.append(ray.get(counter.get_counter.remote(), timeout=60))
        gets.append(time.perf_counter() - t)
        rss.append(proc.memory_info().rss)
    elapsed = time.perf_counter() - t0
    t = time.perf_counter()
    ray.get(Other.remote().ping.remote(), timeout=60)
    new_actor = time.perf_counter() - t
    del loops
    t = time.perf_counter()
    ray.shutdown()
    shutdown = time.perf_counter() - t
    print("RESULT " + json.dumps({
        "get_median_s": statistics.median(gets), "get_max_s": max(gets),
        "calls_per_s": (counts[-1] - counts[0]) / elapsed,
        "new_actor_s": new_actor, "shutdown_s": shutdown,
        "rss_growth_mb": (rss[-1] - rss[0]) / 1e6}), flush=True)


def run(system: str, rounds: int, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", system, "--rounds", str(rounds)]
    if system == "hpc_ray_mpi":
        cmd = ["mpiexec", "-n", "3"] + cmd
    t = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout:.0f} s"}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
            result["wall_s"] = time.perf_counter() - t
            return result
    return {"error": f"exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}"}


def table(results: dict) -> str:
    rows = ["| system | get median s | get max s | counter calls/s | new actor s | "
            "shutdown s | driver RSS growth MB | whole run s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for system, r in results.items():
        if "error" in r:
            rows.append(f"| {system} | {r['error']} | | | | | | |")
            continue
        rows.append(f"| {system} | {r['get_median_s']:.3f} | {r['get_max_s']:.3f} | "
                    f"{r['calls_per_s']:,.0f} | {r['new_actor_s']:.2f} | "
                    f"{r['shutdown_s']:.2f} | {r['rss_growth_mb']:+.0f} | {r['wall_s']:.1f} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--rounds", type=int, default=10, help="gets, one every 0.5 s")
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--save", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.rounds)
        return
    results = {s: run(s, args.rounds, args.timeout) for s in args.systems.split(",")}
    text = table(results)
    print(text)
    if args.save:
        stamp = time.strftime("%Y-%m-%d-%H%M%S")
        path = os.path.join(HERE, "results", f"actor-flood-{stamp}.md")
        load = os.getloadavg()[0]
        with open(path, "w") as f:
            f.write(f"# The docs' actor-handle flood, {stamp}\n\n"
                    f"Command: `python benchmarks/actor_flood.py --systems {args.systems} "
                    f"--rounds {args.rounds} --save`; 1-min load average {load:.1f} at the end, "
                    f"2 CPUs.\n\n{text}\n")
        print(f"saved {path}")


if __name__ == "__main__":
    main()
