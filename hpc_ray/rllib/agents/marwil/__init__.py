"""MARWIL (advantage re-weighted imitation learning)."""
from .marwil import DEFAULT_CONFIG, MARWILTrainer
from .marwil_policy import MARWILTorchPolicy

__all__ = ["MARWILTrainer", "DEFAULT_CONFIG", "MARWILTorchPolicy"]
