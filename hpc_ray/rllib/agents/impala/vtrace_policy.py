"""IMPALA's V-trace actor-critic loss and APPO's clipped surrogate on V-trace advantages."""
from __future__ import annotations

import numpy as np
import torch

from ...models.pytorch.model import from_batch
from ...policy.sample_batch import SampleBatch
from ...policy.torch_policy_template import build_torch_policy
from ..a3c.a3c_torch_policy import apply_grad_clipping
from .vtrace import vtrace

__all__ = ["VTraceTorchPolicy", "APPOTorchPolicy"]


def _targets(policy, batch):
    cfg = policy.config
    logits, _, values, _ = from_batch(policy.model, batch)
    with torch.no_grad():
        _, _, next_values, _ = from_batch(policy.model, batch, next_obs=True)
    dones = batch[SampleBatch.DONES].float()
    next_values = next_values * (1.0 - dones)
    unroll = batch[SampleBatch.UNROLL_ID]
    cuts = torch.ones_like(dones)
    cuts[:-1] = (unroll[1:] != unroll[:-1]).float()
    dist = policy.dist_class(logits)
    actions = batch[SampleBatch.ACTIONS]
    logp = dist.logp(actions)
    vs, pg_adv = vtrace(batch[SampleBatch.ACTION_LOGP], logp.detach(),
                        batch[SampleBatch.REWARDS], values.detach(), next_values,
                        cfg["gamma"] * (1.0 - dones), cuts,
                        cfg["vtrace_clip_rho_threshold"], cfg["vtrace_clip_pg_rho_threshold"])
    return dist, logp, values, vs, pg_adv


def vtrace_loss(policy, batch):
    cfg = policy.config
    dist, logp, values, vs, pg_adv = _targets(policy, batch)
    policy.pi_loss = -(logp * pg_adv).sum()
    policy.vf_loss = 0.5 * ((vs - values) ** 2).sum()
    policy.entropy = dist.entropy().sum()
    return policy.pi_loss + cfg["vf_loss_coeff"] * policy.vf_loss \
        - cfg["entropy_coeff"] * policy.entropy


def appo_loss(policy, batch):
    cfg = policy.config
    dist, logp, values, vs, pg_adv = _targets(policy, batch)
    ratio = torch.exp(logp - batch[SampleBatch.ACTION_LOGP])
    clip = cfg["clip_param"]
    surrogate = torch.min(pg_adv * ratio, pg_adv * torch.clamp(ratio, 1 - clip, 1 + clip))
    policy.pi_loss = -surrogate.mean()
    policy.vf_loss = 0.5 * ((vs - values) ** 2).mean()
    policy.entropy = dist.entropy().mean()
    return policy.pi_loss + cfg["vf_loss_coeff"] * policy.vf_loss \
        - cfg["entropy_coeff"] * policy.entropy


def stats(policy, batch):
    return {"policy_loss": float(policy.pi_loss.detach()),
            "vf_loss": float(policy.vf_loss.detach()),
            "entropy": float(policy.entropy.detach())}


def optimizer(policy, config):
    if config.get("opt_type", "adam") == "rmsprop":
        return torch.optim.RMSprop(policy.model.parameters(), lr=config["lr"],
                                   alpha=config["decay"], momentum=config["momentum"],
                                   eps=config["epsilon"])
    return torch.optim.Adam(policy.model.parameters(), lr=config["lr"])


def _default_config():
    from .impala import DEFAULT_CONFIG
    return DEFAULT_CONFIG


VTraceTorchPolicy = build_torch_policy(
    name="VTraceTorchPolicy", get_default_config=_default_config, loss_fn=vtrace_loss,
    stats_fn=stats, extra_grad_process_fn=apply_grad_clipping, optimizer_fn=optimizer)

APPOTorchPolicy = VTraceTorchPolicy.with_updates(name="APPOTorchPolicy", loss_fn=appo_loss)
APPOTorchPolicy.__module__ = __name__
del np
