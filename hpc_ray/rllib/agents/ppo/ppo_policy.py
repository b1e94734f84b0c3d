"""PPO's clipped surrogate loss with an adaptive KL penalty, in PyTorch.

One place to read PPO (as CleanRL's ``ppo.py``): acting records the value
estimate, the action's log-probability and the logits; postprocessing adds GAE
advantages; the loss below; after each train batch the KL coefficient adapts.
"""
from __future__ import annotations

import torch

from ...evaluation.postprocessing import Postprocessing
from ...models.pytorch.model import from_batch
from ...policy.sample_batch import SampleBatch
from ...policy.torch_policy_template import build_torch_policy
from ..a3c.a3c_torch_policy import ValueNetworkMixin, add_advantages, apply_grad_clipping

__all__ = ["PPOTorchPolicy", "ppo_surrogate_loss", "KLCoeffMixin"]


def ppo_surrogate_loss(policy, batch_tensors):
    cfg = policy.config
    logits, _, values, _ = from_batch(policy.model, batch_tensors)
    dist = policy.dist_class(logits)
    prev_dist = policy.dist_class(batch_tensors[SampleBatch.BEHAVIOUR_LOGITS])
    actions = batch_tensors[SampleBatch.ACTIONS]
    adv = batch_tensors[Postprocessing.ADVANTAGES]

    ratio = torch.exp(dist.logp(actions) - batch_tensors[SampleBatch.ACTION_LOGP])
    surrogate = torch.min(adv * ratio,
                          adv * torch.clamp(ratio, 1 - cfg["clip_param"], 1 + cfg["clip_param"]))
    kl = prev_dist.kl(dist).mean()
    entropy = dist.entropy().mean()

    targets = batch_tensors[Postprocessing.VALUE_TARGETS]
    if cfg["use_gae"]:
        prev_v = batch_tensors[SampleBatch.VF_PREDS]
        v_clipped = prev_v + torch.clamp(values - prev_v, -cfg["vf_clip_param"],
                                         cfg["vf_clip_param"])
        vf_loss = torch.max((values - targets) ** 2, (v_clipped - targets) ** 2).mean()
    else:
        vf_loss = values.new_zeros(())

    loss = (-surrogate.mean() + policy.kl_coeff * kl + cfg["vf_loss_coeff"] * vf_loss
            - cfg["entropy_coeff"] * entropy)
    policy.stats = {"policy_loss": -surrogate.mean(), "vf_loss": vf_loss, "kl": kl,
                    "entropy": entropy, "total_loss": loss}
    return loss


def ppo_stats(policy, batch_tensors):
    out = {k: float(v.detach()) for k, v in policy.stats.items()}
    out["cur_kl_coeff"] = float(policy.kl_coeff)
    out["cur_lr"] = float(policy.config["lr"])
    return out


def ppo_action_out(policy, input_dict, state_batches, model_out):
    logits, _, values, _ = model_out
    return {SampleBatch.VF_PREDS: values.cpu().numpy(),
            SampleBatch.BEHAVIOUR_LOGITS: logits.cpu().numpy()}


class KLCoeffMixin:
    """The adaptive KL penalty coefficient (``kl_coeff``, ``kl_target``)."""

    def update_kl(self, sampled_kl: float) -> float:
        target = self.config["kl_target"]
        if sampled_kl > 2.0 * target:
            self.kl_coeff *= 1.5
        elif sampled_kl < 0.5 * target:
            self.kl_coeff *= 0.5
        return self.kl_coeff

    def get_state(self):
        state = super().get_state()
        state["kl_coeff"] = self.kl_coeff
        return state

    def set_state(self, state):
        super().set_state(state)
        if isinstance(state, dict) and "kl_coeff" in state:
            self.kl_coeff = state["kl_coeff"]


def _setup_kl(policy, obs_space, action_space, config):
    policy.kl_coeff = config["kl_coeff"]


PPOTorchPolicy = build_torch_policy(
    name="PPOTorchPolicy",
    get_default_config=lambda: __import__(
        "hpc_ray.rllib.agents.ppo.ppo", fromlist=["DEFAULT_CONFIG"]).DEFAULT_CONFIG,
    loss_fn=ppo_surrogate_loss, stats_fn=ppo_stats, postprocess_fn=add_advantages,
    extra_action_out_fn=ppo_action_out, extra_grad_process_fn=apply_grad_clipping,
    before_init=_setup_kl, mixins=[KLCoeffMixin, ValueNetworkMixin])
