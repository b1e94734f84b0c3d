"""Vanilla policy gradients."""
from .pg import DEFAULT_CONFIG, PGTrainer
from .pg_policy import PGTorchPolicy

__all__ = ["PGTrainer", "DEFAULT_CONFIG", "PGTorchPolicy"]
