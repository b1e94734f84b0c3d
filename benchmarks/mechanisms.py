"""Does each waiting mechanism pay where every process has a core? An A/B harness.

Issue 34: a waiting mechanism stays only if a run with it beats a run without
it on a configuration with no more runnable processes than cores. Each
mechanism of ``hpc_ray/transport/wait.py`` (``wait.MECHANISMS``: ``spin`` and
``look``) can be turned off with ``HPC_RAY_WAIT_OFF=<name>``; this script runs one
workload job with it on and one with it off, alternating which goes first, in
interleaved rounds, and prints each figure's median and the ratio off/on
(below 1: the mechanism pays; about 1: it does not).

Each job (a child process, started from outside the checkout) runs, after a
warm-up:

    actor_sync   ray.get(a.m.remote()) in a loop          calls/s
    task_sync    ray.get(f.remote()) in a loop            tasks/s
    task_burst   ray.get([f.remote() for _ in range(B)])  tasks/s

in one of two modes:

    embedded     python job.py; ray.init(num_cpus=1): a driver and one worker rank
    mpiexec      mpiexec -n 2 python job.py; ray.init(): rank 0 drives, rank 1 works

    python benchmarks/mechanisms.py                            # every mechanism, both modes
    python benchmarks/mechanisms.py --mechanisms spin,look --modes mpiexec --rounds 5
    python benchmarks/mechanisms.py --base /tmp/other-checkout # "off" = that checkout

With ``--base`` the "off" side is another checkout (its PYTHONPATH) instead of
an env setting: an A/B of a mechanism already removed (``yield``, ``repoll``,
``warm`` and ``handover`` went in issue 34: a checkout before that turns them
on), or of two branches.
Figures from a shared machine (other jobs running) are noisy: the harness
interleaves rounds so that drift hits both sides alike, prints each side's
lowest and highest round, the machine's load average at the start and the end,
and an A/A row (``none``: the same job on both sides) whose ratio shows how far
from 1 noise alone moves a ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "@@mechanisms "
WORKLOADS = ("actor_sync", "task_sync", "task_burst")
#: The "mechanism" of an A/A run (nothing off on either side): the noise floor.
CONTROL = "none"


# --- the job: runs in its own processes -----------------------------------------------

def job(mode: str, seconds: float, burst: int) -> None:
    import hpc_ray as ray
    if mode == "embedded":
        ray.init(num_cpus=1)
    else:
        ray.init()

    @ray.remote
    def f():
        return 1

    @ray.remote(num_cpus=0)
    class Echo:
        def m(self):
            return b"ok"

    def rate(step, n_per_step: int) -> float:
        for _ in range(20):
            step()                                   # warm-up
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            step()
            steps += 1
        return steps * n_per_step / (time.perf_counter() - t0)

    out = {}
    out["task_sync"] = rate(lambda: ray.get(f.remote()), 1)
    out["task_burst"] = rate(lambda: ray.get([f.remote() for _ in range(burst)]), burst)
    actor = Echo.remote()
    ray.get(actor.m.remote())
    out["actor_sync"] = rate(lambda: ray.get(actor.m.remote()), 1)
    print(MARK + json.dumps(out), flush=True)
    ray.shutdown()


# --- the parent ------------------------------------------------------------------------

def command(mode: str, seconds: float, burst: int) -> list[str]:
    me = str(Path(__file__).resolve())
    argv = [sys.executable, me, "--job", mode, "--seconds", str(seconds), "--burst", str(burst)]
    if mode == "embedded":
        return argv
    sys.path.insert(0, str(ROOT))
    from hpc_ray.mpirun import mpiexec_argv
    return mpiexec_argv(2, argv)


def run_job(mode: str, off: str, pythonpath: str, seconds: float, burst: int,
            timeout: float) -> dict | str:
    """One job's figures, or why there are none."""
    env = dict(os.environ, PYTHONPATH=pythonpath)
    env.pop("HPC_RAY_WAIT_OFF", None)
    if off:
        env["HPC_RAY_WAIT_OFF"] = off
    # From outside the checkout: executors start with ``python -m`` in the
    # driver's directory, where a checkout would come before PYTHONPATH's.
    proc = subprocess.Popen(command(mode, seconds, burst), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir(),
                            start_new_session=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        return f"timed out after {timeout:.0f} s"
    lines = [ln for ln in out.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        return f"exit code {proc.returncode}: {(out + err)[-600:]}"
    return json.loads(lines[-1][len(MARK):])


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:4])
    except OSError:
        return "?"


def ab(mechanism: str, mode: str, rounds: int, base: str | None, seconds: float,
       burst: int, timeout: float) -> dict:
    """Interleaved rounds of (on, off) jobs: {side: {workload: [rates]}}."""
    if base:
        off_side = ("", base)
    elif mechanism == CONTROL:
        off_side = ("", str(ROOT))      # an A/A run: the same job on both sides
    else:
        off_side = (mechanism, str(ROOT))
    sides = {"on": ("", str(ROOT)), "off": off_side}
    got: dict = {"on": {w: [] for w in WORKLOADS}, "off": {w: [] for w in WORKLOADS}}
    for r in range(rounds):
        order = ("on", "off") if r % 2 == 0 else ("off", "on")
        for side in order:
            off, path = sides[side]
            res = run_job(mode, off, path, seconds, burst, timeout)
            if isinstance(res, str):
                print(f"  {mechanism} {mode} {side}: {res}", file=sys.stderr, flush=True)
                continue
            for w in WORKLOADS:
                got[side][w].append(res[w])
    return got


def _spread(rates: list) -> str:
    """The rounds' lowest and highest rate, in thousands."""
    return f"{min(rates) / 1e3:.1f}-{max(rates) / 1e3:.1f}k"


def report(mechanism: str, mode: str, got: dict) -> list[str]:
    rows = []
    for w in WORKLOADS:
        on, off = got["on"][w], got["off"][w]
        if not on or not off:
            rows.append(f"| {mechanism} | {mode} | {w} | - | - | - | - | - |")
            continue
        m_on, m_off = statistics.median(on), statistics.median(off)
        rows.append(f"| {mechanism} | {mode} | {w} | {m_on:,.0f} | {m_off:,.0f} | "
                    f"{m_off / m_on:.2f} | {_spread(on)} | {_spread(off)} |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mechanisms", default=None,
                   help="comma-separated names of wait.MECHANISMS, or 'none' for an A/A "
                        "run that shows the noise (default: none and every mechanism)")
    p.add_argument("--modes", default="embedded,mpiexec", help="embedded, mpiexec or both")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per A/B")
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per workload")
    p.add_argument("--burst", type=int, default=1000, help="tasks per async burst")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per job at most")
    p.add_argument("--base", default=None,
                   help="another checkout: its hpc_ray is the 'off' side (PYTHONPATH)")
    p.add_argument("--job", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.job:
        job(args.job, args.seconds, args.burst)
        return
    sys.path.insert(0, str(ROOT))
    from hpc_ray.transport.wait import MECHANISMS
    names = args.mechanisms.split(",") if args.mechanisms else [CONTROL, *MECHANISMS]
    if args.base:
        names = ["base"]
    print(f"# waiting mechanisms, on vs off: {args.rounds} interleaved rounds, medians; "
          f"{os.cpu_count()} CPUs, load average at start {loadavg()}\n")
    print("| mechanism | mode | workload | on /s | off /s | off/on | on: rounds | off: rounds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    for name in names:
        for mode in args.modes.split(","):
            got = ab(name, mode, args.rounds, args.base, args.seconds, args.burst,
                     args.timeout)
            print("\n".join(report(name, mode, got)), flush=True)
    print(f"\nload average at the end: {loadavg()}")


if __name__ == "__main__":
    main()
