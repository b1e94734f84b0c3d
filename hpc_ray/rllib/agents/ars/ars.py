"""Augmented Random Search (ARS, Mania et al. 2018): ES's machinery, ARS's update.

The top ``rollouts_used`` directions (by the better of their two returns) step
the parameters: ``theta += stepsize * sum((R+ - R-) * delta) / (b * std(R))``.
"""
from __future__ import annotations

import numpy as np

from ..es.es import EvolutionTrainer
from ..es.utils import batched_weighted_sum
from ...models.catalog import MODEL_DEFAULTS
from ..trainer import with_common_config

__all__ = ["ARSTrainer", "DEFAULT_CONFIG"]

DEFAULT_CONFIG = with_common_config({
    "noise_stdev": 0.02,
    "num_rollouts": 32,
    "rollouts_used": 32,
    "num_workers": 2,
    "sgd_stepsize": 0.01,
    "observation_filter": "MeanStdFilter",
    # 25M float32 = 100 MB, held once per node (Ray 0.7: 250M = 1 GB).
    "noise_size": 25000000,
    "eval_prob": 0.03,
    "report_length": 10,
    "offset": 0,
    "model": dict(MODEL_DEFAULTS, fcnet_hiddens=[]),
})


class ARSTrainer(EvolutionTrainer):
    """Augmented random search with a linear policy by default."""

    _name = "ARS"
    _default_config = DEFAULT_CONFIG

    def _make_optimizer(self, config: dict) -> None:
        if config["rollouts_used"] > config["num_rollouts"]:
            raise ValueError(f"rollouts_used ({config['rollouts_used']}) must be <= "
                             f"num_rollouts ({config['num_rollouts']})")
        # ES's loop reads these two keys; ARS counts rollouts instead.
        self.config["episodes_per_batch"] = 2 * config["num_rollouts"]
        self.config["train_batch_size"] = 0

    def _update(self, theta, noise_indices, returns, lengths):
        cfg = self.config
        used = min(cfg["rollouts_used"], len(noise_indices))
        best = np.argsort(-returns.max(axis=1))[:used]
        top = returns[best]
        std = float(top.std()) or 1.0
        g, _ = batched_weighted_sum(
            top[:, 0] - top[:, 1],
            (self.noise.get(noise_indices[i], self.policy.num_params) for i in best))
        g = g / (used * std)
        new = (theta + cfg["sgd_stepsize"] * g).astype(np.float32)
        return new, {"weights_norm": float(np.square(new).sum()),
                     "grad_norm": float(np.square(g).sum())}
