"""``MultiAgentEnv``: observations, rewards and dones as dicts keyed by agent id."""
from __future__ import annotations

__all__ = ["MultiAgentEnv"]


class MultiAgentEnv:
    """An environment hosting several agents (Ray 0.7 ``env/multi_agent_env.py``).

    ``reset()`` returns ``{agent_id: obs}``; ``step(action_dict)`` returns four
    dicts ``obs, rewards, dones, infos``, where ``dones["__all__"]`` ends the
    episode. Only agents present in the returned ``obs`` act in the next step.
    Subclasses set ``observation_space`` and ``action_space`` when every agent
    shares them, or the trainer's ``multiagent.policies`` give them per policy.

    Example::

        class TwoCartPoles(MultiAgentEnv):
            def __init__(self, config):
                self.envs = [gym.make("CartPole-v0") for _ in range(2)]
            ...
    """

    def reset(self) -> dict:
        raise NotImplementedError

    def step(self, action_dict: dict) -> tuple[dict, dict, dict, dict]:
        raise NotImplementedError

    def with_agent_groups(self, groups: dict, obs_space=None, act_space=None):
        """This env with groups of agents acting as single agents (for QMIX).

        A group's observation is the list of its agents' observations, its action
        a list of their actions, its reward the sum of theirs (each agent's own
        kept in ``infos[group]["_group_rewards"]``), and it is done when all are.

        Args:
            groups: group id -> list of agent ids, e.g. ``{"group_1": [0, 1]}``.
            obs_space: the group's observation space (a ``Tuple`` of the agents').
            act_space: the group's action space (a ``Tuple`` of the agents').

        Returns:
            a ``MultiAgentEnv`` whose agents are the groups (and any ungrouped agent).
        """
        from .group_agents_wrapper import _GroupAgentsWrapper
        return _GroupAgentsWrapper(self, groups, obs_space, act_space)
