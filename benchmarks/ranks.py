"""Many ranks on one node: 20,000 tiny tasks under mpiexec, hpc_ray vs mpi4py.futures.

For each N the parent runs, one after the other (never together):

    hpc_ray:  mpiexec -n N python benchmarks/ranks.py --child hpc_ray
              (a plain ``python driver.py`` under mpiexec: rank 0 drives, N-1 ranks work)
              ray.get([f.remote(i) for i in range(TASKS)])
    futures:  mpiexec -n N python -m mpi4py.futures benchmarks/ranks.py --child futures
              list(executor.map(f, range(TASKS)))        (N-1 worker ranks, chunksize 1)

Each child first runs one warm-up batch (2 tasks per worker, so the function has
reached every rank), then times the TASKS batch and prints one ``@@ranks {json}``
line with the CPU its processes used during the batch, by role (rank 0, the
other ranks, their child processes: hpc_ray's executors), read with psutil. The
parent also records the wall time of the whole mpiexec (start-up and shutdown
included) and the CPU seconds all its processes used (RUSAGE_CHILDREN: mpiexec
reaps its ranks, the ranks their executors): "CPU µs/task all".

    python benchmarks/ranks.py                       # N = 3, 8, 16, 32; 20,000 tasks
    python benchmarks/ranks.py --ranks 3,8 --reps 2 --systems hpc_ray,futures
    python benchmarks/ranks.py --save                # benchmarks/results/ranks-<date>.md/.json
    python benchmarks/ranks.py --base /tmp/base      # + hpc_ray_base: the hpc_ray of another
                                                     # checkout (PYTHONPATH), in the same run
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = 20_000
MARK = "@@ranks "


def f(x):
    return x


def job_cpu() -> dict:
    """CPU seconds so far of this job's processes, by role (rank 0, other ranks, their children).

    Every rank is a child of the launcher's proxy (our parent); an hpc_ray rank's
    executors are its children.
    """
    import psutil
    me = os.getpid()
    out = {"rank0": 0.0, "ranks": 0.0, "executors": 0.0}

    def cpu(p):
        try:
            t = p.cpu_times()
            return t.user + t.system
        except psutil.Error:
            return 0.0

    for p in psutil.Process(os.getppid()).children():
        role = "rank0" if p.pid == me else "ranks"
        out[role] += cpu(p)
        try:
            kids = p.children(recursive=True)
        except psutil.Error:
            kids = []
        for k in kids:
            out["executors"] += cpu(k)
    return out


def _cpu_delta(a: dict, b: dict, tasks: int) -> dict:
    return {f"cpu_us_{k}": round((b[k] - a[k]) / tasks * 1e6, 1) for k in a}


# --- children: run inside mpiexec ------------------------------------------------------

def child_hpc_ray(tasks: int) -> None:
    import hpc_ray as ray
    ray.init()
    workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    g = ray.remote(f)
    assert ray.get([g.remote(i) for i in range(2 * workers)]) == list(range(2 * workers))
    c0 = job_cpu()
    t = time.perf_counter()
    out = ray.get([g.remote(i) for i in range(tasks)])
    dt = time.perf_counter() - t
    cpu = _cpu_delta(c0, job_cpu(), tasks)
    assert out == list(range(tasks)), "wrong results"
    print(MARK + json.dumps({"seconds": dt, "workers": workers, **cpu}), flush=True)
    ray.shutdown()


def child_futures(tasks: int) -> None:
    from mpi4py.futures import MPIPoolExecutor
    with MPIPoolExecutor() as ex:
        workers = ex.num_workers
        assert list(ex.map(f, range(2 * workers))) == list(range(2 * workers))
        c0 = job_cpu()
        t = time.perf_counter()
        out = list(ex.map(f, range(tasks)))
        dt = time.perf_counter() - t
        cpu = _cpu_delta(c0, job_cpu(), tasks)
    assert out == list(range(tasks)), "wrong results"
    print(MARK + json.dumps({"seconds": dt, "workers": workers, **cpu}), flush=True)


# --- parent ------------------------------------------------------------------------------

def command(system: str, n: int, tasks: int) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from hpc_ray.mpirun import mpiexec_argv
    py = sys.executable
    me = str(Path(__file__).resolve())
    tail = ["--child", system, "--tasks", str(tasks)]
    if system == "hpc_ray":
        return mpiexec_argv(n, [py, me, *tail])
    return mpiexec_argv(n, [py, "-m", "mpi4py.futures", me, *tail])


def run_one(system: str, n: int, tasks: int, timeout: float, base: str | None = None) -> dict:
    env = None
    if system == "hpc_ray_base":
        env = dict(os.environ, PYTHONPATH=base)
    cmd = command("hpc_ray" if system == "hpc_ray_base" else system, n, tasks)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    # From outside the checkout: executors start with ``python -m`` in the driver's
    # directory, where this checkout would come before hpc_ray_base's PYTHONPATH.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tempfile.gettempdir(), start_new_session=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        return {"system": system, "ranks": n, "error": f"timed out after {timeout:.0f} s",
                "tail": (out + err)[-2000:]}
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [ln for ln in out.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        return {"system": system, "ranks": n, "error": f"exit code {proc.returncode}",
                "tail": (out + err)[-2000:]}
    res = json.loads(lines[-1][len(MARK):])
    return {"system": system, "ranks": n, "workers": res["workers"], "tasks": tasks,
            "seconds": round(res["seconds"], 3),
            "tasks_per_s": round(tasks / res["seconds"]),
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "cpu_us_per_task": round(cpu / tasks * 1e6),
            **{k: v for k, v in res.items() if k.startswith("cpu_us_")}}


def table(rows: list[dict], systems: list[str], stat: str = "best") -> str:
    runs: dict = {}
    for r in rows:
        if "error" not in r:
            runs.setdefault((r["system"], r["ranks"]), []).append(r)
    best: dict = {}
    for key, rs in runs.items():
        rs = sorted(rs, key=lambda r: r["tasks_per_s"])
        best[key] = rs[-1] if stat == "best" else rs[(len(rs) - 1) // 2]
    ranks = sorted({r["ranks"] for r in rows})
    head = ["N (ranks)"]
    for s in systems:
        head += [f"{s} tasks/s", f"{s} s", f"{s} wall s",
                 f"{s} CPU µs/task in batch: rank 0 / ranks / executors", f"{s} CPU µs/task all"]
    if "hpc_ray" in systems and "futures" in systems:
        head.append("hpc_ray/futures")
    if "hpc_ray" in systems and "hpc_ray_base" in systems:
        head.append("hpc_ray/hpc_ray_base")
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for n in ranks:
        cells = [str(n)]
        for s in systems:
            r = best.get((s, n))
            split = (" / ".join(f"{r.get('cpu_us_' + k, 0):.0f}"
                                for k in ("rank0", "ranks", "executors")) if r else "")
            cells += ([f"{r['tasks_per_s']:,}", str(r["seconds"]), str(r["wall_s"]), split,
                       f"{r['cpu_us_per_task']:,}"] if r else ["ERR", "", "", "", ""])
        if "hpc_ray" in systems and "futures" in systems:
            a, b = best.get(("hpc_ray", n)), best.get(("futures", n))
            cells.append(f"{a['tasks_per_s'] / b['tasks_per_s']:.2f}x" if a and b else "")
        if "hpc_ray" in systems and "hpc_ray_base" in systems:
            a, b = best.get(("hpc_ray", n)), best.get(("hpc_ray_base", n))
            cells.append(f"{a['tasks_per_s'] / b['tasks_per_s']:.2f}x" if a and b else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="3,8,16,32", help="mpiexec -n values")
    p.add_argument("--systems", default="hpc_ray,futures")
    p.add_argument("--tasks", type=int, default=TASKS)
    p.add_argument("--reps", type=int, default=1, help="runs per (system, N); the best is shown")
    p.add_argument("--stat", choices=["best", "median"], default="best",
                   help="which run of each cell the table shows")
    p.add_argument("--base", help="also run hpc_ray_base: hpc_ray with PYTHONPATH=BASE")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--save", action="store_true", help="write benchmarks/results/ranks-*")
    p.add_argument("--child", choices=["hpc_ray", "futures"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child == "hpc_ray":
        return child_hpc_ray(args.tasks)
    if args.child == "futures":
        return child_futures(args.tasks)

    systems = [s for s in args.systems.split(",") if s]
    if args.base and "hpc_ray_base" not in systems:
        systems.insert(1, "hpc_ray_base")
    for s in systems:
        if s not in ("hpc_ray", "hpc_ray_base", "futures"):
            p.error(f"unknown system {s!r} (known: ['hpc_ray', 'hpc_ray_base', 'futures'])")
        if s == "hpc_ray_base" and not args.base:
            p.error("hpc_ray_base needs --base PATH")
    started = time.time()
    load0 = os.getloadavg()[0]
    rows = []
    # Rank counts interleaved as well as systems: the VM's speed drifts over a
    # run, and "8 ranks no slower than 3" must not be decided by that drift.
    for _ in range(args.reps):
        for n in (int(x) for x in args.ranks.split(",") if x):
            for s in systems:
                r = run_one(s, n, args.tasks, args.timeout, args.base)
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
    text = table(rows, systems, args.stat)
    print(text)
    if args.save:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        out = ROOT / "benchmarks" / "results" / f"ranks-{stamp}"
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--short", "hpc_ray"], cwd=ROOT,
                               capture_output=True, text=True).stdout.split("\n")
        dirty = [ln[3:] for ln in dirty if ln.strip()]
        if dirty:
            commit += f" (uncommitted changes at the end of the run: {', '.join(dirty)})"
        if os.environ.get("PYTHONPATH"):
            commit += f"; PYTHONPATH={os.environ['PYTHONPATH']}"
        if args.base:
            commit += f"; hpc_ray_base: PYTHONPATH={args.base}"
        hdr = (f"# {args.tasks:,} tiny tasks under mpiexec -n N, {stamp}\n\n"
               f"Command: `python benchmarks/ranks.py {' '.join(sys.argv[1:])}`\n\n"
               f"- hpc_ray commit: {commit}\n- python: {platform.python_version()}\n"
               f"- cpus: {os.cpu_count()}; 1-min load average {load0:.2f} at start, "
               f"{os.getloadavg()[0]:.2f} at end\n"
               f"- {args.stat} of {args.reps} run(s) per cell (systems and rank counts interleaved); `s`: the timed batch; `wall s`: the "
               f"whole mpiexec; `CPU µs/task in batch`: CPU of the job's processes during the "
               f"timed batch / tasks, by role; `all`: CPU of every process of the run "
               f"(start-up included) / tasks\n- total: {time.time() - started:.0f} s\n\n")
        errors = [r for r in rows if "error" in r]
        tail = "".join(f"\n- {r['system']} N={r['ranks']}: {r['error']}\n" for r in errors)
        out.with_suffix(".md").write_text(hdr + text + "\n" + tail)
        out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
        print(f"saved {out}.md and .json", file=sys.stderr)


if __name__ == "__main__":
    main()
