"""``minibatches``: shuffled SGD minibatches of a train batch (Ray's ``utils/sgd.py``).

A feed-forward policy's rows are shuffled one by one. A recurrent policy's
rows are cut into the sequences it learns on (``models/lstm.py``) and whole
sequences are shuffled: each minibatch holds a random set of sequences, in
their original order, so that cutting the minibatch again gives the same
sequences (each starting from its recorded ``state_in_N``).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..models.lstm import batch_sequence_lengths
from ..policy.sample_batch import SampleBatch

__all__ = ["minibatches", "policy_max_seq_len"]


def policy_max_seq_len(policy) -> int | None:
    """``max_seq_len`` of a policy with RNN state, None for a feed-forward one."""
    if not policy.get_initial_state():
        return None
    model_config = (getattr(policy, "config", None) or {}).get("model") or {}
    return int(model_config.get("max_seq_len", 20))


def minibatches(batch: SampleBatch, size: int, rng: np.random.Generator,
                max_seq_len: int | None = None) -> Iterator[SampleBatch]:
    """``batch.count // size`` shuffled minibatches of about ``size`` rows (rows
    left over from an uneven split are dropped, as Ray drops them).

    Args:
        max_seq_len: shuffle sequences of at most this many rows, not rows.
    """
    num = batch.count // size
    if not max_seq_len:
        shuffled = batch.shuffle(rng)
        for start in range(0, num * size, size):
            yield shuffled.slice(start, start + size)
        return
    seq_lens = batch_sequence_lengths(batch, max_seq_len)
    starts = np.cumsum(seq_lens) - seq_lens
    for group in np.array_split(rng.permutation(len(seq_lens)), max(1, num)):
        group = np.sort(group)
        rows = np.concatenate([np.arange(starts[k], starts[k] + seq_lens[k]) for k in group])
        yield SampleBatch({k: v[rows] for k, v in batch.items()})
