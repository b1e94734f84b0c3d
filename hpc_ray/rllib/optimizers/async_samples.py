"""``AsyncSamplesOptimizer`` (IMPALA, APPO): workers never wait for the learner.

::

    worker k: sample() ──batch (store)──▶ learner queue; at once: sample() again
              with the newest weights ref it was given
    learner:  once train_batch_size steps are queued, learn on them (V-trace
              corrects for the workers' slightly older policies); put(weights)
              once; every worker's next sample call carries that ref
"""
from __future__ import annotations

from ... import api
from ..policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from .policy_optimizer import PolicyOptimizer

__all__ = ["AsyncSamplesOptimizer"]


class AsyncSamplesOptimizer(PolicyOptimizer):
    """Keep one ``sample()`` in flight per worker; learn as batches arrive.

    Args:
        workers: the ``WorkerSet``.
        train_batch_size: env steps per learner update.
        num_sgd_iter: passes over each train batch.
    """

    def __init__(self, workers, train_batch_size: int = 500, num_sgd_iter: int = 1,
                 **_ignored) -> None:
        super().__init__(workers)
        self.train_batch_size = train_batch_size
        self.num_sgd_iter = num_sgd_iter
        self._in_flight: dict = {}
        self._queue: list = []
        self._queued = 0
        self._weights_ref = None

    def _sample_async(self, worker) -> None:
        worker.set_weights.remote(self._weights_ref)
        self._in_flight[worker.sample.remote()] = worker

    def step(self) -> dict:
        local = self.workers.local_worker()
        remotes = self.workers.remote_workers()
        if not remotes:
            batch = local.sample()
            self.num_steps_sampled += batch.count
            return self._learn([batch])
        if self._weights_ref is None:
            self._weights_ref = api.put(local.get_weights())
            for w in remotes:
                self._sample_async(w)
        while self._queued < self.train_batch_size:
            ready, _ = api.wait(list(self._in_flight), num_returns=1)
            worker = self._in_flight.pop(ready[0])
            batch = api.get(ready[0])
            self._queue.append(batch)
            self._queued += batch.count
            self.num_steps_sampled += batch.count
            self._sample_async(worker)
        batches, self._queue, self._queued = self._queue, [], 0
        stats = self._learn(batches)
        self._weights_ref = api.put(local.get_weights())
        return stats

    def _learn(self, batches: list) -> dict:
        local = self.workers.local_worker()
        policy = local.policy_map[DEFAULT_POLICY_ID]
        # One batch per worker fragment keeps each trajectory contiguous.
        batch = SampleBatch.concat_samples(batches)
        info: dict = {}
        for _ in range(self.num_sgd_iter):
            info = policy.learn_on_batch(batch)
        self.num_steps_trained += batch.count
        self.learner_stats = {DEFAULT_POLICY_ID: info.get("learner_stats", info)}
        return self.learner_stats

    def stop(self) -> None:
        self._in_flight.clear()
