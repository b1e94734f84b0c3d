"""Parent side: run one system's child process under a watchdog and collect its results.

    run_system ──Popen(new session)──▶ child (microbenchmark.py --system X --json)
        ◀── stdout "@@bench {json}" lines, read by a thread into a queue:
            ready(init_s) · start(w) · result(w, value, reps) · error(w, traceback) · done
    watchdog: no event for --timeout s while w runs ──▶ kill the child and every
        descendant it was seen with (MPI ranks call setsid, so killpg is not enough),
        record w as TIMEOUT with the child's stderr tail (its faulthandler stack
        dump), and start a new child on the workloads not yet run.
    after exit: any descendant still alive after a grace period is killed and named
        in a warning, as are new /dev/shm entries.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from bench_catalog import MARK, NOISY, WORKLOAD_BY_NAME, applies

#: Seconds a child may take to exit after its "done" event (Ray's shutdown is slow).
EXIT_GRACE = 30.0
#: Seconds stray descendants get to exit on their own before they are killed.
SWEEP_GRACE = 10.0


@dataclass
class Result:
    status: str  #: ok | error | timeout | n/a
    value: float | None = None
    #: Every rep was taken while other jobs used more than NOISY of the CPUs.
    noisy: bool = False
    reps: list = field(default_factory=list)
    #: Share of the CPUs used by other jobs during each rep (None: unknown).
    foreign: list = field(default_factory=list)
    detail: str = ""


@dataclass
class SystemRun:
    system: str
    results: dict[str, Result] = field(default_factory=dict)
    init_s: float | None = None
    versions: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    #: 1-minute load average when the run started and ended: other jobs on the
    #: machine steal cores from a 2-core benchmark.
    load: tuple[float, float] | None = None
    #: Fraction of all CPUs busy (anyone's work) during 1 s just before the run.
    busy_before: float | None = None


def pick(reps: list[float], foreign: list, stat: str) -> tuple[float, bool]:
    """The figure a run reports, and whether it comes from noisy reps only.

    ``best`` is the best quiet rep (timeit's advice: other jobs only ever slow a rep
    down); ``median`` the median of the quiet reps. Without quiet reps, all reps count.
    """
    quiet = [r for r, f in zip(reps, foreign or [None] * len(reps))
             if f is None or f <= NOISY]
    use = quiet or reps
    value = max(use) if stat == "best" else statistics.median(use)
    return value, not quiet


def merge_rounds(rounds: list[dict[str, SystemRun]]) -> dict[str, SystemRun]:
    """One SystemRun per system from several rounds of all systems (``--rounds``):
    every round's reps pooled, the first error or timeout kept, start-up the
    median, the load from the first round's start to the last round's end."""
    out: dict[str, SystemRun] = {}
    starts: dict[str, list[float]] = {}
    for runs in rounds:
        for name, run in runs.items():
            have = out.get(name)
            if have is None:
                have = out[name] = SystemRun(name, versions=dict(run.versions),
                                             load=run.load, busy_before=run.busy_before)
            if run.init_s is not None:
                starts.setdefault(name, []).append(run.init_s)
            have.warnings += run.warnings
            have.commands += [c for c in run.commands if c not in have.commands]
            if run.load and have.load:
                have.load = (have.load[0], run.load[1])
            for wl, res in run.results.items():
                got = have.results.get(wl)
                if got is None:
                    have.results[wl] = Result(res.status, res.value, res.noisy, list(res.reps),
                                              list(res.foreign), res.detail)
                elif got.status == "ok" or res.status == "ok":
                    if got.status == "ok" and res.status != "ok":
                        got.status, got.detail = res.status, res.detail
                    got.reps += res.reps
                    got.foreign += res.foreign
    for name, run in out.items():
        run.init_s = statistics.median(starts[name]) if name in starts else None
    return out


def load_runs(data: dict) -> dict[str, SystemRun]:
    """SystemRuns back from ``dataclasses.asdict`` JSON (--json-out)."""
    runs = {}
    for name, d in data.items():
        d = dict(d)
        d["results"] = {k: Result(**v) for k, v in d["results"].items()}
        d["load"] = tuple(d["load"]) if d.get("load") else None
        runs[name] = SystemRun(**d)
    return runs


# --- child command lines -----------------------------------------------------------------

def mpiexec_cmd(n: int) -> list[str]:
    exe = shutil.which("mpiexec") or shutil.which("mpirun")
    if exe is None:
        raise SystemExit("mpiexec not found on PATH (needed for hpc_ray_mpi and futures_mpi)")
    cmd = [exe, "-n", str(n)]
    try:
        ver = subprocess.run([exe, "--version"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        ver = ""
    if "Open MPI" in ver or "OpenRTE" in ver:
        cmd += ["--oversubscribe"]
        if os.geteuid() == 0:
            cmd += ["--allow-run-as-root"]
    return cmd


def child_command(script: str, system: str, names: list[str], opts) -> list[str]:
    tail = [script, "--json", "--only", ",".join(names), "--duration", str(opts.duration),
            "--reps", str(opts.reps), "--warmup", str(opts.warmup),
            "--timeout", str(opts.timeout), "--stat", opts.stat]
    py = sys.executable
    if system == "ray" and getattr(opts, "ray_python", None):
        py = opts.ray_python   # Ray in a venv of its own
    if system == "hpc_ray_mpi":
        return mpiexec_cmd(3) + [py, "-m", "hpc_ray"] + tail + ["--system", "hpc_ray"]
    if system == "futures_mpi":
        return mpiexec_cmd(3) + [py, "-m", "mpi4py.futures"] + tail + ["--system", "futures"]
    return [py] + tail + ["--system", system]


# --- process tree bookkeeping ------------------------------------------------------------

class ProcessTree:
    """Every process a child was seen with, so that a killed run leaves nothing behind."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, float] = {}  #: pid -> create_time (guards against pid reuse)

    def scan(self) -> None:
        try:
            import psutil
            procs = psutil.Process(self.root).children(recursive=True)
        except Exception:
            return
        for p in procs:
            try:
                self.seen[p.pid] = p.create_time()
            except Exception:
                pass

    def alive(self) -> list:
        try:
            import psutil
        except ImportError:
            return []
        out = []
        for pid, ctime in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == ctime and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except Exception:
                pass
        return out

    def kill_all(self, proc: subprocess.Popen) -> None:
        self.scan()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        for p in self.alive():
            try:
                p.kill()
            except Exception:
                pass

    def sweep(self, grace: float) -> list[str]:
        """Wait up to ``grace`` s for leftovers to exit; kill and name the rest."""
        end = time.monotonic() + grace
        while self.alive() and time.monotonic() < end:
            time.sleep(0.2)
        names = []
        for p in self.alive():
            try:
                names.append(f"{p.name()}[{p.pid}]")
                p.kill()
            except Exception:
                pass
        return names


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields), idle


def cpu_busy(interval: float = 1.0) -> float | None:
    """Fraction of the machine's CPU time spent busy over ``interval`` seconds."""
    try:
        t0, i0 = _cpu_times()
        time.sleep(interval)
        t1, i1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def wait_idle(max_wait: float, system: str, threshold: float = 0.25) -> float | None:
    """Wait up to ``max_wait`` s for the CPUs to be under ``threshold`` busy."""
    end = time.monotonic() + max_wait
    busy = cpu_busy()
    while busy is not None and busy >= threshold and time.monotonic() < end:
        _say(system, f"CPUs {busy:.0%} busy with other work; waiting (--wait-idle)")
        time.sleep(4.0)
        busy = cpu_busy()
    return busy


def shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def tail(f, n: int) -> str:
    try:
        f.flush()
        f.seek(0)
        return "".join(f.readlines()[-n:])
    except Exception:
        return ""


def _say(system: str, text: str) -> None:
    print(f"# {system}: {text}", file=sys.stderr, flush=True)


# --- one system ---------------------------------------------------------------------------

def run_system(script: str, system: str, names: list[str], opts, cwd: str) -> SystemRun:
    run = SystemRun(system)
    todo = []
    for n in names:
        if applies(system, n):
            todo.append(n)
        else:
            run.results[n] = Result("n/a")
    shm_before = shm_entries()
    load0 = os.getloadavg()[0]
    while todo:
        before = len(todo)
        _run_child(script, system, todo, opts, cwd, run)  # removes what it finished
        if todo and len(todo) == before:  # no progress: do not restart forever
            for n in todo:
                run.results.setdefault(n, Result("error", detail="child ended before it"))
            break
    run.load = (load0, os.getloadavg()[0])
    new = sorted(shm_entries() - shm_before)
    if new:
        run.warnings.append(f"new entries in /dev/shm after the run (other jobs on the "
                            f"machine may have made them): {new}")
    return run


def _run_child(script, system, todo: list[str], opts, cwd, run: SystemRun) -> None:
    cmd = child_command(script, system, todo, opts)
    shown = " ".join(os.path.relpath(c, cwd) if c == script else c for c in cmd)
    run.commands.append(shown)
    _say(system, shown)
    err = tempfile.TemporaryFile(mode="w+")
    env = dict(os.environ, HPC_RAY_BENCH_ROOT=str(os.getpid()))  # see ForeignLoad
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=cwd,
                            env=env, start_new_session=True)
    tree = ProcessTree(proc.pid)
    lines: queue.Queue = queue.Queue()

    def reader() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)
    threading.Thread(target=reader, daemon=True).start()

    current = None  # the workload running now
    ready = done = killed = False
    deadline = time.monotonic() + opts.startup_timeout + opts.timeout
    while True:
        try:
            line = lines.get(timeout=min(2.0, max(0.05, deadline - time.monotonic())))
        except queue.Empty:
            tree.scan()
            if time.monotonic() < deadline:
                continue
            if done:
                break  # slow exit after shutdown: handled below
            tree.kill_all(proc)
            killed = True
            where = current or ("between workloads" if ready else "start-up")
            _say(system, f"TIMEOUT in {where}")
            msg = (f"no progress for {opts.timeout:g} s in {where}; killed. "
                   f"stderr tail (faulthandler dump of the driver):\n" + tail(err, 60))
            if current:
                run.results[current] = Result("timeout", detail=msg)
                todo.remove(current)
            elif not ready:
                for n in todo:
                    run.results[n] = Result("error", detail=msg)
                todo.clear()
            break
        if line is None:
            break
        if not line.startswith(MARK):
            continue
        ev = json.loads(line[len(MARK):])
        tree.scan()
        kind, wl = ev["event"], ev.get("workload")
        if kind == "ready":
            ready = True
            run.init_s = ev["init_s"]
            run.versions = ev.get("versions", {})
        elif kind == "start":
            current = wl
            deadline = time.monotonic() + opts.timeout
            _say(system, f"{wl} ...")
        elif kind == "result":
            fgn = ev.get("foreign") or [None] * len(ev["reps"])
            run.results[wl] = Result("ok", *pick(ev["reps"], fgn, opts.stat),
                                     reps=ev["reps"], foreign=fgn)
            todo.remove(wl)
            current = None
            reps = " ".join(f"{x:.4g}" + (f"[{f:.0%} other]" if f and f > NOISY else "")
                            for x, f in zip(ev["reps"], fgn))
            _say(system, f"{wl} = {run.results[wl].value:.4g} {WORKLOAD_BY_NAME[wl].unit} "
                         f"({opts.stat}; reps: {reps})")
            busiest = {t for top in ev.get("foreign_top") or [] for t in top}
            if busiest:
                _say(system, f"  busy outside the run during {wl}: "
                             + ", ".join(sorted(busiest)))
        elif kind == "error":
            if wl == "init":
                for n in todo:
                    run.results[n] = Result("error", detail="init failed:\n" + ev["error"])
                todo.clear()
            else:
                run.results[wl] = Result("error", detail=ev["error"])
                todo.remove(wl)
            current = None
            _say(system, f"ERROR in {wl}:\n" + ev["error"])
        elif kind == "done":
            done = True
            deadline = time.monotonic() + EXIT_GRACE
    try:
        proc.wait(timeout=EXIT_GRACE if done else 5)
    except subprocess.TimeoutExpired:
        run.warnings.append("the child did not exit after its last event; killed it")
        tree.kill_all(proc)
        killed = True
        proc.wait()
    if not killed and not done:
        # It died on its own: a crash in the runtime (segfault, abort, os._exit).
        msg = f"child exited with {proc.returncode}; stderr tail:\n" + tail(err, 40)
        if current:
            run.results[current] = Result("error", detail=msg)
            todo.remove(current)
        elif not ready:
            for n in todo:
                run.results[n] = Result("error", detail=msg)
            todo.clear()
        else:
            run.warnings.append(msg)
    stray = tree.sweep(SWEEP_GRACE)
    if stray:
        run.warnings.append(f"processes still alive {SWEEP_GRACE:g} s after the child "
                            f"ended (killed): {', '.join(stray)}")
    err.close()
