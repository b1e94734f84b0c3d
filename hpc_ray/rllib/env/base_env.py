"""One interface over the kinds of env a rollout worker steps.

Every kind — a list of gym/gymnasium envs, a list of ``MultiAgentEnv``, a
``VectorEnv`` — is seen as ``num_envs`` slots that return dicts keyed by agent
id (a single-agent env has one agent, ``"agent0"``), so the sampler has one loop.
"""
from __future__ import annotations

from typing import Callable

from .gym_compat import GymCompat
from .multi_agent_env import MultiAgentEnv
from .vector_env import VectorEnv

__all__ = ["BaseEnv", "to_base_env", "DUMMY_AGENT_ID"]

#: The agent id of a single-agent env.
DUMMY_AGENT_ID = "agent0"


class BaseEnv:
    """``num_envs`` slots, each reset and stepped with dicts keyed by agent id."""

    num_envs: int
    observation_space = None
    action_space = None
    multi_agent = False

    def reset_at(self, index: int) -> dict:
        raise NotImplementedError

    def step_all(self, actions: list[dict]) -> tuple[list, list, list, list]:
        """Step every slot; per slot ``obs, rewards, dones (with "__all__"), infos``."""
        raise NotImplementedError

    def get_unwrapped(self) -> list:
        return []

    def stop(self) -> None:
        for env in self.get_unwrapped():
            close = getattr(env, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass


class _SingleAgentEnvs(BaseEnv):
    def __init__(self, envs: list) -> None:
        self.envs = envs
        self.num_envs = len(envs)
        self.observation_space = envs[0].observation_space
        self.action_space = envs[0].action_space

    def reset_at(self, index):
        return {DUMMY_AGENT_ID: self.envs[index].reset()}

    def step_all(self, actions):
        obs, rewards, dones, infos = [], [], [], []
        for env, act in zip(self.envs, actions):
            o, r, d, i = env.step(act[DUMMY_AGENT_ID])
            obs.append({DUMMY_AGENT_ID: o})
            rewards.append({DUMMY_AGENT_ID: r})
            dones.append({DUMMY_AGENT_ID: d, "__all__": d})
            infos.append({DUMMY_AGENT_ID: i})
        return obs, rewards, dones, infos

    def get_unwrapped(self):
        return [getattr(e, "env", e) for e in self.envs]


class _MultiAgentEnvs(BaseEnv):
    multi_agent = True

    def __init__(self, envs: list) -> None:
        self.envs = envs
        self.num_envs = len(envs)
        self.observation_space = getattr(envs[0], "observation_space", None)
        self.action_space = getattr(envs[0], "action_space", None)

    def reset_at(self, index):
        out = self.envs[index].reset()
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict) \
                and isinstance(out[0], dict):
            return out[0]
        return out

    def step_all(self, actions):
        obs, rewards, dones, infos = [], [], [], []
        for env, act in zip(self.envs, actions):
            out = env.step(act)
            if len(out) == 5:  # gymnasium-style multi-agent: terminateds, truncateds
                o, r, term, trunc, i = out
                d = {k: bool(term.get(k, False) or trunc.get(k, False))
                     for k in set(term) | set(trunc)}
            else:
                o, r, d, i = out
            if "__all__" not in d:
                raise ValueError(f"{type(env).__name__}.step() must return dones with an "
                                 f"'__all__' key, got keys {sorted(d)}")
            obs.append(o)
            rewards.append(r)
            dones.append(d)
            infos.append(i or {})
        return obs, rewards, dones, infos

    def get_unwrapped(self):
        return self.envs


class _VectorEnvAdapter(BaseEnv):
    def __init__(self, venv: VectorEnv) -> None:
        self.venv = venv
        self.num_envs = venv.num_envs
        self.observation_space = venv.observation_space
        self.action_space = venv.action_space
        self._started = False

    def reset_at(self, index):
        if not self._started:
            self._started = True
            self._initial = self.venv.vector_reset()
        if self._initial is not None and index < len(self._initial):
            o = self._initial[index]
            if index == len(self._initial) - 1:
                self._initial = None
            return {DUMMY_AGENT_ID: o}
        return {DUMMY_AGENT_ID: self.venv.reset_at(index)}

    def step_all(self, actions):
        o, r, d, i = self.venv.vector_step([a[DUMMY_AGENT_ID] for a in actions])
        return ([{DUMMY_AGENT_ID: x} for x in o], [{DUMMY_AGENT_ID: x} for x in r],
                [{DUMMY_AGENT_ID: x, "__all__": x} for x in d],
                [{DUMMY_AGENT_ID: x} for x in i])

    def get_unwrapped(self):
        return self.venv.get_unwrapped()


def to_base_env(make_env: Callable[[int], object], num_envs: int, seed: int | None) -> BaseEnv:
    """``num_envs`` envs from ``make_env(vector_index)`` as one ``BaseEnv``."""
    first = make_env(0)
    if isinstance(first, BaseEnv):
        return first
    if isinstance(first, VectorEnv):
        return _VectorEnvAdapter(first)
    envs = [first] + [make_env(i) for i in range(1, num_envs)]
    if isinstance(first, MultiAgentEnv):
        return _MultiAgentEnvs(envs)
    return _SingleAgentEnvs([GymCompat(e, None if seed is None else seed + i)
                             for i, e in enumerate(envs)])
