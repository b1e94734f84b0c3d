"""Gradient fusion: many small gradient tensors packed into a few large buffers.

An allreduce costs a latency term per call plus a bandwidth term per byte. A
model has tens to hundreds of parameter tensors, many of them small (biases,
norms), so reducing them one by one pays the latency term that many times.
Horovod's "tensor fusion" packs them into buffers of up to a threshold (64 MB by
default there) and reduces each buffer once; Ray SGD's ``grad_shard_bytes``
does the same for parameter servers. ``FusionPlan`` is that packing, framework
free: it sees numpy arrays (a CPU torch tensor's ``.numpy()`` is a view of the
same memory, so torch gradients go through it without a copy of their own).

    grads (list of arrays) ── pack ──▶ buffers (one flat array per bucket)
                                          │ allreduce / send to a server, in place
    grads (same arrays)    ◀─ unpack ──  buffers

Buckets hold consecutive tensors of one dtype, in model order, and never split a
tensor (a tensor larger than the threshold gets a bucket of its own), so a
bucket can be reduced as soon as its last gradient is ready.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["DEFAULT_FUSION_BYTES", "FusionPlan", "shard_bounds"]

#: Bucket size. Larger buckets mean fewer allreduce calls (less latency) but a
#: later start for the first reduction if reductions were overlapped with the
#: backward pass; 64 MB is Horovod's default threshold.
DEFAULT_FUSION_BYTES = 64 * 1024 * 1024


class FusionPlan:
    """Where each tensor lives inside the fused buffers.

    Args:
        shapes: the tensors' shapes, in model order.
        dtypes: their dtypes (one per tensor, or a single dtype for all).
        threshold_bytes: the largest bucket, in bytes (a tensor larger than
            this gets a bucket of its own).

    Attributes:
        buckets: for each bucket, the indices of the tensors it holds.
        buffers: one preallocated flat array per bucket, reused by every ``pack``.
    """

    def __init__(self, shapes: Sequence[tuple[int, ...]], dtypes, *,
                 threshold_bytes: int = DEFAULT_FUSION_BYTES) -> None:
        if threshold_bytes <= 0:
            raise ValueError(f"threshold_bytes must be > 0, got {threshold_bytes!r}")
        shapes = [tuple(int(d) for d in s) for s in shapes]
        if isinstance(dtypes, (list, tuple)):
            if len(dtypes) != len(shapes):
                raise ValueError(f"got {len(shapes)} shapes but {len(dtypes)} dtypes")
            dts = [np.dtype(d) for d in dtypes]
        else:
            dts = [np.dtype(dtypes)] * len(shapes)
        self.shapes = shapes
        self.dtypes = dts
        self.sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        self.threshold_bytes = int(threshold_bytes)
        #: Tensor indices of each bucket.
        self.buckets: list[list[int]] = []
        #: (bucket, offset in elements) of each tensor.
        self.where: list[tuple[int, int]] = [(0, 0)] * len(shapes)
        current: list[int] = []
        used = 0
        for i, (size, dt) in enumerate(zip(self.sizes, dts)):
            nbytes = size * dt.itemsize
            if current and (dts[current[0]] != dt or used + nbytes > self.threshold_bytes):
                self.buckets.append(current)
                current, used = [], 0
            current.append(i)
            used += nbytes
        if current:
            self.buckets.append(current)
        self.buffers: list[np.ndarray] = []
        for b, members in enumerate(self.buckets):
            offset = 0
            for i in members:
                self.where[i] = (b, offset)
                offset += self.sizes[i]
            self.buffers.append(np.zeros(offset, dtype=dts[members[0]]))

    @classmethod
    def for_arrays(cls, arrays: Sequence[np.ndarray], *,
                   threshold_bytes: int = DEFAULT_FUSION_BYTES) -> "FusionPlan":
        return cls([a.shape for a in arrays], [a.dtype for a in arrays],
                   threshold_bytes=threshold_bytes)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buffers)

    def _check(self, arrays: Sequence[np.ndarray]) -> None:
        if len(arrays) != len(self.shapes):
            raise ValueError(f"expected {len(self.shapes)} tensors, got {len(arrays)}")

    def pack(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Copy ``arrays`` into the plan's buffers and return the buffers."""
        self._check(arrays)
        for i, a in enumerate(arrays):
            b, off = self.where[i]
            a = np.asarray(a)
            if a.shape != self.shapes[i]:
                raise ValueError(f"tensor {i} has shape {a.shape}, the plan expects "
                                 f"{self.shapes[i]}")
            self.buffers[b][off:off + self.sizes[i]] = a.reshape(-1)
        return self.buffers

    def unpack(self, out: Sequence[np.ndarray], buffers: Sequence[np.ndarray] | None = None
               ) -> None:
        """Copy the buffers (the plan's own by default) back into ``out``, in place."""
        self._check(out)
        bufs = self.buffers if buffers is None else buffers
        for i, a in enumerate(out):
            b, off = self.where[i]
            np.copyto(a, bufs[b][off:off + self.sizes[i]].reshape(self.shapes[i]),
                      casting="same_kind")

    def split(self, buffers: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """Views of the buffers shaped as the tensors (no copy)."""
        bufs = self.buffers if buffers is None else buffers
        return [bufs[b][off:off + self.sizes[i]].reshape(self.shapes[i])
                for i, (b, off) in enumerate(self.where)]


def shard_bounds(n: int, num_shards: int) -> list[tuple[int, int]]:
    """Split ``range(n)`` into ``num_shards`` contiguous ``(start, stop)`` pieces
    whose lengths differ by at most one (the first ``n % num_shards`` are longer)."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    base, extra = divmod(n, num_shards)
    bounds, start = [], 0
    for i in range(num_shards):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds
