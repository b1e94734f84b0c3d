"""The actor-critic loss of A2C and A3C in PyTorch (Ray 0.7 ``a3c_torch_policy.py``)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from ...evaluation.postprocessing import Postprocessing, compute_advantages
from ...models.pytorch.model import from_batch
from ...policy.sample_batch import SampleBatch
from ...policy.torch_policy_template import build_torch_policy

__all__ = ["A3CTorchPolicy", "ValueNetworkMixin", "actor_critic_loss", "add_advantages",
           "model_value_predictions", "apply_grad_clipping", "torch_optimizer"]


def actor_critic_loss(policy, batch_tensors):
    logits, _, values, _ = from_batch(policy.model, batch_tensors)
    dist = policy.dist_class(logits)
    log_probs = dist.logp(batch_tensors[SampleBatch.ACTIONS])
    policy.entropy = dist.entropy().mean()
    policy.pi_err = -(batch_tensors[Postprocessing.ADVANTAGES] * log_probs).sum()
    policy.value_err = 0.5 * (values - batch_tensors[Postprocessing.VALUE_TARGETS]).pow(2).sum()
    cfg = policy.config
    return (policy.pi_err + policy.value_err * cfg["vf_loss_coeff"]
            - policy.entropy * cfg["entropy_coeff"] * len(log_probs))


def loss_and_entropy_stats(policy, batch_tensors):
    return {"policy_entropy": float(policy.entropy.item()),
            "policy_loss": float(policy.pi_err.item()),
            "vf_loss": float(policy.value_err.item())}


def add_advantages(policy, sample_batch, other_agent_batches=None, episode=None):
    if sample_batch[SampleBatch.DONES][-1]:
        last_r = 0.0
    else:  # bootstrap from V(s_T), with the RNN state and a_{T-1}, r_{T-1} there
        last = sample_batch.count - 1
        next_state = [sample_batch[f"state_out_{i}"][last]
                      for i in range(len(policy.get_initial_state()))]
        last_r = policy._value(sample_batch[SampleBatch.NEXT_OBS][last],
                               sample_batch[SampleBatch.ACTIONS][last],
                               sample_batch[SampleBatch.REWARDS][last], *next_state)
    return compute_advantages(sample_batch, last_r, policy.config["gamma"],
                              policy.config["lambda"], policy.config.get("use_gae", True))


def model_value_predictions(policy, input_dict, state_batches, model_out):
    return {SampleBatch.VF_PREDS: model_out[2].cpu().numpy()}


def apply_grad_clipping(policy):
    clip = policy.config.get("grad_clip")
    if clip:
        norm = nn.utils.clip_grad_norm_(policy.model.parameters(), clip)
        return {"grad_gnorm": float(norm)}
    return {}


def torch_optimizer(policy, config):
    return torch.optim.Adam(policy.model.parameters(), lr=config["lr"])


class ValueNetworkMixin:
    """``_value(obs, prev_action, prev_reward, *state)``: the value function of one
    observation (for bootstrapping), as Ray 0.7's."""

    def _value(self, obs, prev_action=None, prev_reward=None, *state):
        with self.lock, torch.no_grad():
            def one(x, dtype=torch.float32):
                return torch.as_tensor(np.asarray(x), dtype=dtype, device=self.device)[None]
            input_dict = {"obs": one(obs)}
            if prev_action is not None:
                input_dict[SampleBatch.PREV_ACTIONS] = one(prev_action, None)
            if prev_reward is not None:
                input_dict[SampleBatch.PREV_REWARDS] = one(prev_reward)
            _, _, vf, _ = self.model(input_dict, [one(s) for s in state])
            return float(vf.squeeze())


A3CTorchPolicy = build_torch_policy(
    name="A3CTorchPolicy",
    get_default_config=lambda: __import__(
        "hpc_ray.rllib.agents.a3c.a3c", fromlist=["DEFAULT_CONFIG"]).DEFAULT_CONFIG,
    loss_fn=actor_critic_loss, stats_fn=loss_and_entropy_stats, postprocess_fn=add_advantages,
    extra_action_out_fn=model_value_predictions, extra_grad_process_fn=apply_grad_clipping,
    optimizer_fn=torch_optimizer, mixins=[ValueNetworkMixin])
