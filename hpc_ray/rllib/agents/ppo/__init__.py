"""PPO, APPO and DD-PPO."""
from .ppo import DEFAULT_CONFIG, PPOTrainer
from .ppo_policy import PPOTorchPolicy
from .ddppo import DDPPOTrainer
from .appo import APPOTrainer

__all__ = ["APPOTrainer", "DDPPOTrainer", "PPOTrainer", "DEFAULT_CONFIG", "PPOTorchPolicy"]
