"""``LocalMultiGPUOptimizer``: synchronous samples, then epochs of minibatch SGD
on the learner's device (Ray 0.7's default optimizer for PPO).

::

    trainer: put(weights) ──▶ workers            (WorkerSet.sync_weights, one object)
    workers: sample() ──batches (store)──▶ trainer, until train_batch_size steps
             (straggler_mitigation: the first to answer, the rest discarded)
    trainer: standardize_fields per policy batch, then num_sgd_iter epochs of
             shuffled sgd_batch_size minibatches on each trainable policy of the
             local worker, on that policy's device (CUDA with the trainer's
             num_gpus > 0 and a GPU, else the CPU); the stats are averaged over
             the last epoch's minibatches, as in 0.7

In 0.7 this was TensorFlow only: it split each minibatch over ``num_gpus``
towers. Here the policy is torch and trains on its one device; ``num_gpus > 1``
does not split minibatches across GPUs.
"""
from __future__ import annotations

import logging
import numbers
import time

import numpy as np

from ... import api
from ..policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch
from ..utils.sgd import minibatches, policy_max_seq_len
from .sync_samples import SyncSamplesOptimizer, collect_samples

__all__ = ["LocalMultiGPUOptimizer"]

logger = logging.getLogger(__name__)


class LocalMultiGPUOptimizer(SyncSamplesOptimizer):
    """A synchronous optimizer that runs minibatch SGD on the learner's device.

    Args:
        workers: the ``WorkerSet``.
        sgd_batch_size: rows per SGD minibatch.
        num_sgd_iter: passes (epochs) over each train batch.
        sample_batch_size: steps per env per worker ``sample()`` (what one
            sample request in flight is worth).
        num_envs_per_worker: envs per worker.
        train_batch_size: env steps per ``step()``.
        num_gpus: the trainer's GPUs; the policies are on CUDA when it is > 0
            and torch sees a GPU (``WorkerSet`` builds the learner so).
        standardize_fields: columns standardized per train batch (``advantages``).
        straggler_mitigation: take the first ``train_batch_size`` steps to arrive
            and discard the samples still in flight (0.6's sampling).

    Raises:
        ValueError: ``sgd_batch_size`` or ``num_sgd_iter`` below 1.
    """

    def __init__(self, workers, sgd_batch_size: int = 128, num_sgd_iter: int = 10,
                 sample_batch_size: int = 200, num_envs_per_worker: int = 1,
                 train_batch_size: int = 1024, num_gpus: float = 0,
                 standardize_fields=(), straggler_mitigation: bool = False) -> None:
        if int(sgd_batch_size) < 1:
            raise ValueError(f"sgd_batch_size must be >= 1, got {sgd_batch_size!r}")
        if int(num_sgd_iter) < 1:
            raise ValueError(f"num_sgd_iter must be >= 1, got {num_sgd_iter!r}")
        super().__init__(workers, num_sgd_iter=int(num_sgd_iter),
                         sgd_minibatch_size=int(sgd_batch_size),
                         train_batch_size=int(train_batch_size),
                         standardize_fields=list(standardize_fields or ()))
        self.batch_size = int(sgd_batch_size)
        self.sample_batch_size = sample_batch_size
        self.num_envs_per_worker = num_envs_per_worker
        self.num_gpus = num_gpus
        self.straggler_mitigation = straggler_mitigation
        local = workers.local_worker()
        #: Trainable policy id -> policy (0.7's attribute).
        self.policies = dict(local.foreach_trainable_policy(lambda p, pid: (pid, p)))
        #: The devices the policies train on ("cpu", "cuda", ...).
        self.devices = sorted({str(getattr(p, "device", "cpu")) for p in self.policies.values()})
        if num_gpus and not any(d.startswith("cuda") for d in self.devices):
            logger.warning("LocalMultiGPUOptimizer: num_gpus=%s but the policies are on %s "
                           "(torch sees no CUDA device here): training on the CPU",
                           num_gpus, self.devices)
        self._timers = {"sample": 0.0, "load": 0.0, "grad": 0.0, "update": 0.0}

    def step(self) -> dict:
        t0 = time.perf_counter()
        self.workers.sync_weights()
        t1 = time.perf_counter()
        if self.straggler_mitigation and self.workers.remote_workers():
            samples = _collect_straggler_mitigation(self.workers.remote_workers(),
                                                    self.train_batch_size)
        else:
            samples = collect_samples(self.workers, self.train_batch_size)
        self.num_steps_sampled += samples.count
        by_policy = (samples.policy_batches if isinstance(samples, MultiAgentBatch)
                     else {DEFAULT_POLICY_ID: samples})
        t2 = time.perf_counter()
        loaded = {pid: self._standardized(by_policy[pid])
                  for pid in self.policies if pid in by_policy}
        t3 = time.perf_counter()
        fetches = {}
        for pid, batch in loaded.items():
            fetches[pid], rows = self._sgd_epochs(self.policies[pid], batch)
            self.num_steps_trained += rows
        t4 = time.perf_counter()
        for key, dt in (("update", t1 - t0), ("sample", t2 - t1), ("load", t3 - t2),
                        ("grad", t4 - t3)):
            self._timers[key] = dt
        self.learner_stats = fetches
        return fetches

    def _sgd_epochs(self, policy, batch: SampleBatch) -> tuple[dict, int]:
        """``num_sgd_iter`` epochs; the last epoch's stats averaged, and the rows
        of one epoch (those of an uneven last minibatch are dropped, as 0.7's)."""
        size = self.batch_size
        max_seq_len = policy_max_seq_len(policy)
        stats: list[dict] = []
        rows = 0
        for _ in range(self.num_sgd_iter):
            parts = ([batch] if size >= batch.count
                     else minibatches(batch, size, self._rng, max_seq_len))
            stats, rows = [], 0
            for minibatch in parts:
                out = policy.learn_on_batch(minibatch)
                stats.append(out.get("learner_stats", out))
                rows += minibatch.count
        return _averaged(stats), rows

    def stats(self) -> dict:
        return dict(super().stats(),
                    sample_time_ms=round(1000 * self._timers["sample"], 3),
                    load_time_ms=round(1000 * self._timers["load"], 3),
                    grad_time_ms=round(1000 * self._timers["grad"], 3),
                    update_time_ms=round(1000 * self._timers["update"], 3),
                    learner=self.learner_stats)


def _averaged(stats: list[dict]) -> dict:
    """Each numeric stat's mean over the minibatches; others: the last value."""
    if not stats:
        return {}
    out = {}
    for key, last in stats[-1].items():
        values = [s[key] for s in stats if key in s]
        if all(isinstance(v, numbers.Number) or (isinstance(v, np.ndarray) and v.ndim == 0)
               for v in values):
            out[key] = float(np.mean([float(v) for v in values]))
        else:
            out[key] = last
    return out


def _collect_straggler_mitigation(remotes: list, train_batch_size: int) -> SampleBatch:
    """0.6's sampling: keep one request in flight per worker, take batches as they
    come until ``train_batch_size`` steps, and discard the requests left."""
    in_flight = {w.sample.remote(): w for w in remotes}
    batches, steps = [], 0
    while steps < train_batch_size:
        [ref], _ = api.wait(list(in_flight), num_returns=1)
        worker = in_flight.pop(ref)
        in_flight[worker.sample.remote()] = worker
        batch = api.get(ref)
        batches.append(batch)
        steps += batch.count
    logger.debug("discarding %d sample requests", len(in_flight))
    return SampleBatch.concat_samples(batches)
