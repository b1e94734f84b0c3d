"""RLlib's algorithms: ``agents.<alg>.<Alg>Trainer`` and ``DEFAULT_CONFIG``."""
from .trainer import Trainer, with_common_config

__all__ = ["Trainer", "with_common_config"]
