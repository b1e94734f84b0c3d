"""QMIX: monotonic value factorisation for a group of agents (also VDN)."""
from __future__ import annotations

from ...optimizers.sync_replay import SyncReplayOptimizer
from ..dqn.dqn import DQNTrainer
from ..config import refuse_use_lstm
from ..trainer import with_common_config
from .qmix_policy import QMixTorchPolicy

__all__ = ["QMixTrainer", "DEFAULT_CONFIG"]

DEFAULT_CONFIG = with_common_config({
    # === QMix ===
    # Mixing network. Either "qmix", "vdn", or None
    "mixer": "qmix",
    # Size of the mixing network embedding
    "mixing_embed_dim": 32,
    # Whether to use Double_Q learning
    "double_q": True,
    # Optimize over complete episodes by default.
    "batch_mode": "complete_episodes",
    # === Evaluation ===
    # Evaluate with epsilon=0 every `evaluation_interval` training iterations.
    "evaluation_interval": None,
    # Number of episodes to run per evaluation period.
    "evaluation_num_episodes": 10,
    # === Exploration ===
    # Max num timesteps for annealing schedules. Exploration is annealed from
    # 1.0 to exploration_fraction over this number of timesteps scaled by
    # exploration_fraction
    "schedule_max_timesteps": 100000,
    # Number of env steps to optimize for before returning
    "timesteps_per_iteration": 1000,
    # Fraction of entire training period over which the exploration rate is
    # annealed
    "exploration_fraction": 0.1,
    # Final value of random action probability
    "exploration_final_eps": 0.02,
    # Update the target network every `target_network_update_freq` steps.
    "target_network_update_freq": 500,
    # === Replay buffer ===
    # Size of the replay buffer in steps.
    "buffer_size": 10000,
    # === Optimization ===
    # Learning rate for RMSProp optimizer
    "lr": 0.0005,
    # RMSProp alpha
    "optim_alpha": 0.99,
    # RMSProp epsilon
    "optim_eps": 0.00001,
    # If not None, clip gradients during optimization at this value
    "grad_norm_clipping": 10,
    # How many steps of the model to sample before learning starts.
    "learning_starts": 1000,
    # Update the replay buffer with this many samples at once. Note that
    # this setting applies per-worker if num_workers > 1.
    "sample_batch_size": 4,
    # Size of a batched sampled from replay buffer for training. Note that
    # if async_updates is set, then each worker returns gradients for a
    # batch of this size.
    "train_batch_size": 32,
    # === Parallelism ===
    # Number of workers for collecting samples with. This only makes sense
    # to increase if your environment is particularly slow to sample, or if
    # you"re using the Async or Ape-X optimizers.
    "num_workers": 0,
    # Whether to use a distribution of epsilons across workers for exploration.
    "per_worker_exploration": False,
    # Whether to compute priorities on workers.
    "worker_side_prioritization": False,
    # Prevent iterations from going lower than this time span
    "min_iter_time_s": 1,
    # === Model ===
    "model": {
        "lstm_cell_size": 64,
        "max_seq_len": 999999,
    },
    # Use PyTorch as backend (hpc_ray.rllib: always).
    "use_pytorch": True,
})
# The model dict keeps every MODEL_DEFAULTS key, with QMIX's two set.
DEFAULT_CONFIG["model"] = dict(with_common_config({})["model"], lstm_cell_size=64,
                               max_seq_len=999999)


def validate_config(config: dict) -> None:
    refuse_use_lstm(config, "QMIX", "its agents are feed-forward networks trained on "
                    "replayed transitions")
    if config["mixer"] not in ("qmix", "vdn", None):
        raise ValueError(f"config['mixer'] must be 'qmix', 'vdn' or None, got "
                         f"{config['mixer']!r}")
    if config["train_batch_size"] > config["buffer_size"]:
        raise ValueError(f"train_batch_size ({config['train_batch_size']}) must be <= "
                         f"buffer_size ({config['buffer_size']})")


def make_optimizer(workers, config: dict) -> SyncReplayOptimizer:
    return SyncReplayOptimizer(workers, learning_starts=config["learning_starts"],
                               buffer_size=config["buffer_size"], prioritized_replay=False,
                               train_batch_size=config["train_batch_size"])


QMixTrainer = DQNTrainer.with_updates(
    name="QMIX", default_policy=QMixTorchPolicy, default_config=DEFAULT_CONFIG,
    validate_config=validate_config, make_policy_optimizer=make_optimizer)
QMixTrainer.__name__ = QMixTrainer.__qualname__ = "QMixTrainer"
