"""Chaos: a workload of nested tasks, 1 MB results, chains and restartable actors,
while a thread SIGKILLs a random executor process (never a rank) every 0.3-1 s,
the way Ray's chaos tests kill workers under load.

    python benchmarks/chaos.py --tasks 20000               # embedded, 3 worker ranks
    mpiexec -n 4 python benchmarks/chaos.py --tasks 20000  # the same under mpiexec
    python benchmarks/chaos.py --runs 5 --tasks 20000 --save   # both modes, 5 runs each

Every task retries crashes without limit and every actor restarts without limit,
so every value must come back right however many processes die. The report gives
the kills, the executions beyond one per task (duplicates: work lost with a killed
process and run again), the calls that failed (lost) anyway, and the store at the
end against its start, once the driver dropped every ref. ``tests/test_chaos.py``
runs a small one in both modes.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

#: Seconds between kills: uniform in this range (Ray's chaos tests use about this).
KILL_EVERY = (0.3, 1.0)
#: Bytes of a "big" task's result: over the inline limit, so it lives in the store.
BIG = 1 << 20
#: Executions are counted by appending one byte per run to this file (O_APPEND).
COUNTER_ENV = "HPC_RAY_CHAOS_COUNTER"


def _count_execution() -> None:
    fd = os.open(os.environ[COUNTER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


def executor_pids() -> list[int]:
    """This job's executor processes: hpc_ray executors whose environment holds
    this job's counter (they inherit it from their ranks), in any launch mode."""
    import psutil

    mine = os.environ[COUNTER_ENV]
    pids = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if "hpc_ray.runtime.executor" in " ".join(p.info["cmdline"] or ()) and \
                    p.environ().get(COUNTER_ENV) == mine:
                pids.append(p.pid)
        except (OSError, psutil.Error):
            continue
    return pids


class Killer(threading.Thread):
    """SIGKILLs a random executor every KILL_EVERY seconds until stopped."""

    def __init__(self, seed: int, every: tuple = KILL_EVERY) -> None:
        super().__init__(daemon=True, name="chaos-killer")
        self.rng = random.Random(seed)
        self.every = every
        self.stop = threading.Event()
        self.kills = 0

    def run(self) -> None:
        while not self.stop.wait(self.rng.uniform(*self.every)):
            pids = executor_pids()
            if pids:
                try:
                    os.kill(self.rng.choice(pids), signal.SIGKILL)
                    self.kills += 1
                except ProcessLookupError:
                    pass


def run_workload(ray, tasks: int, seed: int, kill_every: tuple = KILL_EVERY,
                 get_timeout: float = 120) -> dict:
    """Run about ``tasks`` tasks and calls under the killer; return the report."""
    import numpy as np

    @ray.remote(max_retries=-1)
    def leaf(i):
        _count_execution()
        return i

    @ray.remote(max_retries=-1)
    def big(i):
        _count_execution()
        return np.full(BIG // 8, i, dtype=np.int64)

    @ray.remote(max_retries=-1)
    def nested(i):
        # A value only this process holds, then a wait for refs still running
        # elsewhere: the case that broke the head (issue 33).
        _count_execution()
        mine = ray.put(i)
        refs = [leaf.remote(i), leaf.remote(i + 1)]
        ready, _ = ray.wait(refs, num_returns=1)
        return sum(ray.get([mine] + refs)) + len(ready) - 1

    @ray.remote(max_retries=-1)
    def total(arr):
        _count_execution()
        return int(arr[0]) + int(arr[-1])

    @ray.remote(max_retries=-1)
    def step(x, i):
        _count_execution()
        return x + i

    @ray.remote(max_restarts=-1, max_task_retries=-1)
    class Doubler:
        def twice(self, x):
            _count_execution()
            return 2 * x

    @ray.remote(max_retries=-1)
    def caller(actor, i):
        # Actor calls made from inside a task (the direct route on one host).
        _count_execution()
        return sum(ray.get([actor.twice.remote(i), actor.twice.remote(i + 1)]))

    nodes = ray.nodes()
    store_start = sum(n["ObjectStoreUsed"] for n in nodes)
    killer = Killer(seed, kill_every)
    expected_runs = lost = 0
    wrong: list = []
    t0 = time.monotonic()
    killer.start()
    try:
        actors = [Doubler.remote() for _ in range(2)]
        done = r = 0
        while done < tasks:
            r += 1
            runs, failed, errors = _round(ray, r * 1000, leaf, nested, big, total, step,
                                          caller, actors, get_timeout)
            expected_runs += runs
            done += runs
            lost += failed
            wrong += errors
        del actors
    finally:
        killer.stop.set()
        killer.join()
    seconds = time.monotonic() - t0
    # Every ref is dropped: the store must come back to where it started.
    deadline = time.monotonic() + 30
    while True:
        store_end = sum(n["ObjectStoreUsed"] for n in ray.nodes())
        objects = len(ray.objects())
        if (store_end == store_start and objects == 0) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    executions = os.path.getsize(os.environ[COUNTER_ENV])
    return {"tasks": expected_runs, "seconds": round(seconds, 2), "kills": killer.kills,
            "executions": executions, "duplicates": executions - expected_runs,
            "lost": lost, "wrong": wrong, "store_start": store_start,
            "store_end": store_end, "objects_left": objects}


def _round(ray, base: int, leaf, nested, big, total, step, caller, actors,
           get_timeout: float) -> tuple[int, int, list]:
    """One round of every kind of work; returns (runs, calls lost, wrong values)."""
    n = 100
    refs = {
        "leaf": [leaf.remote(base + i) for i in range(n)],
        "nested": [nested.remote(base + i) for i in range(n // 10)],
        "big": [total.remote(big.remote(base + i)) for i in range(4)],
        "calls": [actors[i % 2].twice.remote(base + i) for i in range(n // 5)],
        "callers": [caller.remote(actors[i % 2], base + i) for i in range(4)],
    }
    chain = ray.put(0)
    for i in range(20):
        chain = step.remote(chain, i)
    refs["chain"] = [chain]
    want = {
        "leaf": [base + i for i in range(n)],
        "nested": [3 * (base + i) + 1 for i in range(n // 10)],
        "big": [2 * (base + i) for i in range(4)],
        "calls": [2 * (base + i) for i in range(n // 5)],
        "callers": [4 * (base + i) + 2 for i in range(4)],
        "chain": [sum(range(20))],
    }
    lost, wrong = 0, []
    for kind, rs in refs.items():
        try:
            got = ray.get(rs, timeout=get_timeout)
        except ray.exceptions.GetTimeoutError:
            raise
        except Exception as err:   # a call lost despite its retries
            lost += len(rs)
            wrong.append(f"{kind}: {type(err).__name__}: {str(err)[:300]}")
            continue
        if got != want[kind]:
            wrong.append(f"{kind}: got {got[:5]}..., want {want[kind][:5]}...")
    runs = n + 3 * (n // 10) + 8 + n // 5 + 3 * 4 + 20
    return runs, lost, wrong


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20000,
                        help="tasks and actor calls to run (about)")
    parser.add_argument("--seed", type=int, default=0, help="the killer's random seed")
    parser.add_argument("--kill-every", default="0.3,1.0",
                        help="seconds between kills: LOW,HIGH (uniform)")
    parser.add_argument("--get-timeout", type=float, default=120,
                        help="seconds a round's get may take before the run counts as hung")
    parser.add_argument("--num-cpus", type=int, default=3,
                        help="worker ranks in embedded mode")
    parser.add_argument("--runs", type=int, default=0,
                        help="run the workload this many times embedded and under "
                             "mpiexec -n NUM_CPUS+1, each a fresh job, and tabulate")
    parser.add_argument("--save", action="store_true",
                        help="with --runs: write benchmarks/results/chaos-<date>.md")
    args = parser.parse_args(argv)
    if args.runs:
        return _runs(args)
    import hpc_ray as ray

    # Executors inherit the counter's path from their ranks: under mpiexec it must
    # be in the environment of every rank already (``_runs`` and the test set it).
    own_counter = COUNTER_ENV not in os.environ
    if own_counter:
        fd, os.environ[COUNTER_ENV] = tempfile.mkstemp(prefix="hpc_ray-chaos-")
        os.close(fd)
    try:
        ray.init(num_cpus=args.num_cpus)
        every = tuple(float(x) for x in args.kill_every.split(","))
        report = run_workload(ray, args.tasks, args.seed, every, args.get_timeout)
        ray.shutdown()
    finally:
        if own_counter:
            os.unlink(os.environ[COUNTER_ENV])
    sys.stdout.write("CHAOS " + json.dumps(report) + "\n")
    ok = not report["wrong"] and report["lost"] == 0 and \
        report["store_end"] == report["store_start"] and report["objects_left"] == 0
    return 0 if ok else 1


def _runs(args) -> int:
    """Fresh jobs in turn, embedded and under mpiexec; a Markdown table."""
    here = os.path.abspath(__file__)
    rows = []
    for run in range(args.runs):
        for mode in ("embedded", "mpiexec"):
            cmd = [sys.executable, here, "--tasks", str(args.tasks), "--seed", str(run),
                   "--num-cpus", str(args.num_cpus), "--kill-every", args.kill_every,
                   "--get-timeout", str(args.get_timeout)]
            if mode == "mpiexec":
                cmd = ["mpiexec", "-n", str(args.num_cpus + 1)] + cmd
            fd, counter = tempfile.mkstemp(prefix="hpc_ray-chaos-")
            os.close(fd)
            t0 = time.monotonic()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600,
                                      start_new_session=True,
                                      env={**os.environ, COUNTER_ENV: counter})
            finally:
                os.unlink(counter)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("CHAOS ")),
                        None)
            rep = json.loads(line[6:]) if line else {"error": proc.stderr[-2000:]}
            rep.update(mode=mode, run=run, rc=proc.returncode,
                       wall=round(time.monotonic() - t0, 1))
            rows.append(rep)
            sys.stderr.write(json.dumps(rep) + "\n")
    cols = ("mode", "run", "rc", "tasks", "seconds", "kills", "duplicates", "lost",
            "store_start", "store_end", "objects_left")
    table = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for rep in rows:
        table.append("| " + " | ".join(str(rep.get(c, "")) for c in cols) + " |")
    text = "\n".join(table) + "\n"
    sys.stdout.write(text)
    if args.save:
        name = time.strftime("chaos-%Y-%m-%d-%H%M%S.md")
        path = os.path.join(os.path.dirname(here), "results", name)
        with open(path, "w") as f:
            f.write(f"# Chaos: `python benchmarks/chaos.py --runs {args.runs} --tasks "
                    f"{args.tasks}`\n\n{text}")
    return 0 if all(r.get("rc") == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
