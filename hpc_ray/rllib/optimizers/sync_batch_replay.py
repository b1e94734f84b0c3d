"""``SyncBatchReplayOptimizer``: keep every sampled (or read) batch, learn on random
rows of them (MARWIL).

::

    workers: sample() (simulation or offline input) ──▶ trainer's ReplayBuffer
    trainer: once learning_starts rows are in, learn on train_batch_size random rows
"""
from __future__ import annotations

from ... import api
from ..policy.sample_batch import DEFAULT_POLICY_ID
from .policy_optimizer import PolicyOptimizer
from .replay_buffer import ReplayBuffer
from .sync_replay import _by_policy

__all__ = ["SyncBatchReplayOptimizer"]


class SyncBatchReplayOptimizer(PolicyOptimizer):
    """Args:
        workers: the ``WorkerSet``.
        learning_starts: rows stored before the first update.
        buffer_size: rows kept per policy.
        train_batch_size: rows per update.
    """

    def __init__(self, workers, learning_starts: int = 0, buffer_size: int = 10000,
                 train_batch_size: int = 32) -> None:
        super().__init__(workers)
        self.learning_starts = learning_starts
        self.train_batch_size = train_batch_size
        self._buffer_size = buffer_size
        self._seed = workers.local_worker().policy_config.get("seed")
        self.replay_buffers: dict[str, ReplayBuffer] = {}

    def step(self) -> dict:
        self.workers.sync_weights()
        remotes = self.workers.remote_workers()
        batches = (api.get([w.sample.remote() for w in remotes]) if remotes
                   else [self.workers.local_worker().sample()])
        for batch in batches:
            for pid, b in _by_policy(batch).items():
                buf = self.replay_buffers.get(pid)
                if buf is None:
                    buf = self.replay_buffers[pid] = ReplayBuffer(self._buffer_size, self._seed)
                buf.add_batch(b)
            self.num_steps_sampled += batch.count
        local = self.workers.local_worker()
        stats = {}
        for pid, buf in self.replay_buffers.items():
            if len(buf) < max(1, self.learning_starts) or pid not in local.policies_to_train:
                continue
            samples = buf.sample(self.train_batch_size)
            out = local.policy_map[pid].learn_on_batch(samples)
            stats[pid] = out.get("learner_stats", out)
            self.num_steps_trained += samples.count
        if stats:
            self.learner_stats = stats
        return stats.get(DEFAULT_POLICY_ID, stats)

    def stats(self) -> dict:
        out = super().stats()
        out["replay_buffers"] = {p: b.stats() for p, b in self.replay_buffers.items()}
        return out
