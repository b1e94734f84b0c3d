"""``SyncReplayOptimizer``: sample, store in replay buffers, learn from replayed rows.

::

    trainer: put(weights) ──▶ workers          (WorkerSet.sync_weights, one object)
    workers: sample() ──batches (store)──▶ trainer ──▶ one replay buffer per policy
    trainer: once learning_starts steps are in, each step replays train_batch_size
             rows per policy, learns on them, and (prioritized) writes their new
             |TD error| + eps back as priorities
"""
from __future__ import annotations

import numpy as np

from ... import api
from ..policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch
from .policy_optimizer import PolicyOptimizer
from .replay_buffer import PrioritizedReplayBuffer, ReplayBuffer

__all__ = ["SyncReplayOptimizer", "linear_schedule"]


def linear_schedule(t: float, horizon: float, initial: float, final: float) -> float:
    """``initial`` moving linearly to ``final`` over ``horizon`` steps, then ``final``."""
    frac = min(1.0, t / horizon) if horizon > 0 else 1.0
    return initial + frac * (final - initial)


class SyncReplayOptimizer(PolicyOptimizer):
    """Replay-based learning on the local worker (DQN, DDPG, TD3).

    Args:
        workers: the ``WorkerSet``.
        learning_starts: env steps sampled before the first update.
        buffer_size: transitions kept per policy.
        prioritized_replay: sample by priority (else uniformly).
        prioritized_replay_alpha, prioritized_replay_beta, prioritized_replay_eps:
            prioritization exponent, initial importance exponent, priority floor.
        final_prioritized_replay_beta, beta_annealing_fraction,
        schedule_max_timesteps: beta moves to its final value over this fraction
            of the schedule.
        train_batch_size: rows replayed per update.
        sample_batch_size: unused (the workers' own setting decides).
    """

    def __init__(self, workers, learning_starts: int = 1000, buffer_size: int = 10000,
                 prioritized_replay: bool = True, prioritized_replay_alpha: float = 0.6,
                 prioritized_replay_beta: float = 0.4, prioritized_replay_eps: float = 1e-6,
                 schedule_max_timesteps: int = 100000, beta_annealing_fraction: float = 0.2,
                 final_prioritized_replay_beta: float = 0.4, train_batch_size: int = 32,
                 sample_batch_size: int = 4) -> None:
        super().__init__(workers)
        self.learning_starts = learning_starts
        self.train_batch_size = train_batch_size
        self.prioritized_replay = prioritized_replay
        self.prioritized_replay_eps = prioritized_replay_eps
        self._beta = (prioritized_replay_beta, final_prioritized_replay_beta,
                      schedule_max_timesteps * beta_annealing_fraction)
        seed = workers.local_worker().policy_config.get("seed")
        self._make_buffer = (
            (lambda: PrioritizedReplayBuffer(buffer_size, prioritized_replay_alpha, seed))
            if prioritized_replay else (lambda: ReplayBuffer(buffer_size, seed)))
        self.replay_buffers: dict[str, ReplayBuffer] = {}

    def step(self) -> dict:
        self.workers.sync_weights()
        remotes = self.workers.remote_workers()
        if remotes:
            batches = api.get([w.sample.remote() for w in remotes])
        else:
            batches = [self.workers.local_worker().sample()]
        for batch in batches:
            for pid, b in _by_policy(batch).items():
                buf = self.replay_buffers.get(pid)
                if buf is None:
                    buf = self.replay_buffers[pid] = self._make_buffer()
                buf.add_batch(b)
            self.num_steps_sampled += batch.count
        if self.num_steps_sampled >= self.learning_starts:
            self._optimize()
        return self.learner_stats

    def _optimize(self) -> None:
        local = self.workers.local_worker()
        beta = linear_schedule(self.num_steps_sampled, self._beta[2], self._beta[0],
                               self._beta[1])
        stats = {}
        for pid, buf in self.replay_buffers.items():
            if pid not in local.policies_to_train:
                continue
            if self.prioritized_replay:
                batch = buf.sample(self.train_batch_size, beta=beta)
            else:
                batch = buf.sample(self.train_batch_size)
            out = local.policy_map[pid].learn_on_batch(batch)
            if self.prioritized_replay and "td_error" in out:
                buf.update_priorities(batch["batch_indexes"],
                                      np.abs(out["td_error"]) + self.prioritized_replay_eps)
            stats[pid] = out.get("learner_stats", out)
        self.learner_stats = stats
        self.num_steps_trained += self.train_batch_size * len(stats)

    def stats(self) -> dict:
        out = super().stats()
        out["replay_shard_0"] = {pid: b.stats() for pid, b in self.replay_buffers.items()}
        return out


def _by_policy(batch) -> dict:
    if isinstance(batch, MultiAgentBatch):
        return batch.policy_batches
    if isinstance(batch, SampleBatch):
        return {DEFAULT_POLICY_ID: batch}
    raise TypeError(f"expected a SampleBatch or MultiAgentBatch, got {type(batch).__name__}")
