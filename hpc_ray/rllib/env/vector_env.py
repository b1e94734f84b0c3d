"""``VectorEnv``: a batch of sub-environments stepped together."""
from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["VectorEnv"]


class VectorEnv:
    """Several copies of one env, stepped as a batch (Ray 0.7 ``env/vector_env.py``).

    A user may subclass it to step many envs in one call (a simulator that
    vectorizes itself). ``vectorize_gym_envs`` wraps ``num_envs`` ordinary envs.
    """

    #: Set by subclasses.
    observation_space = None
    action_space = None
    num_envs = 1

    @staticmethod
    def wrap(make_env: Callable[[int], object] | None = None, existing_envs=None,
             num_envs: int = 1, action_space=None, observation_space=None) -> "VectorEnv":
        """A ``VectorEnv`` of ``num_envs`` envs: ``existing_envs`` then ``make_env(i)``."""
        return _VectorizedGymEnv(make_env, existing_envs or [], num_envs,
                                 action_space, observation_space)

    def vector_reset(self) -> list:
        """Reset every sub-env; return their observations."""
        raise NotImplementedError

    def reset_at(self, index: int):
        """Reset sub-env ``index``; return its observation."""
        raise NotImplementedError

    def vector_step(self, actions: list) -> tuple[list, list, list, list]:
        """Step every sub-env; return lists ``obs, rewards, dones, infos``."""
        raise NotImplementedError

    def get_unwrapped(self) -> list:
        return []


class _VectorizedGymEnv(VectorEnv):
    def __init__(self, make_env, existing_envs, num_envs, action_space, observation_space):
        self.envs = list(existing_envs)
        while len(self.envs) < num_envs:
            self.envs.append(make_env(len(self.envs)))
        self.num_envs = num_envs
        self.action_space = action_space or self.envs[0].action_space
        self.observation_space = observation_space or self.envs[0].observation_space

    def vector_reset(self) -> list:
        return [e.reset() for e in self.envs]

    def reset_at(self, index: int):
        return self.envs[index].reset()

    def vector_step(self, actions):
        obs, rewards, dones, infos = [], [], [], []
        for env, a in zip(self.envs, actions):
            o, r, d, i = env.step(a)
            obs.append(o)
            rewards.append(r)
            dones.append(d)
            infos.append(i)
        return obs, rewards, dones, infos

    def get_unwrapped(self) -> list:
        return self.envs


def _stack(xs) -> np.ndarray:
    return np.stack(xs)
