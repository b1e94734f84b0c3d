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
        batch_builder: a ``MultiAgentSampleBatchBuilder`` for this episode, made
            on first use (the sampler keeps its own rows elsewhere).

    Args:
        policies: policy id -> ``Policy``.
        policy_mapping_fn: agent id -> policy id.
        batch_builder_factory: makes ``new_batch_builder()``'s builders (default:
            a ``MultiAgentSampleBatchBuilder`` over ``policies``).
        extra_batch_callback: what ``add_extra_batch(batch)`` calls (the sampler's:
            the batch joins the worker's next ``sample()``).
    """

    def __init__(self, policies: dict, policy_mapping_fn, batch_builder_factory=None,
                 extra_batch_callback=None) -> None:
        self.episode_id = random.randrange(2 ** 60)
        self.length = 0
        self.total_reward = 0.0
        self.agent_rewards: dict[tuple, float] = {}
        self.custom_metrics: dict[str, float] = {}
        self.user_data: dict[str, Any] = {}
        self._policies = policies
        self._policy_mapping_fn = policy_mapping_fn
        self._batch_builder_factory = batch_builder_factory
        self._extra_batch_callback = extra_batch_callback
        self._batch_builder = None
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

    # --- batches ----------------------------------------------------------------------

    def new_batch_builder(self):
        """A new, empty ``MultiAgentSampleBatchBuilder`` (for ``add_extra_batch``)."""
        if self._batch_builder_factory is not None:
            return self._batch_builder_factory()
        from .sample_batch_builder import MultiAgentSampleBatchBuilder
        return MultiAgentSampleBatchBuilder(self._policies)

    @property
    def batch_builder(self):
        if self._batch_builder is None:
            self._batch_builder = self.new_batch_builder()
        return self._batch_builder

    def add_extra_batch(self, batch) -> None:
        """Add ``batch`` (a ``SampleBatch`` of the default policy or a
        ``MultiAgentBatch``, e.g. simulated experiences) to what the worker's
        ``sample()`` returns next, as Ray 0.7's "model-based rollouts" do.

        Raises:
            ValueError: for an episode that no sampler runs.
        """
        if self._extra_batch_callback is None:
            raise ValueError("add_extra_batch() needs an episode run by a rollout "
                             "worker's sampler (this one has no extra_batch_callback)")
        self._extra_batch_callback(batch)

    # --- per-agent state ----------------------------------------------------------------

    def policy_for(self, agent_id="agent0") -> str:
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
        """The agent's last observation, preprocessed and filtered (None before one)."""
        return self._last_obs.get(agent_id)

    def last_raw_obs_for(self, agent_id="agent0"):
        """The agent's last observation as the env returned it (None before one)."""
        return self._last_raw_obs.get(agent_id)

    def last_info_for(self, agent_id="agent0"):
        return self._last_infos.get(agent_id)

    def last_action_for(self, agent_id="agent0"):
        """The agent's last action, or zeros shaped like one before its first."""
        if agent_id in self._last_actions:
            return self._last_actions[agent_id]
        return zero_action(self._policies[self.policy_for(agent_id)].action_space)

    def prev_action_for(self, agent_id="agent0"):
        """The action before the last one, or zeros."""
        if agent_id in self._prev_actions:
            return self._prev_actions[agent_id]
        return np.zeros_like(self.last_action_for(agent_id))

    def prev_reward_for(self, agent_id="agent0") -> float:
        """The reward before the last one, or 0.0 (Ray 0.7's meaning)."""
        return self._prev_rewards.get(agent_id, 0.0)

    def rnn_state_for(self, agent_id="agent0") -> list:
        """The agent's RNN state: its policy's last state out, or
        ``get_initial_state()`` before its first action."""
        if agent_id not in self._rnn_state:
            policy = self._policies[self.policy_for(agent_id)]
            self._rnn_state[agent_id] = list(policy.get_initial_state())
        return self._rnn_state[agent_id]

    def last_pi_info_for(self, agent_id="agent0") -> dict:
        """The extra outputs of the agent's last ``compute_actions`` row
        (``vf_preds``, ``state_in_0``...; empty before its first action)."""
        return self._last_pi_info.get(agent_id, {})

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
