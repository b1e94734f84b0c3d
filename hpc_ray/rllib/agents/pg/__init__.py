"""Vanilla policy gradients."""
from ..trainer import renamed_agent
from .pg import DEFAULT_CONFIG, PGTrainer
from .pg_policy import PGTorchPolicy

PGAgent = renamed_agent(PGTrainer)

__all__ = ["PGAgent", "PGTrainer", "DEFAULT_CONFIG", "PGTorchPolicy"]
