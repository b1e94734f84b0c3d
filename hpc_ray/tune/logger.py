"""Per-trial logging: ``params.json``, ``params.pkl``, ``result.json`` (one JSON
line per result), ``progress.csv``, TensorBoard files when a writer is
importable, the user's own loggers, and ``error.txt`` when the trial failed.

Loggers run on the driver, which owns the experiment directory::

    TrialRunner ── on_result(result) ──▶ TrialLogger ──▶ JsonLogger  (always)
                                                      ├─▶ CSVLogger   (always)
                                                      ├─▶ TBXLogger   (tensorboardX or
                                                      │               torch.utils.tensorboard)
                                                      └─▶ the loggers= classes
"""
from __future__ import annotations

import csv
import functools
import importlib.util
import json
import logging
import numbers
import os
import pickle
import sys
from typing import Any

from .trial import Trial, _jsonable

__all__ = ["Logger", "NoopLogger", "JsonLogger", "CSVLogger", "TBXLogger", "UnifiedLogger",
           "DEFAULT_LOGGERS", "TrialLogger", "pretty_print", "truncate_results"]

log = logging.getLogger(__name__)

RESULT_FILE = "result.json"
PROGRESS_FILE = "progress.csv"
PARAMS_FILE = "params.json"


def _flatten(result: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "/"))
        else:
            flat[name] = value
    return flat


class Logger:
    """Logging interface for Tune: subclass it and pass the class in ``loggers=``.

    One instance per trial, on the driver; ``on_result`` is called with each
    result (the auto-filled fields included), ``close`` when the trial ends
    or pauses.

    Args:
        config: the trial's config.
        logdir: the trial's directory.
        upload_uri: accepted for Ray 0.7's signature; results are not uploaded.
    """

    def __init__(self, config: dict, logdir: str, upload_uri: str | None = None) -> None:
        self.config = config
        self.logdir = logdir
        self.uri = upload_uri
        self._init()

    def _init(self) -> None:
        """Open files here (called by ``__init__``)."""

    def on_result(self, result: dict) -> None:
        """Record one result."""
        raise NotImplementedError(f"{type(self).__name__} must implement on_result(result)")

    def update_config(self, config: dict) -> None:
        """The trial's config changed (PBT)."""

    def close(self) -> None:
        """Release the logger's resources."""

    def flush(self) -> None:
        """Write out what is buffered."""


class JsonLogger(Logger):
    """``params.json``, ``params.pkl`` and ``result.json`` (a line per result,
    appended and closed, so a killed job keeps every result it logged, and a
    trainer dropped without ``stop()`` leaves no file open)."""

    def _init(self) -> None:
        self.update_config(self.config)
        self._path = os.path.join(self.logdir, RESULT_FILE)
        open(self._path, "a").close()

    def on_result(self, result: dict) -> None:
        with open(self._path, "a") as f:
            f.write(json.dumps(_jsonable(result)) + "\n")

    def update_config(self, config: dict) -> None:
        self.config = config
        with open(os.path.join(self.logdir, PARAMS_FILE), "w") as f:
            json.dump(_jsonable(config), f, indent=2, sort_keys=True, default=repr)
        try:
            with open(os.path.join(self.logdir, "params.pkl"), "wb") as f:
                pickle.dump(config, f)
        except Exception:  # noqa: BLE001 - a config that does not pickle plainly
            pass

class CSVLogger(Logger):
    """``progress.csv``: one row per result, columns from the first result
    (appended to on resume, under the header already there).  Nested dicts
    become ``a/b`` columns, except ``config``: one column holding the config
    as JSON text (Ray 0.7 wrote it as one text column too), so a long RLlib
    config costs one column and PBT's changes show row by row."""

    def _init(self) -> None:
        self._path = os.path.join(self.logdir, PROGRESS_FILE)
        self._fields = None
        if os.path.exists(self._path) and os.path.getsize(self._path) > 0:
            with open(self._path, newline="") as f:
                self._fields = next(csv.reader(f), None)
        open(self._path, "a").close()

    def on_result(self, result: dict) -> None:
        result = _jsonable(result)
        config = result.pop("config", None)
        flat = _flatten(result)
        if config is not None:
            flat["config"] = json.dumps(config, sort_keys=True)
        with open(self._path, "a", newline="") as f:
            header = self._fields is None
            if header:
                self._fields = list(flat)
            writer = csv.DictWriter(f, self._fields, extrasaction="ignore")
            if header:
                writer.writeheader()
            writer.writerow(flat)


def _summary_writer():
    """tensorboardX's ``SummaryWriter``, else torch's, else None."""
    module = sys.modules.get("tensorboardX")
    if module is not None:
        return module.SummaryWriter
    return _import_summary_writer()


@functools.lru_cache(maxsize=None)
def _import_summary_writer():
    # Once per process: a failed import searches the path, and every trial asks.
    # torch's writer needs the tensorboard package: without it torch is not
    # imported at all.
    try:
        from tensorboardX import SummaryWriter
        return SummaryWriter
    except ImportError:
        pass
    if importlib.util.find_spec("tensorboard") is None:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
        return SummaryWriter
    except ImportError:
        return None


class TBXLogger(Logger):
    """TensorBoard event files in the trial's directory: every number of a
    result as a scalar ``ray/tune/<name>`` at its ``training_iteration``.
    Does nothing when neither ``tensorboardX`` nor ``torch.utils.tensorboard``
    (with the ``tensorboard`` package) is importable."""

    def _init(self) -> None:
        writer = _summary_writer()
        self._writer = writer(self.logdir, flush_secs=30) if writer is not None else None

    def on_result(self, result: dict) -> None:
        if self._writer is None:
            return
        step = result.get("training_iteration", 0)
        result = {k: v for k, v in result.items() if k != "config"}  # not a metric
        for key, value in _flatten(result).items():
            if isinstance(value, numbers.Number) and not isinstance(value, bool):
                self._writer.add_scalar(f"ray/tune/{key}", value, global_step=step)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


#: The loggers every trial has (``loggers=DEFAULT_LOGGERS + (MyLogger,)``).
DEFAULT_LOGGERS = (JsonLogger, CSVLogger, TBXLogger)


class NoopLogger(Logger):
    """A logger that records nothing."""

    def on_result(self, result: dict) -> None:
        pass


class UnifiedLogger(Logger):
    """Several loggers as one: the default ones, then ``loggers`` (each class
    once; listing a default one again changes nothing).

    Args:
        config: the trial's config.
        logdir: the trial's directory.
        upload_uri: accepted for Ray 0.7's signature; nothing is uploaded.
        loggers: more ``Logger`` subclasses.
        sync_function: accepted for Ray 0.7's signature; nothing is synced.
    """

    def __init__(self, config: dict, logdir: str, upload_uri: str | None = None,
                 loggers=None, sync_function=None) -> None:
        self._classes = list(DEFAULT_LOGGERS)
        for cls in loggers or ():
            if cls not in self._classes:
                self._classes.append(cls)
        super().__init__(config, logdir, upload_uri)

    def _init(self) -> None:
        os.makedirs(self.logdir, exist_ok=True)
        self._loggers = [cls(self.config, self.logdir) for cls in self._classes]

    def on_result(self, result: dict) -> None:
        for logger in self._loggers:
            logger.on_result(result)

    def update_config(self, config: dict) -> None:
        self.config = config
        for logger in self._loggers:
            logger.update_config(config)

    def flush(self) -> None:
        for logger in self._loggers:
            logger.flush()

    def close(self) -> None:
        for logger in self._loggers:
            try:
                logger.flush()
                logger.close()
            except Exception:  # noqa: BLE001 - one logger must not keep the others open
                log.exception("closing %s in %s", type(logger).__name__, self.logdir)


class TrialLogger(UnifiedLogger):
    """A trial's loggers: the default ones and the trial's ``loggers=``."""

    def __init__(self, trial: Trial, loggers: tuple = ()) -> None:
        self.trial = trial
        super().__init__(trial.config, trial.logdir, loggers=loggers)


def pretty_print(result: dict) -> str:
    """A result as YAML (as indented JSON without PyYAML), without its config
    (Ray 0.7's ``pretty_print``)."""
    out = _jsonable({k: v for k, v in result.items() if v is not None and k != "config"})
    try:
        import yaml
    except ImportError:
        return json.dumps(out, indent=2, sort_keys=True) + "\n"
    return yaml.safe_dump(out, default_flow_style=False)


def truncate_results(logdir: str, iteration: int) -> dict:
    """Drop results after ``iteration`` from a trial's files (before it is resumed
    from the checkpoint of that iteration); return the last result kept."""
    last: dict = {}
    path = os.path.join(logdir, RESULT_FILE)
    if os.path.exists(path):
        kept = []
        with open(path) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line torn by the kill
                if row.get("training_iteration", 0) <= iteration:
                    kept.append(line if line.endswith("\n") else line + "\n")
                    last = row
        _rewrite(path, "".join(kept))
    path = os.path.join(logdir, PROGRESS_FILE)
    if os.path.exists(path):
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        if rows:
            header, body = rows[0], rows[1:]
            col = header.index("training_iteration") if "training_iteration" in header else None
            keep = [r for r in body if col is None or (len(r) > col and _int(r[col]) <= iteration)]
            import io
            buf = io.StringIO()
            writer = csv.writer(buf)
            writer.writerow(header)
            writer.writerows(keep)
            _rewrite(path, buf.getvalue())
    return last


def _int(text: Any) -> int:
    try:
        return int(float(text))
    except (TypeError, ValueError):
        return 1 << 60


def _rewrite(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        f.write(text)
    os.replace(tmp, path)
