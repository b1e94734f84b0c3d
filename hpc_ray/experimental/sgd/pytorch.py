"""``ray.experimental.sgd.pytorch``: ``PyTorchTrainer`` and its helpers."""
from ...sgd.pytorch import *  # noqa: F401,F403
from ...sgd.pytorch import PyTorchTrainer, Resources, sgd_mse_optimizer  # noqa: F401
