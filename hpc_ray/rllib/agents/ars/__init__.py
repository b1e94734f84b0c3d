"""Augmented random search."""
from .ars import ARSTrainer, DEFAULT_CONFIG

__all__ = ["ARSTrainer", "DEFAULT_CONFIG"]
