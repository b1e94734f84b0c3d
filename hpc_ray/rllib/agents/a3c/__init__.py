"""A2C and A3C."""
from .a3c import A2C_DEFAULT_CONFIG, A2CTrainer, A3CTrainer, DEFAULT_CONFIG
from .a3c_torch_policy import A3CTorchPolicy

__all__ = ["A2CTrainer", "A3CTrainer", "DEFAULT_CONFIG", "A2C_DEFAULT_CONFIG", "A3CTorchPolicy"]
