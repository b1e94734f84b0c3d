"""Experience replay: a ring of numpy columns, optionally prioritized (Ray 0.7
``optimizers/replay_buffer.py``).

Rows are stored column by column in preallocated arrays (``obs``, ``actions``,
``rewards``, ``new_obs``, ``dones`` and the extra columns every batch so far had), so
``add_batch`` is one slice assignment per column and ``sample`` one fancy index
per column: no Python object per transition, as in the hand-written
shared-memory buffer of the docs' seed. ``PrioritizedReplayBuffer`` keeps its
priorities in a sum tree and a min tree (flat arrays, updated and searched a
whole batch at a time, level by level).
"""
from __future__ import annotations

import numpy as np

from ..policy.sample_batch import SampleBatch

__all__ = ["ReplayBuffer", "PrioritizedReplayBuffer"]


#: The columns every stored batch must have.
_TRANSITION = (SampleBatch.CUR_OBS, SampleBatch.ACTIONS, SampleBatch.REWARDS,
               SampleBatch.NEXT_OBS, SampleBatch.DONES)


class ReplayBuffer:
    """A FIFO buffer of transitions sampled uniformly.

    Args:
        size: the most transitions kept; the oldest are overwritten.
        seed: seeds the sampling.
    """

    def __init__(self, size: int, seed: int | None = None) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"replay buffer size must be an int >= 1, got {size!r}")
        self._maxsize = size
        self._cols: dict[str, np.ndarray] = {}
        self._next_idx = 0
        self._len = 0
        self._rng = np.random.default_rng(seed)
        self._num_added = 0
        self._num_sampled = 0

    def __len__(self) -> int:
        return self._len

    def add_batch(self, batch: SampleBatch) -> np.ndarray:
        """Store every row of ``batch``; return the indexes they went to."""
        n = batch.count
        if n == 0:
            return np.zeros(0, np.int64)
        if not self._cols:
            for k, v in batch.items():
                if isinstance(v, np.ndarray) and v.dtype != object:
                    self._cols[k] = np.zeros((self._maxsize,) + v.shape[1:], v.dtype)
        if n > self._maxsize:
            batch = batch.slice(n - self._maxsize, n)
            n = self._maxsize
        idx = (self._next_idx + np.arange(n)) % self._maxsize
        for k in [k for k in self._cols if k not in batch]:
            if k in _TRANSITION:
                raise ValueError(f"batch lacks column {k!r} of every transition (it has "
                                 f"{sorted(batch.keys())})")
            # An extra column some sources have and others lack (a sampler's
            # q_values, offline data's t): kept only while every batch has it.
            del self._cols[k]
        for k, col in self._cols.items():
            col[idx] = batch[k]
        self._next_idx = int((self._next_idx + n) % self._maxsize)
        self._len = min(self._maxsize, self._len + n)
        self._num_added += n
        return idx

    def add(self, obs_t, action, reward, obs_tp1, done, weight=None) -> None:
        """Store one transition (Ray 0.7's signature)."""
        self.add_batch(SampleBatch({SampleBatch.CUR_OBS: [obs_t], SampleBatch.ACTIONS: [action],
                                    SampleBatch.REWARDS: np.asarray([reward], np.float32),
                                    SampleBatch.NEXT_OBS: [obs_tp1],
                                    SampleBatch.DONES: [done]}))

    def _take(self, idx: np.ndarray) -> SampleBatch:
        self._num_sampled += len(idx)
        return SampleBatch({k: v[idx] for k, v in self._cols.items()})

    def sample(self, batch_size: int) -> SampleBatch:
        """``batch_size`` transitions drawn uniformly with replacement."""
        if self._len == 0:
            raise ValueError("cannot sample from an empty replay buffer: add batches first "
                             "(or raise learning_starts)")
        idx = self._rng.integers(0, self._len, batch_size)
        out = self._take(idx)
        out["batch_indexes"] = idx
        return out

    def stats(self, debug: bool = False) -> dict:
        return {"added_count": self._num_added, "sampled_count": self._num_sampled,
                "num_entries": self._len, "est_size_bytes": self.nbytes()}

    def nbytes(self) -> int:
        return int(sum(c.nbytes for c in self._cols.values()))


class PrioritizedReplayBuffer(ReplayBuffer):
    """Replay in proportion to priority ** ``alpha`` (Schaul et al. 2015).

    Args:
        size: the most transitions kept.
        alpha: how much prioritization is used (0: uniform).
        seed: seeds the sampling.
    """

    def __init__(self, size: int, alpha: float = 0.6, seed: int | None = None) -> None:
        super().__init__(size, seed)
        if alpha < 0:
            raise ValueError(f"prioritized_replay_alpha must be >= 0, got {alpha!r}")
        self._alpha = alpha
        cap = 1
        while cap < size:
            cap *= 2
        self._cap = cap
        self._sum = np.zeros(2 * cap, np.float64)
        self._min = np.full(2 * cap, np.inf, np.float64)
        self._max_priority = 1.0

    def add_batch(self, batch: SampleBatch, priorities: np.ndarray | None = None) -> np.ndarray:
        """Store ``batch``'s rows at the highest priority seen (or ``priorities``)."""
        idx = super().add_batch(batch)
        if priorities is None:
            pr = np.full(len(idx), self._max_priority)
        else:
            pr = np.asarray(priorities, np.float64)[-len(idx):]
            self._max_priority = max(self._max_priority, float(pr.max(initial=0.0)))
        self._set(idx, pr ** self._alpha)
        return idx

    def _set(self, idx: np.ndarray, values: np.ndarray) -> None:
        # Last write wins for duplicate indexes (as a loop of single updates would).
        idx, first = np.unique(idx[::-1], return_index=True)
        values = values[::-1][first]
        node = idx + self._cap
        self._sum[node] = values
        self._min[node] = values
        node = np.unique(node // 2)
        while node[0] >= 1:
            self._sum[node] = self._sum[2 * node] + self._sum[2 * node + 1]
            self._min[node] = np.minimum(self._min[2 * node], self._min[2 * node + 1])
            if node[0] == 1:
                break
            node = np.unique(node // 2)

    def _find_prefixsum_idx(self, mass: np.ndarray) -> np.ndarray:
        node = np.ones(len(mass), np.int64)
        mass = mass.copy()
        while node[0] < self._cap:
            left = 2 * node
            go_right = mass >= self._sum[left]
            mass -= np.where(go_right, self._sum[left], 0.0)
            node = left + go_right
        return np.minimum(node - self._cap, self._len - 1)

    def sample(self, batch_size: int, beta: float = 0.4) -> SampleBatch:
        """``batch_size`` transitions by priority, with importance ``weights``
        (normalized by the largest possible) and ``batch_indexes`` columns."""
        if self._len == 0:
            raise ValueError("cannot sample from an empty replay buffer: add batches first "
                             "(or raise learning_starts)")
        if beta <= 0:
            raise ValueError(f"prioritized_replay_beta must be > 0, got {beta!r}")
        total = self._sum[1]
        # Stratified: one draw in each of batch_size equal slices of the mass.
        mass = (np.arange(batch_size) + self._rng.random(batch_size)) * (total / batch_size)
        idx = self._find_prefixsum_idx(mass)
        p = self._sum[idx + self._cap] / total
        p_min = self._min[1] / total
        max_weight = (p_min * self._len) ** (-beta)
        weights = ((p * self._len) ** (-beta) / max_weight).astype(np.float32)
        out = self._take(idx)
        out["weights"] = weights
        out["batch_indexes"] = idx
        return out

    def update_priorities(self, idxes, priorities) -> None:
        """Set the priorities of sampled rows (from their new TD errors)."""
        idxes = np.asarray(idxes, np.int64)
        pr = np.asarray(priorities, np.float64)
        if len(idxes) != len(pr):
            raise ValueError(f"{len(idxes)} indexes but {len(pr)} priorities")
        if (pr <= 0).any() or not np.isfinite(pr).all():
            raise ValueError("priorities must be finite and > 0 (add prioritized_replay_eps)")
        self._set(idxes, pr ** self._alpha)
        self._max_priority = max(self._max_priority, float(pr.max(initial=0.0)))

    def nbytes(self) -> int:
        return super().nbytes() + self._sum.nbytes + self._min.nbytes
