"""``ray.experimental.sgd.pytorch``: ``PyTorchTrainer`` and its helpers."""
from ....sgd.pytorch import *  # noqa: F401,F403
from ....sgd.pytorch import PyTorchTrainer, Resources, sgd_mse_optimizer  # noqa: F401
from . import utils  # noqa: F401,E402  (the docs' ``utils.sgd_mse_optimizer``)
