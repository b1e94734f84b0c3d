"""``tune.Trainable``: the class API of a trial, run inside a trial actor.

One ``train()`` call is one training iteration; it returns a result dict to
which the auto-filled fields (``training_iteration``, ``time_total_s``, ...)
are added.  ``save()``/``restore()`` move the state through a checkpoint
directory; ``save_to_object()``/``restore_from_object()`` pack that directory
into bytes, which is how checkpoints travel between a trial actor (on any
rank, any node) and the driver, which keeps them on its own disk.

Both the 0.7 names (``_setup``, ``_train``, ``_save``, ``_restore``, ``_stop``)
and the modern ones (``setup``, ``step``, ``save_checkpoint``,
``load_checkpoint``, ``cleanup``) are accepted.
"""
from __future__ import annotations

import datetime
import functools
import io
import os
import pickle
import shutil
import socket
import tempfile
import time
import uuid
from typing import Any

from . import result as R

__all__ = ["Trainable"]

_META = ".tune_metadata"
_DICT_STATE = ".tune_state.pkl"


def _overrides(obj: Any, name: str) -> bool:
    return getattr(type(obj), name, None) is not getattr(Trainable, name, None)


@functools.lru_cache(maxsize=None)
def node_ip() -> str:
    """This host's address as Ray 0.7 finds it: the source address of a route to
    the outside (a UDP connect sends nothing), else the host name's, else loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("8.8.8.8", 80))
            return s.getsockname()[0]
    except OSError:
        pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class Trainable:
    """Abstract class for trainable models, functions, etc.

    Subclasses implement ``_train`` (or ``step``) and, for checkpoints,
    ``_save``/``_restore`` (or ``save_checkpoint``/``load_checkpoint``).
    """

    def __init__(self, config: dict | None = None, logger_creator=None) -> None:
        self.config = dict(config or {})
        self._experiment_id = uuid.uuid4().hex
        self._iteration = 0
        self._time_total = 0.0
        self._timesteps_total: int | None = None
        self._episodes_total: int | None = None
        self._time_since_restore = 0.0
        self._iterations_since_restore = 0
        self._timesteps_since_restore = 0
        self._restored = False
        self.logdir = tempfile.gettempdir()
        #: ``logger_creator(config)``'s logger, for a Trainable used on its own
        #: (in a trial, results are logged by the driver instead).
        self._result_logger = logger_creator(self.config) if logger_creator else None
        if self._result_logger is not None and getattr(self._result_logger, "logdir", None):
            self.logdir = self._result_logger.logdir
        if _overrides(self, "setup"):
            self.setup(dict(self.config))
        else:
            self._setup(dict(self.config))

    # --- the 0.7 API -----------------------------------------------------------

    @classmethod
    def default_resource_request(cls, config: dict):
        """Resources a trial of this class needs; None: use ``resources_per_trial``."""
        return None

    @classmethod
    def resource_help(cls, config: dict) -> str:
        return ""

    @property
    def iteration(self) -> int:
        return self._iteration

    @property
    def training_iteration(self) -> int:
        return self._iteration

    def train(self) -> dict:
        """Run one iteration of training and return its result, auto-filled."""
        start = time.time()
        result = self._call_step()
        if not isinstance(result, dict):
            raise TypeError(f"{type(self).__name__}._train() must return a dict, "
                            f"got {type(result).__name__}")
        result = dict(result)
        duplicate = result.get(R.RESULT_DUPLICATE, False)
        if duplicate:
            # A function trainable ended: its last result again, with done=True
            # (the runner closes the trial with it and does not log it twice).
            result.setdefault(R.DONE, True)
            return self._fill(result, 0.0, count=False)
        elapsed = result.get(R.TIME_THIS_ITER_S, time.time() - start)
        result = self._fill(result, elapsed, count=True)
        self._log_result(result)
        return result

    def _fill(self, result: dict, elapsed: float, count: bool) -> dict:
        if count:
            self._iteration += 1
            self._iterations_since_restore += 1
            self._time_total += elapsed
            self._time_since_restore += elapsed
            if result.get(R.TIMESTEPS_THIS_ITER) is not None:
                self._timesteps_total = (self._timesteps_total or 0) + result[R.TIMESTEPS_THIS_ITER]
                self._timesteps_since_restore += result[R.TIMESTEPS_THIS_ITER]
            if result.get(R.EPISODES_THIS_ITER) is not None:
                self._episodes_total = (self._episodes_total or 0) + result[R.EPISODES_THIS_ITER]
        result.setdefault(R.DONE, False)
        if self._timesteps_total is not None:
            result.setdefault(R.TIMESTEPS_TOTAL, self._timesteps_total)
        if self._episodes_total is not None:
            result.setdefault(R.EPISODES_TOTAL, self._episodes_total)
        if result.get(R.MEAN_LOSS) is not None:
            # 0.7: spares a "min" mode (or a double negative) to schedulers that maximize
            result.setdefault(R.NEG_MEAN_LOSS, -result[R.MEAN_LOSS])
        # (As Ray's: a training_iteration of the user's own, e.g. epochs, stands.)
        result.setdefault(R.TRAINING_ITERATION, self._iteration)
        now = datetime.datetime.now()
        result.update({
            R.EXPERIMENT_ID: self._experiment_id,
            "date": now.strftime("%Y-%m-%d_%H-%M-%S"),
            "timestamp": int(time.time()),
            R.TIME_THIS_ITER_S: elapsed,
            R.TIME_TOTAL_S: self._time_total,
            R.PID: os.getpid(),
            R.HOSTNAME: socket.gethostname(),
            R.NODE_IP: node_ip(),
            "time_since_restore": self._time_since_restore,
            "iterations_since_restore": self._iterations_since_restore,
            R.TIMESTEPS_SINCE_RESTORE: self._timesteps_since_restore,
            # The trial's config as it is now: PBT's changes show in the results.
            R.CONFIG: self.config,
        })
        return result

    def _call_step(self) -> dict:
        if _overrides(self, "step"):
            return self.step()
        return self._train()

    def save(self, checkpoint_dir: str | None = None) -> str:
        """Save the state to a checkpoint directory; return the checkpoint's path,
        as Ray 0.7 does: the path ``_save`` returned, the file of a dict ``_save``
        returned, else the directory. ``restore`` takes it, or the directory."""
        checkpoint_dir = checkpoint_dir or os.path.join(
            self._files_dir(), f"checkpoint_{self._iteration}")
        os.makedirs(checkpoint_dir, exist_ok=True)
        if _overrides(self, "save_checkpoint"):
            saved = self.save_checkpoint(checkpoint_dir)
        else:
            saved = self._save(checkpoint_dir)
        meta = {"iteration": self._iteration, "time_total": self._time_total,
                "timesteps_total": self._timesteps_total,
                "episodes_total": self._episodes_total,
                "experiment_id": self._experiment_id, "kind": "dir", "path": None}
        returned = checkpoint_dir
        if isinstance(saved, dict):
            returned = os.path.join(checkpoint_dir, _DICT_STATE)
            with open(returned, "wb") as f:
                pickle.dump(saved, f)
            meta["kind"] = "dict"
        elif isinstance(saved, str):
            full = os.path.abspath(saved)
            root = os.path.abspath(checkpoint_dir)
            if not (full == root or full.startswith(root + os.sep)):
                raise ValueError(f"_save() must return a path inside {checkpoint_dir!r}, "
                                 f"got {saved!r}")
            meta["kind"] = "path"
            meta["path"] = os.path.relpath(full, root)
            returned = saved
        elif saved is not None:
            raise TypeError(f"_save() must return a path or a dict, got {type(saved).__name__}")
        with open(os.path.join(checkpoint_dir, _META), "wb") as f:
            pickle.dump(meta, f)
        return returned

    def restore(self, checkpoint_path: str) -> None:
        """Restore the state saved by :meth:`save` at ``checkpoint_path``."""
        root = checkpoint_path if os.path.isdir(checkpoint_path) else os.path.dirname(checkpoint_path)
        with open(os.path.join(root, _META), "rb") as f:
            meta = pickle.load(f)
        if meta["kind"] == "dict":
            with open(os.path.join(root, _DICT_STATE), "rb") as f:
                arg = pickle.load(f)
        elif meta["kind"] == "path":
            arg = os.path.join(root, meta["path"])
        else:
            arg = root
        if _overrides(self, "load_checkpoint"):
            self.load_checkpoint(arg)
        else:
            self._restore(arg)
        self._iteration = meta["iteration"]
        self._time_total = meta["time_total"]
        self._timesteps_total = meta["timesteps_total"]
        self._episodes_total = meta["episodes_total"]
        self._time_since_restore = 0.0
        self._iterations_since_restore = 0
        self._timesteps_since_restore = 0
        self._restored = True

    def save_to_object(self) -> bytes:
        """Save to a temporary directory and return its files packed as bytes."""
        tmp = tempfile.mkdtemp(prefix="tune-ckpt-")
        try:
            self.save(tmp)
            return pack_dir(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def restore_from_object(self, obj: bytes) -> None:
        """Restore from the bytes :meth:`save_to_object` returned."""
        tmp = tempfile.mkdtemp(prefix="tune-ckpt-")
        try:
            unpack_dir(obj, tmp)
            self.restore(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def stop(self) -> None:
        """Release the trial's resources (calls ``_stop``/``cleanup``)."""
        result_logger = getattr(self, "_result_logger", None)
        if result_logger is not None:
            result_logger.close()
        if _overrides(self, "cleanup"):
            self.cleanup()
        else:
            self._stop()

    def reset_config(self, new_config: dict) -> bool:
        """Take ``new_config`` without a restart; return True if supported."""
        return False

    def delete_checkpoint(self, checkpoint_dir: str) -> None:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)

    def export_model(self, export_formats, export_dir=None) -> dict:
        return self._export_model(export_formats, export_dir or self._files_dir())

    def _files_dir(self) -> str:
        """Where ``save`` and ``export_model`` write by default: ``logdir``, which a
        Trainable used outside Tune gets of its own on first use, as in Ray 0.7
        (``default_logdir``), rather than the temporary directory every process shares."""
        if self.logdir == tempfile.gettempdir():
            self.logdir = default_logdir(type(self).__name__)
        return self.logdir

    # --- for subclasses ----------------------------------------------------------

    def _setup(self, config: dict) -> None:
        pass

    def _train(self) -> dict:
        raise NotImplementedError(f"{type(self).__name__} must implement _train() or step()")

    def _save(self, checkpoint_dir: str):
        raise NotImplementedError(f"{type(self).__name__} must implement _save() or "
                                  "save_checkpoint() to be checkpointed")

    def _restore(self, checkpoint) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _restore() or "
                                  "load_checkpoint() to be restored")

    def _stop(self) -> None:
        pass

    def _log_result(self, result: dict) -> None:
        """Called with each result of ``train()``; gives it to the logger of
        ``logger_creator`` when there is one."""
        result_logger = getattr(self, "_result_logger", None)
        if result_logger is not None:
            result_logger.on_result(result)

    def _export_model(self, export_formats, export_dir) -> dict:
        return {}

    # Modern names: defined here only so that overriding them can be detected.
    def setup(self, config: dict) -> None:
        pass

    def step(self) -> dict:
        return self._train()

    def save_checkpoint(self, checkpoint_dir: str):
        return self._save(checkpoint_dir)

    def load_checkpoint(self, checkpoint) -> None:
        self._restore(checkpoint)

    def cleanup(self) -> None:
        self._stop()


def default_logdir(prefix: str) -> str:
    """A new directory ``<prefix>_<date and time><random>`` under Tune's results
    directory (``TUNE_RESULT_DIR``, default ``~/ray_results``)."""
    root = os.path.expanduser(os.environ.get("TUNE_RESULT_DIR", "~/ray_results"))
    os.makedirs(root, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{prefix}_{time.strftime('%Y-%m-%d_%H-%M-%S')}",
                            dir=root)


# --- checkpoint directories as bytes ------------------------------------------------


def pack_dir(path: str) -> bytes:
    """Every file under ``path``, as pickled ``{relative path: bytes}``."""
    files = {}
    for root, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                files[os.path.relpath(full, path)] = f.read()
    buf = io.BytesIO()
    pickle.dump(files, buf, protocol=5)
    return buf.getvalue()


def unpack_dir(data: bytes, path: str) -> None:
    files = pickle.loads(data)
    for rel, content in files.items():
        full = os.path.join(path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(content)
