"""What an idle job costs, and how soon it answers after a pause: hpc_ray and Ray
side by side.

A batch job spends time between bursts of tasks (a driver doing numpy, a Tune
trial's long step, a user at a prompt). Meanwhile MPI ranks cannot sleep in the
kernel as Ray's gRPC processes do: a rank polls MPI. This script measures, for
each system, one job of 4 worker CPUs:

    idle CPU        CPU seconds per second of every process of the job (driver,
                    head, ranks or raylet/GCS, executors or workers, launcher),
                    measured over 4 s after 2 s of quiet
    first task      ray.get(f.remote()) of a trivial task right after 1.5 s of
                    quiet (median of 6 pauses): what the pause costs the next call
    after 50 ms     the same after 50 ms of quiet: long enough for a job on one
                    host to sleep on its doorbells (wait.DEEP_AFTER_ONE_HOST),
                    short of the 1 s after which a job on several hosts does
    next task       the same call again, right after the first (median of 6 x 10)
    busy overhead   while 2 CPU-bound tasks of 4 s run: CPU seconds per second
                    of every process of the job except what the two tasks' own
                    processes spent running them (the runtime's polling and
                    bookkeeping, taken from the cores the tasks could use)

Systems: ``hpc_ray`` (embedded: ``init(num_cpus=4)`` spawns 4 worker ranks),
``hpc_ray_mpi`` (``mpiexec -n 5``), ``ray`` (``ray.init(num_cpus=4)``).

    python benchmarks/idle.py                       # ~1 minute
    python benchmarks/idle.py --systems hpc_ray --save
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import queue
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SYSTEMS = ("hpc_ray", "hpc_ray_mpi", "ray")
CPUS = 4
PAUSE = 1.5
SHORT_PAUSE = 0.05
BUSY_TASKS = 2
BUSY_SECONDS = 4.0


def child(system: str, rounds: int) -> None:
    """Start the system, say IDLE and wait for a line on stdin (the parent
    measures meanwhile), then time calls after pauses and print JSON."""
    if system == "ray":
        import ray
        ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
    else:
        import hpc_ray as ray
        ray.init(num_cpus=CPUS) if system == "hpc_ray" else ray.init()

    @ray.remote
    def noop():
        return 1

    @ray.remote
    def burn(seconds):
        """Spin for ``seconds`` of wall time; the CPU this process spent meanwhile."""
        t0 = time.process_time()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        return time.process_time() - t0

    ray.get([noop.remote() for _ in range(200)])
    print("IDLE", flush=True)
    sys.stdin.readline()
    short = []
    for _ in range(rounds * 4):
        time.sleep(SHORT_PAUSE)
        t = time.perf_counter()
        ray.get(noop.remote())
        short.append(time.perf_counter() - t)
    first, then = [], []
    for _ in range(rounds):
        time.sleep(PAUSE)
        t = time.perf_counter()
        ray.get(noop.remote())
        first.append(time.perf_counter() - t)
        for _ in range(10):
            t = time.perf_counter()
            ray.get(noop.remote())
            then.append(time.perf_counter() - t)
    print(json.dumps({"first_ms": statistics.median(first) * 1e3,
                      "first_max_ms": max(first) * 1e3,
                      "short_ms": statistics.median(short) * 1e3,
                      "short_max_ms": max(short) * 1e3,
                      "next_ms": statistics.median(then) * 1e3}), flush=True)
    print("BUSY", flush=True)
    sys.stdin.readline()
    t = time.perf_counter()
    task_cpu = sum(ray.get([burn.remote(BUSY_SECONDS) for _ in range(BUSY_TASKS)]))
    print(json.dumps({"task_cpu": task_cpu, "busy_wall": time.perf_counter() - t}),
          flush=True)
    sys.stdin.readline()   # the parent has read the processes' CPU: they may end
    ray.shutdown()


def _tree_cpu(pid: int) -> tuple[float, int]:
    import psutil
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return 0.0, 0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total, len(procs)


def _lines(stream) -> queue.Queue:
    """The stream's lines, read by a thread (then None at its end): the parent
    can wait for one with a timeout."""
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_for(lines: queue.Queue, want, deadline: float, system: str) -> str:
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise RuntimeError(f"{system}: no answer in time") from None
        if line is None:
            raise RuntimeError(f"{system} ended early")
        if want(line):
            return line


def measure(system: str, rounds: int, timeout: float) -> dict:
    me = [sys.executable, os.path.abspath(__file__), "--child", system, "--rounds", str(rounds)]
    if system == "hpc_ray_mpi":
        me = [shutil.which("mpiexec") or "mpiexec", "-n", str(CPUS + 1)] + me
    proc = subprocess.Popen(me, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        lines = _lines(proc.stdout)
        _wait_for(lines, lambda line: line.strip() == "IDLE", time.monotonic() + timeout, system)
        time.sleep(2.0)   # start-up work (pre-touching the store, imports) settles
        windows = []
        for _ in range(2):
            before, nprocs = _tree_cpu(proc.pid)
            time.sleep(2.0)
            windows.append((_tree_cpu(proc.pid)[0] - before) / 2.0)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out = json.loads(_wait_for(lines, lambda line: line.startswith("{"),
                                   time.monotonic() + timeout, system))
        _wait_for(lines, lambda line: line.strip() == "BUSY", time.monotonic() + timeout,
                  system)
        before, _ = _tree_cpu(proc.pid)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        busy = json.loads(_wait_for(lines, lambda line: line.startswith("{"),
                                    time.monotonic() + timeout, system))
        spent = _tree_cpu(proc.pid)[0] - before
        proc.stdin.write("go\n")
        proc.stdin.flush()
        proc.wait(timeout=60)
        out.update(idle_cpu=min(windows), processes=nprocs,
                   busy_overhead=(spent - busy["task_cpu"]) / busy["busy_wall"])
        return out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--reps", type=int, default=1, help="runs per system, interleaved")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--rounds", type=int, default=6, help="pauses per run")
    ap.add_argument("--quick", action="store_true", help="2 pauses per run (smoke runs)")
    ap.add_argument("--save", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    rounds = 2 if args.quick else args.rounds
    if args.child:
        child(args.child, rounds)
        return
    systems = args.systems.split(",")
    runs: dict = {s: [] for s in systems}
    for _ in range(args.reps):
        for s in systems:
            runs[s].append(measure(s, rounds, args.timeout))
            print(f"# {s}: {runs[s][-1]}", flush=True)
    rows = ["| system | processes | idle CPU (cpu-s/s) | first task after 1.5 s quiet (ms) "
            f"| after {SHORT_PAUSE * 1e3:.0f} ms quiet (ms) | next task (ms) "
            f"| overhead while {BUSY_TASKS} tasks of {BUSY_SECONDS:.0f} s run "
            "(cpu-s/s) |", "|---|--:|--:|--:|--:|--:|--:|"]
    for s in systems:
        med = {k: statistics.median(r[k] for r in runs[s])
               for k in ("idle_cpu", "first_ms", "short_ms", "next_ms", "processes",
                         "busy_overhead")}
        rows.append(f"| {s} | {med['processes']:.0f} | {med['idle_cpu']:.3f} | "
                    f"{med['first_ms']:.2f} | {med['short_ms']:.2f} | {med['next_ms']:.2f} | "
                    f"{med['busy_overhead']:.3f} |")
    table = "\n".join(rows)
    print(table)
    if args.save:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        path = RESULTS / f"idle-{stamp}.md"
        path.write_text(f"# Idle cost and first call after a pause, {stamp}\n\n"
                        f"`python benchmarks/idle.py {' '.join(sys.argv[1:])}` on "
                        f"{platform.node()} ({os.cpu_count()} CPUs); medians of "
                        f"{args.reps} run(s) per system, {CPUS} worker CPUs each.\n\n"
                        f"{table}\n\nEvery run:\n\n```\n{json.dumps(runs, indent=1)}\n```\n")
        print(f"saved {path}")


if __name__ == "__main__":
    main()
