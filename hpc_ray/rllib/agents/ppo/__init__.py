"""PPO, APPO and DD-PPO."""
from .ppo import DEFAULT_CONFIG, PPOTrainer
from .ppo_policy import PPOTorchPolicy
from .ddppo import DDPPOTrainer

__all__ = ["DDPPOTrainer", "PPOTrainer", "DEFAULT_CONFIG", "PPOTorchPolicy"]
