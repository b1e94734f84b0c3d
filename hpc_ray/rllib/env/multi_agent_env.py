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

    def with_agent_groups(self, groups, obs_space=None, act_space=None):
        raise NotImplementedError(
            "agent groups (QMIX) are not supported by hpc_ray.rllib; map agents to "
            "policies with multiagent.policy_mapping_fn instead")
