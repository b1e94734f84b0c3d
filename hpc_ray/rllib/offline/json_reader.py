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
        self.cur_file = None

    def next(self):
        """The next batch (files are reopened from the start when exhausted)."""
        for _ in range(len(self.files) * 2 + 2):
            line = self._next_line()
            if line.strip():
                return self._decode(json.loads(line))
        raise ValueError(f"no batches in the input files {self.files}")

    def _next_line(self) -> str:
        if self.cur_file is None:
            self.cur_file = open(self.files[self._rng.integers(len(self.files))])
        line = self.cur_file.readline()
        if not line:
            self.cur_file.close()
            self.cur_file = None
            return ""
        return line

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
