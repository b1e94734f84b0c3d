"""How much Python one sync actor call runs, by side: bytecodes traced, and with
``--perf`` the instructions ``perf stat`` counts.

A sync call's cost on a busy node is CPU, most of it the runtime's Python on both
sides (a profile of the two executors: ~60% of their cycles in libpython). The
bytecode count does not depend on the machine's speed or load, so two checkouts
compare exactly:

    python benchmarks/call_steps.py                     # bytecodes per call
    python benchmarks/call_steps.py --perf              # and perf's instructions
    cd /tmp && PYTHONPATH=<checkout> python <checkout>/benchmarks/call_steps.py

(For an A/B, run it from outside both checkouts: executors and ranks start with
``python -m`` in the driver's directory, and a checkout there comes first.)

Three sides, one actor (``ray.get(a.m.remote())`` in a loop, ``m`` returns a
small bytes value): the caller when it is a task (its executor), the actor's
executor, and the caller when it is the driver. Bytecodes are counted with
``sys.settrace`` opcode events over ``--traced`` calls (a loop's own steps
included; the actor's serve loop and the call that starts its tracing are not
traced: they were entered before it began); instructions over ``--calls``
untraced calls of a task caller, user and kernel. Both with ``HPC_RAY_SPIN_US=0``:
a busy-poll's steps would count, as many as the wait is long.
"""
from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time

import hpc_ray as ray

_counts: collections.Counter = collections.Counter()


def _trace(frame, event, arg):
    frame.f_trace_opcodes = True
    if event == "opcode":
        _counts[frame.f_code.co_name] += 1
    return _trace


def counted(fn) -> collections.Counter:
    """The opcodes ``fn()`` runs in this thread, by function name."""
    _counts.clear()
    sys.settrace(_trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return collections.Counter(_counts)


@ray.remote
class Echo:
    def m(self):
        return b"ok"

    def pid(self):
        return os.getpid()

    def trace_start(self):
        _counts.clear()
        sys.settrace(_trace)

    def trace_stop(self):
        sys.settrace(None)
        return dict(_counts)


@ray.remote
def task_caller(actor, warm: int, traced: int):
    for _ in range(warm):
        ray.get(actor.m.remote())
    return dict(counted(lambda: [ray.get(actor.m.remote()) for _ in range(traced)]))


@ray.remote
def timed_caller(actor, calls: int, pid_file: str):
    for _ in range(200):
        ray.get(actor.m.remote())
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(1.5)
    for _ in range(calls):
        ray.get(actor.m.remote())
    time.sleep(0.3)


def _perf(pids: dict, seconds: float) -> dict:
    """perf stat's user and kernel instructions of each pid over ``seconds``."""
    procs = {who: subprocess.Popen(
        ["perf", "stat", "-x,", "-e", "instructions:u,instructions:k", "-p", str(pid),
         "--", "sleep", str(seconds)], stderr=subprocess.PIPE, text=True)
        for who, pid in pids.items()}
    out = {}
    for who, p in procs.items():
        counts = {}
        for line in p.communicate()[1].splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[0].isdigit():
                counts[fields[2]] = int(fields[0])
        out[who] = counts
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traced", type=int, default=200, help="calls traced per side")
    ap.add_argument("--perf", action="store_true", help="also count instructions (perf)")
    ap.add_argument("--calls", type=int, default=5000, help="calls perf counts over")
    ap.add_argument("--by-function", type=int, default=0, metavar="N",
                    help="also the N functions of each side that run the most bytecodes")
    args = ap.parse_args()
    # No busy-poll: its polls would count as the call's steps, as many as the wait is
    # long (set before init(): the executors inherit it).
    os.environ["HPC_RAY_SPIN_US"] = "0"
    ray.init()
    actor = Echo.remote()
    ray.get(actor.m.remote())
    n = args.traced
    rows = []
    # The caller is a task.
    got = ray.get(task_caller.remote(actor, 50, n))
    rows.append(("task caller", sum(got.values()) / n))
    sides = {"task caller": (got, n)}
    # The actor, while a task calls it.
    ray.get(actor.trace_start.remote())
    ray.get(task_caller.remote(actor, 0, n))
    got = ray.get(actor.trace_stop.remote())
    rows.append(("actor", sum(got.values()) / (n + 1)))   # (trace_stop's call counts too)
    sides["actor"] = (got, n + 1)
    # The caller is the driver.
    for _ in range(50):
        ray.get(actor.m.remote())
    got = counted(lambda: [ray.get(actor.m.remote()) for _ in range(n)])
    rows.append(("driver caller", sum(got.values()) / n))
    sides["driver caller"] = (got, n)
    for who, per_call in rows:
        print(f"bytecodes per call | {who:13} | {per_call:7.1f}")
    for who, (counts, calls) in sides.items() if args.by_function else ():
        print(f"\n{who}: bytecodes per call by function")
        for name, count in collections.Counter(counts).most_common(args.by_function):
            print(f"  {count / calls:7.1f}  {name}")
    if args.perf:
        pid_file = f"/tmp/hpc_ray-call-steps-{os.getpid()}"
        try:
            ref = timed_caller.remote(actor, args.calls, pid_file)
            deadline = time.monotonic() + 60
            while not os.path.exists(pid_file) or not open(pid_file).read():
                if time.monotonic() > deadline:
                    raise TimeoutError("the caller task did not start")
                time.sleep(0.05)
            caller_pid = int(open(pid_file).read())
            counts = _perf({"task caller": caller_pid,
                            "actor": ray.get(actor.pid.remote())}, 3.0)
            ray.get(ref)
        finally:
            if os.path.exists(pid_file):
                os.unlink(pid_file)
        for who, c in counts.items():
            user, kernel = c.get("instructions:u"), c.get("instructions:k")
            if user is None:
                print(f"instructions per call | {who:13} | perf gave nothing")
                continue
            print(f"instructions per call | {who:13} | user {user / args.calls / 1e3:.1f}k"
                  f" | kernel {(kernel or 0) / args.calls / 1e3:.1f}k")
    ray.shutdown()


if __name__ == "__main__":
    main()
