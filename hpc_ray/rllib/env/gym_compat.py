"""Environments by name, and one step API for old-gym and gymnasium envs.

Inside a rollout worker every single-agent env is seen through ``GymCompat``:
``reset() -> obs`` and ``step(a) -> (obs, reward, done, info)`` (the gym API of
Ray 0.7's days). A gymnasium env (``reset`` returning ``(obs, info)``, ``step``
returning five values) is adapted; ``terminated or truncated`` is ``done`` and
``info["TimeLimit.truncated"]`` tells a time limit apart.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

__all__ = ["GymCompat", "make_env_creator", "OLD_ENV_NAMES"]

#: Ray 0.7's gym names that gymnasium only knows under a newer version.
OLD_ENV_NAMES = {
    "Pendulum-v0": "Pendulum-v1",
    "Acrobot-v0": "Acrobot-v1",
    "MountainCarContinuous-v0": "MountainCarContinuous-v0",
    "LunarLander-v2": "LunarLander-v3",
    "LunarLanderContinuous-v2": "LunarLanderContinuous-v3",
}


class GymCompat:
    """An env with the old gym API, whatever API ``env`` has.

    Args:
        env: a gym- or gymnasium-style env.
        seed: passed to the first ``reset`` of a gymnasium env (or ``env.seed``).
    """

    def __init__(self, env: Any, seed: int | None = None) -> None:
        self.env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self._seed = seed
        self._new_step: bool | None = None

    def reset(self):
        if self._seed is not None:
            seed, self._seed = self._seed, None
            try:
                out = self.env.reset(seed=seed)
            except TypeError:
                if hasattr(self.env, "seed"):
                    self.env.seed(seed)
                out = self.env.reset()
            for space in (self.action_space, self.observation_space):
                if hasattr(space, "seed"):
                    space.seed(seed)
        else:
            out = self.env.reset()
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
            return out[0]
        return out

    def step(self, action):
        out = self.env.step(action)
        if len(out) == 5:
            obs, reward, terminated, truncated, info = out
            if truncated and not terminated:
                info = dict(info)
                info["TimeLimit.truncated"] = True
            return obs, reward, bool(terminated or truncated), info
        return out

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()

    def __getattr__(self, name: str):
        return getattr(self.env, name)


def make_env_creator(env: Any) -> Callable[[dict], Any]:
    """The creator for the trainer's ``env``: a registered name, a gym name, or a class.

    Raises:
        ValueError: the name is neither registered nor known to gymnasium.
    """
    from ...tune.registry import _ENVS
    if isinstance(env, str):
        if env in _ENVS:
            return _ENVS[env]
        return _gym_creator(env)
    if isinstance(env, type):
        return lambda cfg: env(cfg)
    if callable(env):
        return env
    raise TypeError(f"env must be a name, an env class or a creator function, got {env!r}")


def _gym_creator(name: str) -> Callable[[dict], Any]:
    try:
        import gymnasium as gym
    except ImportError:
        raise ValueError(f"env {name!r} is not registered and gymnasium is not installed; "
                         f"register it with hpc_ray.tune.register_env({name!r}, creator) "
                         "or pip install gymnasium") from None
    ids = set(gym.registry.keys())
    real = name if name in ids else OLD_ENV_NAMES.get(name, name)
    if real not in ids:
        raise ValueError(f"unknown env {name!r}: not registered with "
                         f"hpc_ray.tune.register_env and not a gymnasium id; register a "
                         f"creator with register_env({name!r}, lambda env_config: MyEnv(...))")

    def create(env_config, _real=real):
        with warnings.catch_warnings():
            # "CartPole-v0 is out of date": asked for by name, on purpose.
            warnings.filterwarnings("ignore", message=".*out of date.*")
            return gym.make(_real)

    return create
