"""MARWIL: advantage re-weighted imitation learning from offline data."""
from __future__ import annotations

from ...optimizers.sync_batch_replay import SyncBatchReplayOptimizer
from ..config import refuse_use_lstm
from ..trainer import with_common_config
from ..trainer_template import build_trainer
from .marwil_policy import MARWILTorchPolicy

__all__ = ["MARWILTrainer", "DEFAULT_CONFIG"]

DEFAULT_CONFIG = with_common_config({
    # You should override this to point to an offline dataset (see agent.py).
    "input": "sampler",
    # Use importance sampling estimators for reward
    "input_evaluation": ["is", "wis"],
    # Scaling of advantages in exponential terms
    # When beta is 0, MARWIL is reduced to imitation learning
    "beta": 1.0,
    # Balancing value estimation loss and policy optimization loss
    "vf_coeff": 1.0,
    # Whether to calculate cumulative rewards
    "postprocess_inputs": True,
    # Whether to rollout "complete_episodes" or "truncate_episodes"
    "batch_mode": "complete_episodes",
    # Learning rate for adam optimizer
    "lr": 1e-4,
    # Number of timesteps collected for each SGD round
    "train_batch_size": 2000,
    # Number of steps max to keep in the batch replay buffer
    "replay_buffer_size": 100000,
    # Number of steps to read before learning starts
    "learning_starts": 0,
    # === Parallelism ===
    "num_workers": 0,
    # Use PyTorch as backend (hpc_ray.rllib: always).
    "use_pytorch": True,
})


def validate_config(config: dict) -> None:
    refuse_use_lstm(config, "MARWIL", "it learns from replayed single steps of offline data")
    if config["beta"] < 0:
        raise ValueError(f"config['beta'] must be >= 0 (0: imitation learning), got "
                         f"{config['beta']!r}")
    if type(config["replay_buffer_size"]) is not int or config["replay_buffer_size"] < 1:
        raise ValueError(f"config['replay_buffer_size'] must be an int >= 1, got "
                         f"{config['replay_buffer_size']!r}")


def make_optimizer(workers, config: dict) -> SyncBatchReplayOptimizer:
    return SyncBatchReplayOptimizer(workers, learning_starts=config["learning_starts"],
                                    buffer_size=config["replay_buffer_size"],
                                    train_batch_size=config["train_batch_size"])


MARWILTrainer = build_trainer(
    name="MARWIL", default_config=DEFAULT_CONFIG, default_policy=MARWILTorchPolicy,
    validate_config=validate_config, make_policy_optimizer=make_optimizer)
