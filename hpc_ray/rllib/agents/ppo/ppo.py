"""Proximal Policy Optimization (PPO): synchronous samples, epochs of minibatch SGD."""
from __future__ import annotations

import logging

from ...optimizers.multi_gpu_optimizer import LocalMultiGPUOptimizer
from ...optimizers.sync_samples import SyncSamplesOptimizer
from ..trainer import with_common_config
from ..trainer_template import build_trainer
from .ppo_policy import PPOTorchPolicy

__all__ = ["PPOTrainer", "DEFAULT_CONFIG", "choose_policy_optimizer", "update_kl",
           "validate_config", "warn_about_obs_filter", "warn_about_bad_reward_scales"]

logger = logging.getLogger(__name__)

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
    # Uses the sync samples optimizer instead of the multi-gpu one (both run
    # minibatch SGD here; the multi-gpu one averages its stats over an epoch).
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
    """0.7's: ``LocalMultiGPUOptimizer`` (minibatch SGD on the learner's device),
    or ``SyncSamplesOptimizer`` with ``simple_optimizer``."""
    if config["simple_optimizer"]:
        return SyncSamplesOptimizer(workers, num_sgd_iter=config["num_sgd_iter"],
                                    sgd_minibatch_size=config["sgd_minibatch_size"],
                                    train_batch_size=config["train_batch_size"],
                                    standardize_fields=["advantages"])
    return LocalMultiGPUOptimizer(
        workers, sgd_batch_size=config["sgd_minibatch_size"],
        num_sgd_iter=config["num_sgd_iter"], num_gpus=config["num_gpus"],
        sample_batch_size=config["sample_batch_size"],
        num_envs_per_worker=config["num_envs_per_worker"],
        train_batch_size=config["train_batch_size"], standardize_fields=["advantages"],
        straggler_mitigation=config["straggler_mitigation"])


def update_kl(trainer, fetches) -> None:
    """Adapt each policy's KL coefficient to the KL of the last update
    (``fetches``: one policy's stats, or stats by policy id)."""
    local = trainer.workers.local_worker()
    if "kl" in (fetches or {}):
        local.for_policy(lambda pi: pi.update_kl(fetches["kl"]))
        return
    for pid, stats in (fetches or {}).items():
        if isinstance(stats, dict) and "kl" in stats and pid in local.policy_map:
            local.policy_map[pid].update_kl(stats["kl"])


def warn_about_obs_filter(trainer) -> None:
    if "observation_filter" not in trainer.raw_user_config:
        logger.info("Important! Since 0.7.0, observation normalization is no longer "
                    "enabled by default. To enable running-mean normalization, set "
                    "'observation_filter': 'MeanStdFilter'. You can ignore this message "
                    "if your environment doesn't require observation normalization.")


def warn_about_bad_reward_scales(trainer, result) -> None:
    """Log a warning when rewards are far larger than ``vf_clip_param`` (0.7's)."""
    if trainer.config["vf_clip_param"] <= 0:
        rew_scale = float("inf")
    elif result.get("policy_reward_mean"):
        rew_scale = 0  # punt on the multi-agent case, as 0.7 does
    else:
        rew_scale = round(abs(result["episode_reward_mean"])
                          / trainer.config["vf_clip_param"], 0)
    if rew_scale > 200:
        logger.warning("The magnitude of your environment rewards are more than %sx the "
                       "scale of `vf_clip_param`. This means that it will take more than "
                       "%s iterations for your value function to converge. If this is not "
                       "intended, consider increasing `vf_clip_param`.", rew_scale, rew_scale)


PPOTrainer = build_trainer(
    name="PPO", default_config=DEFAULT_CONFIG, default_policy=PPOTorchPolicy,
    make_policy_optimizer=choose_policy_optimizer, validate_config=validate_config,
    after_optimizer_step=update_kl, before_train_step=warn_about_obs_filter,
    after_train_result=warn_about_bad_reward_scales)
