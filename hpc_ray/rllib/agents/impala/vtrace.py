"""V-trace targets (Espeholt et al. 2018) over a batch of trajectory fragments."""
from __future__ import annotations

import torch

__all__ = ["vtrace"]


def vtrace(behaviour_logp, target_logp, rewards, values, next_values, discounts, cuts,
           clip_rho_threshold: float = 1.0, clip_pg_rho_threshold: float = 1.0):
    """V-trace value targets and policy-gradient advantages (no gradient through them).

    Args:
        behaviour_logp, target_logp: log-probabilities of the taken actions under
            the worker's (behaviour) policy and the learner's (target) policy, ``[T]``.
        rewards: ``[T]``.
        values: ``V(x_t)`` under the learner's value function, ``[T]``.
        next_values: ``V(x_{t+1})`` (0 after a terminal step), ``[T]``.
        discounts: ``gamma * (1 - done_t)``, ``[T]``.
        cuts: 1 where row t is the last of its trajectory fragment, ``[T]``.

    Returns:
        ``(vs, pg_advantages)``, each ``[T]``.
    """
    with torch.no_grad():
        rhos = torch.exp(target_logp - behaviour_logp)
        clipped_rhos = torch.clamp(rhos, max=clip_rho_threshold)
        cs = torch.clamp(rhos, max=1.0)
        deltas = clipped_rhos * (rewards + discounts * next_values - values)
        vs_minus_v = torch.zeros_like(values)
        acc = values.new_zeros(())
        for t in range(len(values) - 1, -1, -1):
            if cuts[t]:
                acc = values.new_zeros(())
            acc = deltas[t] + discounts[t] * cs[t] * acc
            vs_minus_v[t] = acc
        vs = values + vs_minus_v
        # v_s at t+1: the next row's target inside a fragment, else the bootstrap.
        vs_next = torch.where(cuts.bool(), next_values,
                              torch.cat([vs[1:], next_values[-1:]]))
        pg_rhos = torch.clamp(rhos, max=clip_pg_rho_threshold)
        pg_advantages = pg_rhos * (rewards + discounts * vs_next - values)
    return vs, pg_advantages
