"""IMPALA (V-trace)."""
from ..trainer import renamed_agent
from .impala import DEFAULT_CONFIG, ImpalaTrainer

ImpalaAgent = renamed_agent(ImpalaTrainer)

__all__ = ["ImpalaAgent", "ImpalaTrainer", "DEFAULT_CONFIG"]
