"""Distributed training on MPI ranks (Ray's ``ray.experimental.sgd``).

``PyTorchTrainer`` (in ``hpc_ray.sgd.pytorch``; imports torch only when used)
trains a PyTorch model on N replicas with fused-gradient MPI allreduce.
``DistributedSGD`` trains framework-free numpy models (``Model``) with the
"simple", "ps" (parameter servers) or "allreduce" strategy. ``data`` reads
HDF5 data sets in per-replica slices; ``checkpoint`` saves and restores HDF5
checkpoints; ``fusion`` packs gradients into few large buffers.
"""
from . import checkpoint, data, fusion
from .distributed import STRATEGIES, DistributedSGD
from .models import MLPModel, Model
from .pytorch import PyTorchTrainer, Resources, sgd_mse_optimizer

__all__ = ["DistributedSGD", "MLPModel", "Model", "PyTorchTrainer", "Resources",
           "STRATEGIES", "checkpoint", "data", "fusion", "sgd_mse_optimizer"]
