"""Off-policy estimators: how good the current policy would be on logged episodes.

Both need the behaviour policy's ``action_prob`` column (``JsonWriter`` adds it
from ``action_logp``) and the current policy's probability of each logged action.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..policy.sample_batch import SampleBatch

__all__ = ["OffPolicyEstimator", "OffPolicyEstimate", "ImportanceSamplingEstimator",
           "WeightedImportanceSamplingEstimator", "ESTIMATORS"]


class OffPolicyEstimate(NamedTuple):
    """One estimate: the estimator's name and its metrics (``V_prev``, ``V_gain_est``...)."""

    estimator_name: str
    metrics: dict


class OffPolicyEstimator:
    """Estimates the value of ``policy`` from episodes another policy produced.

    Args:
        policy: the policy to evaluate.
        gamma: the discount of the estimate.
    """

    name = "base"

    def __init__(self, policy, gamma: float) -> None:
        self.policy = policy
        self.gamma = gamma
        self.new_estimates: list[OffPolicyEstimate] = []

    def estimate(self, batch: SampleBatch) -> OffPolicyEstimate:
        """The estimate over one episode's rows."""
        raise NotImplementedError

    def process(self, batch) -> None:
        """Estimate every episode of ``batch`` and keep the results for ``get_metrics``."""
        if not isinstance(batch, SampleBatch):
            raise ValueError(f"off-policy estimation ({self.name!r}) is not implemented for "
                             f"multi-agent batches: set \"input_evaluation\": []")
        if SampleBatch.ACTION_PROB not in batch:
            raise ValueError(f"off-policy estimation ({self.name!r}) needs the behaviour "
                             "policy's 'action_prob' column in the input data; set "
                             "\"input_evaluation\": [] for data without it")
        for episode in batch.split_by_episode():
            self.new_estimates.append(self.estimate(episode))

    def get_metrics(self) -> list[OffPolicyEstimate]:
        out, self.new_estimates = self.new_estimates, []
        return out

    def action_prob(self, batch: SampleBatch) -> np.ndarray:
        """The current policy's probability of each logged action."""
        return action_prob(self.policy, batch)

    def _ratios(self, batch: SampleBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rewards = np.asarray(batch[SampleBatch.REWARDS], np.float64)
        old = np.asarray(batch[SampleBatch.ACTION_PROB], np.float64)
        new = self.action_prob(batch)
        p = np.cumprod(new / np.maximum(old, 1e-12))
        disc = self.gamma ** np.arange(len(rewards))
        return rewards, p, disc


class ImportanceSamplingEstimator(OffPolicyEstimator):
    """The step-wise importance sampling estimator ("is")."""

    name = "is"

    def estimate(self, batch):
        rewards, p, disc = self._ratios(batch)
        v_prev = float((rewards * disc).sum())
        v_is = float((p * rewards * disc).sum())
        return OffPolicyEstimate("is", {"V_prev": v_prev, "V_step_IS": v_is,
                                        "V_gain_est": v_is / max(1e-8, v_prev)})


class WeightedImportanceSamplingEstimator(OffPolicyEstimator):
    """The step-wise weighted importance sampling estimator ("wis"): ratios are
    normalized by their running mean at each step over the episodes seen."""

    name = "wis"

    def __init__(self, policy, gamma: float) -> None:
        super().__init__(policy, gamma)
        self.filter_values = np.zeros(0)
        self.filter_counts = np.zeros(0)

    def estimate(self, batch):
        rewards, p, disc = self._ratios(batch)
        n = len(p)
        if n > len(self.filter_values):
            grow = n - len(self.filter_values)
            self.filter_values = np.concatenate([self.filter_values, np.zeros(grow)])
            self.filter_counts = np.concatenate([self.filter_counts, np.zeros(grow)])
        self.filter_values[:n] += p
        self.filter_counts[:n] += 1.0
        w = self.filter_values[:n] / self.filter_counts[:n]
        v_prev = float((rewards * disc).sum())
        v_wis = float((p / w * rewards * disc).sum())
        return OffPolicyEstimate("wis", {"V_prev": v_prev, "V_step_WIS": v_wis,
                                         "V_gain_est": v_wis / max(1e-8, v_prev)})


#: ``input_evaluation`` names -> estimator classes.
ESTIMATORS = {"is": ImportanceSamplingEstimator, "wis": WeightedImportanceSamplingEstimator}


def action_prob(policy, batch: SampleBatch) -> np.ndarray:
    """``policy``'s probability of each action in ``batch`` (its ``action_prob``
    method if it has one, else its model and action distribution)."""
    own = getattr(policy, "action_prob", None)
    if own is not None:
        return np.asarray(own(batch), np.float64)
    import torch
    from ..policy.torch_policy import _tensor
    if getattr(policy, "dist_class", None) is None:
        raise ValueError(f"{type(policy).__name__} has no action distribution to estimate "
                         "with; set \"input_evaluation\": [] (or \"soft_q\": True for DQN)")
    with policy.lock, torch.no_grad():
        logits = policy.model({SampleBatch.CUR_OBS: _tensor(
            np.asarray(batch[SampleBatch.CUR_OBS]), policy.device)}, [])[0]
        logp = policy.dist_class(logits).logp(
            _tensor(np.asarray(batch[SampleBatch.ACTIONS]), policy.device))
    return np.exp(logp.cpu().numpy().astype(np.float64))
