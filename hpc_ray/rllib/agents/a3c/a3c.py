"""A3C (asynchronous gradients) and A2C (synchronous samples) (Ray 0.7 ``agents/a3c``)."""
from __future__ import annotations

from ...optimizers.async_gradients import AsyncGradientsOptimizer
from ...optimizers.sync_samples import SyncSamplesOptimizer
from ..trainer import with_common_config
from ..trainer_template import build_trainer
from .a3c_torch_policy import A3CTorchPolicy

__all__ = ["A3CTrainer", "A2CTrainer", "DEFAULT_CONFIG", "A2C_DEFAULT_CONFIG"]

DEFAULT_CONFIG = with_common_config({
    # Should use a critic as a baseline (otherwise don't use value baseline;
    # required for using GAE).
    "use_critic": True,
    # If true, use the Generalized Advantage Estimator (GAE).
    "use_gae": True,
    # GAE(lambda) parameter.
    "lambda": 1.0,
    # Max global norm for each gradient calculated by worker.
    "grad_clip": 40.0,
    # Learning rate.
    "lr": 0.0001,
    # Learning rate schedule (not supported: a constant lr).
    "lr_schedule": None,
    # Value Function Loss coefficient.
    "vf_loss_coeff": 0.5,
    # Entropy coefficient.
    "entropy_coeff": 0.01,
    # Min time per iteration.
    "min_iter_time_s": 5,
    # Workers sample async (not supported here: sampling is synchronous per worker).
    "sample_async": False,
    # Size of rollout batch.
    "sample_batch_size": 10,
    # Use PyTorch as backend (hpc_ray.rllib: always).
    "use_pytorch": True,
})

A2C_DEFAULT_CONFIG = dict(DEFAULT_CONFIG, sample_batch_size=20, min_iter_time_s=10,
                          sample_async=False)


def _validate(config: dict) -> None:
    if config["entropy_coeff"] < 0:
        raise ValueError(f"config['entropy_coeff'] must be >= 0, got {config['entropy_coeff']!r}")
    if config["lr_schedule"]:
        raise ValueError("lr_schedule is not supported by hpc_ray.rllib; use a constant lr")


def _make_async_optimizer(workers, config):
    return AsyncGradientsOptimizer(workers, **config["optimizer"])


def _make_sync_optimizer(workers, config):
    return SyncSamplesOptimizer(workers, train_batch_size=config["train_batch_size"])


A3CTrainer = build_trainer(
    name="A3C", default_policy=A3CTorchPolicy, default_config=DEFAULT_CONFIG,
    validate_config=_validate, make_policy_optimizer=_make_async_optimizer)

A2CTrainer = A3CTrainer.with_updates(
    name="A2C", default_config=A2C_DEFAULT_CONFIG, make_policy_optimizer=_make_sync_optimizer)
