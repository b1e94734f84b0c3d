"""The first allreduces after ordinary actors are created, beside raw mpi4py.

A program makes its actors, forms a collective group and starts its loop at
once (``hpc_ray.collective``'s docs, ``DistributedSGD``). Whatever else the job
does in that first second (a rank starting the executor for its next actor, see
``worker.WorkerLoop``'s standby) shares the cores with the loop. This times the
loop from its first operation: ``--windows`` windows of ``--ops`` allreduces of
``--size`` bytes (float32, sum), microseconds per operation in each window.

    hpc_ray_exec       3 ordinary @remote actors (mpiexec -n 4: the head + 3 ranks),
                       created, joined into a group, then the windows at once
    hpc_ray_exec_base  the same with the hpc_ray of another checkout (--base PATH)
    mpi4py             comm.Allreduce on 3 ranks (mpiexec -n 3) after MPI_Init

(Ray is not in the table: its collective library needs cupy or pygloo, neither
installs here.) ``--repeat R`` runs the systems R times in turn; the table shows
each window's median over the runs.

    python benchmarks/collective_start.py
    python benchmarks/collective_start.py --base /tmp/base --repeat 5 --save
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
import time
from pathlib import Path

from allreduce import mpiexec   # (this directory is on sys.path: a script's own)

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
RESULTS = HERE.parent / "results"
MARK = "@@collective_start "
MEMBERS = 3


def windows(allreduce, buf, n_windows: int, ops: int) -> list[float]:
    out = []
    for _ in range(n_windows):
        t0 = time.perf_counter()
        for _ in range(ops):
            allreduce(buf)
        out.append((time.perf_counter() - t0) / ops * 1e6)
    return out


def child_hpc_ray(args) -> None:
    import numpy as np

    import hpc_ray as ray
    from hpc_ray import collective as col
    ray.init()

    @ray.remote
    class Member:
        def __init__(self, rank):
            self.rank = rank

        def join(self):
            col.init_collective_group(MEMBERS, self.rank, group_name="start")

        def run(self, size, n_windows, ops):
            buf = np.zeros(size // 4, dtype=np.float32)
            return windows(lambda b: col.allreduce(b, "start"), buf, n_windows, ops)

    members = [Member.remote(i) for i in range(MEMBERS)]
    ray.get([m.join.remote() for m in members])
    times = ray.get([m.run.remote(args.size, args.windows, args.ops) for m in members])
    # Every operation waits for all members: member 0's windows are the group's.
    print(MARK + json.dumps(times[0]), flush=True)
    ray.shutdown()


def child_mpi4py(args) -> None:
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    buf = np.zeros(args.size // 4, dtype=np.float32)
    times = windows(lambda b: comm.Allreduce(MPI.IN_PLACE, b), buf, args.windows, args.ops)
    if comm.Get_rank() == 0:
        print(MARK + json.dumps(times), flush=True)


def run_system(system: str, args) -> list[float] | None:
    child = [sys.executable, str(HERE), "--child", system.replace("_base", ""),
             "--size", str(args.size), "--windows", str(args.windows), "--ops", str(args.ops)]
    ranks = MEMBERS if system == "mpi4py" else MEMBERS + 1
    repo = Path(args.base).resolve() if system.endswith("_base") else REPO
    env = dict(os.environ, PYTHONPATH=str(repo))
    # From /tmp: executors start with ``python -m`` in this directory, where a
    # checkout would come before PYTHONPATH.
    proc = subprocess.run([mpiexec(), "-n", str(ranks), *child], env=env, cwd="/tmp",
                          capture_output=True, text=True, timeout=args.timeout)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    sys.stderr.write(f"{system}: no result (exit {proc.returncode})\n{proc.stderr[-2000:]}\n")
    return None


def table(runs: dict, args) -> str:
    systems = [s for s in runs if runs[s]]
    med = {s: [statistics.median(r[w] for r in runs[s]) for w in range(args.windows)]
           for s in systems}
    lines = ["| window (ops) | " + " | ".join(f"{s} us/op" for s in systems) + " |",
             "|---:|" + "---:|" * len(systems)]
    for w in range(args.windows):
        lo, hi = w * args.ops + 1, (w + 1) * args.ops
        lines.append(f"| {lo}-{hi} | " + " | ".join(f"{med[s][w]:,.0f}" for s in systems) + " |")
    half = args.windows // 2
    lines.append("| last half, median | " + " | ".join(
        f"{statistics.median(med[s][half:]):,.0f}" for s in systems) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--systems", default="hpc_ray_exec,mpi4py")
    ap.add_argument("--size", type=int, default=1 << 20, help="bytes per allreduce")
    ap.add_argument("--windows", type=int, default=10)
    ap.add_argument("--ops", type=int, default=100, help="allreduces per window")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base", help="a checkout of hpc_ray: adds hpc_ray_exec_base")
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--save", action="store_true")
    args = ap.parse_args()
    if args.child == "hpc_ray_exec":
        return child_hpc_ray(args)
    if args.child == "mpi4py":
        return child_mpi4py(args)
    systems = args.systems.split(",")
    if args.base and "hpc_ray_exec_base" not in systems:
        systems.insert(1, "hpc_ray_exec_base")
    runs: dict = {s: [] for s in systems}
    for rep in range(args.repeat):
        for s in systems:
            got = run_system(s, args)
            if got is not None:
                runs[s].append(got)
                print(f"run {rep + 1} {s}: " + ", ".join(f"{t:,.0f}" for t in got), flush=True)
    out = table(runs, args)
    load = os.getloadavg()[0]
    head = (f"allreduce of {args.size:,} bytes among {MEMBERS} members, from the first "
            f"operation: us per operation in windows of {args.ops}, median of "
            f"{args.repeat} interleaved run(s); load average {load:.1f} on "
            f"{os.cpu_count()} CPUs")
    print(head)
    print(out)
    if args.save:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        cmd = "python benchmarks/collective_start.py " + " ".join(sys.argv[1:])
        text = (f"# The first allreduces after actors are created, {stamp}\n\nCommand: "
                f"`{cmd}`\n\n- hpc_ray commit: {commit}\n- python {platform.python_version()}"
                f"\n\n{head}\n\n{out}\n\nEach run:\n\n```\n" + "\n".join(
                    f"{s} run {i + 1}: " + ", ".join(f"{t:,.0f}" for t in r)
                    for s in runs for i, r in enumerate(runs[s])) + "\n```\n")
        path = RESULTS / f"collective-start-{stamp}.md"
        path.write_text(text)
        print(f"saved {path}")


if __name__ == "__main__":
    main()
