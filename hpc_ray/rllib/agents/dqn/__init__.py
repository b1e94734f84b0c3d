"""DQN and Ape-X DQN."""
from ..trainer import renamed_agent
from .apex import APEX_DEFAULT_CONFIG, ApexTrainer
from .dqn import DEFAULT_CONFIG, DQNTrainer
from .dqn_policy import DQNTorchPolicy

DQNAgent = renamed_agent(DQNTrainer)
ApexAgent = renamed_agent(ApexTrainer)

__all__ = ["DQNAgent", "ApexAgent", "DQNTrainer", "DEFAULT_CONFIG", "DQNTorchPolicy",
           "ApexTrainer", "APEX_DEFAULT_CONFIG"]
