"""Synchronous optimizers: gather ``train_batch_size`` steps, then learn locally.

::

    trainer: put(weights) ──▶ workers         (WorkerSet.sync_weights, one object)
    workers: sample() ──batches (store)──▶ trainer, until train_batch_size steps
    trainer: local worker learns: one pass (PG, A2C) or num_sgd_iter epochs of
             shuffled sgd_minibatch_size minibatches (PPO; of whole sequences
             for a recurrent policy: utils/sgd.py)
"""
from __future__ import annotations

import numpy as np

from ... import api
from ..policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch
from ..utils.sgd import minibatches, policy_max_seq_len
from .policy_optimizer import PolicyOptimizer

__all__ = ["SyncSamplesOptimizer", "collect_samples"]


def collect_samples(workers, train_batch_size: int):
    """Sample from the remote workers (or the local one) until ``train_batch_size``."""
    batches, steps = [], 0
    remotes = workers.remote_workers()
    if not remotes:
        while steps < train_batch_size:
            b = workers.local_worker().sample()
            batches.append(b)
            steps += b.count
        return SampleBatch.concat_samples(batches)
    in_flight = {w.sample.remote(): w for w in remotes}
    while steps < train_batch_size:
        ready, _ = api.wait(list(in_flight), num_returns=1)
        ref = ready[0]
        worker = in_flight.pop(ref)
        b = api.get(ref)
        batches.append(b)
        steps += b.count
        # Ask again only while the batches in flight may not be enough.
        if steps + len(in_flight) * b.count < train_batch_size:
            in_flight[worker.sample.remote()] = worker
    # The batches still in flight were sampled with the current weights: keep them.
    if in_flight:
        for b in api.get(list(in_flight)):
            batches.append(b)
    return SampleBatch.concat_samples(batches)


class SyncSamplesOptimizer(PolicyOptimizer):
    """Sample synchronously, then SGD on the local worker's policies.

    Args:
        workers: the ``WorkerSet``.
        num_sgd_iter: passes over each train batch.
        sgd_minibatch_size: rows per SGD step (0: the whole batch at once).
        train_batch_size: env steps per ``step()``.
        standardize_fields: columns standardized per train batch (``advantages``).
    """

    def __init__(self, workers, num_sgd_iter: int = 1, sgd_minibatch_size: int = 0,
                 train_batch_size: int = 200, standardize_fields=()) -> None:
        super().__init__(workers)
        self.num_sgd_iter = num_sgd_iter
        self.sgd_minibatch_size = sgd_minibatch_size
        self.train_batch_size = train_batch_size
        self.standardize_fields = tuple(standardize_fields)
        self._rng = np.random.default_rng(workers.local_worker().policy_config.get("seed"))

    def step(self) -> dict:
        self.workers.sync_weights()
        samples = collect_samples(self.workers, self.train_batch_size)
        self.num_steps_sampled += samples.count
        local = self.workers.local_worker()
        by_policy = (samples.policy_batches if isinstance(samples, MultiAgentBatch)
                     else {DEFAULT_POLICY_ID: samples})
        stats = {}
        for pid, batch in by_policy.items():
            if pid not in local.policies_to_train:
                continue
            batch = self._standardized(batch)
            stats[pid] = self._sgd(local.policy_map[pid], batch)
        self.learner_stats = stats
        self.num_steps_trained += samples.count
        return stats

    def _standardized(self, batch: SampleBatch) -> SampleBatch:
        if not self.standardize_fields:
            return batch
        cols = dict(batch.items())
        for field in self.standardize_fields:
            x = np.asarray(cols[field], np.float32)
            cols[field] = (x - x.mean()) / max(1e-4, float(x.std()))
        return SampleBatch(cols)

    def _sgd(self, policy, batch: SampleBatch) -> dict:
        size = self.sgd_minibatch_size
        last: dict = {}
        for _ in range(self.num_sgd_iter):
            if not size or size >= batch.count:
                last = policy.learn_on_batch(batch)
                continue
            for minibatch in minibatches(batch, size, self._rng, policy_max_seq_len(policy)):
                last = policy.learn_on_batch(minibatch)
        return last.get("learner_stats", last)
