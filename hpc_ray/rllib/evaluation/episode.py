"""``MultiAgentEpisode`` and the per-episode metrics a worker reports."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["MultiAgentEpisode", "RolloutMetrics"]


@dataclass
class RolloutMetrics:
    """One finished episode, as reported to the trainer."""

    #: Steps of the episode.
    episode_length: int
    #: Sum of every agent's rewards.
    episode_reward: float
    #: ``(agent_id, policy_id) -> reward``.
    agent_rewards: dict = field(default_factory=dict)
    #: The callbacks' ``episode.custom_metrics``.
    custom_metrics: dict = field(default_factory=dict)


class MultiAgentEpisode:
    """The state of one running episode (what callbacks receive as ``episode``).

    Attributes:
        episode_id: a random id.
        length: steps so far.
        total_reward: sum of rewards so far.
        agent_rewards: ``(agent_id, policy_id) -> reward so far``.
        custom_metrics: set by callbacks; averaged into ``custom_metrics`` of the result.
        user_data: free space for callbacks.
    """

    def __init__(self, policies: dict, policy_mapping_fn) -> None:
        self.episode_id = random.randrange(2 ** 60)
        self.length = 0
        self.total_reward = 0.0
        self.agent_rewards: dict[tuple, float] = {}
        self.custom_metrics: dict[str, float] = {}
        self.user_data: dict[str, Any] = {}
        self.batch_builder = None
        self._policies = policies
        self._policy_mapping_fn = policy_mapping_fn
        self._agent_to_policy: dict = {}
        # agent id -> value; the sampler writes these dicts directly (hot loop).
        self._last_obs: dict = {}
        self._last_raw_obs: dict = {}
        self._last_actions: dict = {}
        self._prev_actions: dict = {}
        self._last_infos: dict = {}
        self._last_rewards: dict = {}
        self._prev_rewards: dict = {}
        self._rnn_state: dict = {}
        self._last_pi_info: dict = {}

    def policy_for(self, agent_id) -> str:
        """The policy id that controls ``agent_id`` (fixed for the episode)."""
        pid = self._agent_to_policy.get(agent_id)
        if pid is None:
            pid = self._policy_mapping_fn(agent_id)
            if pid not in self._policies:
                raise ValueError(f"policy_mapping_fn({agent_id!r}) returned {pid!r}, which is "
                                 f"not a policy (known: {sorted(self._policies)})")
            self._agent_to_policy[agent_id] = pid
        return pid

    def last_observation_for(self, agent_id="agent0"):
        return self._last_obs.get(agent_id)

    def last_action_for(self, agent_id="agent0"):
        return self._last_actions.get(agent_id)

    def last_info_for(self, agent_id="agent0"):
        return self._last_infos.get(agent_id)

    def prev_reward_for(self, agent_id="agent0"):
        return self._last_rewards.get(agent_id, 0.0)

    def soft_reset(self) -> None:
        """Start a new logical episode in the same env (``soft_horizon``): a new
        id, length and rewards from zero; RNN state and last observations,
        actions and infos are kept."""
        self.episode_id = random.randrange(2 ** 60)
        self.length = 0
        self.total_reward = 0.0
        self.agent_rewards = {}
        self._last_rewards = {}
        self._prev_rewards = {}

    def _add_rewards(self, rewards: dict) -> None:
        for agent_id, r in rewards.items():
            r = float(r)
            self.total_reward += r
            key = (agent_id, self.policy_for(agent_id))
            self.agent_rewards[key] = self.agent_rewards.get(key, 0.0) + r
            self._prev_rewards[agent_id] = self._last_rewards.get(agent_id, 0.0)
            self._last_rewards[agent_id] = r

    def _metrics(self) -> RolloutMetrics:
        return RolloutMetrics(self.length, self.total_reward, dict(self.agent_rewards),
                              dict(self.custom_metrics))


def zero_action(space):
    """Zeros shaped like an action of ``space``: the previous action an agent
    has before its first (Ray 0.7 ``last_action_for`` at t=0)."""
    name = type(space).__name__
    if name == "Discrete":
        return np.int64(0)
    if name in ("Box", "MultiDiscrete", "MultiBinary"):
        return np.zeros(space.shape, space.dtype)
    return np.zeros_like(np.asarray(space.sample()))
