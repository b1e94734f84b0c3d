"""Ape-X DQN: many exploring workers, sharded prioritized replay actors, one learner."""
from __future__ import annotations

import copy

from ...optimizers.async_replay import AsyncReplayOptimizer
from ..trainer_template import build_trainer
from .dqn import (DEFAULT_CONFIG as DQN_CONFIG, DQNStateMixin, DQNTrainer, add_exploration_info,
                  setup_exploration, update_target_if_needed, update_worker_explorations)

__all__ = ["ApexTrainer", "APEX_DEFAULT_CONFIG", "make_async_optimizer"]

#: What Ape-X changes in its base algorithm's config (Ape-X DDPG applies it too).
APEX_OVERRIDES = {
    "optimizer": {"max_weight_sync_delay": 400, "num_replay_buffer_shards": 4,
                  "debug": False},
    "n_step": 3,
    "num_gpus": 1,
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
}

APEX_DEFAULT_CONFIG = copy.deepcopy(DQN_CONFIG)
APEX_DEFAULT_CONFIG.update(copy.deepcopy(APEX_OVERRIDES))

_OPTIMIZER_KEYS = ("max_weight_sync_delay", "num_replay_buffer_shards", "debug")


def make_async_optimizer(workers, config: dict) -> AsyncReplayOptimizer:
    opt = dict(APEX_DEFAULT_CONFIG["optimizer"], **config["optimizer"])
    unknown = set(opt) - set(_OPTIMIZER_KEYS)
    if unknown:
        raise ValueError(f"unknown optimizer option(s) {sorted(unknown)} for Ape-X "
                         f"(known: {list(_OPTIMIZER_KEYS)})")
    if not config["prioritized_replay"]:
        raise ValueError("Ape-X replays by priority: leave prioritized_replay at True")
    return AsyncReplayOptimizer(
        workers, learning_starts=config["learning_starts"], buffer_size=config["buffer_size"],
        prioritized_replay_alpha=config["prioritized_replay_alpha"],
        prioritized_replay_beta=config["prioritized_replay_beta"],
        prioritized_replay_eps=config["prioritized_replay_eps"],
        train_batch_size=config["train_batch_size"],
        sample_batch_size=config["sample_batch_size"] * config["num_envs_per_worker"],
        seed=config["seed"], **opt)


def validate_apex_config(config: dict) -> None:
    from .dqn import validate_dqn_config
    validate_dqn_config(config)
    if config["num_workers"] < 1:
        raise ValueError("Ape-X needs num_workers >= 1 (the workers feed the replay "
                         f"shards), got {config['num_workers']!r}")
    if config["multiagent"]["policies"]:
        raise ValueError("Ape-X in hpc_ray.rllib trains one policy; use DQN for "
                         "multi-agent replay")


def _after_init(trainer) -> None:
    # Ape-X's epsilons are fixed per worker: set them once.
    update_worker_explorations(trainer)


def _before_step(trainer) -> None:
    if not trainer.config["per_worker_exploration"]:
        update_worker_explorations(trainer)


def _add_info(trainer, result: dict) -> None:
    add_exploration_info(trainer, result)


ApexTrainer = build_trainer(
    name="APEX", default_policy=DQNTrainer._policy, default_config=APEX_DEFAULT_CONFIG,
    validate_config=validate_apex_config, before_init=setup_exploration,
    make_policy_optimizer=make_async_optimizer, after_init=_after_init,
    before_train_step=_before_step, after_optimizer_step=update_target_if_needed,
    after_train_result=_add_info, mixins=[DQNStateMixin])
# Importable (and so picklable by reference, as Tune ships it) under this name.
ApexTrainer.__name__ = ApexTrainer.__qualname__ = "ApexTrainer"
