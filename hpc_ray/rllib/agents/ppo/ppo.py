"""Proximal Policy Optimization (PPO): synchronous samples, epochs of minibatch SGD."""
from __future__ import annotations

from ...optimizers.sync_samples import SyncSamplesOptimizer
from ..trainer import with_common_config
from ..trainer_template import build_trainer
from .ppo_policy import PPOTorchPolicy

__all__ = ["PPOTrainer", "DEFAULT_CONFIG"]

DEFAULT_CONFIG = with_common_config({
    # If true, use the Generalized Advantage Estimator (GAE).
    "use_gae": True,
    # GAE(lambda) parameter.
    "lambda": 1.0,
    # Initial coefficient for KL divergence.
    "kl_coeff": 0.2,
    # Size of batches collected from each worker.
    "sample_batch_size": 200,
    # Number of timesteps collected for each SGD round.
    "train_batch_size": 4000,
    # Total SGD batch size across all devices for SGD.
    "sgd_minibatch_size": 128,
    # Whether to shuffle sequences in the batch when training (recommended).
    "shuffle_sequences": True,
    # Number of SGD iterations in each outer loop.
    "num_sgd_iter": 30,
    # Stepsize of SGD.
    "lr": 5e-5,
    # Learning rate schedule (not supported: a constant lr).
    "lr_schedule": None,
    # Share layers for value function.
    "vf_share_layers": False,
    # Coefficient of the value function loss.
    "vf_loss_coeff": 1.0,
    # Coefficient of the entropy regularizer.
    "entropy_coeff": 0.0,
    # PPO clip parameter.
    "clip_param": 0.3,
    # Clip param for the value function.
    "vf_clip_param": 10.0,
    # If specified, clip the global norm of gradients by this amount.
    "grad_clip": None,
    # Target value for KL divergence.
    "kl_target": 0.01,
    # Whether to rollout "complete_episodes" or "truncate_episodes".
    "batch_mode": "truncate_episodes",
    # Which observation filter to apply to the observation.
    "observation_filter": "NoFilter",
    # Uses the sync samples optimizer instead of the multi-gpu one (always here).
    "simple_optimizer": False,
    # (Deprecated) Use the sampling behavior as of 0.6.
    "straggler_mitigation": False,
    # Use PyTorch as backend (hpc_ray.rllib: always).
    "use_pytorch": True,
})


def validate_config(config: dict) -> None:
    if config["sgd_minibatch_size"] > config["train_batch_size"]:
        raise ValueError(f"sgd_minibatch_size ({config['sgd_minibatch_size']}) must be <= "
                         f"train_batch_size ({config['train_batch_size']})")
    if config["entropy_coeff"] < 0:
        raise ValueError(f"config['entropy_coeff'] must be >= 0, got {config['entropy_coeff']!r}")
    if config["lr_schedule"]:
        raise ValueError("lr_schedule is not supported by hpc_ray.rllib; use a constant lr")
    if config["vf_share_layers"]:
        config["model"]["vf_share_layers"] = True


def choose_policy_optimizer(workers, config):
    return SyncSamplesOptimizer(workers, num_sgd_iter=config["num_sgd_iter"],
                                sgd_minibatch_size=config["sgd_minibatch_size"],
                                train_batch_size=config["train_batch_size"],
                                standardize_fields=["advantages"])


def update_kl(trainer, fetches) -> None:
    """Adapt each policy's KL coefficient to the KL of the last update."""
    for pid, stats in (fetches or {}).items():
        if "kl" in stats:
            trainer.workers.local_worker().policy_map[pid].update_kl(stats["kl"])


PPOTrainer = build_trainer(
    name="PPO", default_config=DEFAULT_CONFIG, default_policy=PPOTorchPolicy,
    make_policy_optimizer=choose_policy_optimizer, validate_config=validate_config,
    after_optimizer_step=update_kl)
