"""The trainers by their documented names, registered with Tune on import."""
from __future__ import annotations

import importlib

__all__ = ["ALGORITHMS", "get_agent_class"]

#: Documented name -> (module, class).
ALGORITHMS = {
    "PG": ("hpc_ray.rllib.agents.pg", "PGTrainer"),
    "A2C": ("hpc_ray.rllib.agents.a3c", "A2CTrainer"),
    "A3C": ("hpc_ray.rllib.agents.a3c", "A3CTrainer"),
    "PPO": ("hpc_ray.rllib.agents.ppo", "PPOTrainer"),
    "APPO": ("hpc_ray.rllib.agents.ppo.appo", "APPOTrainer"),
    "DDPPO": ("hpc_ray.rllib.agents.ppo.ddppo", "DDPPOTrainer"),
    "IMPALA": ("hpc_ray.rllib.agents.impala", "ImpalaTrainer"),
    "ES": ("hpc_ray.rllib.agents.es", "ESTrainer"),
    "ARS": ("hpc_ray.rllib.agents.ars", "ARSTrainer"),
    "DQN": ("hpc_ray.rllib.agents.dqn", "DQNTrainer"),
    "APEX": ("hpc_ray.rllib.agents.dqn", "ApexTrainer"),
    "DDPG": ("hpc_ray.rllib.agents.ddpg", "DDPGTrainer"),
    "TD3": ("hpc_ray.rllib.agents.ddpg", "TD3Trainer"),
    "APEX_DDPG": ("hpc_ray.rllib.agents.ddpg", "ApexDDPGTrainer"),
    "QMIX": ("hpc_ray.rllib.agents.qmix", "QMixTrainer"),
    "MARWIL": ("hpc_ray.rllib.agents.marwil", "MARWILTrainer"),
}

#: Ray 0.7 algorithms that hpc_ray.rllib does not have.
MISSING = ("SAC", "APEX_QMIX", "MADDPG")


def get_agent_class(alg: str) -> type:
    """The trainer class registered as ``alg`` ("PPO", "A3C"...).

    Raises:
        ValueError: an unknown name (the known ones are listed).
    """
    if alg in ALGORITHMS:
        module, name = ALGORITHMS[alg]
        return getattr(importlib.import_module(module), name)
    if alg in MISSING:
        raise ValueError(f"{alg} is a Ray 0.7 algorithm that hpc_ray.rllib does not implement "
                         f"(available: {sorted(ALGORITHMS)})")
    raise ValueError(f"unknown algorithm {alg!r} (available: {sorted(ALGORITHMS)})")
