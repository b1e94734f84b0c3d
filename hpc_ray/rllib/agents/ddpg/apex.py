"""Ape-X DDPG: DDPG's policy on Ape-X's workers and sharded replay actors."""
from __future__ import annotations

import copy

from ..dqn.apex import ApexTrainer
from .ddpg import DEFAULT_CONFIG as DDPG_CONFIG, DDPGTorchPolicy, validate_ddpg_config

__all__ = ["ApexDDPGTrainer", "APEX_DDPG_DEFAULT_CONFIG"]

APEX_DDPG_DEFAULT_CONFIG = copy.deepcopy(DDPG_CONFIG)
APEX_DDPG_DEFAULT_CONFIG.update({
    "optimizer": {"max_weight_sync_delay": 400, "num_replay_buffer_shards": 4,
                  "debug": False},
    "n_step": 3,
    "num_gpus": 0,
    "num_workers": 32,
    "buffer_size": 2000000,
    "learning_starts": 50000,
    "train_batch_size": 512,
    "sample_batch_size": 50,
    "target_network_update_freq": 500000,
    "timesteps_per_iteration": 25000,
    "per_worker_exploration": True,
    "worker_side_prioritization": True,
    "min_iter_time_s": 30,
})


def _validate(config: dict) -> None:
    validate_ddpg_config(config)
    if config["num_workers"] < 1:
        raise ValueError("Ape-X DDPG needs num_workers >= 1 (the workers feed the replay "
                         f"shards), got {config['num_workers']!r}")


ApexDDPGTrainer = ApexTrainer.with_updates(
    name="APEX_DDPG", default_policy=DDPGTorchPolicy, default_config=APEX_DDPG_DEFAULT_CONFIG,
    validate_config=_validate)
ApexDDPGTrainer.__name__ = ApexDDPGTrainer.__qualname__ = "ApexDDPGTrainer"
