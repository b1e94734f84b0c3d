"""Observation filters (Ray 0.7 ``utils/filter.py``): ``NoFilter`` and ``MeanStdFilter``.

A ``MeanStdFilter`` on each rollout worker keeps the running statistics of the
observations it saw since the last synchronization (its *buffer*). Once per
iteration the trainer collects every worker's buffer, merges them into its own
filter and sends the merged filter back, so all workers normalize alike.
"""
from __future__ import annotations

import numpy as np

__all__ = ["Filter", "NoFilter", "MeanStdFilter", "RunningStat", "get_filter"]


class RunningStat:
    """Running mean and variance (Welford), mergeable."""

    def __init__(self, shape: tuple = ()) -> None:
        self.n = 0
        self.mean = np.zeros(shape, np.float64)
        self.m2 = np.zeros(shape, np.float64)

    def push(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64)
        self.n += 1
        delta = x - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (x - self.mean)

    def update(self, other: "RunningStat") -> None:
        if other.n == 0:
            return
        n = self.n + other.n
        delta = other.mean - self.mean
        self.mean = self.mean + delta * other.n / n
        self.m2 = self.m2 + other.m2 + delta ** 2 * self.n * other.n / n
        self.n = n

    def copy(self) -> "RunningStat":
        new = RunningStat(self.mean.shape)
        new.n, new.mean, new.m2 = self.n, self.mean.copy(), self.m2.copy()
        return new

    @property
    def var(self) -> np.ndarray:
        return self.m2 / (self.n - 1) if self.n > 1 else np.square(self.mean)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var)


class Filter:
    """A stateful transformation of observations."""

    def __call__(self, x, update: bool = True):
        raise NotImplementedError

    def apply_changes(self, other: "Filter", with_buffer: bool = False) -> None:
        pass

    def copy(self) -> "Filter":
        return self

    def sync(self, other: "Filter") -> None:
        pass

    def clear_buffer(self) -> None:
        pass

    def as_serializable(self) -> "Filter":
        return self.copy()


class NoFilter(Filter):
    """Passes observations through unchanged."""

    def __call__(self, x, update: bool = True):
        return np.asarray(x)


class MeanStdFilter(Filter):
    """``(x - mean) / std`` with running statistics, clipped to ``[-clip, clip]``.

    Args:
        shape: the observation's shape.
        demean, destd: subtract the mean, divide by the standard deviation.
        clip: the bound of the result.
    """

    def __init__(self, shape: tuple, demean: bool = True, destd: bool = True,
                 clip: float = 10.0) -> None:
        self.shape = tuple(shape)
        self.demean, self.destd, self.clip = demean, destd, clip
        self.rs = RunningStat(self.shape)
        self.buffer = RunningStat(self.shape)

    def __call__(self, x, update: bool = True):
        x = np.asarray(x, np.float64)
        if update:
            if x.shape == self.shape:
                self.rs.push(x)
                self.buffer.push(x)
            else:
                for row in x:
                    self.rs.push(row)
                    self.buffer.push(row)
        if self.demean:
            x = x - self.rs.mean
        if self.destd:
            x = x / (self.rs.std + 1e-8)
        if self.clip:
            x = np.clip(x, -self.clip, self.clip)
        return x.astype(np.float32)

    def apply_changes(self, other: "MeanStdFilter", with_buffer: bool = False) -> None:
        """Merge ``other``'s buffer (what it saw since its last sync) into this filter."""
        self.rs.update(other.buffer)
        if with_buffer:
            self.buffer = other.buffer.copy()

    def copy(self) -> "MeanStdFilter":
        new = MeanStdFilter(self.shape, self.demean, self.destd, self.clip)
        new.rs, new.buffer = self.rs.copy(), self.buffer.copy()
        return new

    def sync(self, other: "MeanStdFilter") -> None:
        """Take ``other``'s statistics (the merged ones from the trainer)."""
        self.rs = other.rs.copy()
        self.buffer = other.buffer.copy()

    def clear_buffer(self) -> None:
        self.buffer = RunningStat(self.shape)

    def __repr__(self) -> str:
        return f"MeanStdFilter({self.shape}, n={self.rs.n})"


def get_filter(name: str, shape: tuple) -> Filter:
    """The filter named in the ``observation_filter`` config key."""
    if name == "MeanStdFilter":
        return MeanStdFilter(shape, clip=None)
    if name == "ConcurrentMeanStdFilter":
        return MeanStdFilter(shape, clip=None)
    if name == "NoFilter":
        return NoFilter()
    raise ValueError(f"unknown observation_filter {name!r} (known: 'NoFilter', 'MeanStdFilter')")
