"""Training data in HDF5, read by each replica in its own slice.

A data set is an ``.h5`` file with one group per split, each holding equally
long datasets (``x`` and ``y`` by default):

    digits.h5
      /train/x        float32 (N, 64)
      /train/y        int64   (N,)
      /validation/x, /validation/y

``H5Dataset(path, "train")`` is a cheap description (path and names): pass it
from a ``data_creator`` to the replicas. Each replica calls ``shard(rank,
world_size)`` and gets a dataset bound to the contiguous rows
``shard_bounds(N, world_size)[rank]``; it opens the file itself and reads only
that hyperslab (one contiguous read per dataset, or one row per item with
``in_memory=False``). No replica reads another's rows, and ``reads`` records
every read made, so a test can check this.

Contiguous shards (not strided ones) keep each replica's read to one extent of
the file, which is what a parallel file system serves best. Shuffling happens
inside a shard, every epoch.

The datasets follow the PyTorch map-style protocol (``__len__``,
``__getitem__`` returning ``(x, y)``), so a ``torch.utils.data.DataLoader`` can
consume them, without this module importing torch.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .fusion import shard_bounds

if TYPE_CHECKING:
    import h5py

__all__ = ["ArrayDataset", "H5Dataset", "load_digits", "shard_bounds", "write_digits_h5",
           "write_h5"]


class ArrayDataset:
    """In-memory ``(x, y)`` arrays as a map-style dataset.

    Attributes:
        indices: the global row numbers held (``range`` over the whole set when
            not sharded).
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, indices: range | None = None) -> None:
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} rows but y has {len(y)}")
        self.x = x
        self.y = y
        self.indices = range(len(x)) if indices is None else indices

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All rows at once (the trainers batch with numpy indexing when they can)."""
        return self.x, self.y

    def shard(self, rank: int, world_size: int) -> "ArrayDataset":
        start, stop = _bounds(len(self), rank, world_size)
        return ArrayDataset(self.x[start:stop], self.y[start:stop],
                            self.indices[start:stop])


def _bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank!r}")
    return shard_bounds(n, world_size)[rank]


class H5Dataset:
    """Rows of an HDF5 group, read lazily: only the rows of this replica's shard.

    Args:
        path: the ``.h5`` file.
        group: the group holding the split (``"train"``, ``"validation"``).
        keys: the datasets returned per item, ``(x, y)`` by default.
        start, stop: the row range this object covers (all rows by default).
        in_memory: read the whole range with one read per dataset when first
            used; with ``False``, read one row per ``__getitem__``.

    Attributes:
        reads: every ``(start, stop)`` row range read from the file so far.
    """

    def __init__(self, path: str | os.PathLike, group: str = "train",
                 keys: Sequence[str] = ("x", "y"), *, start: int = 0,
                 stop: int | None = None, in_memory: bool = True) -> None:
        self.path = os.fspath(path)
        self.group = group
        self.keys = tuple(keys)
        self.in_memory = in_memory
        if stop is None:
            with _open(self.path) as f:
                stop = len(_group(f, self.path, group)[self.keys[0]])
        if not 0 <= start <= stop:
            raise ValueError(f"bad row range [{start}, {stop})")
        self.start = start
        self.stop = stop
        self.reads: list[tuple[int, int]] = []
        self._cache: tuple[np.ndarray, ...] | None = None
        self._file: "h5py.File | None" = None

    @property
    def indices(self) -> range:
        """The global row numbers this dataset covers."""
        return range(self.start, self.stop)

    def __len__(self) -> int:
        return self.stop - self.start

    def shard(self, rank: int, world_size: int) -> "H5Dataset":
        """The dataset of replica ``rank`` of ``world_size``: a contiguous slice."""
        lo, hi = _bounds(len(self), rank, world_size)
        return H5Dataset(self.path, self.group, self.keys, start=self.start + lo,
                         stop=self.start + hi, in_memory=self.in_memory)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """This range's rows of every key, read once (one hyperslab per dataset)."""
        if self._cache is None:
            with _open(self.path) as f:
                g = _group(f, self.path, self.group)
                self._cache = tuple(np.asarray(g[k][self.start:self.stop])
                                    for k in self.keys)
            self.reads.append((self.start, self.stop))
        return self._cache

    def __getitem__(self, i: int):
        if not -len(self) <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} rows")
        i %= len(self)
        if self.in_memory:
            return tuple(a[i] for a in self.arrays())
        if self._file is None:
            import h5py
            self._file = h5py.File(self.path, "r")
        g = self._file[self.group]
        row = self.start + i
        self.reads.append((row, row + 1))
        return tuple(g[k][row] for k in self.keys)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __getstate__(self) -> dict:
        # Ship the description, never an open file or the rows read so far.
        state = self.__dict__.copy()
        state["_file"] = None
        state["_cache"] = None
        state["reads"] = []
        return state

    def __repr__(self) -> str:
        return f"H5Dataset({self.path!r}, {self.group!r}, rows {self.start}:{self.stop})"


def _open(path: str):
    import h5py
    return h5py.File(path, "r")


def _group(f, path: str, name: str):
    if name not in f:
        raise KeyError(f"{path} has no group {name!r} (groups: {sorted(f.keys())})")
    return f[name]


# --- writing --------------------------------------------------------------------------


def write_h5(path: str | os.PathLike, splits: dict[str, dict[str, np.ndarray]],
             attrs: dict | None = None) -> str:
    """Write ``{split: {key: array}}`` to ``path`` (replacing it), one group per split."""
    import h5py
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with h5py.File(tmp, "w") as f:
        for name, arrays in splits.items():
            g = f.create_group(name)
            lengths = {len(a) for a in arrays.values()}
            if len(lengths) > 1:
                raise ValueError(f"split {name!r}: datasets have different lengths "
                                 f"{ {k: len(a) for k, a in arrays.items()} }")
            for key, arr in arrays.items():
                g.create_dataset(key, data=np.asarray(arr))
        for key, value in (attrs or {}).items():
            f.attrs[key] = value
    os.replace(tmp, path)  # readers never see a half-written file
    return path


def load_digits(validation_fraction: float = 0.2, seed: int = 0
                ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """scikit-learn's bundled 8x8 digits (1,797 images, no download), shuffled and
    split: ``((x_train, y_train), (x_val, y_val))``; x is float32 in [0, 1]."""
    from sklearn.datasets import load_digits as _sk_digits
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction!r}")
    digits = _sk_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_val = int(round(len(x) * validation_fraction))
    return (x[n_val:], y[n_val:]), (x[:n_val], y[:n_val])


def write_digits_h5(path: str | os.PathLike, validation_fraction: float = 0.2,
                    seed: int = 0) -> str:
    """Write the digits to ``path`` as ``/train/{x,y}`` and ``/validation/{x,y}``."""
    (xt, yt), (xv, yv) = load_digits(validation_fraction, seed)
    return write_h5(path, {"train": {"x": xt, "y": yt}, "validation": {"x": xv, "y": yv}},
                    attrs={"source": "sklearn.datasets.load_digits", "num_classes": 10})
