"""Sync actor calls from two driver threads under fixed CPU placements, hpc_ray and Ray.

The ``actor_nn_sync`` row of the microbenchmark (two driver threads, each looping
``get(a_i.f.remote())`` on its own actor) swings between two speeds from one run to
the next on a 2-core machine. This script shows where the swing comes from by
fixing where each party runs (``os.sched_setaffinity``) and running the same loop:

    free     nothing pinned: the kernel places the threads and the actors' processes
    apart    both driver threads on CPU 0, both actors on CPU 1
    paired   driver thread i and actor i on CPU i
    crossed  driver thread i and the other thread's actor on CPU i
    actors   the actors on CPU 1, the driver threads anywhere

Each (system, placement) runs in a child process of its own, one at a time, with a
warm-up, then ``--calls`` calls per thread; ``--reps`` children each, the table
shows the median and the range. Ray's actors pin themselves the same way (its
raylet and GCS stay unpinned).

    python benchmarks/placement.py                   # hpc_ray and ray, all placements, 3 reps
    python benchmarks/placement.py --systems hpc_ray --placements free,apart --reps 5
    python benchmarks/placement.py --save            # benchmarks/results/placement-<date>.md
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "@@placement "
WARMUP_CALLS = 1000

#: placement -> (CPUs of driver thread 0, of thread 1, of actor 0, of actor 1); None: unpinned.
PLACEMENTS = {
    "free": (None, None, None, None),
    "apart": ([0], [0], [1], [1]),
    "paired": ([0], [1], [0], [1]),
    "crossed": ([0], [1], [1], [0]),
    "actors": (None, None, [1], [1]),
}


class Echo:
    def f(self, x=None):
        return x

    def pin(self, cpus):
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        return sorted(os.sched_getaffinity(0))


def child(system: str, placement: str, calls: int) -> None:
    if system == "ray":
        import ray
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    else:
        import hpc_ray as ray
        ray.init(num_cpus=2)
    plan = PLACEMENTS[placement]
    cls = ray.remote(Echo)
    actors = [cls.remote(), cls.remote()]
    ray.get([a.pin.remote(plan[2 + i]) for i, a in enumerate(actors)])

    def loop(i: int, actor, n: int) -> None:
        if plan[i] is not None:
            os.sched_setaffinity(threading.get_native_id(), plan[i])
        for _ in range(n):
            ray.get(actor.f.remote())

    def both(n: int) -> float:
        threads = [threading.Thread(target=loop, args=(i, a, n)) for i, a in enumerate(actors)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return time.perf_counter() - t

    both(WARMUP_CALLS)
    seconds = both(calls)
    print(MARK + json.dumps({"calls_per_s": 2 * calls / seconds}), flush=True)
    ray.shutdown()


def run_child(system: str, placement: str, calls: int, timeout: float) -> float | None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", system,
           "--placement", placement, "--calls", str(calls)]
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        print(f"{system} {placement}: timed out after {timeout} s", file=sys.stderr)
        return None
    for line in out.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])["calls_per_s"]
    print(f"{system} {placement}: exit code {out.returncode}\n{out.stderr[-2000:]}",
          file=sys.stderr)
    return None


def table(results: dict, systems: list, placements: list) -> str:
    lines = ["| placement | " + " | ".join(f"{s} calls/s, median (range)" for s in systems)
             + (" | hpc_ray/ray |" if {"hpc_ray", "ray"} <= set(systems) else " |"),
             "|---|" + "--:|" * len(systems) + ("--:|" if {"hpc_ray", "ray"} <= set(systems) else "")]
    for p in placements:
        cells = []
        med = {}
        for s in systems:
            got = [r for r in results.get((s, p), []) if r is not None]
            if not got:
                cells.append("ERR")
                continue
            med[s] = statistics.median(got)
            cells.append(f"{med[s]:,.0f} ({min(got):,.0f}-{max(got):,.0f})")
        row = f"| {p} | " + " | ".join(cells) + " |"
        if {"hpc_ray", "ray"} <= set(systems):
            row += f" {med['hpc_ray'] / med['ray']:.1f}x |" if len(med) == len(systems) else " |"
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--systems", default="hpc_ray,ray")
    ap.add_argument("--placements", default=",".join(PLACEMENTS))
    ap.add_argument("--calls", type=int, default=10_000, help="timed calls per thread")
    ap.add_argument("--reps", type=int, default=3, help="children per (system, placement)")
    ap.add_argument("--timeout", type=float, default=300.0, help="per child")
    ap.add_argument("--save", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--placement", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.placement, args.calls)
        return
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        sys.exit("placement.py needs CPUs 0 and 1")
    systems = args.systems.split(",")
    placements = args.placements.split(",")
    for p in placements:
        if p not in PLACEMENTS:
            sys.exit(f"unknown placement {p!r} (from {list(PLACEMENTS)})")
    results: dict = {}
    # Reps interleaved, so that a noisy minute falls on every cell alike.
    for rep in range(args.reps):
        for p in placements:
            for s in systems:
                r = run_child(s, p, args.calls, args.timeout)
                results.setdefault((s, p), []).append(r)
                print(json.dumps({"system": s, "placement": p, "rep": rep, "calls_per_s": r}),
                      flush=True)
    load = os.getloadavg()[0]
    title = (f"Two driver threads, each calling its own actor synchronously, "
             f"{args.calls:,} calls each; {args.reps} children per cell; "
             f"load average {load:.1f} on {os.cpu_count()} CPUs")
    text = title + "\n\n" + table(results, systems, placements)
    print(text)
    if args.save:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=ROOT).stdout.strip()
        path = ROOT / "benchmarks" / "results" / f"placement-{stamp}.md"
        path.write_text(f"# placement.py, {stamp}\n\n"
                        f"hpc_ray at `{commit}`; {platform.platform()}; Python "
                        f"{platform.python_version()}\n\n"
                        f"`python benchmarks/placement.py {' '.join(sys.argv[1:])}`\n\n"
                        + text + "\n")
        print(f"saved {path}")


if __name__ == "__main__":
    main()
