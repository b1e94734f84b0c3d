"""APPO: IMPALA's asynchronous sampling with PPO's clipped surrogate on V-trace advantages."""
from __future__ import annotations

from ..impala.impala import DEFAULT_CONFIG as IMPALA_CONFIG
from ..impala.impala import ImpalaTrainer

__all__ = ["APPOTrainer", "DEFAULT_CONFIG"]

DEFAULT_CONFIG = dict(
    IMPALA_CONFIG,
    vtrace=True, use_gae=True, lambda_=None, clip_param=0.4, lr=0.0005,
    num_sgd_iter=1, sample_batch_size=50, train_batch_size=500, min_iter_time_s=10,
    num_workers=2, num_gpus=0, opt_type="adam", grad_clip=40.0, vf_loss_coeff=0.5,
    entropy_coeff=0.01)
DEFAULT_CONFIG.pop("lambda_")
DEFAULT_CONFIG["lambda"] = 1.0
DEFAULT_CONFIG["kl_coeff"] = 0.0


def _policy(config):
    from ..impala.vtrace_policy import APPOTorchPolicy
    return APPOTorchPolicy


APPOTrainer = ImpalaTrainer.with_updates(name="APPO", default_config=DEFAULT_CONFIG,
                                         get_policy_class=_policy)
