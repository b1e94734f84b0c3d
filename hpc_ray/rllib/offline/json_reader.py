"""``JsonReader``: batches read back from files that ``JsonWriter`` wrote."""
from __future__ import annotations

import glob
import json
import os

import numpy as np

from ..policy.sample_batch import MultiAgentBatch, SampleBatch
from .input_reader import InputReader
from .io_context import IOContext
from .json_writer import unpack_column

__all__ = ["JsonReader"]

#: Lines read per file open: more holds more batches in memory between reads.
_LINES_PER_READ = 16


class JsonReader(InputReader):
    """Reads batches from JSON files, a random file at a time, line by line, for ever.

    Args:
        inputs: a directory, a glob ("/tmp/out/*.json"), a file, or a list of files.
        ioctx: the worker's ``IOContext`` (its config's ``seed`` seeds the file order).

    Raises:
        ValueError: no file matches ``inputs``.
    """

    def __init__(self, inputs, ioctx: IOContext | None = None) -> None:
        self.ioctx = ioctx or IOContext()
        if isinstance(inputs, str):
            path = inputs.replace("file://", "")
            if os.path.isdir(path):
                files = glob.glob(os.path.join(path, "*.json"))
            elif os.path.exists(path):
                files = [path]
            else:
                files = glob.glob(path)
        else:
            files = [str(f).replace("file://", "") for f in inputs]
        self.files = sorted(files)
        if not self.files:
            raise ValueError(f"input {inputs!r} matches no JSON file: give a directory "
                             "written by \"output\", a glob such as '/tmp/out/*.json', or "
                             "a list of files")
        seed = self.ioctx.config.get("seed")
        self._rng = np.random.default_rng(
            None if seed is None else seed + 7 * self.ioctx.worker_index)
        self._lines: list[str] = []
        self._file: str | None = None
        self._offset = 0

    def next(self):
        """The next batch (files are reread from the start when exhausted)."""
        for _ in range(len(self.files) * 2 + 2):
            line = self._next_line()
            if line.strip():
                return self._decode(json.loads(line))
        raise ValueError(f"no batches in the input files {self.files}")

    def _next_line(self) -> str:
        if not self._lines:
            self._fill()
        return self._lines.pop() if self._lines else ""

    def _fill(self) -> None:
        # A few lines at a time, the file closed in between: a reader holds no
        # open file however long it lives.
        if self._file is None:
            self._file = self.files[self._rng.integers(len(self.files))]
            self._offset = 0
        with open(self._file) as f:
            f.seek(self._offset)
            lines = [f.readline() for _ in range(_LINES_PER_READ)]
            self._offset = f.tell()
        lines = [line for line in lines if line]
        if len(lines) < _LINES_PER_READ:
            self._file = None
        self._lines = lines[::-1]

    def read_all_files(self):
        """Every batch of every file once, in order."""
        for path in self.files:
            with open(path) as f:
                for line in f:
                    if line.strip():
                        yield self._decode(json.loads(line))

    @staticmethod
    def _decode(obj: dict):
        kind = obj.pop("type", "SampleBatch")
        if kind == "MultiAgentBatch":
            return MultiAgentBatch({p: _batch(cols) for p, cols in obj["policy_batches"].items()},
                                   obj["count"])
        return _batch(obj)


def _batch(cols: dict) -> SampleBatch:
    out = {}
    for k, v in cols.items():
        v = unpack_column(v)
        if not isinstance(v, np.ndarray):
            v = np.array(v, dtype=object) if k == SampleBatch.INFOS else np.asarray(v)
        if v.dtype == np.float64:
            v = v.astype(np.float32)
        out[k] = v
    return SampleBatch(out)
