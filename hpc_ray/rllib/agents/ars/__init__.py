"""Augmented random search."""
from ..trainer import renamed_agent
from .ars import ARSTrainer, DEFAULT_CONFIG

ARSAgent = renamed_agent(ARSTrainer)

__all__ = ["ARSAgent", "ARSTrainer", "DEFAULT_CONFIG"]
