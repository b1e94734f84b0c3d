"""Data-parallel PyTorch training over MPI allreduce (Ray's ``PyTorchTrainer``).

    driver: PyTorchTrainer ── creates N ──▶ PyTorchRunner actors (one per rank)
            setup(rank, N, group):  join the collective group, shard the data,
                                    broadcast replica 0's weights (fused buffers)
            train():   every runner, every batch:
                         forward, backward ─▶ gradients land in fused buffers
                         ─▶ MPI Allreduce(MEAN) per buffer, in place ─▶ optimizer.step
            validate(): local sums ─▶ one Allreduce ─▶ global loss and accuracy
            save/restore: replica 0's state ─▶ driver ─▶ HDF5 (hpc_ray.sgd.checkpoint)

Each parameter's ``.grad`` is a view into a fused buffer (``FusionPlan``),
which ``backward`` accumulates into (``zero_grad(set_to_none=False)`` keeps the
views), and the allreduce works on those buffers: runners are ordinary actors
by default, whose rank copies each buffer straight from the runner's memory,
reduces it and copies it back (``hpc_ray.runtime.collective_buffers``); with
``in_rank=True`` runners live inside their worker ranks and MPI works on the
buffers themselves, at the price that a crash in the model's code ends the MPI
job. If something replaces a ``.grad`` tensor, that step falls back to packing
copies.

Every replica applies the same averaged gradients to the same starting
weights, so the parameters stay identical on all replicas (BatchNorm running
statistics, which are not gradients, stay per replica, as in Horovod).
"""
from __future__ import annotations

import collections
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .. import api, collective
from ..actors import kill
from ..exceptions import RayError
from .checkpoint import load_checkpoint, save_checkpoint
from .distributed import check_capacity, gather_or_end, limit_threads
from .fusion import DEFAULT_FUSION_BYTES, FusionPlan, shard_bounds

if TYPE_CHECKING:
    import torch

__all__ = ["PyTorchRunner", "PyTorchTrainer", "Resources", "sgd_mse_optimizer"]

#: The backends a trainer accepts; each means MPI allreduce of CPU tensors ("gloo",
#: Ray 0.7's CPU backend, is accepted under its name; there is no GPU path).
BACKENDS = ("auto", "mpi", "gloo")


class Resources(collections.namedtuple("Resources", ["num_cpus", "num_gpus", "resources"],
                                       defaults=(1, 0, None))):
    """What each replica reserves (Ray Tune's ``Resources``, the fields used here)."""


def sgd_mse_optimizer(model: "torch.nn.Module", config: dict):
    """The default ``optimizer_creator``: MSE loss and SGD with ``config["lr"]``."""
    import torch
    return (torch.nn.MSELoss(),
            torch.optim.SGD(model.parameters(), lr=config.get("lr", 1e-4)))


# --- tensors <-> numpy ---------------------------------------------------------------


def _to_numpy(tree: Any) -> Any:
    import torch
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu().numpy().copy()
    if isinstance(tree, dict):
        return {k: _to_numpy(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to_numpy(v) for v in tree)
    return tree


def _to_torch(tree: Any) -> Any:
    import torch
    if isinstance(tree, (np.ndarray, np.generic)):
        return torch.from_numpy(np.array(tree))
    if isinstance(tree, dict):
        return {k: _to_torch(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to_torch(v) for v in tree)
    return tree


# --- the replica -----------------------------------------------------------------------


class _Shard:
    """A contiguous slice of an arbitrary map-style dataset (``DistributedSampler``
    with blocks instead of strides)."""

    def __init__(self, dataset, rank: int, world_size: int) -> None:
        start, stop = shard_bounds(len(dataset), world_size)[rank]
        self.dataset = dataset
        self.indices = range(start, stop)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        return self.dataset[self.indices[i]]


def _shard(dataset, rank: int, world_size: int):
    if hasattr(dataset, "shard"):
        return dataset.shard(rank, world_size)
    return _Shard(dataset, rank, world_size)


class PyTorchRunner:
    """One replica: model, optimizer, its data shard, fused gradient buffers."""

    def __init__(self, model_creator: Callable, data_creator: Callable,
                 optimizer_creator: Callable, config: dict, batch_size: int,
                 num_cpus: float, fusion_bytes: int) -> None:
        import torch
        limit_threads(num_cpus)
        torch.set_num_threads(max(1, int(num_cpus or 1)))
        self.config = config
        self.batch_size = batch_size
        self.fusion_bytes = fusion_bytes
        self.seed = int(config.get("seed", 0))
        torch.manual_seed(self.seed)
        self.model = model_creator(config)
        self.criterion, self.optimizer = optimizer_creator(self.model, config)
        self.train_set, self.validation_set = data_creator(config)
        self.rank, self.world_size, self.group = 0, 1, None
        self.epoch = 0
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.plan = FusionPlan.for_arrays([p.detach().numpy() for p in self.params],
                                          threshold_bytes=fusion_bytes)
        # Each .grad becomes a view of its slot in a fused buffer.
        self._grad_ptrs = []
        for p, view in zip(self.params, self.plan.split()):
            p.grad = torch.from_numpy(view)
            self._grad_ptrs.append(p.grad.data_ptr())
        self.copied_steps = 0   # steps that needed the copying fallback

    def setup(self, rank: int, world_size: int, group: str | None) -> dict:
        """Join the group, take this replica's shard, start from replica 0's weights."""
        self.rank, self.world_size, self.group = rank, world_size, group
        if group is not None:
            collective.init_collective_group(world_size, rank, group_name=group)
            self._broadcast_state()
        self.train_data = _shard(self.train_set, rank, world_size)
        self.validation_data = _shard(self.validation_set, rank, world_size)
        return self.shard_info()

    def _broadcast_state(self) -> None:
        tensors = list(self.model.state_dict().values())
        arrays = [t.numpy() for t in tensors]   # views: state_dict tensors share memory
        plan = FusionPlan.for_arrays(arrays, threshold_bytes=self.fusion_bytes)
        for buf in plan.pack(arrays):
            collective.broadcast(buf, 0, self.group)
        plan.unpack(arrays)

    def shard_info(self) -> dict:
        def rows(data):
            idx = getattr(data, "indices", range(len(data)))
            return [idx.start, idx.stop] if isinstance(idx, range) else list(idx)
        return {"rank": self.rank, "train_samples": len(self.train_data),
                "train_rows": rows(self.train_data),
                "validation_rows": rows(self.validation_data),
                "train_reads": list(getattr(self.train_data, "reads", [])),
                "validation_reads": list(getattr(self.validation_data, "reads", []))}

    # --- batches ------------------------------------------------------------------------

    def _batches(self, data, shuffle: bool, total: int | None = None):
        """Batches of ``data``; with ``total`` more than its length, its samples
        again from the first of its order on, up to ``total`` (the padding of
        torch's DistributedSampler)."""
        import torch
        n = len(data)
        if hasattr(data, "arrays"):
            x, y = data.arrays()[:2]
            order = (np.random.default_rng((self.seed, self.epoch, self.rank)).permutation(n)
                     if shuffle else np.arange(n))
            if total is not None and total > n:
                order = np.resize(order, total)
            for start in range(0, len(order), self.batch_size):
                idx = order[start:start + self.batch_size]
                yield torch.from_numpy(x[idx]), torch.from_numpy(y[idx])
            return
        gen = torch.Generator()
        gen.manual_seed(self.seed * 1_000_003 + self.epoch * 1009 + self.rank)
        if total is not None and total > n:
            order = torch.randperm(n, generator=gen).tolist() if shuffle else list(range(n))
            order = (order * -(-total // n))[:total]
            yield from torch.utils.data.DataLoader(data, batch_size=self.batch_size,
                                                   sampler=order)
            return
        loader = torch.utils.data.DataLoader(data, batch_size=self.batch_size,
                                             shuffle=shuffle, generator=gen)
        yield from loader

    def _agree(self, values: list[float], op: str = "sum") -> np.ndarray:
        arr = np.asarray(values, dtype=np.float64)
        if self.group is not None:
            collective.allreduce(arr, self.group, op)
        return arr

    # --- training -----------------------------------------------------------------------

    def _allreduce_gradients(self) -> None:
        if all(p.grad is not None and p.grad.data_ptr() == ptr
               for p, ptr in zip(self.params, self._grad_ptrs)):
            for buf in self.plan.buffers:
                collective.allreduce(buf, self.group, collective.ReduceOp.MEAN)
            return
        # Something replaced a .grad (or set it to None): pack, reduce, unpack.
        import torch
        self.copied_steps += 1
        grads = []
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad.numpy())
        buffers = self.plan.pack(grads)
        for buf in buffers:
            collective.allreduce(buf, self.group, collective.ReduceOp.MEAN)
        self.plan.unpack(grads)

    def step(self) -> dict:
        """One epoch over this replica's shard; the stats are global averages."""
        start = time.perf_counter()
        self.model.train()
        # Every replica must take the same number of steps, or an allreduce would
        # wait forever: a shorter shard is padded with its own samples to the
        # largest one's size, as torch's DistributedSampler pads (the trainer
        # refuses an empty shard).
        total = int(-self._agree([-len(self.train_data)], "min")[0])
        steps = -(-total // self.batch_size)
        loss_sum, samples = 0.0, 0
        for x, y in self._batches(self.train_data, True, total):
            self.optimizer.zero_grad(set_to_none=False)
            loss = self.criterion(self.model(x), y)
            loss.backward()
            if self.group is not None:
                self._allreduce_gradients()
            self.optimizer.step()
            loss_sum += float(loss.detach()) * len(x)
            samples += len(x)
        total_loss, total_samples = self._agree([loss_sum, samples])
        self.epoch += 1
        elapsed = time.perf_counter() - start
        return {"train_loss": float(total_loss / max(total_samples, 1)),
                "epoch": self.epoch, "num_steps": steps, "num_samples": int(total_samples),
                "time_this_epoch_s": elapsed,
                "samples_per_s": float(total_samples / elapsed) if elapsed > 0 else 0.0,
                "batch_processing_ms": 1000 * elapsed / max(steps, 1)}

    def validate(self) -> dict:
        import torch
        self.model.eval()
        loss_sum, correct, samples = 0.0, 0, 0
        with torch.no_grad():
            for x, y in self._batches(self.validation_data, shuffle=False):
                out = self.model(x)
                loss_sum += float(self.criterion(out, y)) * len(x)
                if out.dim() == 2 and y.dim() == 1 and not y.is_floating_point():
                    correct += int((out.argmax(dim=1) == y).sum())
                samples += len(x)
        total_loss, total_correct, total = self._agree([loss_sum, correct, samples])
        return {"validation_loss": float(total_loss / max(total, 1)),
                "validation_accuracy": float(total_correct / max(total, 1)),
                "num_samples": int(total)}

    # --- state ---------------------------------------------------------------------------

    def get_state(self) -> dict:
        return {"model": _to_numpy(self.model.state_dict()),
                "optimizer": _to_numpy(self.optimizer.state_dict()),
                "epoch": self.epoch}

    def set_state(self, state: dict) -> None:
        self.model.load_state_dict(_to_torch(state["model"]))
        if state.get("optimizer") is not None:
            self.optimizer.load_state_dict(_to_torch(state["optimizer"]))
        self.epoch = int(state.get("epoch", 0))

    def get_weights(self) -> dict[str, np.ndarray]:
        return {name: p.detach().numpy().copy()
                for name, p in self.model.named_parameters()}

    def apply(self, fn: Callable) -> Any:
        return fn(self)

    def shutdown(self) -> None:
        if self.group is not None:
            collective.destroy_collective_group(self.group)
            self.group = None


# --- the driver's object ---------------------------------------------------------------


class PyTorchTrainer:
    """Train a PyTorch model on ``num_replicas`` MPI ranks with allreduce.

    Args:
        model_creator: ``config -> torch.nn.Module``.
        data_creator: ``config -> (train_set, validation_set)``: map-style
            datasets. Each replica trains and validates on its own contiguous
            slice; a dataset with a ``shard(rank, world_size)`` method (such as
            ``hpc_ray.sgd.data.H5Dataset``) makes the slice itself, reading
            only those rows.
        optimizer_creator: ``(model, config) -> (loss, optimizer)``.
        config: passed to the three creators (``seed`` seeds data order).
        num_replicas: replicas, one per worker rank: with N replicas, start
            ``init(num_cpus=N)`` or ``mpiexec -n N+1``.
        resources_per_replica: ``Resources(num_cpus=1)`` by default; its CPUs
            also size the replica's torch thread pool.
        batch_size: the batch of each replica per step.
        backend: "auto", "mpi" or "gloo" (the same thing here).
        use_gpu: Ray 0.7.2's flag; only False is possible here (the replicas
            train on CPU). A bool in ``resources_per_replica``'s place is
            taken as this flag, as 0.7.2 passes it there.
        fusion_bytes: the largest fused gradient buffer (an hpc_ray addition).
        in_rank: run the replicas inside their worker ranks (an hpc_ray
            extension; see below).

    Raises:
        ValueError: an unknown backend, a bad count, ``use_gpu=True``, or
            more replicas than the job's CPUs (or GPUs) can hold at once
            (they would wait for each other forever), or ``num_replicas > 1``
            in ``local_mode``.

    Replicas are ordinary actors: a crash in one fails that call with an
    error. With several replicas, an exception or crash in one during
    ``train``, ``validate``, ``apply_all_replicas`` or the set-up ends them all
    (the others wait for it in an allreduce) and is raised; the trainer's
    methods then raise ``RayError``. With ``in_rank=True`` they live inside
    their ranks, where MPI needs no copy of the gradients; an exception in the
    model's code is returned as usual, but a crash (segfault, ``os._exit``) in
    it ends the job.
    """

    def __init__(self, model_creator: Callable, data_creator: Callable,
                 optimizer_creator: Callable = sgd_mse_optimizer, config: dict | None = None,
                 num_replicas: int = 1, resources_per_replica: Any = None,
                 batch_size: int = 16, backend: str = "auto",
                 fusion_bytes: int = DEFAULT_FUSION_BYTES, in_rank: bool = False,
                 use_gpu: bool = False) -> None:
        if isinstance(resources_per_replica, bool):
            use_gpu, resources_per_replica = resources_per_replica, None
        if use_gpu or backend == "nccl":
            raise ValueError(f"{'use_gpu=True' if use_gpu else 'backend=nccl'}: PyTorchTrainer "
                             f"trains on CPU here (MPI allreduce of CPU tensors, no GPU "
                             f"path); leave use_gpu=False and backend='auto'")
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r} (valid: {list(BACKENDS)})")
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be an int >= 1, got {num_replicas!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.model_creator = model_creator
        self.config = dict(config or {})
        self.num_replicas = num_replicas
        self.batch_size = batch_size
        self.backend = "mpi"
        res = _resources(resources_per_replica)
        check_capacity("num_replicas", num_replicas, res.num_cpus, res.num_gpus,
                       one_per_rank=num_replicas > 1)
        options: dict[str, Any] = {"num_cpus": res.num_cpus, "num_gpus": res.num_gpus,
                                   "in_rank": in_rank}
        if res.resources:
            options["resources"] = dict(res.resources)
        runner_cls = api.remote(**options)(PyTorchRunner)
        self.workers = [runner_cls.remote(model_creator, data_creator, optimizer_creator,
                                          self.config, batch_size, res.num_cpus,
                                          fusion_bytes)
                        for _ in range(num_replicas)]
        self.group = f"torch-{uuid.uuid4().hex[:12]}" if num_replicas > 1 else None
        self.failure: str | None = None
        self.shards = self._all([w.setup.remote(i, num_replicas, self.group)
                                 for i, w in enumerate(self.workers)])
        sizes = [info["train_samples"] for info in self.shards]
        if 0 in sizes:
            self.shutdown()
            raise ValueError(f"the training set has {sum(sizes)} samples, fewer than "
                             f"num_replicas={num_replicas}: each replica needs one at least")

    def _replicas(self) -> list:
        if not self.workers:
            why = (f"its replicas were ended when one failed ({self.failure})"
                   if self.failure else "it was shut down")
            raise RayError(f"this PyTorchTrainer cannot be used: {why}; create a new "
                           f"PyTorchTrainer")
        return self.workers

    def _all(self, refs: list) -> list:
        """Every replica's result, in order; with several replicas the first to
        fail ends them all (``gather_or_end``) and its error is raised."""
        if self.group is None:
            return api.get(list(refs))
        try:
            return gather_or_end(refs, self.workers)
        except Exception as err:
            self.failure = f"{type(err).__name__}: {str(err).splitlines()[0]}"
            self.workers = []
            raise

    def train(self) -> dict:
        """One epoch on every replica; ``train_loss`` is the mean over all samples."""
        return self._all([w.step.remote() for w in self._replicas()])[0]

    def validate(self) -> dict:
        """``validation_loss`` and ``validation_accuracy`` over the whole validation set."""
        return self._all([w.validate.remote() for w in self._replicas()])[0]

    def get_model(self) -> "torch.nn.Module":
        """A new model (on the driver) with replica 0's trained weights."""
        model = self.model_creator(self.config)
        state = api.get(self._replicas()[0].get_state.remote())
        model.load_state_dict(_to_torch(state["model"]))
        return model

    def save(self, checkpoint: str) -> str:
        """Write model and optimizer state to an HDF5 file; returns its path."""
        state = api.get(self._replicas()[0].get_state.remote())
        return save_checkpoint(checkpoint, state["model"], state["optimizer"],
                               {"epoch": state["epoch"], "num_replicas": self.num_replicas,
                                "batch_size": self.batch_size})

    def restore(self, checkpoint: str) -> None:
        """Load a checkpoint written by ``save`` into every replica."""
        model, optimizer, meta = load_checkpoint(checkpoint)
        ref = api.put({"model": model, "optimizer": optimizer,
                       "epoch": meta.get("epoch", 0)})
        api.get([w.set_state.remote(ref) for w in self._replicas()])

    def apply_all_replicas(self, fn: Callable) -> list:
        """``fn(runner)`` on every replica (a ``PyTorchRunner``), in replica order."""
        return self._all([w.apply.remote(fn) for w in self._replicas()])

    def get_replica_weights(self) -> list[dict[str, np.ndarray]]:
        """Every replica's parameters (to check that they agree)."""
        return api.get([w.get_weights.remote() for w in self._replicas()])

    def shutdown(self) -> None:
        """Leave the group and end the replicas (safe to call twice)."""
        if not self.workers:
            return
        api.get([w.shutdown.remote() for w in self.workers])
        for w in self.workers:
            kill(w)
        self.workers = []


def _resources(spec: Any) -> Resources:
    if spec is None:
        return Resources()
    if isinstance(spec, dict):
        unknown = set(spec) - set(Resources._fields)
        if unknown:
            raise ValueError(f"unknown resources_per_replica keys {sorted(unknown)} "
                             f"(valid: {list(Resources._fields)})")
        return Resources(**spec)
    if all(hasattr(spec, f) for f in ("num_cpus", "num_gpus")):
        return Resources(spec.num_cpus, spec.num_gpus,
                         getattr(spec, "resources", None) or getattr(spec, "custom_resources",
                                                                     None))
    if all(hasattr(spec, f) for f in ("cpu", "gpu")):   # Tune's Resources(cpu=, gpu=)
        return Resources(spec.cpu, spec.gpu, getattr(spec, "custom_resources", None))
    raise TypeError(f"resources_per_replica must be a Resources(num_cpus=, num_gpus=) of "
                    f"hpc_ray.sgd, Tune's Resources(cpu=, gpu=) or a dict, got "
                    f"{type(spec).__name__}")
