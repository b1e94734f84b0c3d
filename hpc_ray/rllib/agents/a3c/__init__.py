"""A2C and A3C."""
from ..trainer import renamed_agent
from .a3c import A2C_DEFAULT_CONFIG, A2CTrainer, A3CTrainer, DEFAULT_CONFIG
from .a3c_torch_policy import A3CTorchPolicy

A2CAgent = renamed_agent(A2CTrainer)
A3CAgent = renamed_agent(A3CTrainer)

__all__ = ["A2CAgent", "A3CAgent", "A2CTrainer", "A3CTrainer", "DEFAULT_CONFIG",
           "A2C_DEFAULT_CONFIG", "A3CTorchPolicy"]
