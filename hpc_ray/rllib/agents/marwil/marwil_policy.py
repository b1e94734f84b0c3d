"""MARWIL's loss in PyTorch: imitation weighted by exponentiated advantages.

``adv = returns - V(s)``; ``policy_loss = -mean(exp(beta * adv / sqrt(c)) * logp(a))``
with ``c`` a moving average of ``adv ** 2``; ``vf_loss = 0.5 * mean(adv ** 2)``.
With ``beta = 0`` it is plain behaviour cloning.
"""
from __future__ import annotations

import numpy as np
import torch

from ...evaluation.postprocessing import Postprocessing, compute_advantages
from ...policy.sample_batch import SampleBatch
from ...policy.torch_policy_template import build_torch_policy
from ..a3c.a3c_torch_policy import ValueNetworkMixin

__all__ = ["MARWILTorchPolicy"]


def marwil_loss(policy, t):
    cfg = policy.config
    logits, _, values, _ = policy.model({SampleBatch.CUR_OBS: t[SampleBatch.CUR_OBS]}, [])
    logp = policy.dist_class(logits).logp(t[SampleBatch.ACTIONS])
    adv = t[Postprocessing.ADVANTAGES] - values
    with torch.no_grad():
        policy.ma_adv_norm += 1e-6 * (float((adv ** 2).mean()) - policy.ma_adv_norm)
        weights = torch.exp(cfg["beta"] * adv / (1e-8 + np.sqrt(policy.ma_adv_norm)))
    policy.p_loss = -(weights * logp).mean()
    policy.v_loss = 0.5 * (adv ** 2).mean()
    return policy.p_loss + cfg["vf_coeff"] * policy.v_loss


def marwil_stats(policy, t):
    return {"policy_loss": float(policy.p_loss.detach()), "vf_loss": float(policy.v_loss.detach()),
            "moving_average_sqd_adv_norm": float(policy.ma_adv_norm)}


def postprocess_returns(policy, batch, other_agent_batches=None, episode=None):
    """Discounted returns as ``advantages`` (bootstrapped from V at a cut)."""
    done = bool(batch[SampleBatch.DONES][-1])
    last_r = 0.0 if done else policy._value(batch[SampleBatch.NEXT_OBS][-1])
    return compute_advantages(batch, last_r, policy.config["gamma"], use_gae=False)


def _setup(policy, obs_space, action_space, config):
    policy.ma_adv_norm = 100.0


class MARWILStateMixin:
    """The advantage norm's moving average is part of a checkpoint."""

    def get_state(self):
        state = super().get_state()
        state["ma_adv_norm"] = self.ma_adv_norm
        return state

    def set_state(self, state):
        super().set_state(state)
        if isinstance(state, dict) and "ma_adv_norm" in state:
            self.ma_adv_norm = state["ma_adv_norm"]


MARWILTorchPolicy = build_torch_policy(
    name="MARWILTorchPolicy",
    get_default_config=lambda: __import__(
        "hpc_ray.rllib.agents.marwil.marwil", fromlist=["DEFAULT_CONFIG"]).DEFAULT_CONFIG,
    loss_fn=marwil_loss, stats_fn=marwil_stats, postprocess_fn=postprocess_returns,
    before_init=_setup, mixins=[MARWILStateMixin, ValueNetworkMixin])
