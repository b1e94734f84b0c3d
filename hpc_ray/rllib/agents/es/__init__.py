"""Evolution strategies."""
from .es import DEFAULT_CONFIG, ESTrainer

__all__ = ["ESTrainer", "DEFAULT_CONFIG"]
