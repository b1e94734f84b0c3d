"""What a wake-up costs on this machine: the floor under every sync call's figure.

A sync actor call is two processes waking each other. How much that costs
depends on the machine more than on any runtime: on a VM, waking a process that
sleeps on another CPU goes through the hypervisor (an inter-processor
interrupt), while waking one on the caller's own CPU is a plain context switch.
This script measures, with no runtime at all, one process echoing 16-byte
pickled messages to another over a socketpair (multiprocessing's framing, as
hpc_ray's ranks and executors use), under fixed placements:

    same CPU            both pinned to CPU 0: each wake-up is a local switch
    two CPUs            caller on CPU 1, echo on CPU 0, both block in recv
    two CPUs, spin      the same, but the caller busy-polls for the answer
                        (as hpc_ray's callers do for up to HPC_RAY_SPIN_US)
    2 threads, 2 echoes two threads of one process, each with its own echo
                        process, unpinned: the floor of ``actor_nn_sync``
                        (two driver threads share one GIL)

and prints round trips per second. Quote the microbenchmark's sync rows next to
these: a machine whose cross-CPU wake-up is slow shows lower sync rows for every
system (hpc_ray, Ray and the ``pipe`` floor alike).

    python benchmarks/wakeups.py             # ~10 s
    python benchmarks/wakeups.py --save      # + results/wakeups-<date>.md
"""
from __future__ import annotations

import argparse
import datetime
import os
import pickle
import platform
import socket
import statistics
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
STOP = b"stop"


def _echo(sock: socket.socket, cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    conn = Connection(sock.detach())
    while True:
        try:
            msg = conn.recv_bytes()
        except (EOFError, OSError):
            break
        if msg == STOP:
            break
        conn.send_bytes(msg)
    os._exit(0)


def _start_echo(cpu: int | None) -> tuple[Connection, int]:
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        a.close()
        _echo(b, cpu)
    b.close()
    return Connection(a.detach()), pid


def _stop_echo(conn: Connection, pid: int) -> None:
    conn.send_bytes(STOP)
    conn.close()
    os.waitpid(pid, 0)


def _round_trips(conn: Connection, n: int, spin: bool) -> None:
    for i in range(n):
        conn.send_bytes(pickle.dumps(("m", i)))
        if spin:
            while not conn.poll(0):
                pass
        pickle.loads(conn.recv_bytes())


def one_pair(caller_cpu: int | None, echo_cpu: int | None, spin: bool, n: int) -> float:
    """Round trips per second of one caller and one echo process."""
    conn, pid = _start_echo(echo_cpu)
    mask = os.sched_getaffinity(0)
    try:
        if caller_cpu is not None:
            os.sched_setaffinity(0, {caller_cpu})
        _round_trips(conn, n // 10, spin)     # warm-up
        t0 = time.perf_counter()
        _round_trips(conn, n, spin)
        return n / (time.perf_counter() - t0)
    finally:
        os.sched_setaffinity(0, mask)
        _stop_echo(conn, pid)


def two_threads(n: int) -> float:
    """Round trips per second of two threads, each with its own echo process."""
    pairs = [_start_echo(None) for _ in range(2)]
    try:
        threads = [threading.Thread(target=_round_trips, args=(conn, n, False))
                   for conn, _ in pairs]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return 2 * n / (time.perf_counter() - t0)
    finally:
        for conn, pid in pairs:
            _stop_echo(conn, pid)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=20_000, help="round trips per rep")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--save", action="store_true", help="write results/wakeups-<date>.md")
    args = p.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    rows = []
    cases = [("same CPU", lambda: one_pair(cpus[0], cpus[0], False, args.calls))]
    if len(cpus) > 1:
        cases += [
            ("two CPUs", lambda: one_pair(cpus[1], cpus[0], False, args.calls)),
            ("two CPUs, caller spins", lambda: one_pair(cpus[1], cpus[0], True, args.calls)),
        ]
    cases.append(("2 threads, 2 echoes, unpinned", lambda: two_threads(args.calls)))
    for name, run in cases:
        reps = [run() for _ in range(args.reps)]
        rows.append((name, max(reps), statistics.median(reps)))
        print(f"{name:32s} best {max(reps):9,.0f}  median {statistics.median(reps):9,.0f} "
              f"round trips/s", flush=True)
    if args.save:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        lines = [f"# Wake-up floor, {stamp}", "",
                 f"Command: `python benchmarks/wakeups.py --calls {args.calls} "
                 f"--reps {args.reps} --save`", "",
                 f"- python {platform.python_version()}, cpus {len(cpus)}, "
                 f"{platform.processor() or platform.machine()}",
                 "- no runtime: one process echoing pickled messages to another over a "
                 "socketpair", "",
                 "| placement | best round trips/s | median | us per round trip (best) |",
                 "|---|--:|--:|--:|"]
        lines += [f"| {name} | {best:,.0f} | {med:,.0f} | {1e6 / best:.1f} |"
                  for name, best, med in rows]
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"wakeups-{stamp}.md"
        out.write_text("\n".join(lines) + "\n")
        print(f"saved {out}")


if __name__ == "__main__":
    main()
