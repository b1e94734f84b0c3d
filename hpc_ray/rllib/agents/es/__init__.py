"""Evolution strategies."""
from ..trainer import renamed_agent
from .es import DEFAULT_CONFIG, ESTrainer

ESAgent = renamed_agent(ESTrainer)

__all__ = ["ESAgent", "ESTrainer", "DEFAULT_CONFIG"]
