"""Allreduce of the same float32 buffers (1 KB to 64 MB) among N members (default 3),
side by side:

    hpc_ray_exec ordinary @remote actors (executor processes without MPI), the program
                 of hpc_ray.collective's docs: mpiexec -n N+1 python allreduce.py
                 --child hpc_ray_exec; each actor times hpc_ray.collective.allreduce(buf,
                 group) in a loop (its rank copies the buffer in, runs MPI, copies it out)
    hpc_ray      the same with in-rank actors (@remote(in_rank=True): direct MPI, in
                 place); then, as "hpc_ray_comm", Allreduce on get_communicator(group)
    mpi4py       mpiexec -n N python allreduce.py --child mpi4py
                 comm.Allreduce(MPI.IN_PLACE, buf) in a loop
    torch_gloo   N processes, torch.distributed (gloo over loopback TCP)
    ray          ray.init(num_cpus=N): N actors; one allreduce = each actor returns its
                 buffer (object store), then each sums all into its own buffer; the
                 driver drives every step (Ray has no MPI-like collective by default)
    hpc_ray_exec_base  hpc_ray_exec with another checkout of hpc_ray (--base PATH, e.g.
                 a git worktree of the base commit): an A/B of the same program

Each system runs in its own child process(es), one after the other, never two at
once; ``--repeat R`` runs the whole list R times in turn (interleaved) and the table
shows, per size, the median over the R runs. Within a run: one checked allreduce
(the result must equal the sum), a warm-up, then ``--rounds`` rounds of back-to-back
operations on a zeroed buffer (so values stay finite); a round's time is the slowest
rank's, and a run's figure is the median round's time per operation.

    python benchmarks/allreduce.py                         # every system, ~3 min
    python benchmarks/allreduce.py --systems hpc_ray_exec,mpi4py,ray --sizes 1M,4M,16M,64M \
        --repeat 5 --base /tmp/base-checkout
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
SYSTEMS = ("hpc_ray", "hpc_ray_exec", "mpi4py", "torch_gloo", "ray")
#: Reported columns: the systems, plus raw Allreduce on the hpc_ray group's communicator.
COLUMNS = ("hpc_ray_exec", "hpc_ray", "hpc_ray_comm", "mpi4py", "torch_gloo", "ray",
           "hpc_ray_exec_base")
DEFAULT_SIZES = "1K,4K,16K,64K,256K,1M,4M,16M,64M"
#: Ordinary actors' allreduce should be at least as fast as raw mpi4py, at every
#: size (issue 34).
TARGET = 1.0
MARK = "@@allreduce "


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def label(nbytes: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size}{unit}"
    return f"{nbytes}B"


# --- the timing loop, shared by every system ---------------------------------------------


def measure(allreduce: Callable[[np.ndarray], None], barrier: Callable[[], None],
            slowest: Callable[[float], float], world: int, rank: int, sizes: list[int],
            rounds: int, budget: float, log: Callable[[str], None] = lambda s: None) -> dict:
    """Seconds per allreduce for each size (median over rounds of the slowest rank).

    ``allreduce(buf)`` reduces ``buf`` in place (sum), ``barrier()`` aligns the
    ranks, ``slowest(t)`` returns the maximum of ``t`` over the ranks.
    """
    out = {}
    for nbytes in sizes:
        n = nbytes // 4
        buf = np.full(n, rank + 1, dtype=np.float32)
        allreduce(buf)
        want = world * (world + 1) / 2
        if not np.all(buf == want):
            raise AssertionError(f"allreduce of {label(nbytes)} gave {buf[:4]}, "
                                 f"expected {want}")
        buf[:] = 0
        # Warm up (first-call costs, page faults), then calibrate: how many
        # operations fill one round of budget/rounds seconds.
        barrier()
        t0 = time.perf_counter()
        for _ in range(5):
            allreduce(buf)
        per_op = slowest((time.perf_counter() - t0) / 5)
        warm = int(min(50, 0.2 * budget / max(per_op, 1e-7)))
        barrier()
        t0 = time.perf_counter()
        for _ in range(warm):
            allreduce(buf)
        if warm:
            per_op = slowest((time.perf_counter() - t0) / warm)
        ops = int(max(2, min(2000, budget / rounds / max(per_op, 1e-7))))
        times = []
        for _ in range(rounds):
            barrier()
            t0 = time.perf_counter()
            for _ in range(ops):
                allreduce(buf)
            times.append(slowest(time.perf_counter() - t0) / ops)
        out[str(nbytes)] = float(np.median(times))
        log(f"{label(nbytes)}: {out[str(nbytes)] * 1e6:.1f} us/op ({ops} ops x {rounds})")
    return out


def emit(system: str, results: dict) -> None:
    print(MARK + json.dumps({"system": system, "results": results}), flush=True)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- children ------------------------------------------------------------------------------


def child_mpi4py(args) -> None:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD

    def slowest(t):
        return comm.allreduce(t, op=MPI.MAX)

    res = measure(lambda b: comm.Allreduce(MPI.IN_PLACE, b), comm.Barrier, slowest,
                  comm.Get_size(), comm.Get_rank(), args.size_list, args.rounds, args.budget,
                  log if comm.Get_rank() == 0 else (lambda s: None))
    if comm.Get_rank() == 0:
        emit("mpi4py", res)


def child_hpc_ray(args, in_rank: bool) -> None:
    import hpc_ray as ray
    from hpc_ray import collective as col
    ray.init()
    members = args.members
    workers = int(ray.cluster_resources().get("CPU", 0))
    if workers < members:
        raise SystemExit(f"need {members} worker ranks, got {workers}")

    class Bench:
        def __init__(self, rank):
            self.rank = rank

        def join(self):
            col.init_collective_group(members, self.rank, group_name="bench")

        def run(self, sizes, rounds, budget):
            def slowest(t):
                a = np.array([t])
                col.allreduce(a, "bench", col.ReduceOp.MAX)
                return float(a[0])
            return measure(lambda b: col.allreduce(b, "bench"),
                           lambda: col.barrier("bench"), slowest, members, self.rank,
                           sizes, rounds, budget)

        def run_comm(self, sizes, rounds, budget):
            # The same loop on the group's own mpi4py communicator.
            from mpi4py import MPI
            comm = col.get_communicator("bench")
            return measure(lambda b: comm.Allreduce(MPI.IN_PLACE, b), comm.Barrier,
                           lambda t: comm.allreduce(t, op=MPI.MAX), members, self.rank,
                           sizes, rounds, budget)

    cls = ray.remote(num_cpus=1, in_rank=in_rank)(Bench)
    actors = [cls.remote(i) for i in range(members)]
    ray.get([a.join.remote() for a in actors])
    settle()
    res = ray.get([a.run.remote(args.size_list, args.rounds, args.budget)
                   for a in actors])[0]
    for nbytes, t in res.items():
        log(f"{label(int(nbytes))}: {t * 1e6:.1f} us/op")
    emit("hpc_ray" if in_rank else args.label or "hpc_ray_exec", res)
    if in_rank:
        res = ray.get([a.run_comm.remote(args.size_list, args.rounds, args.budget)
                       for a in actors])[0]
        for nbytes, t in res.items():
            log(f"get_communicator() {label(int(nbytes))}: {t * 1e6:.1f} us/op")
        emit("hpc_ray_comm", res)
    ray.shutdown()


def child_torch(args) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    rank = int(os.environ["BENCH_RANK"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}",
                            rank=rank, world_size=args.members)

    def reduce(buf):
        dist.all_reduce(torch.from_numpy(buf))

    def slowest(t):
        x = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return float(x[0])

    res = measure(reduce, dist.barrier, slowest, args.members, rank, args.size_list, args.rounds,
                  args.budget, log if rank == 0 else (lambda s: None))
    dist.destroy_process_group()
    if rank == 0:
        emit("torch_gloo", res)


def child_ray(args) -> None:
    import ray
    n = args.members
    ray.init(num_cpus=n, include_dashboard=False, log_to_driver=False)

    @ray.remote(num_cpus=1)
    class Member:
        def __init__(self, rank):
            self.rank = rank
            self.buf = None

        def set(self, nbytes, value):
            self.buf = np.full(nbytes // 4, value, dtype=np.float32)

        def contribute(self):
            return self.buf

        def combine(self, *parts):
            # Each member sums every contribution into its own buffer, in place.
            np.copyto(self.buf, parts[0])
            for p in parts[1:]:
                self.buf += p
            return None

        def head(self):
            return self.buf[:4].tolist()

    members = [Member.remote(i) for i in range(n)]

    def allreduce_step():
        parts = [m.contribute.remote() for m in members]
        ray.get([m.combine.remote(*parts) for m in members])

    out = {}
    for nbytes in args.size_list:
        ray.get([m.set.remote(nbytes, i + 1) for i, m in enumerate(members)])
        allreduce_step()
        heads = ray.get([m.head.remote() for m in members])
        if any(h != [n * (n + 1) / 2] * min(4, nbytes // 4) for h in heads):
            raise AssertionError(f"ray allreduce of {label(nbytes)} gave {heads}")
        ray.get([m.set.remote(nbytes, 0) for m in members])
        t0 = time.perf_counter()
        for _ in range(5):
            allreduce_step()
        per_op = (time.perf_counter() - t0) / 5
        ops = int(max(2, min(2000, args.budget / args.rounds / max(per_op, 1e-7))))
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for _ in range(ops):
                allreduce_step()
            times.append((time.perf_counter() - t0) / ops)
        out[str(nbytes)] = float(np.median(times))
        log(f"{label(nbytes)}: {out[str(nbytes)] * 1e6:.1f} us/op ({ops} ops x {args.rounds})")
    emit("ray", out)
    ray.shutdown()


# --- the parent ----------------------------------------------------------------------------


def mpiexec() -> str:
    for name in ("mpiexec", "mpirun"):
        beside = Path(sys.executable).parent / name
        if beside.exists():
            return str(beside)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        raise SystemExit("no mpiexec found")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_children(cmds: list[list[str]], envs: list[dict], timeout: float,
                 repo: Path = REPO) -> dict:
    """Start the commands, wait for all; ``{system: results}`` of what they emitted.

    ``repo`` is the checkout whose hpc_ray the children import.
    """
    procs = []
    for cmd, env in zip(cmds, envs):
        full = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(repo)] + [p for p in [os.environ.get("PYTHONPATH")] if p]), **env)
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, env=full, text=True,
                                      start_new_session=True))
    found: dict = {}
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                try:
                    os.killpg(q.pid, 9)
                except ProcessLookupError:
                    pass
            log(f"timed out after {timeout}s: {' '.join(cmds[0])}")
            return found
        for line in out.splitlines():
            if line.startswith(MARK):
                got = json.loads(line[len(MARK):])
                found.setdefault(got["system"], {}).update(got["results"])
        if p.returncode != 0:
            log(f"exit code {p.returncode}: {' '.join(cmds[procs.index(p)])}")
    return found


def run_system(system: str, args) -> dict:
    py = sys.executable
    n = args.members
    common = ["--sizes", args.sizes, "--rounds", str(args.rounds), "--budget",
              str(args.budget), "--members", str(n)]
    me = [py, str(HERE), "--child", system, *common]
    if system in ("hpc_ray", "hpc_ray_exec"):
        return run_children([[mpiexec(), "-n", str(n + 1), *me]], [{}], args.timeout)
    if system == "hpc_ray_exec_base":
        if not args.base:
            raise SystemExit("hpc_ray_exec_base needs --base PATH (a checkout of hpc_ray)")
        me = [py, str(HERE), "--child", "hpc_ray_exec", "--label", system, *common]
        return run_children([[mpiexec(), "-n", str(n + 1), *me]], [{}], args.timeout,
                            repo=Path(args.base).resolve())
    if system == "mpi4py":
        return run_children([[mpiexec(), "-n", str(n), *me]], [{}], args.timeout)
    if system == "torch_gloo":
        port = str(free_port())
        return run_children([me] * n, [{"BENCH_RANK": str(r), "BENCH_PORT": port}
                                       for r in range(n)], args.timeout)
    if system == "ray":
        return run_children([me], [{}], args.timeout)
    raise SystemExit(f"unknown system {system!r} (known: {list(SYSTEMS)} and "
                     f"hpc_ray_exec_base)")


def settle(limit: float = 10.0, busy: float = 0.25) -> None:
    """Wait until this job's other processes (the launcher's descendants: ranks,
    executors) use less than ``busy`` CPU-s/s, up to ``limit`` seconds.

    Creating actors starts more processes for a while: each rank that hosts one
    starts a standby executor (~0.4 s of CPU) once its CPUs have a core to spare.
    On 2 cores a job of 8 actors used 1.2-2.1 CPU-s/s in the first second after
    they were created, 0.34 in the next half second, then 0.05; on 8 members of a
    16-core node the first size measured took 3.5x the time it took measured
    last. The table is of operations after start-up; ``collective_start.py``
    measures the first ones.
    """
    import psutil
    from neighbour import cpu_seconds   # (this directory is on sys.path: a script's own)
    me = psutil.Process()
    launcher = me.parent()
    if launcher is None:
        return

    def used() -> float:
        return cpu_seconds([p for p in launcher.children(recursive=True) if p.pid != me.pid])

    start = time.monotonic()
    before = used()
    while time.monotonic() - start < limit:
        time.sleep(0.2)
        now = used()
        if (now - before) / 0.2 < busy:
            log(f"(settled {time.monotonic() - start:.1f} s after start-up)")
            return
        before = now
    log(f"the job's processes stayed busy for {limit:.0f} s after start-up; measuring anyway")


def wait_idle(limit: float, busy_percent: float = 25.0) -> None:
    """Wait up to ``limit`` seconds for the CPUs to be mostly idle (other jobs)."""
    import psutil
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if psutil.cpu_percent(interval=1.0) < busy_percent:
            return
    log(f"the CPUs stayed busy for {limit:.0f} s; measuring anyway")


def table(results: dict[str, dict], sizes: list[int]) -> str:
    """Microseconds per operation per system; ratios against ordinary actors (ours)."""
    systems = [s for s in COLUMNS if s in results]
    ours_name = "hpc_ray_exec" if "hpc_ray_exec" in results else "hpc_ray"
    head = ["size"] + [f"{s} us" for s in systems] + [f"{ours_name} GB/s"]
    ratios = [("mpi4py", f"{ours_name} vs mpi4py"), ("hpc_ray", f"{ours_name} vs in_rank"),
              ("torch_gloo", f"{ours_name} vs gloo"), ("ray", f"{ours_name} vs ray"),
              ("hpc_ray_exec_base", f"{ours_name} vs base")]
    ratios = [(s, name) for s, name in ratios
              if s in results and s != ours_name and ours_name in results]
    head += [name for _, name in ratios]
    if "mpi4py" in results and ours_name in results:
        head.append(f"target >= {TARGET:g}x mpi4py")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for nbytes in sizes:
        key = str(nbytes)
        row = [label(nbytes)]
        for s in systems:
            t = results[s].get(key)
            row.append("-" if t is None else f"{t * 1e6:,.1f}")
        ours = results.get(ours_name, {}).get(key)
        # Algorithm bandwidth: bytes reduced per second.
        row.append("-" if not ours else f"{nbytes / ours / 1e9:.2f}")
        # Speed ratios: > 1 means ours is faster.
        for s, _ in ratios:
            other = results[s].get(key)
            row.append("-" if not ours or not other else f"{other / ours:.2f}x")
        if head[-1].startswith("target"):
            other = results["mpi4py"].get(key)
            if not ours or not other:
                row.append("")
            else:
                row.append("PASS" if other / ours >= TARGET else "MISS")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated, from {list(SYSTEMS)}")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="bytes, e.g. 1K,4M,64M")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per size")
    parser.add_argument("--budget", type=float, default=0.6,
                        help="seconds of timed operations per size and system")
    parser.add_argument("--timeout", type=float, default=240, help="per system")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run the systems this many times in turn (interleaved); the "
                             "table shows each size's median over the runs")
    parser.add_argument("--members", type=int, default=3,
                        help="members of the allreduce (hpc_ray jobs get one more rank, "
                             "the head)")
    parser.add_argument("--base", default=None,
                        help="a checkout of hpc_ray for the hpc_ray_exec_base system")
    parser.add_argument("--label", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--wait-idle", type=float, default=0,
                        help="before each system, wait up to this many seconds for idle CPUs")
    parser.add_argument("--json-out", default=None, help="write every figure as JSON")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.size_list = [parse_size(s) for s in args.sizes.split(",")]

    if args.child:
        {"mpi4py": child_mpi4py, "torch_gloo": child_torch, "ray": child_ray,
         "hpc_ray": lambda a: child_hpc_ray(a, True),
         "hpc_ray_exec": lambda a: child_hpc_ray(a, False)}[args.child](args)
        return

    runs: dict[str, dict[str, list]] = {}
    for system in args.systems.split(",") * args.repeat:
        if args.wait_idle:
            wait_idle(args.wait_idle)
        log(f"--- {system}")
        start = time.monotonic()
        for name, got in run_system(system.strip(), args).items():
            mine = runs.setdefault(name, {})
            for key, t in got.items():
                mine.setdefault(key, []).append(t)
        log(f"--- {system}: {time.monotonic() - start:.0f} s")
    results = {name: {key: float(np.median(ts)) for key, ts in per.items()}
               for name, per in runs.items()}
    load = os.getloadavg()[0]
    print(f"allreduce, float32 sum, {args.members} members, median of {args.rounds} rounds "
          f"per run, median of {args.repeat} interleaved run(s) "
          f"(microseconds per operation; load average {load:.1f} on {os.cpu_count()} CPUs)")
    print(table(results, args.size_list))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"median": results, "runs": runs},
                                                  indent=1))


if __name__ == "__main__":
    main()
