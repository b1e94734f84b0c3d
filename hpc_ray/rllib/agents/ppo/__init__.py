"""PPO, APPO and DD-PPO."""
from .ppo import DEFAULT_CONFIG, PPOTrainer
from .ppo_policy import PPOTorchPolicy

__all__ = ["PPOTrainer", "DEFAULT_CONFIG", "PPOTorchPolicy"]
