"""Data-parallel training on scikit-learn's bundled digits (no download).

The digits are written to an HDF5 file; each replica reads only its own slice
of it, trains on it, and gradients are averaged with MPI allreduce after every
batch (``hpc_ray.sgd.PyTorchTrainer``; with ``--framework numpy``, or when
torch is not installed, ``hpc_ray.sgd.DistributedSGD`` with a numpy model).

    python examples/sgd_digits.py --replicas 2             # embedded: 2 worker ranks
    mpiexec -n 3 python examples/sgd_digits.py             # 2 workers + the driver
    python examples/sgd_digits.py --framework numpy --strategy ps

Prints the loss and validation accuracy per epoch; writes an HDF5 checkpoint
at the end (``--checkpoint``).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
import time

import numpy as np

import hpc_ray as ray
from hpc_ray.sgd import DistributedSGD, MLPModel, PyTorchTrainer
from hpc_ray.sgd.data import H5Dataset, write_digits_h5


def model_creator(config):
    import torch
    hidden = config.get("hidden", 64)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))


def data_creator(config):
    # Descriptions only: each replica reads its own rows when it shards them.
    return H5Dataset(config["path"], "train"), H5Dataset(config["path"], "validation")


def optimizer_creator(model, config):
    import torch
    return (torch.nn.CrossEntropyLoss(),
            torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9))


def train_torch(args, path: str, replicas: int) -> float:
    trainer = PyTorchTrainer(model_creator, data_creator, optimizer_creator,
                             config={"path": path, "lr": args.lr}, num_replicas=replicas,
                             batch_size=args.batch_size)
    for row in trainer.shards:
        print(f"replica {row['rank']}: train rows {row['train_rows']}, "
              f"validation rows {row['validation_rows']}")
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        stats = trainer.train()
        val = trainer.validate()
        accuracy = val["validation_accuracy"]
        print_epoch(epoch, stats["train_loss"], val["validation_loss"], accuracy,
                    stats["samples_per_s"])
    if args.checkpoint:
        print(f"checkpoint: {trainer.save(args.checkpoint)}")
    trainer.shutdown()
    return accuracy


def print_epoch(epoch: int, train_loss: float, validation_loss: float, accuracy: float,
                samples_per_s: float) -> None:
    """The one progress line per epoch (the tests read it)."""
    print(f"epoch {epoch:2d}  train loss {train_loss:.4f}  "
          f"validation loss {validation_loss:.4f}  accuracy {accuracy:.3f}  "
          f"({samples_per_s:.0f} samples/s)", flush=True)


class DigitsModel(MLPModel):
    """The numpy model, reading its slice of the HDF5 file."""

    def __init__(self, path: str, shard: int, shards: int, batch_size: int, lr: float):
        x, y = H5Dataset(path, "train").shard(shard, shards).arrays()
        super().__init__([64, 64, 10], x, y, batch_size=batch_size, lr=lr, seed=0,
                         data_seed=shard)
        self.validation = H5Dataset(path, "validation").arrays()

    def validate(self) -> dict:
        return self.evaluate(*self.validation)


def train_numpy(args, path: str, replicas: int) -> float:
    n_train = len(H5Dataset(path, "train"))

    def creator(worker_index, device_index):
        return DigitsModel(path, worker_index, replicas, args.batch_size, args.lr)

    sgd = DistributedSGD(creator, replicas, strategy=args.strategy)
    steps_per_epoch = max(1, n_train // (args.batch_size * replicas))
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        losses = [sgd.step(fetch_stats=True)["loss"] for _ in range(steps_per_epoch)]
        elapsed = time.perf_counter() - start
        val = sgd.foreach_model(lambda m: m.validate())[0]
        accuracy = val["accuracy"]
        print_epoch(epoch, np.mean(losses), val["loss"], accuracy,
                    steps_per_epoch * args.batch_size * replicas / elapsed)
    if args.checkpoint:
        print(f"checkpoint: {sgd.save(args.checkpoint)}")
    sgd.shutdown()
    return accuracy


def under_mpiexec() -> bool:
    from hpc_ray.launch import mpi
    return mpi().COMM_WORLD.Get_size() > 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=None,
                        help="replicas (default: 2 embedded, every worker rank under mpiexec)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per replica")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--framework", choices=("torch", "numpy"), default=None,
                        help="default: torch when installed")
    parser.add_argument("--strategy", choices=("allreduce", "ps", "simple"),
                        default="allreduce", help="numpy framework only")
    parser.add_argument("--data", default=None, help="the .h5 file (default: a temp file)")
    parser.add_argument("--checkpoint", default=None, help="write an HDF5 checkpoint here")
    args = parser.parse_args()
    framework = args.framework or ("torch" if importlib.util.find_spec("torch") else "numpy")

    if under_mpiexec():
        ray.init()
        replicas = args.replicas or int(ray.cluster_resources().get("CPU", 1))
    else:
        replicas = args.replicas or 2
        ray.init(num_cpus=replicas)

    with tempfile.TemporaryDirectory() as tmp:
        path = write_digits_h5(args.data or os.path.join(tmp, "digits.h5"))
        print(f"{framework}: {replicas} replicas, data {path}", flush=True)
        train = train_torch if framework == "torch" else train_numpy
        accuracy = train(args, path, replicas)
    print(f"final validation accuracy {accuracy:.3f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
