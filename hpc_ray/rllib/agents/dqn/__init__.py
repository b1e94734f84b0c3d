"""DQN and Ape-X DQN."""
from .apex import APEX_DEFAULT_CONFIG, ApexTrainer
from .dqn import DEFAULT_CONFIG, DQNTrainer
from .dqn_policy import DQNTorchPolicy

__all__ = ["DQNTrainer", "DEFAULT_CONFIG", "DQNTorchPolicy", "ApexTrainer", "APEX_DEFAULT_CONFIG"]
