"""Evolution Strategies (ES, Salimans et al. 2017) with a per-node noise table.

One iteration::

    theta_ref = put(theta)                             (once per round)
    workers: do_rollouts(theta_ref) until episodes_per_batch episodes and
             train_batch_size steps have come back
    g = sum over pairs of (rank(R+) - rank(R-)) * noise[offset]   (centered ranks)
    theta = Adam(theta, -g / n + l2_coeff * theta)
    observation filters: merge every worker's new statistics, send them back
"""
from __future__ import annotations

import numpy as np

from .... import api
from ....actors import kill
from ...models.catalog import MODEL_DEFAULTS
from ..config import refuse_use_lstm
from ..trainer import Trainer, with_common_config
from .es_worker import ESWorker
from .utils import (Adam, NumpyPolicy, SharedNoiseTable, batched_weighted_sum,
                    compute_centered_ranks, create_shared_noise)

__all__ = ["ESTrainer", "DEFAULT_CONFIG", "EvolutionTrainer"]

DEFAULT_CONFIG = with_common_config({
    "l2_coeff": 0.005,
    "noise_stdev": 0.02,
    "episodes_per_batch": 1000,
    "train_batch_size": 10000,
    "eval_prob": 0.003,
    "return_proc_mode": "centered_rank",
    "num_workers": 10,
    "stepsize": 0.01,
    "observation_filter": "MeanStdFilter",
    # 25M float32 = 100 MB, held once per node (Ray 0.7: 250M = 1 GB).
    "noise_size": 25000000,
    "report_length": 10,
    "model": dict(MODEL_DEFAULTS, fcnet_hiddens=[32, 32]),
})


class EvolutionTrainer(Trainer):
    """What ES and ARS share: the workers, the noise table, rounds of rollouts."""

    _name = "ES"
    _default_config = DEFAULT_CONFIG
    #: The worker class (an extension point, as Ray's ``Worker``).
    _worker_cls = ESWorker

    def _init(self, config: dict, env_creator) -> None:
        refuse_use_lstm(config, self._name, "its policy is a feed-forward numpy network")
        if config["num_workers"] < 1:
            raise ValueError(f"{self._name} needs num_workers >= 1, got {config['num_workers']}")
        env = env_creator(self._env_context())
        self.policy = NumpyPolicy(env.observation_space, env.action_space, config["model"],
                                  config["observation_filter"])
        if config["noise_size"] < self.policy.num_params:
            raise ValueError(f"noise_size ({config['noise_size']}) must be >= the policy's "
                             f"{self.policy.num_params} parameters")
        # One put: every worker on a node reads the same shared-memory copy, and
        # the trainer keeps only the store's view (no private second copy).
        self._noise_ref = api.put(create_shared_noise(config["noise_size"],
                                                      config.get("seed") or 123))
        self.noise = SharedNoiseTable(api.get(self._noise_ref))
        worker_cls = api.remote(num_cpus=config["num_cpus_per_worker"])(self._worker_cls)
        self._workers = [worker_cls.remote(config, env_creator, self._noise_ref, i + 1)
                         for i in range(config["num_workers"])]
        self.workers = None
        self.optimizer = None
        self._make_optimizer(config)
        self.episodes_so_far = 0
        self.timesteps_so_far = 0
        self.reward_list: list[float] = []

    def _env_context(self):
        from ...env.env_context import EnvContext
        return EnvContext(self.config["env_config"], 0)

    def _make_optimizer(self, config: dict) -> None:
        self._adam = Adam(self.policy.num_params, config["stepsize"])

    def _collect(self, theta: np.ndarray) -> tuple[list, int, int]:
        cfg = self.config
        theta_ref = api.put(theta)
        results, episodes, steps = [], 0, 0
        while episodes < cfg["episodes_per_batch"] or steps < cfg["train_batch_size"]:
            for r in api.get([w.do_rollouts.remote(theta_ref) for w in self._workers]):
                results.append(r)
                episodes += 2 * len(r["noise_indices"]) + len(r["eval_returns"])
                steps += int(np.sum(r["lengths"])) + int(np.sum(r["eval_lengths"]))
        return results, episodes, steps

    def _update(self, theta, noise_indices, returns, lengths) -> tuple[np.ndarray, dict]:
        cfg = self.config
        proc = compute_centered_ranks(returns)
        g, count = batched_weighted_sum(
            proc[:, 0] - proc[:, 1],
            (self.noise.get(i, self.policy.num_params) for i in noise_indices))
        g /= returns.size
        new = self._adam.update(theta, -g + cfg["l2_coeff"] * theta)
        return new, {"weights_norm": float(np.square(new).sum()),
                     "grad_norm": float(np.square(g).sum()), "update_ratio": float(
                         np.linalg.norm(new - theta) / (np.linalg.norm(theta) + 1e-8))}

    def _train(self) -> dict:
        theta = self.policy.get_flat_weights()
        results, episodes, steps = self._collect(theta)
        noise_indices = [i for r in results for i in r["noise_indices"]]
        returns = np.array([x for r in results for x in r["returns"]], np.float32)
        lengths = np.array([x for r in results for x in r["lengths"]], np.int64)
        eval_returns = [x for r in results for x in r["eval_returns"]]
        eval_lengths = [x for r in results for x in r["eval_lengths"]]
        theta, info = self._update(theta, noise_indices, returns, lengths)
        self.policy.set_flat_weights(theta)
        self._sync_filters()
        self.episodes_so_far += episodes
        self.timesteps_so_far += steps
        if eval_returns:
            self.reward_list.append(float(np.mean(eval_returns)))
        reported = self.reward_list[-self.config["report_length"]:]
        nan = float("nan")
        info.update(episodes_so_far=self.episodes_so_far, num_steps_sampled=self.timesteps_so_far)
        return {
            "episode_reward_mean": float(np.mean(reported)) if reported else nan,
            "episode_reward_max": float(np.max(eval_returns)) if eval_returns else nan,
            "episode_reward_min": float(np.min(eval_returns)) if eval_returns else nan,
            "episode_len_mean": float(np.mean(eval_lengths)) if eval_lengths else
            float(lengths.mean()),
            "noisy_reward_mean": float(returns.mean()),
            "episodes_this_iter": episodes, "timesteps_this_iter": steps,
            "info": info,
        }

    def _sync_filters(self) -> None:
        local = self.policy.observation_filter
        if type(local).__name__ == "NoFilter":
            return
        for f in api.get([w.get_filters.remote(True) for w in self._workers]):
            local.apply_changes(f)
        ref = api.put(local.as_serializable())
        api.get([w.sync_filters.remote(ref) for w in self._workers])

    def train(self) -> dict:
        return Trainer.train(self)

    def compute_action(self, observation, *args, **kwargs):
        """The (deterministic) action of the current parameters."""
        return self.policy.compute(observation, update_filter=False)

    def get_policy(self, policy_id: str = "default_policy"):
        return self.policy

    def get_weights(self, policies=None):
        return {"default_policy": self.policy.get_flat_weights()}

    def set_weights(self, weights):
        self.policy.set_flat_weights(weights["default_policy"])

    def __getstate__(self) -> dict:
        return {"weights": self.policy.get_flat_weights(),
                "filter": self.policy.observation_filter.as_serializable(),
                "episodes_so_far": self.episodes_so_far,
                "timesteps_so_far": self.timesteps_so_far, "reward_list": self.reward_list}

    def __setstate__(self, state: dict) -> None:
        self.policy.set_flat_weights(state["weights"])
        self.policy.observation_filter.sync(state["filter"])
        self.episodes_so_far = state["episodes_so_far"]
        self.timesteps_so_far = state.get("timesteps_so_far", 0)
        self.reward_list = list(state.get("reward_list", []))
        ref = api.put(state["filter"])
        api.get([w.sync_filters.remote(ref) for w in self._workers])

    def _stop(self) -> None:
        for w in getattr(self, "_workers", []):
            try:
                kill(w)
            except Exception:  # noqa: BLE001 - the actor may be gone already
                pass
        self._workers = []


class ESTrainer(EvolutionTrainer):
    """Evolution strategies: Adam on centered-rank-weighted antithetic noise."""

    _name = "ES"
    _default_config = DEFAULT_CONFIG
