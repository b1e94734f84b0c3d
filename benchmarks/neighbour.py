"""How much of its speed a CPU-bound neighbour keeps beside a job making sync actor calls.

A user's CPU-bound process (a pure-Python counting loop, one core) runs beside a
job whose driver calls an actor in a loop (``ray.get(a.m.remote())``). Rounds
alternate: the job running, then the job frozen (SIGSTOP to its whole process
tree, the launcher included). The neighbour's speed with the job running over its
speed with the job frozen, in the same pair of rounds, is the share it keeps;
the median over the pairs is printed, with the job's calls/s and the CPU seconds
per second the job's processes used while running.

    python benchmarks/neighbour.py                       # embedded and mpiexec -n 4
    python benchmarks/neighbour.py --modes embedded --rounds 10 --window 2
    python benchmarks/neighbour.py --systems hpc_ray,ray --python-ray /tmp/rayvenv/bin/python

Issue 34 asks that the neighbour keep at least 0.75 of its speed. A job that
spins or yields in its waits takes the core the neighbour would use; a job that
sleeps in them costs the neighbour only the calls' own CPU.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

import psutil

#: The job's driver: make sync actor calls forever, print the count every 0.2 s.
JOB = r"""
import sys, threading, time
import {module} as ray
ray.init({init})

@ray.remote
class Echo:
    def m(self):
        return b"ok"

a = Echo.remote()
ray.get(a.m.remote())
calls = 0

def report():
    while True:
        print("calls", calls, flush=True)
        time.sleep(0.2)

print("ready", flush=True)   # (before the report thread: print's writes interleave)
threading.Thread(target=report, daemon=True).start()
while True:
    ray.get(a.m.remote())
    calls += 1
"""


def _neighbour(counter) -> None:
    n = 0
    while True:
        for _ in range(20000):
            n += 1
        counter.value = n


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root] + root.children(recursive=True)
    except psutil.Error:
        return [root]


def _signal_all(procs, sig) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


def cpu_seconds(procs) -> float:
    """User and system CPU seconds of ``procs`` (psutil processes) so far; those gone count 0."""
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


class Job:
    """The job's process tree, started in a session of its own."""

    def __init__(self, cmd: list[str], env: dict) -> None:
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, start_new_session=True)
        self.calls = 0
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        self.root = psutil.Process(self.proc.pid)

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("ready"):
                self.ready.set()
            elif line.startswith("calls "):
                self.calls = int(line.split()[1])

    def processes(self) -> list[psutil.Process]:
        return _tree(self.root)

    def stop(self) -> None:
        procs = self.processes()
        _signal_all(procs, signal.SIGCONT)
        _signal_all(procs, signal.SIGKILL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        psutil.wait_procs(procs, timeout=10)


def _job_command(system: str, mode: str, ranks: int, python: str) -> list[str]:
    if system == "ray":
        src = JOB.format(module="ray", init="num_cpus=2, include_dashboard=False")
        return [python, "-c", src]
    if mode == "embedded":
        return [python, "-c", JOB.format(module="hpc_ray", init="")]
    mpiexec = shutil.which("mpiexec") or os.path.join(os.path.dirname(python), "mpiexec")
    return [mpiexec, "-n", str(ranks), python, "-c", JOB.format(module="hpc_ray", init="")]


def measure(system: str, mode: str, ranks: int, rounds: int, window: float,
            python: str) -> dict:
    counter = multiprocessing.Value("q", 0, lock=False)
    neighbour = multiprocessing.Process(target=_neighbour, args=(counter,), daemon=True)
    job = Job(_job_command(system, mode, ranks, python), dict(os.environ))
    try:
        if not job.ready.wait(180):
            raise RuntimeError(f"{system} {mode}: the job did not start: "
                               + (job.proc.stderr.read() if job.proc.poll() is not None else ""))
        neighbour.start()
        time.sleep(1.0)
        kept, rates, cpus = [], [], []
        for _ in range(rounds):
            procs = job.processes()
            n0, c0, j0, t0 = counter.value, job.calls, cpu_seconds(procs), time.monotonic()
            time.sleep(window)
            n1, c1, j1, t1 = counter.value, job.calls, cpu_seconds(procs), time.monotonic()
            running = (n1 - n0) / (t1 - t0)
            rates.append((c1 - c0) / (t1 - t0))
            cpus.append((j1 - j0) / (t1 - t0))
            _signal_all(procs, signal.SIGSTOP)
            time.sleep(0.1)
            n0, t0 = counter.value, time.monotonic()
            time.sleep(window)
            n1, t1 = counter.value, time.monotonic()
            _signal_all(procs, signal.SIGCONT)
            frozen = (n1 - n0) / (t1 - t0)
            kept.append(running / frozen if frozen else 0.0)
            time.sleep(0.2)
        return {"kept": statistics.median(kept), "kept_all": kept,
                "calls_per_s": statistics.median(rates), "job_cpu": statistics.median(cpus)}
    finally:
        if neighbour.is_alive():
            neighbour.kill()
        job.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="hpc_ray", help="hpc_ray,ray")
    ap.add_argument("--modes", default="embedded,mpiexec", help="hpc_ray's: embedded,mpiexec")
    ap.add_argument("--ranks", type=int, default=4, help="mpiexec -n")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--window", type=float, default=1.5, help="seconds per half-round")
    ap.add_argument("--python-ray", default=sys.executable, help="an interpreter with ray")
    args = ap.parse_args()
    print(f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.2f}, "
          f"{args.rounds} rounds of {args.window} s running + {args.window} s frozen")
    print("| system | mode | neighbour keeps (median) | per round | calls/s | job CPU-s/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for system in args.systems.split(","):
        modes = ["embedded"] if system == "ray" else args.modes.split(",")
        for mode in modes:
            python = args.python_ray if system == "ray" else sys.executable
            r = measure(system, mode, args.ranks, args.rounds, args.window, python)
            label = f"mpiexec -n {args.ranks}" if mode == "mpiexec" else mode
            per = " ".join(f"{k:.2f}" for k in r["kept_all"])
            print(f"| {system} | {label} | {r['kept']:.2f} | {per} | "
                  f"{r['calls_per_s']:.0f} | {r['job_cpu']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
