"""Preprocessors: observations of any gym space as flat float32 vectors."""
from __future__ import annotations

import numpy as np

__all__ = ["Preprocessor", "NoPreprocessor", "OneHotPreprocessor", "FlattenPreprocessor",
           "get_preprocessor", "as_gymnasium_space"]


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
        # An old ``gym`` package's Tuple/Dict: gymnasium's flatten needs its own.
        self._obs_space = obs_space = as_gymnasium_space(obs_space)
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


def as_gymnasium_space(space):
    """``space`` as a gymnasium space: a space of the old ``gym`` package (or
    any object with its class names and attributes: ``Box.low/high/dtype``,
    ``Discrete.n``, ``MultiDiscrete.nvec``, ``MultiBinary.n``, ``Tuple.spaces``,
    ``Dict.spaces``) is rebuilt, nested spaces included; a gymnasium space is
    returned as it is.

    Raises:
        TypeError: for another kind of space (naming the supported ones).
    """
    import gymnasium as gym
    if isinstance(space, gym.spaces.Space):
        return space
    name = type(space).__name__
    spaces = gym.spaces
    if name == "Box":
        return spaces.Box(np.asarray(space.low), np.asarray(space.high),
                          dtype=np.dtype(space.dtype))
    if name == "Discrete":
        return spaces.Discrete(int(space.n), start=int(getattr(space, "start", 0)))
    if name == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(space.nvec))
    if name == "MultiBinary":
        return spaces.MultiBinary(space.n)
    if name == "Tuple":
        return spaces.Tuple([as_gymnasium_space(s) for s in space.spaces])
    if name == "Dict":
        return spaces.Dict({k: as_gymnasium_space(s) for k, s in space.spaces.items()})
    raise TypeError(f"unsupported observation space {space!r} (supported: Box, Discrete, "
                    f"MultiDiscrete, MultiBinary, Tuple, Dict of gymnasium or gym)")
