"""The ES/ARS rollout worker: perturbed episodes from offsets into the noise table.

::

    trainer ── put(theta) once per round ──▶ every worker: do_rollouts(theta_ref)
    worker: i = random offset; eps = sigma * noise[i:i+dim] (a view, no copy)
            returns of theta + eps and theta - eps (antithetic pair)
    worker ── (offsets, returns, lengths, eval returns) ──▶ trainer
"""
from __future__ import annotations

import os
import time

import numpy as np

from ...env.env_context import EnvContext
from ...env.gym_compat import GymCompat
from .utils import NumpyPolicy, SharedNoiseTable, rollout

__all__ = ["ESWorker"]


class ESWorker:
    """Runs antithetic perturbation pairs and evaluation episodes.

    Args:
        config: the trainer's config.
        env_creator: the env creator.
        noise: the shared noise table (passed as an object reference, so each
            worker maps the node's single copy read-only).
        worker_index: 1.. (seeds the worker's offsets and envs).
    """

    def __init__(self, config: dict, env_creator, noise: np.ndarray, worker_index: int,
                 min_task_runtime: float = 0.2) -> None:
        self.config = config
        self.min_task_runtime = min_task_runtime
        self.noise = SharedNoiseTable(noise)
        seed = (config.get("seed") or 0) + 1000 * worker_index
        self.rng = np.random.RandomState(seed)
        env = env_creator(EnvContext(config["env_config"], worker_index))
        self.env = GymCompat(env, seed)
        self.policy = NumpyPolicy(self.env.observation_space, self.env.action_space,
                                  config["model"], config["observation_filter"])

    def noise_table_info(self) -> dict:
        """How this worker holds the table (for checks: a read-only shared view)."""
        arr = self.noise.noise
        return {"writeable": bool(arr.flags.writeable), "owndata": bool(arr.flags.owndata),
                "nbytes": int(arr.nbytes), "pid": os.getpid()}

    def do_rollouts(self, params: np.ndarray, timestep_limit: int | None = None) -> dict:
        cfg = self.config
        dim = len(params)
        offset = cfg.get("offset", 0.0)
        out = {"noise_indices": [], "returns": [], "lengths": [], "eval_returns": [],
               "eval_lengths": []}
        start = time.time()
        while not out["noise_indices"] or time.time() - start < self.min_task_runtime:
            if self.rng.rand() < cfg["eval_prob"]:
                self.policy.set_flat_weights(params)
                r, n = rollout(self.policy, self.env, timestep_limit)
                out["eval_returns"].append(r)
                out["eval_lengths"].append(n)
                continue
            idx = self.noise.sample_index(self.rng, dim)
            eps = cfg["noise_stdev"] * self.noise.get(idx, dim)
            self.policy.set_flat_weights(params + eps)
            r_pos, n_pos = rollout(self.policy, self.env, timestep_limit, offset=offset)
            self.policy.set_flat_weights(params - eps)
            r_neg, n_neg = rollout(self.policy, self.env, timestep_limit, offset=offset)
            out["noise_indices"].append(idx)
            out["returns"].append([r_pos, r_neg])
            out["lengths"].append([n_pos, n_neg])
        return out

    def get_filters(self, flush_after: bool = False):
        f = self.policy.observation_filter.as_serializable()
        if flush_after:
            self.policy.observation_filter.clear_buffer()
        return f

    def sync_filters(self, new_filter) -> None:
        self.policy.observation_filter.sync(new_filter)
