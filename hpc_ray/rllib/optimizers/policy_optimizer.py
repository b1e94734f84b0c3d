"""``PolicyOptimizer``: how a trainer moves samples and gradients between workers."""
from __future__ import annotations

import collections

from ..evaluation.metrics import collect_episodes, summarize_episodes

__all__ = ["PolicyOptimizer"]


class PolicyOptimizer:
    """One ``step()`` = sample from the workers, then update the policies.

    Args:
        workers: the trainer's ``WorkerSet``.

    Attributes:
        num_steps_sampled, num_steps_trained: env steps so far.
        learner_stats: the last update's stats by policy (``info["learner"]``).
    """

    def __init__(self, workers) -> None:
        self.workers = workers
        self.num_steps_sampled = 0
        self.num_steps_trained = 0
        self.learner_stats: dict = {}
        self._episode_history: collections.deque = collections.deque(maxlen=1000)
        self._to_be_collected: list = []

    def step(self) -> dict:
        raise NotImplementedError

    def stats(self) -> dict:
        return {"num_steps_sampled": self.num_steps_sampled,
                "num_steps_trained": self.num_steps_trained}

    def save(self) -> list:
        return [self.num_steps_trained, self.num_steps_sampled]

    def restore(self, data: list) -> None:
        self.num_steps_trained, self.num_steps_sampled = data[0], data[1]

    def stop(self) -> None:
        pass

    def collect_metrics(self, timeout_seconds: float = 180, min_history: int = 100,
                        selected_workers=None) -> dict:
        """Episode statistics over this iteration's episodes, topped up from earlier
        ones to at least ``min_history`` (the smoothing window)."""
        episodes = collect_episodes(
            self.workers.local_worker(),
            selected_workers if selected_workers is not None
            else self.workers.remote_workers(), timeout_seconds)
        new = list(episodes)
        missing = min_history - len(episodes)
        if missing > 0:
            episodes = list(self._episode_history)[-missing:] + episodes
        self._episode_history.extend(new)
        res = summarize_episodes(episodes, new)
        res.update(info=self.stats())
        return res

    def foreach_worker(self, func):
        return self.workers.foreach_worker(func)
