"""DDPG, TD3 and Ape-X DDPG."""
from ..trainer import renamed_agent
from .apex import APEX_DDPG_DEFAULT_CONFIG, ApexDDPGTrainer
from .ddpg import DEFAULT_CONFIG, DDPGTrainer
from .ddpg_policy import DDPGTorchPolicy
from .td3 import TD3_DEFAULT_CONFIG, TD3Trainer

DDPGAgent = renamed_agent(DDPGTrainer)
ApexDDPGAgent = renamed_agent(ApexDDPGTrainer)

__all__ = ["DDPGAgent", "ApexDDPGAgent", "DDPGTrainer", "DEFAULT_CONFIG", "DDPGTorchPolicy",
           "TD3Trainer", "TD3_DEFAULT_CONFIG", "ApexDDPGTrainer", "APEX_DDPG_DEFAULT_CONFIG"]
