"""MARWIL (advantage re-weighted imitation learning)."""
from ..trainer import renamed_agent
from .marwil import DEFAULT_CONFIG, MARWILTrainer
from .marwil_policy import MARWILTorchPolicy

MARWILAgent = renamed_agent(MARWILTrainer)

__all__ = ["MARWILAgent", "MARWILTrainer", "DEFAULT_CONFIG", "MARWILTorchPolicy"]
