"""Bursts of tiny tasks in every launch mode, against mpi4py.futures, in one run.

Issue 9 asks that under ``mpiexec -n 3`` (both ``python driver.py`` and
``python -m hpc_ray driver.py``) 20,000 and 200,000 tiny tasks run at no less
than 80% of embedded mode's rate, and at least 4x mpi4py.futures' rate. Each
system runs in its own launch, one after the other (2 workers each):

    embedded  python benchmarks/bursts.py --child hpc_ray N
    mpiexec   mpiexec -n 3 python benchmarks/bursts.py --child hpc_ray N
    module    mpiexec -n 3 python -m hpc_ray benchmarks/bursts.py --child hpc_ray N
    futures   mpiexec -n 3 python -m mpi4py.futures benchmarks/bursts.py --child futures N
              (list(executor.map(f, range(N), chunksize=1)), as a Ray user would port it)

The child times ``ray.get([f.remote(i) for i in range(N)])`` after a warm-up and
prints ``@@burst {json}``; the parent prints the table (best of ``--reps``).

    python benchmarks/bursts.py                      # 20,000 and 200,000 tasks
    python benchmarks/bursts.py --tasks 20000 --reps 3 --save
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "@@burst "
HERE = str(Path(__file__).resolve())


def f(x):
    return x


def child(system: str, n: int) -> None:
    if system == "futures":
        from mpi4py.futures import MPIPoolExecutor
        with MPIPoolExecutor() as ex:
            list(ex.map(f, range(100)))
            t = time.perf_counter()
            out = list(ex.map(f, range(n)))
            dt = time.perf_counter() - t
    else:
        import hpc_ray as ray
        ray.init()
        remote_f = ray.remote(f)
        ray.get([remote_f.remote(i) for i in range(100)])
        t = time.perf_counter()
        out = ray.get([remote_f.remote(i) for i in range(n)])
        dt = time.perf_counter() - t
        ray.shutdown()
    assert out[-1] == n - 1
    print(MARK + json.dumps({"tasks": n, "seconds": dt, "rate": n / dt}), flush=True)


COMMANDS = {
    "embedded": lambda n: [sys.executable, HERE, "--child", "hpc_ray", str(n)],
    "mpiexec": lambda n: ["mpiexec", "-n", "3", sys.executable, HERE, "--child", "hpc_ray",
                          str(n)],
    "module": lambda n: ["mpiexec", "-n", "3", sys.executable, "-m", "hpc_ray", HERE,
                         "--child", "hpc_ray", str(n)],
    "futures": lambda n: ["mpiexec", "-n", "3", sys.executable, "-m", "mpi4py.futures", HERE,
                          "--child", "futures", str(n)],
}


def run_one(system: str, n: int, timeout: float) -> float | None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run(COMMANDS[system](n), capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=str(ROOT))
    except subprocess.TimeoutExpired:
        return None
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])["rate"]
    sys.stderr.write(f"{system} {n}: no result\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}\n")
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2)
    ap.add_argument("--tasks", default="20000,200000")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--save", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    rows = []
    for n in (int(x) for x in args.tasks.split(",")):
        best = {}
        for _ in range(args.reps):
            for system in COMMANDS:
                rate = run_one(system, n, args.timeout)
                if rate is not None:
                    best[system] = max(best.get(system, 0.0), rate)
        emb, fut = best.get("embedded"), best.get("futures")
        for system in ("embedded", "mpiexec", "module", "futures"):
            rate = best.get(system)
            vs_emb = f"{rate / emb:.2f}" if rate and emb else "-"
            vs_fut = f"{rate / fut:.1f}x" if rate and fut and system != "futures" else "-"
            rows.append(f"| {n:,} | {system} | {rate:,.0f} | {vs_emb} | {vs_fut} |"
                        if rate else f"| {n:,} | {system} | (failed) | - | - |")
    table = "\n".join(["| tasks | system | tasks/s (best) | / embedded | / futures |",
                       "| --- | --- | --- | --- | --- |"] + rows)
    load = os.getloadavg()
    text = (f"# Bursts of tiny tasks, {datetime.datetime.now():%Y-%m-%d %H:%M}\n\n"
            f"`python benchmarks/bursts.py --tasks {args.tasks} --reps {args.reps}`, "
            f"2 workers each, load average {load[0]:.1f} at the end.\n\n{table}\n")
    print(text)
    if args.save:
        out = ROOT / "benchmarks" / "results" / f"bursts-{datetime.datetime.now():%Y-%m-%d-%H%M}.md"
        out.write_text(text)
        print(f"saved {out}")


if __name__ == "__main__":
    main()
