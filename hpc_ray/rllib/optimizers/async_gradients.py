"""``AsyncGradientsOptimizer`` (A3C): workers compute gradients, the trainer applies them.

::

    worker k: sample() → compute_gradients(batch) ──grads (store)──▶ trainer
    trainer:  apply to the local policy as each arrives; put(weights) ──▶ worker k
              and ask it for its next gradient (the others keep working)
"""
from __future__ import annotations

from ... import api
from .policy_optimizer import PolicyOptimizer

__all__ = ["AsyncGradientsOptimizer"]


class AsyncGradientsOptimizer(PolicyOptimizer):
    """Apply gradients from the remote workers as they come (no waiting for all).

    Args:
        workers: the ``WorkerSet``.
        grads_per_step: gradients applied per ``step()``.
    """

    def __init__(self, workers, grads_per_step: int = 100) -> None:
        super().__init__(workers)
        self.grads_per_step = grads_per_step
        self._pending: dict = {}

    def _launch(self, worker, weights_ref) -> None:
        worker.set_weights.remote(weights_ref)
        batch_ref = worker.sample.remote()
        self._pending[worker.compute_gradients.remote(batch_ref)] = (worker, batch_ref)

    def step(self) -> dict:
        local = self.workers.local_worker()
        remotes = self.workers.remote_workers()
        if not remotes:
            for _ in range(self.grads_per_step):
                batch = local.sample()
                grads, info = local.compute_gradients(batch)
                local.apply_gradients(grads)
                self.num_steps_sampled += batch.count
                self.num_steps_trained += batch.count
                self.learner_stats = info.get("learner_stats", info)
            return self.learner_stats
        if not self._pending:
            ref = api.put(local.get_weights())
            for w in remotes:
                self._launch(w, ref)
        for _ in range(self.grads_per_step):
            ready, _ = api.wait(list(self._pending), num_returns=1)
            worker, _ = self._pending.pop(ready[0])
            grads, info = api.get(ready[0])
            count = info["batch_count"]
            local.apply_gradients(grads)
            self.num_steps_sampled += count
            self.num_steps_trained += count
            self.learner_stats = info.get("learner_stats", info)
            self._launch(worker, api.put(local.get_weights()))
        return self.learner_stats

    def stop(self) -> None:
        self._pending.clear()
