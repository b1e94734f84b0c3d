"""Synchronous data-parallel SGD for framework-free (numpy) models, after Ray SGD.

``DistributedSGD`` makes ``num_workers`` worker actors, each holding
``devices_per_worker`` model replicas (``model_creator(worker_index,
device_index)``), and runs one synchronous step per ``step()`` with one of three
strategies, so that their costs can be compared on the same model:

    "simple"     worker.compute_gradients ──(fused buffers)──▶ driver averages
                 driver ──ray.put(average)──▶ worker.apply_fused         (reference)

    "ps"         worker.compute_gradient_shards ──shard j──▶ server[j % P].aggregate
                 (object refs only: the driver touches no data)
                 every server's average ──▶ worker.apply_shards

    "allreduce"  worker.step_allreduce: local gradients ─▶ pack ─▶ MPI Allreduce per
                 fused buffer ─▶ apply (workers in one collective group: ordinary
                 actors, whose rank runs the Allreduce on a copy it takes straight
                 from the worker's memory, or with ``in_rank=True`` in place)

In every strategy a worker first averages its own replicas' gradients, packs
them into few large buffers (``FusionPlan``, at most ``grad_shard_bytes``
each), and applies the same averaged gradients as every other worker, so all
replicas keep identical weights (they start from worker 0's).
"""
from __future__ import annotations

import math
import uuid
from typing import Any, Callable, Sequence

import numpy as np

from .. import api, collective
from ..actors import kill
from ..exceptions import RayError
from .checkpoint import load_checkpoint, save_checkpoint
from .fusion import FusionPlan, shard_bounds

__all__ = ["DistributedSGD", "STRATEGIES"]

STRATEGIES = ("simple", "ps", "allreduce")


def check_capacity(what: str, count: int, num_cpus: float | None,
                   num_gpus: float | None, one_per_rank: bool) -> None:
    """Refuse ``count`` actors that the job can never hold at once (they step
    together, so the others would wait forever): more CPUs or GPUs in all than
    the job has, or, where they form an MPI group (``one_per_rank``), more
    than one per worker rank, or any group in ``local_mode``."""
    session = api._session
    if session is not None and session[0] == "local":
        if one_per_rank:
            raise ValueError(f"{what}={count} in local_mode: local_mode runs one call at a "
                             f"time in the driver, so they cannot allreduce together; use "
                             f"{what}=1")
        return
    if not api.is_initialized():
        return
    if one_per_rank:
        worker_ranks = sum(len(node.get("Ranks", ())) for node in api.nodes()) - 1
        if count > worker_ranks:
            raise ValueError(f"{what}={count}, and the job has {worker_ranks} worker ranks: "
                             f"they join one MPI group, one per worker rank; ask for fewer, "
                             f"or start the job with more ranks (init(num_cpus=N) "
                             f"embedded, mpiexec -n N+1)")
    total = api.cluster_resources()
    for name, each in (("CPU", num_cpus or 0), ("GPU", num_gpus or 0)):
        have = total.get(name, 0)
        if count * each > have:
            raise ValueError(
                f"{what}={count} actors of {each:g} {name} each need {count * each:g} "
                f"{name} at once (they step together), and the job has {have:g}; ask "
                f"for fewer, or fewer {name}s each, or start the job with more {name}s")


def gather_or_end(refs: list, actors: list) -> list:
    """Every result of ``refs``, in order. The first that fails kills ``actors``
    (members of one group, which would wait for the failed one in a collective
    forever) and its error is raised."""
    pending = list(refs)
    while pending:
        ready, pending = api.wait(pending, num_returns=1)
        try:
            api.get(ready[0])
        except Exception:
            for actor in actors:
                kill(actor)
            raise
    return api.get(list(refs))


def limit_threads(num_cpus: float | None) -> None:
    """Keep numpy's (and torch's) thread pools to the CPUs a replica was given.

    Replicas share a node's cores; each BLAS pool sized to the whole machine
    oversubscribes it and slows everyone down.
    """
    n = max(1, int(num_cpus or 1))
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(n)
    except ImportError:  # optional: scikit-learn brings it
        pass


# --- worker side ------------------------------------------------------------------------


def _merge_stats(stats: Sequence[dict]) -> dict:
    """Mean of ``loss`` (and other numbers), sum of ``num_samples``."""
    out: dict[str, Any] = {}
    for key in stats[0]:
        values = [s[key] for s in stats if key in s]
        if not all(isinstance(v, (int, float, np.number)) for v in values):
            out[key] = values[0]
        elif key == "num_samples":
            out[key] = int(sum(values))
        else:
            out[key] = float(np.mean(values))
    return out


class SGDWorker:
    """One worker: its model replicas, their fused gradient buffers, the step."""

    def __init__(self, model_creator: Callable, worker_index: int, devices_per_worker: int,
                 grad_shard_bytes: int, num_cpus: float) -> None:
        limit_threads(num_cpus)
        self.worker_index = worker_index
        self.models = [model_creator(worker_index, d) for d in range(devices_per_worker)]
        weights = self.models[0].get_weights()
        # Gradients have the weights' shapes and dtypes (the Model contract).
        self.plan = FusionPlan.for_arrays(weights, threshold_bytes=grad_shard_bytes)
        self.shards: list[tuple[int, int, int]] = []   # (bucket, start, stop)
        self.group: str | None = None

    # --- gradients -------------------------------------------------------------------

    def _local_gradients(self) -> tuple[list[np.ndarray], dict]:
        """Every replica's gradients averaged into the plan's buffers."""
        results = [model.compute_gradients() for model in self.models]
        buffers = self.plan.pack(results[0][0])
        if len(results) > 1:
            views = self.plan.split()
            for grads, _ in results[1:]:
                for view, g in zip(views, grads):
                    view += g
            for b in buffers:
                b /= len(results)
        return buffers, _merge_stats([s for _, s in results])

    def _apply(self, buffers: Sequence[np.ndarray]) -> None:
        grads = self.plan.split(buffers)
        for model in self.models:
            model.apply_gradients(grads)

    def compute_gradients(self) -> tuple[list[np.ndarray], dict]:
        buffers, stats = self._local_gradients()
        return [b.copy() for b in buffers], stats

    def apply_fused(self, buffers: Sequence[np.ndarray]) -> None:
        self._apply(buffers)

    def plan_shards(self, num_servers: int) -> int:
        """Cut the fused buffers into at least ``num_servers`` balanced shards."""
        total = sum(len(b) for b in self.plan.buffers)
        self.shards = []
        for i, buf in enumerate(self.plan.buffers):
            pieces = max(1, math.ceil(num_servers * len(buf) / max(total, 1)))
            for start, stop in shard_bounds(len(buf), min(pieces, max(len(buf), 1))):
                self.shards.append((i, start, stop))
        return len(self.shards)

    def compute_gradient_shards(self) -> tuple:
        buffers, stats = self._local_gradients()
        return (*[buffers[b][lo:hi].copy() for b, lo, hi in self.shards], stats)

    def apply_shards(self, *shards: np.ndarray) -> None:
        for (b, lo, hi), shard in zip(self.shards, shards):
            self.plan.buffers[b][lo:hi] = shard
        self._apply(self.plan.buffers)

    # --- allreduce -------------------------------------------------------------------

    def join_group(self, world_size: int, group_name: str) -> int:
        collective.init_collective_group(world_size, self.worker_index,
                                         group_name=group_name)
        self.group = group_name
        return collective.get_rank(group_name)

    def step_allreduce(self, fetch_stats: bool = True) -> dict | None:
        buffers, stats = self._local_gradients()
        if self.group is not None:
            for b in buffers:
                collective.allreduce(b, self.group, collective.ReduceOp.MEAN)
        if not fetch_stats:
            self._apply(buffers)
            return None
        if self.group is not None:
            # Loss and sample counts, summed in one small extra reduction.
            summary = np.array([stats.get("loss", 0.0), stats.get("num_samples", 0)],
                               dtype=np.float64)
            collective.allreduce(summary, self.group)
            size = collective.get_collective_group_size(self.group)
            stats = dict(stats, loss=float(summary[0] / size), num_samples=int(summary[1]))
        self._apply(buffers)
        return stats

    # --- state and access --------------------------------------------------------------

    def get_weights(self) -> list[np.ndarray]:
        return self.models[0].get_weights()

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        for model in self.models:
            model.set_weights(weights)

    def get_state(self) -> dict:
        model = self.models[0]
        getter = getattr(model, "get_optimizer_state", None)
        return {"weights": model.get_weights(),
                "optimizer": getter() if getter is not None else None}

    def set_state(self, state: dict) -> None:
        for model in self.models:
            model.set_weights(state["weights"])
            setter = getattr(model, "set_optimizer_state", None)
            if setter is not None and state.get("optimizer") is not None:
                setter(state["optimizer"])

    def foreach_model(self, fn: Callable) -> list:
        return [fn(model) for model in self.models]

    def foreach_worker(self, fn: Callable) -> Any:
        return fn(self)

    def close(self) -> None:
        if self.group is not None:
            collective.destroy_collective_group(self.group)
            self.group = None


class ParameterServerShard:
    """Averages one shard of every worker's gradients (``ps`` strategy)."""

    def ping(self) -> bool:
        return True

    def aggregate(self, *shards: np.ndarray) -> np.ndarray:
        return _average(shards)


# --- driver side ------------------------------------------------------------------------


class DistributedSGD:
    """Synchronous distributed SGD over worker actors (Ray SGD's interface).

    Args:
        model_creator: ``(worker_index, device_index) -> Model`` (see
            ``hpc_ray.sgd.Model``); each replica builds its own input pipeline.
        num_workers: worker actors, one per rank (each takes ``cpus_per_worker``).
        devices_per_worker: model replicas per worker, averaged locally first.
        gpu: give each worker ``devices_per_worker`` GPUs (default: CPUs only).
        strategy: ``"simple"`` (average on the driver), ``"ps"`` (sharded
            parameter-server actors) or ``"allreduce"`` (MPI Allreduce).
        grad_shard_bytes: the largest fused gradient buffer, in bytes.
        all_reduce_alg: accepted for compatibility; MPI picks its own algorithm.
        num_ps: parameter-server actors for ``"ps"`` (default ``num_workers``).
        cpus_per_worker: CPUs per worker (its numpy thread pool is sized to it).
        in_rank: run the ``"allreduce"`` workers inside their ranks (an hpc_ray
            extension: the Allreduce works on the gradients' own memory, but a
            crash in the model's code ends the MPI job).

    Raises:
        ValueError: an unknown strategy, a bad count, or more workers than the
            job's CPUs or GPUs (and, for ``"allreduce"``, worker ranks) can
            hold at once, or ``num_workers > 1`` in ``local_mode``.

    The ``"allreduce"`` workers are ordinary actors by default: a crash in one
    fails the step with an error, and the others' collectives fail too rather
    than hang; an exception in one ends them all and is raised. Needs
    ``num_workers`` worker ranks (``init(num_cpus=num_workers)`` or
    ``mpiexec -n num_workers+1``): a collective group has one member per rank.
    """

    def __init__(self, model_creator: Callable, num_workers: int,
                 devices_per_worker: int = 1, gpu: bool = False, strategy: str = "ps",
                 grad_shard_bytes: int = 10_000_000, all_reduce_alg: str = "simple",
                 num_ps: int | None = None, cpus_per_worker: float = 1,
                 in_rank: bool = False) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r} (valid: {list(STRATEGIES)})")
        for name, value in (("num_workers", num_workers),
                            ("devices_per_worker", devices_per_worker)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if num_ps is not None and (not isinstance(num_ps, int) or num_ps < 1):
            raise ValueError(f"num_ps must be an int >= 1, got {num_ps!r}")
        check_capacity("num_workers", num_workers, cpus_per_worker,
                       devices_per_worker if gpu else 0,
                       one_per_rank=strategy == "allreduce" and num_workers > 1)
        self.strategy = strategy
        self.num_workers = num_workers
        self.steps = 0
        options: dict[str, Any] = {"num_cpus": cpus_per_worker,
                                   "num_gpus": devices_per_worker if gpu else 0}
        if strategy == "allreduce" and in_rank:
            options["in_rank"] = True
        worker_cls = api.remote(**options)(SGDWorker)
        self.workers = [worker_cls.remote(model_creator, i, devices_per_worker,
                                          grad_shard_bytes, cpus_per_worker)
                        for i in range(num_workers)]
        self.servers: list = []
        self.group: str | None = None
        # Every replica starts from the weights of worker 0's first replica. (The ref is ready before
        # it is passed on: the head may misplace a call to a still-starting actor
        # whose argument is pending; see the issue 6 note.)
        first = self.workers[0].get_weights.remote()
        api.get(first)
        api.get([w.set_weights.remote(first) for w in self.workers])
        if strategy == "allreduce" and num_workers > 1:
            self.group = f"sgd-{uuid.uuid4().hex[:12]}"
            self._all([w.join_group.remote(num_workers, self.group) for w in self.workers])
        elif strategy == "ps":
            server_cls = api.remote(num_cpus=0)(ParameterServerShard)
            self.servers = [server_cls.remote() for _ in range(num_ps or num_workers)]
            api.get([s.ping.remote() for s in self.servers])  # started before a step
            counts = api.get([w.plan_shards.remote(len(self.servers))
                              for w in self.workers])
            self.num_shards = counts[0]

    def step(self, fetch_stats: bool = False) -> dict | None:
        """Run one synchronous step on every worker.

        Returns:
            With ``fetch_stats``, the mean ``loss`` over workers, the total
            ``num_samples`` and the models' other stats; otherwise None.
        """
        if not self.workers:
            raise RayError("this DistributedSGD cannot step: its workers were ended (by "
                           "shutdown(), or when one failed); create a new DistributedSGD")
        if self.strategy == "allreduce":
            # Every worker reduces the stats, or none does (a collective).
            stats = self._all([w.step_allreduce.remote(fetch_stats) for w in self.workers])
            merged = (None if not fetch_stats else
                      stats[0] if self.group is not None else _merge_stats(stats))
        elif self.strategy == "simple":
            merged = self._step_simple()
        else:
            merged = self._step_ps()
        self.steps += 1
        return merged if fetch_stats else None

    def _all(self, refs: list) -> list:
        """Results of the allreduce workers; the first failure ends them all."""
        if self.group is None:
            return api.get(refs)
        try:
            return gather_or_end(refs, self.workers)
        except Exception:
            self.workers, self.group = [], None
            raise

    def _step_simple(self) -> dict:
        results = api.get([w.compute_gradients.remote() for w in self.workers])
        average = [_average(parts) for parts in zip(*(buffers for buffers, _ in results))]
        ref = api.put(average)
        api.get([w.apply_fused.remote(ref) for w in self.workers])
        return _merge_stats([s for _, s in results])

    def _step_ps(self) -> dict:
        n = self.num_shards
        outs = [w.compute_gradient_shards.options(num_returns=n + 1).remote()
                for w in self.workers]
        averaged = [self.servers[j % len(self.servers)].aggregate.remote(
            *[out[j] for out in outs]) for j in range(n)]
        api.get([w.apply_shards.remote(*averaged) for w in self.workers])
        return _merge_stats(api.get([out[n] for out in outs]))

    # --- access ------------------------------------------------------------------------

    def foreach_worker(self, fn: Callable) -> list:
        """``[fn(worker) for worker in workers]``, run on each worker."""
        return api.get([w.foreach_worker.remote(fn) for w in self.workers])

    def foreach_model(self, fn: Callable) -> list:
        """``fn(model)`` for every replica on every worker, flattened in order."""
        per_worker = api.get([w.foreach_model.remote(fn) for w in self.workers])
        return [value for values in per_worker for value in values]

    def get_weights(self) -> list[np.ndarray]:
        return api.get(self.workers[0].get_weights.remote())

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        ref = api.put(list(weights))
        api.get([w.set_weights.remote(ref) for w in self.workers])

    def save(self, path: str) -> str:
        """Write worker 0's weights (and optimizer state, if the model has
        ``get_optimizer_state``) to an HDF5 checkpoint."""
        state = api.get(self.workers[0].get_state.remote())
        model = {str(i): w for i, w in enumerate(state["weights"])}
        return save_checkpoint(path, model, state["optimizer"],
                               {"steps": self.steps, "strategy": self.strategy})

    def restore(self, path: str) -> None:
        model, optimizer, meta = load_checkpoint(path)
        ref = api.put({"weights": [model[str(i)] for i in range(len(model))],
                       "optimizer": optimizer})
        api.get([w.set_state.remote(ref) for w in self.workers])
        self.steps = int(meta.get("steps", 0))

    def shutdown(self) -> None:
        """Leave the collective group and end every actor (safe to call twice)."""
        if self.workers and self.group is not None:
            api.get([w.close.remote() for w in self.workers])
        for actor in self.workers + self.servers:
            kill(actor)
        self.workers, self.servers, self.group = [], [], None


def _average(arrays) -> np.ndarray:
    """The element-wise mean of equally shaped arrays, in a new array."""
    out = np.array(arrays[0], copy=True)
    for a in arrays[1:]:
        out += a
    out /= len(arrays)
    return out
