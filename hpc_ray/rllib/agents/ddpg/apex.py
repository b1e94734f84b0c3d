"""Ape-X DDPG: DDPG's policy on Ape-X's workers and sharded replay actors."""
from __future__ import annotations

import copy

from ..dqn.apex import APEX_OVERRIDES, ApexTrainer
from .ddpg import DEFAULT_CONFIG as DDPG_CONFIG, DDPGTorchPolicy, validate_ddpg_config

__all__ = ["ApexDDPGTrainer", "APEX_DDPG_DEFAULT_CONFIG"]

APEX_DDPG_DEFAULT_CONFIG = copy.deepcopy(DDPG_CONFIG)
APEX_DDPG_DEFAULT_CONFIG.update(copy.deepcopy(APEX_OVERRIDES), num_gpus=0)


def _validate(config: dict) -> None:
    validate_ddpg_config(config)
    if config["num_workers"] < 1:
        raise ValueError("Ape-X DDPG needs num_workers >= 1 (the workers feed the replay "
                         f"shards), got {config['num_workers']!r}")


ApexDDPGTrainer = ApexTrainer.with_updates(
    name="APEX_DDPG", default_policy=DDPGTorchPolicy, default_config=APEX_DDPG_DEFAULT_CONFIG,
    validate_config=_validate)
ApexDDPGTrainer.__name__ = ApexDDPGTrainer.__qualname__ = "ApexDDPGTrainer"
