"""DQN and Ape-X DQN."""
from .dqn import DEFAULT_CONFIG, DQNTrainer
from .dqn_policy import DQNTorchPolicy

__all__ = ["DQNTrainer", "DEFAULT_CONFIG", "DQNTorchPolicy"]
