"""Preprocessors: observations of any gym space as flat float32 vectors."""
from __future__ import annotations

import numpy as np

__all__ = ["Preprocessor", "NoPreprocessor", "OneHotPreprocessor", "FlattenPreprocessor",
           "get_preprocessor"]


class Preprocessor:
    """Turns an observation of ``obs_space`` into an array of ``self.shape``.

    Args:
        obs_space: the env's observation space.
        options: the ``model`` config (unused by the built-in ones).
    """

    def __init__(self, obs_space, options: dict | None = None) -> None:
        self._obs_space = obs_space
        self._options = options or {}
        self.shape = self._init_shape(obs_space, self._options)
        self.size = int(np.prod(self.shape))

    def _init_shape(self, obs_space, options) -> tuple:
        raise NotImplementedError

    def transform(self, observation) -> np.ndarray:
        raise NotImplementedError

    @property
    def observation_space(self):
        import gymnasium as gym
        return gym.spaces.Box(-np.inf, np.inf, self.shape, np.float32)


class NoPreprocessor(Preprocessor):
    def _init_shape(self, obs_space, options):
        return tuple(obs_space.shape)

    def transform(self, observation):
        return np.asarray(observation, np.float32)

    @property
    def observation_space(self):
        return self._obs_space


class OneHotPreprocessor(Preprocessor):
    """A ``Discrete(n)`` observation as a one-hot vector of length n."""

    def _init_shape(self, obs_space, options):
        return (int(obs_space.n),)

    def transform(self, observation):
        out = np.zeros(self.shape, np.float32)
        out[int(observation)] = 1.0
        return out


class FlattenPreprocessor(Preprocessor):
    """``Tuple``/``Dict``/``MultiDiscrete``/``MultiBinary`` observations, flattened."""

    def _init_shape(self, obs_space, options):
        import gymnasium as gym
        return (int(gym.spaces.flatdim(obs_space)),)

    def transform(self, observation):
        import gymnasium as gym
        return np.asarray(gym.spaces.flatten(self._obs_space, observation), np.float32)

    @property
    def observation_space(self):
        space = super().observation_space
        # What TorchModel unflattens Dict and Tuple observations into (Ray 0.7).
        space.original_space = self._obs_space
        return space


def get_preprocessor(space) -> type[Preprocessor]:
    """The preprocessor class for an observation space."""
    name = type(space).__name__
    if name == "Discrete":
        return OneHotPreprocessor
    if name == "Box":
        return NoPreprocessor
    return FlattenPreprocessor
