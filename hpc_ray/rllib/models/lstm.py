"""Sequences for recurrent models (Ray 0.7 ``ray.rllib.models.lstm``).

A train batch holds the rows of many trajectories one after another. A
recurrent model learns on it in sequences:

::

    rows:      a0 a1 a2 a3 a4 | b0 b1 | c0 c1 c2          (eps_id/unroll_id/agent_index runs)
    seq_lens:  [3, 2, 2, 3]   with max_seq_len = 3: a run is cut every 3 rows
    padded:    a0 a1 a2 | a3 a4 0 | b0 b1 0 | c0 c1 c2  (len(seq_lens) x max(seq_lens) rows)
    state:     the recorded state_in_N of each sequence's first row (a0, a3, b0, c0)

``chop_into_sequences`` does this in numpy (0.7's signature);
``add_time_dimension`` turns the padded ``[B * T, ...]`` rows into ``[B, T, ...]``.
``sequence_lengths`` and ``padded_positions`` are the two halves, for callers
that pad tensors themselves (``TorchModel.from_batch``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["chop_into_sequences", "add_time_dimension", "sequence_lengths",
           "padded_positions", "batch_sequence_lengths"]


def sequence_lengths(episode_ids, unroll_ids, agent_indices, max_seq_len: int) -> np.ndarray:
    """The lengths of the sequences the rows are cut into, in row order.

    A sequence ends where the episode, the unroll (a fragment of one worker's
    sampling) or the agent changes, and after ``max_seq_len`` rows. Unlike 0.7,
    which added the three ids together, any change of any of them cuts.
    """
    if max_seq_len < 1:
        raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len!r}")
    ids = [np.asarray(x).reshape(-1) for x in (episode_ids, unroll_ids, agent_indices)]
    n = len(ids[0])
    if any(len(x) != n for x in ids):
        raise ValueError(f"episode_ids, unroll_ids and agent_indices differ in length: "
                         f"{[len(x) for x in ids]}")
    if n == 0:
        return np.zeros(0, np.int64)
    new_run = np.zeros(n, bool)
    new_run[0] = True
    for x in ids:
        new_run[1:] |= x[1:] != x[:-1]
    run_starts = np.flatnonzero(new_run)
    offset = np.arange(n) - run_starts[np.cumsum(new_run) - 1]
    starts = np.flatnonzero(offset % max_seq_len == 0)
    return np.diff(np.append(starts, n)).astype(np.int64)


def batch_sequence_lengths(batch, max_seq_len: int) -> np.ndarray:
    """``sequence_lengths`` of a ``SampleBatch`` (or dict of columns); a column
    of ids that is missing counts as one id for every row."""
    n = len(batch["obs"]) if "obs" in batch else len(next(iter(batch.values()), ()))
    ids = [_numpy(batch[k]) if k in batch else np.zeros(n, np.int64)
           for k in ("eps_id", "unroll_id", "agent_index")]
    return sequence_lengths(*ids, max_seq_len)


def _numpy(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def padded_positions(seq_lens: np.ndarray, max_len: int | None = None):
    """Where each row goes in the padded layout, and the sequences' first rows.

    Returns:
        ``(positions, starts, max_len)``: row ``i`` is padded row ``positions[i]``
        of ``len(seq_lens) * max_len``; ``starts[k]`` is sequence k's first row.
    """
    seq_lens = np.asarray(seq_lens, np.int64)
    if max_len is None:
        max_len = int(seq_lens.max()) if len(seq_lens) else 0
    starts = np.cumsum(seq_lens) - seq_lens
    seq_of_row = np.repeat(np.arange(len(seq_lens)), seq_lens)
    positions = seq_of_row * max_len + (np.arange(int(seq_lens.sum())) - starts[seq_of_row])
    return positions, starts, max_len


def chop_into_sequences(episode_ids, unroll_ids, agent_indices, feature_columns,
                        state_columns, max_seq_len: int, dynamic_max: bool = True,
                        _extra_padding: int = 0):
    """Cut rows into padded sequences (Ray 0.7's function).

    Args:
        episode_ids, unroll_ids, agent_indices: one id per row.
        feature_columns: columns to pad, each ``[N, ...]``.
        state_columns: RNN state columns (``state_in_N``), each ``[N, ...]``.
        max_seq_len: the longest sequence.
        dynamic_max: pad to the longest sequence present, not to ``max_seq_len``.

    Returns:
        ``(feature_sequences, initial_states, seq_lens)``: each feature column
        padded with zeros to ``[len(seq_lens) * T, ...]``, each state column's
        value at every sequence's first row ``[len(seq_lens), ...]``, and the
        lengths.

    Example::

        >>> f, s, lens = chop_into_sequences([1, 1, 1, 2], [0] * 4, [0] * 4,
        ...                                  [[1, 2, 3, 4]], [[5, 6, 7, 8]], 2)
        >>> f[0].tolist(), s[0].tolist(), lens.tolist()
        ([1, 2, 3, 0, 4, 0], [5, 7, 8], [2, 1, 1])
    """
    seq_lens = sequence_lengths(episode_ids, unroll_ids, agent_indices, max_seq_len)
    max_len = (int(seq_lens.max()) if len(seq_lens) else 0) if dynamic_max else max_seq_len
    positions, starts, max_len = padded_positions(seq_lens, max_len + _extra_padding)
    feature_sequences = []
    for column in feature_columns:
        column = np.asarray(column)
        padded = np.zeros((len(seq_lens) * max_len,) + column.shape[1:], column.dtype)
        padded[positions] = column
        feature_sequences.append(padded)
    initial_states = [np.asarray(s)[starts] for s in state_columns]
    return feature_sequences, initial_states, seq_lens


def add_time_dimension(padded_inputs, seq_lens):
    """``[B * T, ...]`` padded rows as ``[B, T, ...]``, B = ``len(seq_lens)``
    (a torch tensor or a numpy array)."""
    batch = len(seq_lens)
    if batch == 0:
        raise ValueError("add_time_dimension: seq_lens is empty")
    time = padded_inputs.shape[0] // batch
    if time * batch != padded_inputs.shape[0]:
        raise ValueError(f"add_time_dimension: {padded_inputs.shape[0]} rows are not "
                         f"{batch} padded sequences")
    return padded_inputs.reshape((batch, time) + tuple(padded_inputs.shape[1:]))
