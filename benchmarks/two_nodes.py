"""Two nodes beside one: tiny tasks, a large object across nodes, allreduce across nodes.

Each measurement is one ``mpiexec`` (MPICH hydra) of this script with ``--child``,
run one after the other. By default the nodes are fake hosts on this machine,
as in ``tests/test_two_nodes.py``: hydra's ssh launcher is ``tests/fake_host_ssh.sh``,
one proxy per "host", and MPI talks between them over its network path:

    mpiexec -hosts 127.0.0.2:3,127.0.0.3:2 -launcher ssh \\
            -launcher-exec tests/fake_host_ssh.sh -n 5 python two_nodes.py --child KIND

``--hosts A:3,B:2`` names real hosts instead (and ``--launcher-exec ''`` keeps
hydra's own ssh). One node is the same number of ranks on the first host.

    tasks      ray.get([f.remote(i) for i in range(T)]), T = 10^4 and 10^5: tasks/s
               on two nodes and on one node
    object     100 MB ``put`` on the driver's node, then ``get`` in an actor on the
               other node (a fresh object each time): GB/s, beside mpi4py
               Send/Recv of 100 MB between the same two ranks (rank 0 and the
               actor's rank)
    allreduce  float32 sum among one ordinary actor per worker rank, two nodes:
               hpc_ray's route (store in each node, MPI between leaders), the
               per-member route (every member through its rank:
               ``collective_shm`` off), and mpi4py Allreduce on the same ranks

    python benchmarks/two_nodes.py            # 10^4 and 10^5 tasks, 100 MB, 1 and 16 MB
    python benchmarks/two_nodes.py --quick    # smaller everything, for a smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKE_SSH = ROOT / "tests" / "fake_host_ssh.sh"
MARK = "@@two "


def emit(**values) -> None:
    print(MARK + json.dumps(values), flush=True)


def f(x):
    return x


# --- children: run inside mpiexec ------------------------------------------------------

def idle_until_done(comm) -> None:
    """Wait on a barrier without keeping a core busy (2-core machine, several ranks)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.001)


def child_tasks(args) -> None:
    import hpc_ray as ray
    ray.init()
    remote_f = ray.remote(f)
    ray.get([remote_f.remote(i) for i in range(100)])            # warm-up: every rank
    for n in args.tasks:
        t0 = time.perf_counter()
        ray.get([remote_f.remote(i) for i in range(n)])
        emit(kind="tasks", tasks=n, rate=n / (time.perf_counter() - t0))
    ray.shutdown()


def _actors(ray, count):
    """One actor per worker rank, and their (node, rank)."""
    @ray.remote(num_cpus=1)
    class Member:
        def where(self):
            from hpc_ray.runtime import context
            return context.current().node, context.current().rank

        def nbytes(self, arr):
            return arr.nbytes

        def join(self, size, rank):
            from hpc_ray import collective as col
            col.init_collective_group(size, rank, group_name="g")

        def per_member(self, yes):
            from hpc_ray.runtime import context
            context.current().collective_shm = not yes

        def allreduce(self, nbytes, reps):
            import numpy as np
            from hpc_ray import collective as col
            a = np.ones(nbytes // 4, np.float32)
            for _ in range(2):
                col.allreduce(a, "g")
            col.barrier("g")
            t0 = time.perf_counter()
            for _ in range(reps):
                col.allreduce(a, "g")
            return (time.perf_counter() - t0) / reps
    actors = [Member.remote() for _ in range(count)]
    return actors, ray.get([a.where.remote() for a in actors])


def child_object(args) -> None:
    import numpy as np
    import hpc_ray as ray
    ray.init()
    nodes = ray.nodes()
    actors, places = _actors(ray, sum(len(n["Ranks"]) for n in nodes) - 1)
    here = next(int(n["NodeID"].split("-")[1]) for n in nodes if 0 in n["Ranks"])
    far, (_, far_rank) = next((a, p) for a, p in zip(actors, places) if p[0] != here)
    arr = np.ones(args.object_mb * (1 << 20) // 8)
    ray.get(far.nbytes.remote(ray.put(arr[:1000])))                # warm-up
    times = []
    for _ in range(args.reps):
        ref = ray.put(arr)
        t0 = time.perf_counter()
        ray.get(far.nbytes.remote(ref))
        times.append(time.perf_counter() - t0)
        del ref
    emit(kind="object", system="hpc_ray", rank=far_rank, gbs=arr.nbytes / min(times) / 1e9)
    ray.shutdown()


def child_sendrecv(args) -> None:
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    peer = args.peer
    buf = np.ones(args.object_mb * (1 << 20) // 8)
    ack = np.zeros(1)
    if comm.rank in (0, peer):
        times = []
        for _ in range(args.reps + 1):
            t0 = time.perf_counter()
            if comm.rank == 0:
                comm.Send(buf, dest=peer)
                comm.Recv(ack, source=peer)
            else:
                comm.Recv(buf, source=0)
                comm.Send(ack, dest=0)
            times.append(time.perf_counter() - t0)
        if comm.rank == 0:
            emit(kind="object", system="mpi4py", rank=peer, gbs=buf.nbytes / min(times[1:]) / 1e9)
    idle_until_done(comm)


def child_allreduce(args) -> None:
    import hpc_ray as ray
    ray.init()
    workers = sum(len(n["Ranks"]) for n in ray.nodes()) - 1
    actors, places = _actors(ray, workers)
    ray.get([a.join.remote(workers, i) for i, a in enumerate(actors)])
    for per_member in (False, True):
        ray.get([a.per_member.remote(per_member) for a in actors])
        for nbytes in args.sizes:
            secs = max(ray.get([a.allreduce.remote(nbytes, args.reps) for a in actors]))
            emit(kind="allreduce", system="hpc_ray_per_member" if per_member else "hpc_ray",
                 bytes=nbytes, ms=secs * 1e3, nodes=len({n for n, _ in places}))
    ray.shutdown()


def child_mpi_allreduce(args) -> None:
    import numpy as np
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    comm = world.Split(0 if world.rank else MPI.UNDEFINED, world.rank)
    if comm != MPI.COMM_NULL:
        for nbytes in args.sizes:
            a = np.ones(nbytes // 4, np.float32)
            for _ in range(2):
                comm.Allreduce(MPI.IN_PLACE, a)
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(args.reps):
                comm.Allreduce(MPI.IN_PLACE, a)
            secs = comm.allreduce((time.perf_counter() - t0) / args.reps, op=MPI.MAX)
            if comm.rank == 0:
                emit(kind="allreduce", system="mpi4py", bytes=nbytes, ms=secs * 1e3)
        comm.Free()
    idle_until_done(world)


CHILDREN = {"tasks": child_tasks, "object": child_object, "sendrecv": child_sendrecv,
            "allreduce": child_allreduce, "mpi_allreduce": child_mpi_allreduce}


# --- parent: one mpiexec per measurement -----------------------------------------------

def command(hosts: list[str], args, kind: str, *extra: str) -> list[str]:
    mpiexec = shutil.which("mpiexec")
    n = sum(int(h.rsplit(":", 1)[1]) for h in hosts)
    launch = [mpiexec, "-hosts", ",".join(hosts)]
    if args.launcher_exec:
        launch += ["-launcher", "ssh", "-launcher-exec", args.launcher_exec]
    return launch + ["-n", str(n), sys.executable, str(Path(__file__).resolve()),
                     "--child", kind, *extra]


def run(cmd: list[str], timeout: float) -> list[dict]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tempfile.gettempdir(), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        sys.exit(f"timed out after {timeout}s: {' '.join(cmd)}\n{out}\n{err}")
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{out}\n{err}")
    return [json.loads(line[len(MARK):]) for line in out.splitlines() if line.startswith(MARK)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    p.add_argument("--peer", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--hosts", default="127.0.0.2:3,127.0.0.3:2",
                   help="two nodes as hydra's -hosts (address:ranks,address:ranks)")
    p.add_argument("--launcher-exec", default=str(FAKE_SSH),
                   help="hydra's ssh launcher ('' for hydra's own ssh)")
    p.add_argument("--tasks", default="10000,100000", help="task counts")
    p.add_argument("--object-mb", type=int, default=100, help="object size in MB")
    p.add_argument("--sizes", default="1048576,16777216", help="allreduce sizes in bytes")
    p.add_argument("--reps", type=int, default=10, help="repetitions per figure")
    p.add_argument("--timeout", type=float, default=900, help="seconds per mpiexec")
    p.add_argument("--quick", action="store_true",
                   help="10^3 and 10^4 tasks, 10 MB object, 64 KB and 1 MB allreduce, 3 reps")
    args = p.parse_args()
    if args.quick:
        args.tasks, args.object_mb, args.sizes, args.reps = "1000,10000", 10, "65536,1048576", 3
    args.tasks = [int(t) for t in args.tasks.split(",")]
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        CHILDREN[args.child](args)
        return
    two = args.hosts.split(",")
    ranks = sum(int(h.rsplit(":", 1)[1]) for h in two)
    one = [f"{two[0].rsplit(':', 1)[0]}:{ranks}"]
    print(f"launch: {' '.join(command(two, args, 'KIND'))}", flush=True)
    print(f"one node: {' '.join(command(one, args, 'tasks'))}", flush=True)
    rows = []
    tasks = {}
    for label, hosts in (("one node", one), ("two nodes", two)):
        for r in run(command(hosts, args, "tasks", "--tasks", ",".join(map(str, args.tasks)),
                             "--reps", str(args.reps)), args.timeout):
            tasks[label, r["tasks"]] = r["rate"]
    rows.append("| measure | one node | two nodes | two / one |")
    rows.append("| --- | ---: | ---: | ---: |")
    for n in args.tasks:
        a, b = tasks["one node", n], tasks["two nodes", n]
        rows.append(f"| {n:,} tiny tasks, tasks/s | {a:,.0f} | {b:,.0f} | {b / a:.2f} |")
    common = ["--object-mb", str(args.object_mb), "--reps", str(args.reps),
              "--sizes", ",".join(map(str, args.sizes))]
    obj = run(command(two, args, "object", *common), args.timeout)[0]
    raw = run(command(two, args, "sendrecv", "--peer", str(obj["rank"]), *common),
              args.timeout)[0]
    rows += ["", "| across nodes | hpc_ray | mpi4py | hpc_ray / mpi4py |",
             "| --- | ---: | ---: | ---: |",
             f"| {args.object_mb} MB put, get on the other node (rank 0 -> {obj['rank']}), "
             f"GB/s | {obj['gbs']:.2f} | {raw['gbs']:.2f} (Send/Recv) | "
             f"{obj['gbs'] / raw['gbs']:.2f} |"]
    got = run(command(two, args, "allreduce", *common), args.timeout)
    got += run(command(two, args, "mpi_allreduce", *common), args.timeout)
    ms = {(r["system"], r["bytes"]): r["ms"] for r in got}
    rows += ["", f"| allreduce, {ranks - 1} ranks on two nodes, ms | hpc_ray | "
             f"per-member route | mpi4py Allreduce | hpc_ray / mpi4py |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for nbytes in args.sizes:
        h, pm, m = (ms["hpc_ray", nbytes], ms["hpc_ray_per_member", nbytes],
                    ms["mpi4py", nbytes])
        size = f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"
        rows.append(f"| {size} | {h:.3f} | {pm:.3f} | {m:.3f} | {h / m:.2f} |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
