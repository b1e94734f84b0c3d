"""Pieces ES and ARS share: the noise table, a numpy policy, rank shaping, Adam.

The noise table is one large float32 array of Gaussian noise. The trainer
``put``s it once; every worker receives the reference and ``get``s a read-only
view of the same shared-memory object, so a node holds ONE copy however many
workers it runs (Ray 0.7 made one copy per node through plasma the same way).
A perturbation is an offset into the table: workers send offsets, not vectors.
"""
from __future__ import annotations

import numpy as np

from ...env.gym_compat import GymCompat
from ...models.catalog import ModelCatalog
from ...utils.filter import get_filter

__all__ = ["create_shared_noise", "SharedNoiseTable", "NumpyPolicy", "compute_centered_ranks",
           "batched_weighted_sum", "Adam", "rollout"]


def create_shared_noise(count: int, seed: int = 123) -> np.ndarray:
    """``count`` float32 standard normal numbers (the table every worker reads)."""
    return np.random.RandomState(seed).randn(count).astype(np.float32)


class SharedNoiseTable:
    """Slices of the shared noise array (a read-only view; never copied)."""

    def __init__(self, noise: np.ndarray) -> None:
        self.noise = noise
        if noise.dtype != np.float32:
            raise TypeError(f"the noise table must be float32, got {noise.dtype}")

    def get(self, i: int, dim: int) -> np.ndarray:
        return self.noise[i:i + dim]

    def sample_index(self, rng: np.random.RandomState, dim: int) -> int:
        return int(rng.randint(0, len(self.noise) - dim + 1))


class NumpyPolicy:
    """A deterministic MLP over flat parameters, for evolution strategies.

    ``fcnet_hiddens``/``fcnet_activation`` from the ``model`` config; an empty
    ``fcnet_hiddens`` is a linear policy (ARS). Discrete actions: the argmax;
    ``Box`` actions: the output clipped to the bounds.

    Args:
        obs_space, action_space: the env's spaces.
        model_config: the ``model`` config.
        observation_filter: "NoFilter" or "MeanStdFilter".
    """

    def __init__(self, obs_space, action_space, model_config: dict,
                 observation_filter: str = "NoFilter") -> None:
        self.preprocessor = ModelCatalog.get_preprocessor_for_space(obs_space, model_config)
        self.action_space = action_space
        self.discrete = type(action_space).__name__ == "Discrete"
        out = int(action_space.n) if self.discrete else int(np.prod(action_space.shape))
        sizes = [self.preprocessor.size, *model_config.get("fcnet_hiddens", [32, 32]), out]
        self.activation = np.tanh if model_config.get("fcnet_activation", "tanh") == "tanh" \
            else (lambda x: np.maximum(x, 0.0))
        self.shapes = [(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
        self.num_params = sum(a * b + b for a, b in self.shapes)
        self.observation_filter = get_filter(observation_filter, self.preprocessor.shape)
        rng = np.random.RandomState(0)
        flat = []
        for a, b in self.shapes:
            w = rng.randn(a, b).astype(np.float32)
            w *= (0.01 if b == out else 1.0) / np.sqrt(np.square(w).sum(0, keepdims=True))
            flat += [w.ravel(), np.zeros(b, np.float32)]
        self.flat = np.concatenate(flat)
        self.set_flat_weights(self.flat)

    def set_flat_weights(self, flat: np.ndarray) -> None:
        self.flat = np.asarray(flat, np.float32)
        self.layers, i = [], 0
        for a, b in self.shapes:
            w = self.flat[i:i + a * b].reshape(a, b)
            i += a * b
            self.layers.append((w, self.flat[i:i + b]))
            i += b

    def get_flat_weights(self) -> np.ndarray:
        return self.flat

    def compute(self, observation, update_filter: bool = True):
        x = self.observation_filter(self.preprocessor.transform(observation), update_filter)
        x = np.asarray(x, np.float32).ravel()
        for k, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if k < len(self.layers) - 1:
                x = self.activation(x)
        if self.discrete:
            return int(np.argmax(x))
        return np.clip(x, self.action_space.low, self.action_space.high)


def rollout(policy: NumpyPolicy, env: GymCompat, timestep_limit: int | None = None,
            add_noise: bool = False, offset: float = 0.0) -> tuple[float, int]:
    """One episode with ``policy``; its return (minus ``offset`` per step) and length."""
    limit = timestep_limit or getattr(getattr(env.env, "spec", None), "max_episode_steps",
                                      None) or 10 ** 6
    obs = env.reset()
    total, steps = 0.0, 0
    for _ in range(limit):
        obs, reward, done, _ = env.step(policy.compute(obs))
        total += float(reward) - offset
        steps += 1
        if done:
            break
    return total, steps


def compute_ranks(x: np.ndarray) -> np.ndarray:
    ranks = np.empty(len(x), dtype=int)
    ranks[x.argsort()] = np.arange(len(x))
    return ranks


def compute_centered_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks scaled to [-0.5, 0.5] (fitness shaping)."""
    y = compute_ranks(x.ravel()).reshape(x.shape).astype(np.float32)
    return y / (x.size - 1) - 0.5


def batched_weighted_sum(weights: np.ndarray, vecs, batch_size: int = 500):
    total, num = 0.0, 0
    weights, vecs = list(weights), list(vecs)
    for start in range(0, len(weights), batch_size):
        w = np.asarray(weights[start:start + batch_size], np.float32)
        v = np.asarray(vecs[start:start + batch_size], np.float32)
        total += w @ v
        num += len(w)
    return total, num


class Adam:
    """Adam on a flat parameter vector (ES's optimizer)."""

    def __init__(self, num_params: int, stepsize: float, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-08) -> None:
        self.stepsize, self.beta1, self.beta2, self.epsilon = stepsize, beta1, beta2, epsilon
        self.m = np.zeros(num_params, np.float32)
        self.v = np.zeros(num_params, np.float32)
        self.t = 0

    def update(self, theta: np.ndarray, globalg: np.ndarray) -> np.ndarray:
        """``theta`` after one step that *descends* ``globalg``."""
        self.t += 1
        a = self.stepsize * np.sqrt(1 - self.beta2 ** self.t) / (1 - self.beta1 ** self.t)
        self.m = self.beta1 * self.m + (1 - self.beta1) * globalg
        self.v = self.beta2 * self.v + (1 - self.beta2) * (globalg * globalg)
        return (theta - a * self.m / (np.sqrt(self.v) + self.epsilon)).astype(np.float32)
