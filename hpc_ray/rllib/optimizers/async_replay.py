"""``AsyncReplayOptimizer``: Ape-X's distributed prioritized replay.

::

    rollout workers (actors, 1 CPU each)      replay shards (actors, num_cpus=0)
      sample() ──batch into the node store──▶ (the trainer passes only the ref)
                                          ReplayActor.add_batch(ref): rows into its
                                          prioritized ring (initial priorities from
                                          the workers' own TD errors)
    trainer (the learner)  ◀── replay() ── one request in flight per shard
      learn_on_batch ── update_priorities(idx, |td| + eps) ──▶ that shard
      every max_weight_sync_delay sampled steps a worker gets put(weights) (one
      object in the store, mapped by every worker of the node)

The trainer never fetches a sample batch: a worker's result goes from the
worker's node store to the shard that the trainer names, and the shard reads it
as read-only views of the store's copy before writing its rows into its ring.
"""
from __future__ import annotations

import random
import socket
from typing import Any

import numpy as np

from ... import api
from ..policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from .policy_optimizer import PolicyOptimizer
from .replay_buffer import PrioritizedReplayBuffer
from .sync_replay import linear_schedule

__all__ = ["AsyncReplayOptimizer", "ReplayActor"]


class ReplayActor:
    """One shard of the prioritized replay buffer (an actor).

    Args:
        num_shards: how many shards share ``learning_starts`` and ``buffer_size``.
        learning_starts: total rows stored (over all shards) before replay starts.
        buffer_size: total rows kept (over all shards).
        train_batch_size: rows per ``replay()``.
        prioritized_replay_alpha, prioritized_replay_beta,
        prioritized_replay_eps: as for ``PrioritizedReplayBuffer``.
        seed: seeds the sampling.
    """

    def __init__(self, num_shards: int, learning_starts: int, buffer_size: int,
                 train_batch_size: int, prioritized_replay_alpha: float,
                 prioritized_replay_beta: float, prioritized_replay_eps: float,
                 seed: int | None = None) -> None:
        self.replay_starts = learning_starts // num_shards
        self.train_batch_size = train_batch_size
        self.beta = prioritized_replay_beta
        self.eps = prioritized_replay_eps
        self.buffer = PrioritizedReplayBuffer(max(1, buffer_size // num_shards),
                                              prioritized_replay_alpha, seed)

    def add_batch(self, batch: SampleBatch) -> int:
        """Store a worker's batch; return its row count."""
        td = batch.get("td_error")
        prios = None if td is None else np.abs(np.asarray(td, np.float64)) + self.eps
        self.buffer.add_batch(batch, prios)
        return batch.count

    def replay(self) -> SampleBatch | None:
        """``train_batch_size`` rows by priority, or None before ``learning_starts``."""
        if len(self.buffer) < max(1, self.replay_starts):
            return None
        return self.buffer.sample(self.train_batch_size, beta=self.beta)

    def update_priorities(self, idxes: np.ndarray, priorities: np.ndarray) -> None:
        self.buffer.update_priorities(idxes, priorities)

    def stats(self) -> dict:
        return dict(self.buffer.stats(), host=socket.gethostname())


class AsyncReplayOptimizer(PolicyOptimizer):
    """Ape-X: sampling, replay and learning overlap; the trainer is the learner.

    Args:
        workers: the ``WorkerSet`` (at least one remote worker).
        learning_starts, buffer_size, train_batch_size: over all shards.
        prioritized_replay_alpha, prioritized_replay_beta, prioritized_replay_eps:
            as for ``PrioritizedReplayBuffer``.
        num_replay_buffer_shards: replay actors.
        max_weight_sync_delay: sampled steps after which a worker gets new weights.
        sample_batch_size: steps per worker ``sample()`` (for the weight-sync count).
        seed: seeds the shards.

    Raises:
        ValueError: no remote workers, or fewer than one shard.
    """

    def __init__(self, workers, learning_starts: int = 1000, buffer_size: int = 10000,
                 prioritized_replay: bool = True, prioritized_replay_alpha: float = 0.6,
                 prioritized_replay_beta: float = 0.4, prioritized_replay_eps: float = 1e-6,
                 train_batch_size: int = 512, sample_batch_size: int = 50,
                 num_replay_buffer_shards: int = 1, max_weight_sync_delay: int = 400,
                 debug: bool = False, seed: int | None = None) -> None:
        super().__init__(workers)
        if not workers.remote_workers():
            raise ValueError("Ape-X needs num_workers >= 1: the rollout workers feed the "
                             "replay shards while the trainer learns")
        if num_replay_buffer_shards < 1:
            raise ValueError(f"optimizer.num_replay_buffer_shards must be >= 1, got "
                             f"{num_replay_buffer_shards!r}")
        self.train_batch_size = train_batch_size
        self.max_weight_sync_delay = max_weight_sync_delay
        self.sample_batch_size = sample_batch_size
        self.eps = prioritized_replay_eps
        actor = api.remote(num_cpus=0)(ReplayActor)
        self.replay_actors = [
            actor.remote(num_replay_buffer_shards, learning_starts, buffer_size,
                         train_batch_size, prioritized_replay_alpha, prioritized_replay_beta,
                         prioritized_replay_eps, None if seed is None else seed + i)
            for i in range(num_replay_buffer_shards)]
        self._rng = random.Random(seed)
        self._samples: dict[Any, Any] = {}        # sample ref -> worker
        self._replays: dict[Any, Any] = {}        # replay ref -> shard
        self._idle_shards: list = []              # shards that returned None
        self._counts: list = []                   # add_batch refs -> row counts
        self._steps_since_sync: dict[Any, int] = {}
        self._weights_ref = None
        self.num_weight_syncs = 0
        self.num_samples_dropped = 0

    def _launch(self) -> None:
        for w in self.workers.remote_workers():
            self._steps_since_sync[w] = 0
            self._samples[w.sample.remote()] = w
        for shard in self.replay_actors:
            self._replays[shard.replay.remote()] = shard

    def step(self) -> dict:
        if not self._samples:
            self._launch()
        pending = list(self._samples) + list(self._replays)
        api.wait(pending, num_returns=1)
        ready, _ = api.wait(pending, num_returns=len(pending), timeout=0)
        ready_set = set(ready)
        for ref in [r for r in self._samples if r in ready_set]:
            self._on_sample(ref)
        for ref in [r for r in self._replays if r in ready_set]:
            self._on_replay(ref)
        self._collect_counts()
        return self.learner_stats

    def _on_sample(self, ref) -> None:
        worker = self._samples.pop(ref)
        shard = self._rng.choice(self.replay_actors)
        # The ref, not the batch: the shard reads it from the store.
        self._counts.append(shard.add_batch.remote(ref))
        if shard in self._idle_shards:
            self._idle_shards.remove(shard)
            self._replays[shard.replay.remote()] = shard
        self._steps_since_sync[worker] += self.sample_batch_size
        if self._steps_since_sync[worker] >= self.max_weight_sync_delay:
            if self._weights_ref is None:
                self._weights_ref = api.put(self.workers.local_worker().get_weights())
            worker.set_weights.remote(self._weights_ref)
            self._steps_since_sync[worker] = 0
            self.num_weight_syncs += 1
        self._samples[worker.sample.remote()] = worker

    def _on_replay(self, ref) -> None:
        shard = self._replays.pop(ref)
        batch = api.get(ref)
        if batch is None:
            self._idle_shards.append(shard)
            return
        # Ask for the next batch before learning on this one: replay overlaps learning.
        self._replays[shard.replay.remote()] = shard
        local = self.workers.local_worker()
        out = local.policy_map[DEFAULT_POLICY_ID].learn_on_batch(batch)
        if "td_error" in out:
            shard.update_priorities.remote(batch["batch_indexes"],
                                           np.abs(out["td_error"]) + self.eps)
        self.learner_stats = {DEFAULT_POLICY_ID: out.get("learner_stats", out)}
        self.num_steps_trained += batch.count
        self._weights_ref = None

    def _collect_counts(self) -> None:
        if not self._counts:
            return
        done, _ = api.wait(self._counts, num_returns=len(self._counts), timeout=0)
        if done:
            self.num_steps_sampled += int(sum(api.get(done)))
            done_set = set(done)
            self._counts = [r for r in self._counts if r not in done_set]

    def stats(self) -> dict:
        out = super().stats()
        out.update(num_weight_syncs=self.num_weight_syncs,
                   num_replay_shards=len(self.replay_actors))
        return out

    def replay_stats(self) -> list[dict]:
        """Each shard's buffer statistics (and the host it runs on)."""
        return api.get([s.stats.remote() for s in self.replay_actors])

    def stop(self) -> None:
        from ...actors import kill
        for shard in self.replay_actors:
            try:
                kill(shard)
            except Exception:  # noqa: BLE001 - the job may be ending already
                pass
        self.replay_actors = []
        self._samples.clear()
        self._replays.clear()
