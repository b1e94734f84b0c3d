"""Episode statistics for a training result (Ray 0.7 ``evaluation/metrics.py``)."""
from __future__ import annotations

import collections
from typing import Iterable

import numpy as np

from ... import api
from .episode import RolloutMetrics

__all__ = ["collect_episodes", "summarize_episodes", "collect_metrics"]


def collect_episodes(local_worker=None, remote_workers: Iterable = (),
                     timeout_seconds: float = 180) -> list[RolloutMetrics]:
    """The episodes every worker finished since the last call."""
    episodes: list[RolloutMetrics] = []
    remote_workers = list(remote_workers)
    if remote_workers:
        refs = [w.get_metrics.remote() for w in remote_workers]
        ready, _ = api.wait(refs, num_returns=len(refs), timeout=timeout_seconds)
        for eps in api.get(ready):
            episodes.extend(eps)
    if local_worker is not None:
        episodes.extend(local_worker.get_metrics())
    return episodes


def summarize_episodes(episodes: list[RolloutMetrics],
                       new_episodes: list[RolloutMetrics] | None = None) -> dict:
    """The result keys about episodes: reward mean/min/max, length, counts.

    Args:
        episodes: the episodes to average over (the smoothing window).
        new_episodes: the episodes of this iteration (``episodes_this_iter``).
    """
    from ..offline.off_policy_estimator import OffPolicyEstimate
    estimates = [e for e in (new_episodes if new_episodes is not None else episodes)
                 if isinstance(e, OffPolicyEstimate)]
    episodes = [e for e in episodes if not isinstance(e, OffPolicyEstimate)]
    new_episodes = episodes if new_episodes is None else [
        e for e in new_episodes if not isinstance(e, OffPolicyEstimate)]
    by_name = collections.defaultdict(lambda: collections.defaultdict(list))
    for est in estimates:
        for k, v in est.metrics.items():
            by_name[est.estimator_name][k].append(v)
    off_policy = {name: {k: float(np.mean(v)) for k, v in ms.items()}
                  for name, ms in by_name.items()}
    rewards = [e.episode_reward for e in episodes]
    lengths = [e.episode_length for e in episodes]
    policy_rewards = collections.defaultdict(list)
    custom = collections.defaultdict(list)
    for e in episodes:
        for (_agent, pid), r in e.agent_rewards.items():
            policy_rewards[pid].append(r)
        for k, v in e.custom_metrics.items():
            custom[k].append(v)
    custom_metrics = {}
    for k, vals in custom.items():
        vals = [v for v in vals if v is not None]
        if vals:
            custom_metrics[k + "_mean"] = float(np.mean(vals))
            custom_metrics[k + "_min"] = float(np.min(vals))
            custom_metrics[k + "_max"] = float(np.max(vals))
    nan = float("nan")
    return {
        "episode_reward_max": float(np.max(rewards)) if rewards else nan,
        "episode_reward_min": float(np.min(rewards)) if rewards else nan,
        "episode_reward_mean": float(np.mean(rewards)) if rewards else nan,
        "episode_len_mean": float(np.mean(lengths)) if lengths else nan,
        "episodes_this_iter": len(new_episodes),
        "policy_reward_mean": {p: float(np.mean(r)) for p, r in policy_rewards.items()},
        "custom_metrics": custom_metrics,
        "sampler_perf": {},
        "off_policy_estimator": off_policy,
        "num_metric_batches_dropped": 0,
    }


def collect_metrics(local_worker=None, remote_workers: Iterable = (),
                    timeout_seconds: float = 180) -> dict:
    """``summarize_episodes(collect_episodes(...))``."""
    return summarize_episodes(collect_episodes(local_worker, remote_workers, timeout_seconds))
