"""Synchronous data-parallel SGD throughput: samples per second for 1, 2 and 3
replicas of the same numpy model (``hpc_ray.sgd.MLPModel`` on the digits,
batch per replica ``--batch``), under:

    allreduce   hpc_ray DistributedSGD(strategy="allreduce"): ordinary actors (the
                default), fused gradients, MPI Allreduce run by their ranks; the driver
                sends one call per worker per step
    allreduce_in_rank  the same with DistributedSGD(..., in_rank=True): workers live
                in their ranks, MPI on the gradient buffers themselves
    ps          hpc_ray DistributedSGD(strategy="ps"): gradient shards averaged by
                parameter-server actors, refs passed actor to actor
    simple      hpc_ray DistributedSGD(strategy="simple"): averaged on the driver
    ray_ps      Ray (ray.init(num_cpus=R+1)): the parameter server of Ray's docs, on the
                same model: the server holds the weights, each step every worker
                computes gradients on the current weights, the server averages and
                applies them and returns the new weights
    hpc_ray_ps  the very same ray_ps code with ``import hpc_ray as ray``

hpc_ray runs as ``mpiexec -n R+1 python sgd.py --child hpc_ray --replicas R`` (one
worker rank per replica), Ray in one process; one system at a time. Each figure:
warm-up steps, then ``--rounds`` rounds of about ``--budget``/rounds seconds, the
median round; ``--repeat N`` runs every child N times in turn (interleaved) and
the table shows the median of the N figures. The machine has 2 cores: 3 replicas
oversubscribe it, for every system alike.

    python benchmarks/sgd.py                     # ~2-3 min
    python benchmarks/sgd.py --replicas 2 --systems allreduce,ray_ps --hidden 256,256
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from allreduce import log, mpiexec, run_children, wait_idle  # noqa: E402

HPC_SYSTEMS = ("allreduce", "allreduce_in_rank", "ps", "simple", "hpc_ray_ps")
SYSTEMS = HPC_SYSTEMS + ("ray_ps",)
MARK = "@@allreduce "   # the line prefix run_children reads


# --- the model, identical everywhere -----------------------------------------------------


def make_model(worker: int, replicas: int, hidden: list[int], batch: int):
    from hpc_ray.sgd.data import load_digits, shard_bounds
    from hpc_ray.sgd.models import MLPModel
    (x, y), _ = load_digits()
    lo, hi = shard_bounds(len(x), replicas)[worker]
    return MLPModel([64, *hidden, 10], x[lo:hi], y[lo:hi], batch_size=batch,
                    lr=0.02, seed=0, data_seed=worker)


def timed(step, args) -> float:
    """Median steps per second over rounds, after a warm-up."""
    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(3):
        step()
    per_step = (time.perf_counter() - t0) / 3
    n = int(max(3, min(5000, args.budget / args.rounds / max(per_step, 1e-6))))
    rates = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        rates.append(n / (time.perf_counter() - t0))
    return float(np.median(rates))


# --- Ray's parameter server, written once for both runtimes ---------------------------------


def parameter_server_rate(ray, replicas: int, args) -> float:
    """Steps per second of the docs' synchronous parameter server on ``ray``."""

    @ray.remote(num_cpus=1)
    class Worker:
        def __init__(self, index):
            self.model = make_model(index, replicas, args.hidden_list, args.batch)

        def compute_gradients(self, weights):
            self.model.set_weights(weights)
            grads, _ = self.model.compute_gradients()
            return grads

    @ray.remote(num_cpus=0)
    class ParameterServer:
        def __init__(self):
            self.model = make_model(0, replicas, args.hidden_list, args.batch)

        def apply_gradients(self, *gradients):
            average = [np.mean(parts, axis=0) for parts in zip(*gradients)]
            self.model.apply_gradients(average)
            return self.model.get_weights()

        def get_weights(self):
            return self.model.get_weights()

    ps = ParameterServer.remote()
    workers = [Worker.remote(i) for i in range(replicas)]
    state = {"weights": ps.get_weights.remote()}
    ray.get(state["weights"])

    def step():
        grads = [w.compute_gradients.remote(state["weights"]) for w in workers]
        state["weights"] = ps.apply_gradients.remote(*grads)
        ray.get(state["weights"])

    rate = timed(step, args)
    for actor in workers + [ps]:
        ray.kill(actor)
    return rate


# --- children -------------------------------------------------------------------------------


def emit(system: str, replicas: int, rate: float, args) -> None:
    samples = rate * args.batch * replicas
    log(f"{system} x{replicas}: {rate:.1f} steps/s, {samples:.0f} samples/s")
    print(MARK + json.dumps({"system": system, "results": {str(replicas): rate}}),
          flush=True)


def child_hpc_ray(args) -> None:
    import hpc_ray as ray
    from hpc_ray.sgd import DistributedSGD
    ray.init()
    r = args.replicas
    for system in args.system_list:
        if system == "hpc_ray_ps":
            emit(system, r, parameter_server_rate(ray, r, args), args)
            continue
        sgd = DistributedSGD(lambda w, d: make_model(w, r, args.hidden_list, args.batch), r,
                             strategy=system.replace("_in_rank", ""),
                             in_rank=system.endswith("_in_rank"))
        rate = timed(sgd.step, args)
        stats = sgd.step(fetch_stats=True)
        if not np.isfinite(stats["loss"]):
            raise AssertionError(f"{system}: loss {stats['loss']}")
        sgd.shutdown()
        emit(system, r, rate, args)
    ray.shutdown()


def child_ray(args) -> None:
    import ray
    for r in args.replica_list:
        ray.init(num_cpus=r + 1, include_dashboard=False, log_to_driver=False)
        emit("ray_ps", r, parameter_server_rate(ray, r, args), args)
        ray.shutdown()


# --- the parent -------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated, from {list(SYSTEMS)}")
    parser.add_argument("--replicas", default="1,2,3", help="replica counts")
    parser.add_argument("--hidden", default="64",
                        help="hidden layer sizes, comma-separated (default: the digits "
                             "example's model, 64-64-10)")
    parser.add_argument("--batch", type=int, default=32, help="samples per replica per step")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=3.0, help="timed seconds per figure")
    parser.add_argument("--timeout", type=float, default=300, help="per child")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every child this many times in turn; median of the runs")
    parser.add_argument("--wait-idle", type=float, default=0,
                        help="before each child, wait up to this many seconds for idle CPUs")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.system_list = [s.strip() for s in args.systems.split(",")]
    args.replica_list = [int(r) for r in args.replicas.split(",")]
    args.hidden_list = [int(h) for h in str(args.hidden).split(",")]
    unknown = set(args.system_list) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)} (known: {list(SYSTEMS)})")

    if args.child == "hpc_ray":
        args.replicas = args.replica_list[0]
        child_hpc_ray(args)
        return
    if args.child == "ray":
        child_ray(args)
        return

    common = ["--hidden", args.hidden, "--batch", str(args.batch), "--warmup",
              str(args.warmup), "--rounds", str(args.rounds), "--budget", str(args.budget)]
    runs: dict[str, dict[str, list]] = {}

    def collect(found: dict) -> None:
        for name, got in found.items():
            for key, rate in got.items():
                runs.setdefault(name, {}).setdefault(key, []).append(rate)

    hpc = [s for s in args.system_list if s in HPC_SYSTEMS]
    for _ in range(args.repeat):
        for r in args.replica_list:
            if not hpc:
                break
            if args.wait_idle:
                wait_idle(args.wait_idle)
            log(f"--- hpc_ray, {r} replica(s)")
            cmd = [mpiexec(), "-n", str(r + 1), sys.executable, str(HERE), "--child",
                   "hpc_ray", "--replicas", str(r), "--systems", ",".join(hpc), *common]
            collect(run_children([cmd], [{}], args.timeout))
        if "ray_ps" in args.system_list:
            if args.wait_idle:
                wait_idle(args.wait_idle)
            log("--- ray")
            cmd = [sys.executable, str(HERE), "--child", "ray", "--replicas", args.replicas,
                   *common]
            collect(run_children([cmd], [{}], args.timeout))
    rates = {name: {key: float(np.median(v)) for key, v in per.items()}
             for name, per in runs.items()}

    layers = "-".join(str(n) for n in [64, *args.hidden_list, 10])
    print(f"synchronous SGD, MLP {layers} on the digits, batch "
          f"{args.batch} per replica: samples/s (step time in ms), median of "
          f"{args.repeat} interleaved run(s); load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    systems = [s for s in SYSTEMS if s in rates]
    head = ["replicas"] + systems
    if "allreduce" in rates and "ray_ps" in rates:
        head.append("allreduce step vs ray_ps")
    if "allreduce" in rates and "ps" in rates:
        head.append("allreduce vs ps")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in args.replica_list:
        key = str(r)
        row = [key]
        for s in systems:
            rate = rates[s].get(key)
            row.append("-" if rate is None else
                       f"{rate * args.batch * r:,.0f} ({1000 / rate:.2f})")
        ours = rates.get("allreduce", {}).get(key)
        for other in ("ray_ps", "ps"):
            if f"allreduce {'step vs ray_ps' if other == 'ray_ps' else 'vs ps'}" in head:
                theirs = rates[other].get(key)
                row.append("-" if not ours or not theirs else f"{ours / theirs:.1f}x")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
