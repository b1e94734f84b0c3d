"""IMPALA: asynchronous sampling, a central learner with V-trace off-policy correction."""
from __future__ import annotations

from ...optimizers.async_samples import AsyncSamplesOptimizer
from ..trainer import with_common_config
from ..trainer_template import build_trainer

__all__ = ["ImpalaTrainer", "DEFAULT_CONFIG"]

DEFAULT_CONFIG = with_common_config({
    # V-trace params (see vtrace.py).
    "vtrace": True,
    "vtrace_clip_rho_threshold": 1.0,
    "vtrace_clip_pg_rho_threshold": 1.0,
    # System params.
    "sample_batch_size": 50,
    "train_batch_size": 500,
    "min_iter_time_s": 10,
    "num_workers": 2,
    "num_gpus": 0,
    # Accepted for Ray configs; one learner thread here.
    "num_data_loader_buffers": 1,
    "minibatch_buffer_size": 1,
    "num_sgd_iter": 1,
    "replay_proportion": 0.0,
    "replay_buffer_num_slots": 0,
    "learner_queue_size": 16,
    "max_sample_requests_in_flight_per_worker": 2,
    "broadcast_interval": 1,
    "grad_clip": 40.0,
    "opt_type": "adam",
    "lr": 0.0005,
    "lr_schedule": None,
    "decay": 0.99,
    "momentum": 0.0,
    "epsilon": 0.1,
    "vf_loss_coeff": 0.5,
    "entropy_coeff": 0.01,
})


def make_aggregators_and_optimizer(workers, config):
    return AsyncSamplesOptimizer(workers, train_batch_size=config["train_batch_size"],
                                 num_sgd_iter=config["num_sgd_iter"])


def validate_config(config):
    if not config["vtrace"]:
        raise ValueError("IMPALA in hpc_ray.rllib always uses V-trace; leave vtrace=True")
    if config["replay_proportion"]:
        raise ValueError("replay_proportion is not supported by hpc_ray.rllib; leave it 0")


def _policy(config):
    from .vtrace_policy import VTraceTorchPolicy
    return VTraceTorchPolicy


ImpalaTrainer = build_trainer(
    name="IMPALA", default_config=DEFAULT_CONFIG, default_policy=None,
    get_policy_class=_policy, validate_config=validate_config,
    make_policy_optimizer=make_aggregators_and_optimizer)
# Importable under the name it is exported as (pickled by reference).
ImpalaTrainer.__name__ = ImpalaTrainer.__qualname__ = "ImpalaTrainer"
