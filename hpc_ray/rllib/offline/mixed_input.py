"""``MixedInput``: several input sources drawn from by probability."""
from __future__ import annotations

import numpy as np

from .input_reader import InputReader
from .io_context import IOContext
from .json_reader import JsonReader

__all__ = ["MixedInput", "ShuffledInput"]


class MixedInput(InputReader):
    """Each ``next()`` comes from one source, chosen with the given probability.

    Args:
        dist: source -> probability; a source is "sampler" (simulation), a path or
            glob of JSON files, or a list of files. The probabilities must sum to 1.
        ioctx: the worker's ``IOContext``.

    Example::

        MixedInput({"sampler": 0.4, "/tmp/cartpole-out": 0.6}, ioctx)
    """

    def __init__(self, dist: dict, ioctx: IOContext) -> None:
        total = sum(float(p) for p in dist.values())
        if abs(total - 1.0) > 1e-6 or any(float(p) < 0 for p in dist.values()):
            raise ValueError(f"input probabilities must be >= 0 and sum to 1, got {dist!r}")
        self.choices, self.p = [], []
        for source, prob in dist.items():
            reader = (ioctx.default_sampler_input() if source == "sampler"
                      else JsonReader(source, ioctx))
            self.choices.append(reader)
            self.p.append(float(prob))
        seed = ioctx.config.get("seed")
        self._rng = np.random.default_rng(None if seed is None else seed + ioctx.worker_index)

    def next(self):
        return self.choices[self._rng.choice(len(self.choices), p=self.p)].next()


class ShuffledInput(InputReader):
    """Batches of ``child`` through a sliding window of ``n`` (``shuffle_buffer_size``)."""

    def __init__(self, child: InputReader, n: int = 0, seed: int | None = None) -> None:
        self.child = child
        self.n = n
        self.buffer: list = []
        self._rng = np.random.default_rng(seed)

    def next(self):
        if self.n <= 1:
            return self.child.next()
        while len(self.buffer) < self.n:
            self.buffer.append(self.child.next())
        i = int(self._rng.integers(len(self.buffer)))
        out, self.buffer[i] = self.buffer[i], self.child.next()
        return out
