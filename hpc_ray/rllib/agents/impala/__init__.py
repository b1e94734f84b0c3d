"""IMPALA (V-trace)."""
from .impala import DEFAULT_CONFIG, ImpalaTrainer

__all__ = ["ImpalaTrainer", "DEFAULT_CONFIG"]
