"""``JsonWriter``: experiences as JSON lines, one batch per line (Ray 0.7's format).

Each line is ``{"type": "SampleBatch", column: [...], ...}`` (or
``{"type": "MultiAgentBatch", "count": n, "policy_batches": {pid: {...}}}``).
Columns named in ``compress_columns`` are stored as one base64 string of a
zlib-compressed ``.npy`` buffer (Ray 0.7: LZ4); ``JsonReader`` reads both forms.
A file rolls over to the next (``output-<date>_worker-<i>_<n>.json``) once it
passes ``max_file_size`` bytes.
"""
from __future__ import annotations

import base64
import io
import json
import os
import time
import zlib

import numpy as np

from ..policy.sample_batch import MultiAgentBatch, SampleBatch
from .io_context import IOContext
from .output_writer import OutputWriter

__all__ = ["JsonWriter", "pack_column", "unpack_column"]

_PACKED = "__npz_b64__:"


def pack_column(array: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    return _PACKED + base64.b64encode(zlib.compress(buf.getvalue(), 1)).decode("ascii")


def unpack_column(value):
    if isinstance(value, str) and value.startswith(_PACKED):
        raw = zlib.decompress(base64.b64decode(value[len(_PACKED):]))
        return np.load(io.BytesIO(raw), allow_pickle=False)
    return value


class JsonWriter(OutputWriter):
    """Writes batches to JSON files in a directory.

    Args:
        path: the output directory (created if missing).
        ioctx: the worker's ``IOContext`` (its ``worker_index`` names the files).
        max_file_size: bytes after which a new file is started.
        compress_columns: columns stored compressed (``output_compress_columns``).
    """

    def __init__(self, path: str, ioctx: IOContext | None = None,
                 max_file_size: int = 64 * 1024 * 1024,
                 compress_columns=("obs", "new_obs")) -> None:
        if "://" in str(path) and not str(path).startswith("file://"):
            raise ValueError(f"output {path!r}: only local paths are supported by "
                             "hpc_ray.rllib (write to a shared file system path)")
        self.path = os.path.abspath(str(path).replace("file://", ""))
        os.makedirs(self.path, exist_ok=True)
        self.ioctx = ioctx or IOContext()
        self.max_file_size = max_file_size
        self.compress_columns = set(compress_columns or ())
        self.file_index = 0
        self.bytes_written = 0
        self.cur_file = None

    def write(self, sample_batch) -> None:
        line = json.dumps(self._encode(sample_batch)) + "\n"
        f = self._file()
        f.write(line)
        f.flush()
        self.bytes_written += len(line)

    def _encode(self, batch) -> dict:
        if isinstance(batch, MultiAgentBatch):
            return {"type": "MultiAgentBatch", "count": batch.count,
                    "policy_batches": {p: self._columns(b)
                                       for p, b in batch.policy_batches.items()}}
        return dict(self._columns(batch), type="SampleBatch")

    def _columns(self, batch: SampleBatch) -> dict:
        out = {}
        for k, v in batch.items():
            if k in self.compress_columns and v.dtype != object:
                out[k] = pack_column(v)
            elif v.dtype == object:
                out[k] = [_jsonable(x) for x in v]
            else:
                out[k] = v.tolist()
        if SampleBatch.ACTION_PROB not in out and SampleBatch.ACTION_LOGP in batch:
            # What off-policy estimators need: the behaviour policy's probability.
            out[SampleBatch.ACTION_PROB] = np.exp(batch[SampleBatch.ACTION_LOGP]).tolist()
        return out

    def _file(self):
        if self.cur_file is None or self.bytes_written >= self.max_file_size:
            if self.cur_file is not None:
                self.cur_file.close()
                self.file_index += 1
            stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
            name = f"output-{stamp}_worker-{self.ioctx.worker_index}_{self.file_index}.json"
            self.cur_file = open(os.path.join(self.path, name), "w")
            self.bytes_written = 0
        return self.cur_file

    def close(self) -> None:
        if self.cur_file is not None:
            self.cur_file.close()
            self.cur_file = None

    def __del__(self) -> None:
        # The docs' example never closes its writer: its file closes with it.
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _jsonable(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    return x
