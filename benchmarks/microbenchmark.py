"""Microbenchmarks: hpc_ray side by side with Ray and mpi4py.futures, in one run.

    python benchmarks/microbenchmark.py                  # hpc_ray, ray, futures; table
    python benchmarks/microbenchmark.py --quick --only task_sync,task_async
    python benchmarks/microbenchmark.py --mpiexec --save # also hpc_ray under mpiexec

Data flow (the parent never imports a runtime; each system runs in its own child):

    parent ──spawn──▶ child: python microbenchmark.py --system ray --json --only a,b
       ▲              init() ─ each workload: check, warm-up, timed reps ─ shutdown()
       └──stdout lines "@@bench {json}": ready / start / result / error / done
    parent: watchdog per workload (a hang is killed with every descendant, reported
            as TIMEOUT, and the child restarted on the remaining workloads),
            then one table with ratios and PASS/MISS against the targets.

Systems and how their child is started (2 workers each):

    hpc_ray      python microbenchmark.py     hpc_ray.init(num_cpus=2): spawns 2 ranks
    hpc_ray_mpi  mpiexec -n 3 python -m hpc_ray microbenchmark.py        (--mpiexec)
    ray          python microbenchmark.py     ray.init(num_cpus=2, include_dashboard=False)
    futures      python microbenchmark.py     MPIPoolExecutor(max_workers=2), spawned
    futures_mpi  mpiexec -n 3 python -m mpi4py.futures microbenchmark.py
    pipe         python microbenchmark.py     no runtime: a forked process answering
                                              pickled calls on a socketpair (the floor
                                              of a sync round trip; task/actor_sync)

Every measurement: one batch whose result is checked, ``--warmup`` seconds of untimed
batches, then ``--reps`` repetitions, each running whole batches until ``--duration``
seconds have passed. The table reports the BEST rep (``--stat median`` for the median):
other jobs on a small machine only ever slow a rep down. --json-out keeps every rep.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import faulthandler
import fnmatch
import json
import os
import pickle
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.abspath(__file__)
if HERE not in sys.path:  # mpi4py.futures workers re-import this file as their main
    sys.path.insert(0, HERE)

from bench_catalog import (  # noqa: E402
    ARRAY_FLOATS, ASYNC_BATCH, CHAIN_BATCH, DEFAULT_SYSTEMS, LARGE_BYTES, LONG_CALLER_CALLS,
    MARK, NOISY, SYNC_THREAD_BATCH, SYSTEMS, TREE_LEAVES, WAIT_REFS, WORKLOADS, applies)


# --- task bodies (module level: cloudpickled by value for Ray and hpc_ray, imported ---
# --- by mpi4py.futures workers, which re-import this script as their main module)  ---

#: The runtime module (ray or hpc_ray) as seen by caller tasks; cloudpickle carries
#: a module global by name, so the task imports the same runtime in the worker.
_RT: Any = None


def _small_value():
    return b"ok"


def _add(a, b):
    return a + b


class _Actor:
    def small_value(self):
        return b"ok"

    def half(self, w):
        return w * 0.5

    def inc(self, x):
        return x + 1


def _caller_sync(actor, n):
    for _ in range(n):
        _RT.get(actor.small_value.remote())
    return n


def _caller_async(actor, n):
    return len(_RT.get([actor.small_value.remote() for _ in range(n)]))


# --- measurement -------------------------------------------------------------------------

@dataclass
class Settings:
    duration: float = 1.0
    reps: int = 3
    #: Seconds of untimed batches first: caches, worker start-up and first-touch
    #: page faults (Ray's object store warms up over several puts of 100 MiB).
    warmup: float = 1.0
    stat: str = "best"


class ForeignLoad:
    """How much CPU other jobs used during a rep: the machine's busy time (/proc/stat)
    minus the CPU time of every process of this benchmark run (the parent's
    descendants: runtime daemons, MPI ranks, executors), as a fraction of all CPUs.
    The busiest processes outside the run are named, so a figure flagged as noisy
    can be told from a process that escaped the run's tree."""

    ROOT_ENV = "HPC_RAY_BENCH_ROOT"  #: pid of the parent microbenchmark.py

    def __init__(self) -> None:
        self.root = int(os.environ.get(self.ROOT_ENV, os.getpid()))
        self.tick = os.sysconf("SC_CLK_TCK")
        self.ncpu = os.cpu_count() or 1

    def sample(self):
        """(time, machine busy s, our CPU s, {other pid: (name, CPU s)}), or None."""
        try:
            import psutil
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
            busy = (sum(v[:8]) - v[3] - v[4]) / self.tick  # all but idle and iowait
            root = psutil.Process(self.root)
            ours = {root.pid} | {p.pid for p in root.children(recursive=True)}
            mine, others = 0.0, {}
            for p in psutil.process_iter(["name", "cpu_times"]):
                t = p.info["cpu_times"]
                if t is None:
                    continue
                if p.pid in ours:
                    mine += t.user + t.system
                else:
                    others[p.pid] = (p.info["name"], t.user + t.system)
            return time.perf_counter(), busy, mine, others
        except Exception:  # no psutil, no /proc: report nothing rather than guess
            return None

    def compare(self, a, b) -> tuple[float | None, list[str]]:
        if a is None or b is None:
            return None, []
        wall = b[0] - a[0]
        frac = max(0.0, (b[1] - a[1]) - (b[2] - a[2])) / (self.ncpu * wall)
        top = []
        if frac > NOISY:
            deltas = sorted(((cpu - a[3][pid][1], name, pid) for pid, (name, cpu)
                             in b[3].items() if pid in a[3]), reverse=True)[:3]
            top = [f"{name}[{pid}] {d / wall:.0%}" for d, name, pid in deltas if d > 0]
        return frac, top


_FOREIGN: ForeignLoad | None = None


def measure(batch: Callable[[], Any], ops: float, s: Settings) -> dict:
    """Rates of ``ops`` per call of ``batch``, one per rep of at least ``duration`` s,
    each with the share of the CPUs other jobs took meanwhile (``foreign``)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < s.warmup:
        batch()
    rates, foreign, tops = [], [], []
    for _ in range(s.reps):
        before = _FOREIGN.sample() if _FOREIGN else None
        n = 0
        t0 = time.perf_counter()
        while True:
            batch()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= s.duration:
                break
        rates.append(n * ops / dt)
        frac, top = _FOREIGN.compare(before, _FOREIGN.sample()) if _FOREIGN else (None, [])
        foreign.append(frac)
        tops.append(top)
    return {"value": max(rates), "median": statistics.median(rates), "reps": rates,
            "foreign": foreign, "foreign_top": tops}


def _in_threads(fns: list[Callable[[], Any]]) -> None:
    errors: list[BaseException] = []

    def run(fn):
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,), daemon=True) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"wrong result in warm-up: {what}")


# --- ray-like workloads (the same code for ray and hpc_ray) ---------------------------

class RayLike:
    """Workloads written once against the Ray API; ``rt`` is ray or hpc_ray."""

    def __init__(self, rt, s: Settings) -> None:
        global _RT
        _RT = rt
        self.rt = rt
        self.s = s
        self.small = rt.remote(_small_value)
        self.add = rt.remote(_add)
        self.actor_cls = rt.remote(_Actor)
        self.caller_sync = rt.remote(_caller_sync)
        self.caller_async = rt.remote(_caller_async)

    def _kill(self, actors: list) -> None:
        kill = getattr(self.rt, "kill", None)
        for a in actors:
            if kill is not None:
                kill(a)

    def task_sync(self):
        rt, f = self.rt, self.small
        _check(rt.get(f.remote()) == b"ok", "task_sync")
        return measure(lambda: rt.get(f.remote()), 1, self.s)

    def task_async(self):
        rt, f = self.rt, self.small

        def batch():
            return rt.get([f.remote() for _ in range(ASYNC_BATCH)])
        _check(batch() == [b"ok"] * ASYNC_BATCH, "task_async")
        return measure(batch, ASYNC_BATCH, self.s)

    def put_large(self):
        import numpy as np
        rt = self.rt
        arr = np.arange(LARGE_BYTES // 8, dtype=np.float64)  # touched pages, not zero pages
        ref = rt.put(arr)
        arr[0] = -1.0  # put must have copied: later writes do not reach the object
        _check(float(rt.get(ref)[0]) == 0.0 and float(rt.get(ref)[-1]) == float(arr[-1]),
               "put_large")
        arr[0] = 0.0
        del ref
        return measure(lambda: rt.put(arr), LARGE_BYTES / 1e9, self.s)

    def get_large(self):
        import numpy as np
        rt = self.rt
        arr = np.arange(LARGE_BYTES // 8, dtype=np.float64)
        ref = rt.put(arr)
        out = rt.get(ref)
        _check(out.shape == arr.shape and float(out[12345]) == 12345.0, "get_large")
        del out
        return measure(lambda: rt.get(ref), 1, self.s)

    def put_small(self):
        rt = self.rt
        return measure(lambda: rt.put(0), 1, self.s)

    def get_small(self):
        rt = self.rt
        ref = rt.put(0)
        _check(rt.get(ref) == 0, "get_small")
        return measure(lambda: rt.get(ref), 1, self.s)

    def wait_1k(self):
        rt, f = self.rt, self.small
        refs = [f.remote() for _ in range(WAIT_REFS)]
        rt.get(refs)

        def batch():
            return rt.wait(refs, num_returns=WAIT_REFS)
        ready, not_ready = batch()
        _check(len(ready) == WAIT_REFS and not not_ready, "wait_1k")
        return measure(batch, 1, self.s)

    def tree_reduce(self):
        rt, add = self.rt, self.add
        leaves = [rt.put(i) for i in range(TREE_LEAVES)]

        def batch():
            level = leaves
            while len(level) > 1:
                level = [add.remote(level[i], level[i + 1]) for i in range(0, len(level), 2)]
            return rt.get(level[0])
        _check(batch() == sum(range(TREE_LEAVES)), "tree_reduce")
        return measure(batch, 1, self.s)

    def actor_sync(self):
        rt = self.rt
        a = self.actor_cls.remote()
        try:
            _check(rt.get(a.small_value.remote()) == b"ok", "actor_sync")
            return measure(lambda: rt.get(a.small_value.remote()), 1, self.s)
        finally:
            self._kill([a])

    def actor_sync_array(self):
        import numpy as np
        rt = self.rt
        a = self.actor_cls.remote()
        w = np.ones(ARRAY_FLOATS)
        try:
            _check(float(rt.get(a.half.remote(w))[-1]) == 0.5, "actor_sync_array")
            return measure(lambda: rt.get(a.half.remote(w)), 1, self.s)
        finally:
            self._kill([a])

    def actor_async(self):
        rt = self.rt
        a = self.actor_cls.remote()

        def batch():
            return rt.get([a.small_value.remote() for _ in range(ASYNC_BATCH)])
        try:
            _check(batch() == [b"ok"] * ASYNC_BATCH, "actor_async")
            return measure(batch, ASYNC_BATCH, self.s)
        finally:
            self._kill([a])

    def actor_chain(self):
        rt = self.rt
        a, b = self.actor_cls.remote(), self.actor_cls.remote()
        rt.get([a.small_value.remote(), b.small_value.remote()])   # both are up

        def batch():
            return rt.get([b.inc.remote(a.inc.remote(i)) for i in range(CHAIN_BATCH)])
        try:
            _check(batch() == [i + 2 for i in range(CHAIN_BATCH)], "actor_chain")
            return measure(batch, CHAIN_BATCH, self.s)
        finally:
            self._kill([a, b])

    def _nn(self, per_caller, n: int, name: str):
        actors = [self.actor_cls.remote() for _ in range(2)]
        try:
            self.rt.get([a.small_value.remote() for a in actors])  # both are up

            def batch():
                return per_caller(actors, n)
            batch()
            return measure(batch, 2 * n, self.s)
        finally:
            self._kill(actors)

    def actor_nn_sync(self):
        rt = self.rt

        def loops(actors, n):
            def loop(a):
                return lambda: [rt.get(a.small_value.remote()) for _ in range(n)]
            _in_threads([loop(a) for a in actors])
        return self._nn(loops, SYNC_THREAD_BATCH, "actor_nn_sync")

    def actor_nn_async(self):
        rt = self.rt

        def loops(actors, n):
            def loop(a):
                return lambda: rt.get([a.small_value.remote() for _ in range(n)])
            _in_threads([loop(a) for a in actors])
        return self._nn(loops, ASYNC_BATCH // 2, "actor_nn_async")

    def actor_nn_sync_tasks(self):
        rt, caller = self.rt, self.caller_sync

        def callers(actors, n):
            _check(rt.get([caller.remote(a, n) for a in actors]) == [n, n], "nn_sync_tasks")
        return self._nn(callers, SYNC_THREAD_BATCH, "actor_nn_sync_tasks")

    def actor_nn_sync_long_tasks(self):
        rt, caller = self.rt, self.caller_sync

        def callers(actors, n):
            _check(rt.get([caller.remote(a, n) for a in actors]) == [n, n], "nn_sync_long")
        return self._nn(callers, LONG_CALLER_CALLS, "actor_nn_sync_long_tasks")

    def actor_nn_async_tasks(self):
        rt, caller = self.rt, self.caller_async

        def callers(actors, n):
            _check(rt.get([caller.remote(a, n) for a in actors]) == [n, n], "nn_async_tasks")
        return self._nn(callers, ASYNC_BATCH, "actor_nn_async_tasks")


# --- mpi4py.futures workloads ------------------------------------------------------------

class Futures:
    def __init__(self, ex, s: Settings) -> None:
        self.ex = ex
        self.s = s

    def task_sync(self):
        ex = self.ex
        _check(ex.submit(_small_value).result() == b"ok", "task_sync")
        return measure(lambda: ex.submit(_small_value).result(), 1, self.s)

    def task_async(self):
        ex = self.ex

        def batch():
            futs = [ex.submit(_small_value) for _ in range(ASYNC_BATCH)]
            return [f.result() for f in futs]
        _check(batch() == [b"ok"] * ASYNC_BATCH, "task_async")
        return measure(batch, ASYNC_BATCH, self.s)

    def tree_reduce(self):
        # No refs as arguments: the driver pairs values up as soon as two are ready.
        ex = self.ex

        def batch():
            pending = {ex.submit(_add, i, i + 1) for i in range(0, TREE_LEAVES, 2)}
            ready: list = []
            while pending:
                done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                ready.extend(f.result() for f in done)
                while len(ready) >= 2:
                    pending.add(ex.submit(_add, ready.pop(), ready.pop()))
            return ready[0]
        _check(batch() == sum(range(TREE_LEAVES)), "tree_reduce")
        return measure(batch, 1, self.s)


class PipeFloor:
    """No runtime: a forked Python process answers pickled calls on a socketpair
    (the same ``multiprocessing`` connection hpc_ray's ranks use to talk to their
    executors). A sync task or actor call of any runtime is at least this round
    trip: two wake-ups of a sleeping process plus two pickles."""

    def __init__(self) -> None:
        import multiprocessing.connection as mpc
        import socket
        a, b = socket.socketpair()
        self.pid = os.fork()
        if self.pid == 0:
            a.close()
            conn = mpc.Connection(b.detach())
            try:
                while True:
                    fn, args = pickle.loads(conn.recv_bytes())
                    conn.send_bytes(pickle.dumps(fn(*args)))
            except (EOFError, OSError):
                os._exit(0)
        b.close()
        self.conn = mpc.Connection(a.detach())

    def call(self):
        self.conn.send_bytes(pickle.dumps((_small_value, ())))
        return pickle.loads(self.conn.recv_bytes())

    def task_sync(self):
        _check(self.call() == b"ok", "task_sync")
        return measure(self.call, 1, _SETTINGS)

    actor_sync = task_sync

    def stop(self) -> None:
        self.conn.close()
        os.waitpid(self.pid, 0)


# --- child: one system, JSON lines on stdout -------------------------------------------

def emit(event: str, **kw) -> None:
    sys.stdout.write(MARK + json.dumps({"event": event, **kw}) + "\n")
    sys.stdout.flush()


def _under_mpiexec() -> bool:
    env = os.environ
    return any(k in env for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE",
                                  "PMIX_RANK", "MPI_LOCALNRANKS"))


def _start_system(system: str):
    """Start the runtime; return (workload object, versions, stop function)."""
    s = _SETTINGS
    if system == "ray":
        import ray
        ray.init(num_cpus=2, include_dashboard=False)
        return RayLike(ray, s), {"ray": ray.__version__}, ray.shutdown
    if system == "hpc_ray":
        import hpc_ray
        if _under_mpiexec():
            hpc_ray.init()  # the job is the cluster: mpiexec -n 3 = driver + 2 workers
        else:
            hpc_ray.init(num_cpus=2)
        return RayLike(hpc_ray, s), {"hpc_ray": hpc_ray.__version__}, hpc_ray.shutdown
    if system == "futures":
        import mpi4py
        from mpi4py.futures import MPIPoolExecutor
        ex = MPIPoolExecutor() if _under_mpiexec() else MPIPoolExecutor(max_workers=2)
        ex.submit(_small_value).result()  # spawn now, so start-up is timed here
        return Futures(ex, s), {"mpi4py": mpi4py.__version__}, ex.shutdown
    if system == "pipe":
        floor = PipeFloor()
        return floor, {"python": sys.version.split()[0]}, floor.stop
    raise SystemExit(f"unknown system {system!r} (choose from {SYSTEMS})")


_SETTINGS = Settings()


def child_main(system: str, names: list[str], as_json: bool, timeout: float) -> int:
    global _FOREIGN
    _FOREIGN = ForeignLoad()
    out: dict[str, dict] = {}
    # Dump every thread's stack to stderr before the parent's watchdog kills us.
    timeout = max(timeout * 0.8, timeout - 5)
    t0 = time.perf_counter()
    faulthandler.dump_traceback_later(timeout, exit=False)
    try:
        bench, versions, stop = _start_system(system)
    except BaseException:
        import traceback
        emit("error", workload="init", error=traceback.format_exc())
        return 1
    finally:
        faulthandler.cancel_dump_traceback_later()
    init_s = time.perf_counter() - t0
    emit("ready", init_s=init_s, versions=versions, pid=os.getpid())
    rc = 0
    try:
        for name in names:
            if not applies(system, name):
                continue
            emit("start", workload=name)
            faulthandler.dump_traceback_later(timeout, exit=False)
            try:
                res = getattr(bench, name)()
            except Exception:
                import traceback
                emit("error", workload=name, error=traceback.format_exc())
                rc = 1
                continue
            finally:
                faulthandler.cancel_dump_traceback_later()
            out[name] = res
            emit("result", workload=name, **res)
    finally:
        faulthandler.dump_traceback_later(timeout, exit=True)
        t1 = time.perf_counter()
        stop()
        faulthandler.cancel_dump_traceback_later()
        emit("done", shutdown_s=time.perf_counter() - t1)
    if not as_json:
        from bench_runner import Result, SystemRun, pick
        from bench_report import format_table
        run = SystemRun(system, init_s=init_s, results={
            k: Result("ok", *pick(v["reps"], v["foreign"], _SETTINGS.stat), reps=v["reps"],
                      foreign=v["foreign"]) for k, v in out.items()})
        print(format_table({system: run}, [n for n in names if n in out]))
    return rc


# --- command line ------------------------------------------------------------------------

def _select(only: str | None) -> list[str]:
    if not only:
        return [w.name for w in WORKLOADS]
    names = []
    for pat in only.split(","):
        hit = [w.name for w in WORKLOADS if fnmatch.fnmatchcase(w.name, pat.strip())]
        if not hit:
            raise SystemExit(f"unknown workload {pat!r} (choose from "
                             f"{[w.name for w in WORKLOADS]}; globs such as 'actor_*' work)")
        names += [h for h in hit if h not in names]
    return [w.name for w in WORKLOADS if w.name in names]


def parse_args(argv: list[str]):
    p = argparse.ArgumentParser(
        description="hpc_ray vs Ray vs mpi4py.futures microbenchmarks (2 workers each).")
    p.add_argument("--systems", default=DEFAULT_SYSTEMS,
                   help=f"comma-separated, from {','.join(SYSTEMS)} (default %(default)s)")
    p.add_argument("--mpiexec", action="store_true",
                   help="also run hpc_ray as `mpiexec -n 3 python -m hpc_ray` (hpc_ray_mpi)")
    p.add_argument("--only", help="comma-separated workloads or globs (default: all)")
    p.add_argument("--quick", action="store_true",
                   help="one 0.2 s repetition per workload (smoke runs)")
    p.add_argument("--duration", type=float, default=None,
                   help="seconds per repetition (default 0.5; 0.2 with --quick)")
    p.add_argument("--reps", type=int, default=None,
                   help="repetitions per workload (default 5; 1 with --quick)")
    p.add_argument("--stat", choices=("best", "median"), default="best",
                   help="which rep the table shows (default %(default)s: other jobs on "
                        "the machine only ever slow a rep down)")
    p.add_argument("--warmup", type=float, default=None,
                   help="untimed seconds before the first repetition (default 0.5; 0 with "
                        "--quick)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds without progress before a workload counts as hung")
    p.add_argument("--startup-timeout", type=float, default=60.0,
                   help="extra seconds allowed for a runtime to start")
    p.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                   help="before each system, wait up to SECONDS for the CPUs to be idle "
                        "(< 25%% busy over 1 s): other jobs skew a 2-core benchmark")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every system this many times, in turn (hpc_ray, ray, hpc_ray, "
                        "ray, ...), and pool each system's reps: a slow stretch of the "
                        "machine then falls on both sides of a ratio (default 1)")
    p.add_argument("--ray-python", default=os.environ.get("RAY_PYTHON"), metavar="PYTHON",
                   help="an interpreter with ray installed, for the ray system "
                        "(default: $RAY_PYTHON, else this one)")
    p.add_argument("--save", action="store_true",
                   help="also write the tables to benchmarks/results/<date>.md (and every "
                        "rep to <date>.json)")
    p.add_argument("--json-out", metavar="PATH", help="also write every result as JSON")
    p.add_argument("--from-json", metavar="PATH",
                   help="run nothing: report a --json-out file again (e.g. --stat median)")
    p.add_argument("--system", help=argparse.SUPPRESS)  # child mode: run one system
    p.add_argument("--json", action="store_true",
                   help="child mode: JSON lines instead of a table")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    opts = p.parse_args(argv)
    if opts.rounds < 1:
        p.error("--rounds must be 1 or more")
    if opts.duration is None:
        opts.duration = 0.2 if opts.quick else 0.5
    if opts.reps is None:
        opts.reps = 1 if opts.quick else 5
    if opts.warmup is None:
        opts.warmup = 0.0 if opts.quick else 0.5
    return opts


def _systems(opts) -> list[str]:
    systems = [s.strip() for s in opts.systems.split(",") if s.strip()]
    if opts.mpiexec and "hpc_ray_mpi" not in systems:
        systems.insert(systems.index("hpc_ray") + 1 if "hpc_ray" in systems else 0,
                       "hpc_ray_mpi")
    for s in systems:
        if s not in SYSTEMS:
            raise SystemExit(f"unknown system {s!r} (choose from {list(SYSTEMS)})")
    return systems


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    opts = parse_args(argv)
    names = _select(opts.only)
    if opts.list:
        for w in WORKLOADS:
            print(f"{w.name:22} {w.unit:13} {w.what}")
        return 0
    _SETTINGS.duration, _SETTINGS.reps, _SETTINGS.warmup, _SETTINGS.stat = (
        opts.duration, opts.reps, opts.warmup, opts.stat)
    if opts.system:
        return child_main(opts.system, names, opts.json, opts.timeout)

    from bench_report import (format_load, format_problems, format_rounds, format_table, save,
                              with_stat)
    from bench_runner import load_runs, merge_rounds, run_system, wait_idle
    t0 = time.monotonic()
    per_round = ""
    if opts.from_json:  # report an earlier run again (e.g. with --stat median)
        with open(opts.from_json) as f:
            saved = json.load(f)
        runs, spent = load_runs(saved["runs"]), saved["seconds"]
        for k in ("duration", "reps", "warmup"):
            setattr(opts, k, saved["settings"][k])
        runs = with_stat(runs, opts.stat)
        names = [n for n in names if any(n in r.results for r in runs.values())]
    else:
        rounds = []
        for _ in range(opts.rounds):
            runs = {}
            for s in _systems(opts):  # one after the other: never two benchmarks at once
                busy = wait_idle(opts.wait_idle, s)
                runs[s] = run_system(SCRIPT, s, names, opts, cwd=REPO)
                runs[s].busy_before = busy
            rounds.append(runs)
        if len(rounds) > 1:
            per_round = format_rounds(rounds, names, opts.stat)
            runs = with_stat(merge_rounds(rounds), opts.stat)
        spent = time.monotonic() - t0
    reps = opts.reps if opts.from_json else opts.reps * opts.rounds
    header = (f"2 workers per system; each figure is the {opts.stat} of {reps} rep(s) "
              f"of >= {opts.duration:g} s after {opts.warmup:g} s of warm-up"
              + (f" ({opts.rounds} rounds of the systems in turn, {opts.reps} reps each)"
                 if opts.rounds > 1 and not opts.from_json else "")
              + f"; higher is better (startup: lower). {format_load(runs)}. "
              f"Total {spent:.0f} s.")
    table = format_table(runs, names)
    if per_round:
        table += (f"\n\nEach round's ratios ({opts.stat} of its {opts.reps} reps):\n\n"
                  + per_round)
    print("\n" + header + "\n\n" + table)
    problems = format_problems(runs)
    if problems:
        print("\n## Errors and warnings\n\n" + problems)
    data = {"settings": {"duration": opts.duration, "reps": reps, "warmup": opts.warmup},
            "seconds": spent, "runs": {s: dataclasses.asdict(r) for s, r in runs.items()}}
    outs = [opts.json_out] if opts.json_out else []
    if opts.save:
        path = save(os.path.join(HERE, "results"), REPO, runs, names, header, table, argv)
        outs.append(path[:-len(".md")] + ".json")  # every rep, for --from-json
        print(f"\nsaved to {os.path.relpath(path)} and .json")
    for out in outs:
        with open(out, "w") as f:
            json.dump(data, f, indent=1)
    bad = any(r.status in ("error", "timeout") for run in runs.values()
              for r in run.results.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
