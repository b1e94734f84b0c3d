"""Advantage estimation over one trajectory (Ray 0.7 ``evaluation/postprocessing.py``)."""
from __future__ import annotations

import numpy as np

from ..policy.sample_batch import SampleBatch

__all__ = ["Postprocessing", "compute_advantages", "discount"]


class Postprocessing:
    """Column names that postprocessing adds."""

    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"


def discount(x: np.ndarray, gamma: float) -> np.ndarray:
    """``y[t] = x[t] + gamma * y[t+1]``, the discounted sum from each step on."""
    out = np.empty(len(x), dtype=np.float32)
    acc = 0.0
    for t in range(len(x) - 1, -1, -1):
        acc = float(x[t]) + gamma * acc
        out[t] = acc
    return out


def compute_advantages(rollout: SampleBatch, last_r: float, gamma: float = 0.9,
                       lambda_: float = 1.0, use_gae: bool = True) -> SampleBatch:
    """Add ``advantages`` (and ``value_targets`` with GAE) to one trajectory.

    Args:
        rollout: one agent's steps of one episode (or a truncated part of it).
        last_r: the value of the state after the last step (0 if the episode ended).
        gamma: discount factor.
        lambda_: the GAE parameter.
        use_gae: GAE (needs ``vf_preds``); else discounted reward-to-go.

    Returns:
        ``rollout`` with the new columns (float32).
    """
    rewards = np.asarray(rollout[SampleBatch.REWARDS], dtype=np.float32)
    if use_gae:
        if SampleBatch.VF_PREDS not in rollout:
            raise ValueError("use_gae=True needs the 'vf_preds' column: the policy must "
                             "return value predictions from extra_action_out_fn, and "
                             "offline data (\"input\") must carry them (or set "
                             "\"use_gae\": False)")
        vpred = np.append(np.asarray(rollout[SampleBatch.VF_PREDS], np.float32), last_r)
        delta = rewards + gamma * vpred[1:] - vpred[:-1]
        adv = discount(delta, gamma * lambda_)
        rollout[Postprocessing.ADVANTAGES] = adv
        rollout[Postprocessing.VALUE_TARGETS] = (adv + vpred[:-1]).astype(np.float32)
    else:
        returns = discount(np.append(rewards, last_r), gamma)[:-1]
        rollout[Postprocessing.ADVANTAGES] = returns
        rollout[Postprocessing.VALUE_TARGETS] = returns.copy()
    return rollout
