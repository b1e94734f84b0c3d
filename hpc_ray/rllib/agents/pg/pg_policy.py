"""Vanilla policy gradient in PyTorch: ``-mean(logp(a) * reward-to-go)``."""
from __future__ import annotations

from ...evaluation.postprocessing import Postprocessing, compute_advantages
from ...models.pytorch.model import from_batch
from ...policy.sample_batch import SampleBatch
from ...policy.torch_policy_template import build_torch_policy

__all__ = ["PGTorchPolicy", "pg_loss", "postprocess_advantages"]


def pg_loss(policy, batch_tensors):
    logits, _, _, _ = from_batch(policy.model, batch_tensors)
    dist = policy.dist_class(logits)
    logp = dist.logp(batch_tensors[SampleBatch.ACTIONS])
    policy.pi_err = -(logp * batch_tensors[Postprocessing.ADVANTAGES]).mean()
    return policy.pi_err


def postprocess_advantages(policy, sample_batch, other_agent_batches=None, episode=None):
    return compute_advantages(sample_batch, 0.0, policy.config["gamma"], use_gae=False)


def pg_stats(policy, batch_tensors):
    return {"policy_loss": float(policy.pi_err.item())}


PGTorchPolicy = build_torch_policy(
    name="PGTorchPolicy",
    get_default_config=lambda: __import__(
        "hpc_ray.rllib.agents.pg.pg", fromlist=["DEFAULT_CONFIG"]).DEFAULT_CONFIG,
    loss_fn=pg_loss, stats_fn=pg_stats, postprocess_fn=postprocess_advantages)
