"""Policy gradients (PG): sample synchronously, one gradient step per batch."""
from __future__ import annotations

from ..trainer import with_common_config
from ..trainer_template import build_trainer
from .pg_policy import PGTorchPolicy

__all__ = ["PGTrainer", "DEFAULT_CONFIG"]

DEFAULT_CONFIG = with_common_config({
    # No remote workers by default.
    "num_workers": 0,
    # Learning rate.
    "lr": 0.0004,
    # Use PyTorch as backend (hpc_ray.rllib: always).
    "use_pytorch": True,
})

PGTrainer = build_trainer(name="PG", default_policy=PGTorchPolicy, default_config=DEFAULT_CONFIG)
