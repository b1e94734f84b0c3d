"""Agents grouped into one (``MultiAgentEnv.with_agent_groups``, Ray 0.7)."""
from __future__ import annotations

from .multi_agent_env import MultiAgentEnv

__all__ = ["GROUP_REWARDS", "GROUP_INFO"]

#: ``infos[group]`` keys holding the grouped agents' own rewards and infos.
GROUP_REWARDS = "_group_rewards"
GROUP_INFO = "_group_info"


class _GroupAgentsWrapper(MultiAgentEnv):
    def __init__(self, env: MultiAgentEnv, groups: dict, obs_space=None, act_space=None):
        self.env = env
        self.groups = {g: list(agents) for g, agents in groups.items()}
        self.agent_id_to_group = {}
        for group_id, agents in self.groups.items():
            if not agents:
                raise ValueError(f"agent group {group_id!r} is empty")
            for agent_id in agents:
                if agent_id in self.agent_id_to_group:
                    raise ValueError(f"agent {agent_id!r} is in two groups: "
                                     f"{self.agent_id_to_group[agent_id]!r} and {group_id!r}")
                self.agent_id_to_group[agent_id] = group_id
        if obs_space is not None:
            self.observation_space = obs_space
        if act_space is not None:
            self.action_space = act_space

    def reset(self):
        return self._group(self.env.reset())

    def step(self, action_dict):
        actions = {}
        for agent_id, action in action_dict.items():
            if agent_id in self.groups:
                agents = self.groups[agent_id]
                if len(action) != len(agents):
                    raise ValueError(f"group {agent_id!r} has {len(agents)} agents but got "
                                     f"{len(action)} actions")
                actions.update(zip(agents, action))
            else:
                actions[agent_id] = action
        obs, rewards, dones, infos = self.env.step(actions)
        obs = self._group(obs)
        rewards = self._group(rewards)
        infos = self._group(infos, lambda vals: {GROUP_INFO: vals})
        for group_id, rew in list(rewards.items()):
            if isinstance(rew, list):
                rewards[group_id] = float(sum(rew))
                infos.setdefault(group_id, {})[GROUP_REWARDS] = rew
        all_done = dones.pop("__all__", False)
        dones = self._group(dones, all)
        dones["__all__"] = all_done
        return obs, rewards, dones, infos

    def _group(self, items: dict, agg=list) -> dict:
        out, seen = {}, {}
        for agent_id, item in items.items():
            group_id = self.agent_id_to_group.get(agent_id)
            if group_id is None:
                out[agent_id] = item
            else:
                seen.setdefault(group_id, {})[agent_id] = item
        for group_id, vals in seen.items():
            agents = self.groups[group_id]
            missing = [a for a in agents if a not in vals]
            if missing:
                raise ValueError(f"agents {missing} of group {group_id!r} are missing from "
                                 f"the env's output: agents of a group must act together")
            out[group_id] = agg([vals[a] for a in agents])
        return out
