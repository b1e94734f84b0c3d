"""PPO, APPO and DD-PPO."""
from ..trainer import renamed_agent
from .ppo import DEFAULT_CONFIG, PPOTrainer
from .ppo_policy import PPOTorchPolicy
from .ddppo import DDPPOTrainer
from .appo import APPOTrainer

PPOAgent = renamed_agent(PPOTrainer)
APPOAgent = renamed_agent(APPOTrainer)

__all__ = ["PPOAgent", "APPOAgent", "APPOTrainer", "DDPPOTrainer", "PPOTrainer", "DEFAULT_CONFIG",
           "PPOTorchPolicy"]
