"""``ExperimentAnalysis``: read experiment directories back (results, best config).

``tune.run`` returns a :class:`TrialList`: the list of trials (Ray 0.7's
``return_trials=True``) that also answers the analysis' methods (Ray 0.8's
``return_trials=False``), so a script written for either works unchanged.
"""
from __future__ import annotations

import json
import os
from typing import Any

from .error import TuneError

__all__ = ["ExperimentAnalysis", "Analysis", "TrialList"]

_RESULT_FILE = "result.json"
_PARAMS_FILE = "params.json"
_STATE_FILE = "experiment_state.json"
_JOURNAL_FILE = "experiment_state.journal"


class Analysis:
    """The trials under a directory, from their ``result.json`` files.

    The directory is walked whole: an experiment directory (``local_dir/name``)
    gives its trials, a ``local_dir`` holding several experiments gives every
    trial of every one of them.

    Args:
        experiment_dir: the directory (or a file in it, such as its
            ``experiment_state.json``).
    """

    def __init__(self, experiment_dir: str, _logdirs: list[str] | None = None) -> None:
        path = os.path.abspath(os.path.expanduser(experiment_dir))
        if os.path.isfile(path):
            path = os.path.dirname(path)
        if _logdirs is None and not os.path.isdir(path):
            raise TuneError(f"no experiment directory at {experiment_dir!r}: pass "
                            f"local_dir/name of an experiment tune.run has written")
        self._dir = path
        #: logdir -> every result of the trial, in order.
        self.trial_dataframes_raw: dict[str, list[dict]] = {}
        #: logdir -> the trial's config.
        self._configs: dict[str, dict] = {}
        for logdir in (_logdirs if _logdirs is not None else _trial_dirs(path)):
            self.trial_dataframes_raw[logdir] = _read_results(logdir)
            params = os.path.join(logdir, _PARAMS_FILE)
            if os.path.isfile(params):
                with open(params) as f:
                    self._configs[logdir] = json.load(f)

    @property
    def experiment_dir(self) -> str:
        return self._dir

    # --- results ------------------------------------------------------------------

    def results(self) -> dict[str, dict]:
        """logdir -> the trial's last result."""
        return {d: rows[-1] for d, rows in self.trial_dataframes_raw.items() if rows}

    def get_all_configs(self, prefix: bool = False) -> dict[str, dict]:
        """logdir -> config (``prefix=True``: flattened, keys ``config/...``)."""
        if not prefix:
            return dict(self._configs)
        return {d: {f"config/{k}": v for k, v in _flatten(c).items()}
                for d, c in self._configs.items()}

    def dataframe(self, metric: str | None = None, mode: str | None = None,
                  refresh: bool = False):
        """One row per trial (its last result, or its best by ``metric``/``mode``),
        with ``config/...`` columns and ``logdir``.  Needs pandas.

        Ray 0.7's ``dataframe(refresh=False)`` is accepted too (the files are
        read when the analysis is made; make a new one to read them again).
        """
        if isinstance(metric, bool):  # dataframe(True): 0.7's refresh
            metric = None
        pd = _pandas("dataframe()")
        return pd.DataFrame(self._rows(metric, mode))

    def _rows(self, metric: str | None, mode: str | None) -> list[dict]:
        rows = []
        for logdir, results in self.trial_dataframes_raw.items():
            if not results:
                continue
            if metric:
                scored = [r for r in results if _number(r.get(metric))]
                if not scored:
                    continue
                pick = (max if _mode(mode) == "max" else min)(scored, key=lambda r: r[metric])
            else:
                pick = results[-1]
            row = dict(pick)
            config = row.pop("config", None)  # the config as of that result (PBT)
            if not isinstance(config, dict):
                config = self._configs.get(logdir, {})
            for key, value in _flatten(config).items():
                row[f"config/{key}"] = value
            row["logdir"] = logdir
            rows.append(row)
        return rows

    @property
    def trial_dataframes(self) -> dict:
        """logdir -> a DataFrame of every result of the trial (needs pandas)."""
        pd = _pandas("trial_dataframes")
        return {d: pd.DataFrame(rows) for d, rows in self.trial_dataframes_raw.items()}

    def _best(self, metric: str, mode: str) -> tuple[str | None, dict | None]:
        best, best_dir, best_row = None, None, None
        sign = 1 if _mode(mode) == "max" else -1
        for logdir, results in self.trial_dataframes_raw.items():
            for r in results:
                value = r.get(metric)
                if _number(value) and (best is None or sign * value > sign * best):
                    best, best_dir, best_row = value, logdir, r
        return best_dir, best_row

    def get_best_logdir(self, metric: str, mode: str = "max") -> str | None:
        """The logdir of the trial with the best ``metric`` over all its results."""
        return self._best(metric, mode)[0]

    def get_best_config(self, metric: str, mode: str = "max") -> dict | None:
        """The config of the trial with the best ``metric``."""
        logdir = self.get_best_logdir(metric, mode)
        return None if logdir is None else self._configs.get(logdir)

    def get_best_info(self, metric: str, mode: str = "max", flatten: bool = True) -> dict | None:
        """The best result itself (flattened: nested keys joined with ``/``)."""
        row = self._best(metric, mode)[1]
        if row is None:
            return None
        return _flatten(row) if flatten else dict(row)

    def get_trial_checkpoints_paths(self, trial, metric: str = "training_iteration"
                                    ) -> list[tuple[str, Any]]:
        """``[(checkpoint directory, metric at that checkpoint)]`` of a trial
        (a ``Trial`` or its logdir), oldest first."""
        logdir = trial if isinstance(trial, str) else trial.logdir
        by_iter = {r.get("training_iteration"): r
                   for r in self.trial_dataframes_raw.get(logdir) or _read_results(logdir)}
        out = []
        for name in os.listdir(logdir):
            path = os.path.join(logdir, name)
            if name.startswith("checkpoint_") and os.path.isdir(path):
                try:
                    iteration = int(name.rsplit("_", 1)[1])
                except ValueError:
                    continue
                out.append((iteration, path, by_iter.get(iteration, {}).get(metric)))
        return [(path, value) for _, path, value in sorted(out)]

    def get_best_trainable(self, metric: str, trainable_cls: type, mode: str = "max"):
        """An instance of ``trainable_cls`` with the best trial's config,
        restored from that trial's newest checkpoint when it has one."""
        logdir = self.get_best_logdir(metric, mode)
        if logdir is None:
            raise TuneError(f"no trial reported {metric!r}: nothing to build a trainable from")
        trainable = trainable_cls(config=self._configs.get(logdir, {}))
        checkpoints = self.get_trial_checkpoints_paths(logdir)
        if checkpoints:
            trainable.restore(checkpoints[-1][0])
        return trainable


class ExperimentAnalysis(Analysis):
    """An experiment's results and its trials (Ray 0.7's ``ExperimentAnalysis``).

    Args:
        experiment_path: the experiment's directory (``local_dir/name``), its
            ``experiment_state.json``, or a directory holding several experiments.
            An experiment's directory gives the trials its state file lists, as
            Ray 0.7 reads them: not those of an earlier run of the same name.
        trials: the trials (``tune.run`` passes them); without, they are read
            from the experiment state files under ``experiment_path``.
    """

    def __init__(self, experiment_path: str, trials: list | None = None) -> None:
        logdirs = None
        if trials is not None:
            logdirs = [t.logdir for t in trials if t.logdir and os.path.isdir(t.logdir)]
        else:
            logdirs = _listed_trial_dirs(experiment_path)
        super().__init__(experiment_path, logdirs)
        self._trials = list(trials) if trials is not None else None
        self._states: list[tuple[str, dict]] | None = None

    @property
    def trials(self) -> list:
        """The experiment's ``Trial`` objects."""
        if self._trials is None:
            from .experiment_state import load_experiment_state
            # An experiment after the first of a run_experiments call has no state
            # file of its own: the first one's, beside it, lists its trials.
            state_dirs = (_state_dirs(self._dir)
                          or _state_dirs(os.path.dirname(self._dir), depth=1))
            names = {os.path.basename(d) for d in self.trial_dataframes_raw}
            self._trials = []
            for state_dir in state_dirs:
                loaded = load_experiment_state(state_dir)
                if loaded is not None:
                    self._trials.extend(t for t in loaded[1]
                                        if os.path.basename(t.logdir or "") in names)
        return self._trials

    def get_best_trial(self, metric: str, mode: str = "max"):
        """The ``Trial`` with the best ``metric`` over all its results, or None."""
        logdir = self.get_best_logdir(metric, mode)
        return next((t for t in self.trials if t.logdir == logdir), None)

    def _state_files(self) -> list[tuple[str, dict]]:
        if self._states is None:
            self._states = []
            for state_dir in _state_dirs(self._dir):
                with open(os.path.join(state_dir, _STATE_FILE)) as f:
                    self._states.append((state_dir, json.load(f)))
        return self._states

    def stats(self) -> dict:
        """When each experiment's state was last saved (``{"timestamp": ...}``)."""
        stamps = [s.get("timestamp") for _, s in self._state_files() if s.get("timestamp")]
        return {"timestamp": max(stamps)} if stamps else {}

    def runner_data(self) -> dict:
        """The experiment's metadata (its name), as saved in its state file."""
        data: dict = {}
        for _, state in self._state_files():
            data.update(state.get("metadata", {}))
        return data


class TrialList(list):
    """What ``tune.run`` returns: the list of trials, which also answers
    :class:`ExperimentAnalysis`'s methods (``.dataframe()``,
    ``.get_best_config(...)``, ``.trials``, ...)."""

    def __init__(self, trials: list, experiment_dir: str) -> None:
        super().__init__(trials)
        self._experiment_dir = experiment_dir
        self._analysis: ExperimentAnalysis | None = None

    @property
    def trials(self) -> list:
        return list(self)

    @property
    def analysis(self) -> ExperimentAnalysis:
        if self._analysis is None:
            self._analysis = ExperimentAnalysis(self._experiment_dir, trials=list(self))
        return self._analysis

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return getattr(self.analysis, name)
        except AttributeError:
            raise AttributeError(f"tune.run's result (a list of trials and an "
                                 f"ExperimentAnalysis) has no attribute {name!r}") from None

    def __reduce__(self):
        return (TrialList, (list(self), self._experiment_dir))


# --- reading the files ------------------------------------------------------------


def _trial_dirs(root: str) -> list[str]:
    """Every directory under ``root`` (itself included) holding a ``result.json``."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("checkpoint_"))
        if _RESULT_FILE in filenames:
            found.append(dirpath)
    return found


def _listed_trial_dirs(path: str) -> list[str] | None:
    """The trial directories under an experiment's directory that its state
    file (snapshot and journal) lists, by name (the directory may have moved);
    None where ``path`` holds no state file of its own."""
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.isfile(path):
        path = os.path.dirname(path)
    state_path = os.path.join(path, _STATE_FILE)
    try:
        with open(state_path) as f:
            entries = json.load(f).get("trials", [])
    except (OSError, ValueError):
        return None
    entries += _json_lines(os.path.join(path, _JOURNAL_FILE))
    names = {os.path.basename(e["logdir"]) for e in entries if e.get("logdir")}
    return [d for d in _trial_dirs(path) if os.path.basename(d) in names]


def _state_dirs(root: str, depth: int | None = None) -> list[str]:
    """The directories under ``root`` (itself included, down ``depth`` levels)
    holding an experiment state file."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("checkpoint_"))
        if depth is not None and dirpath.count(os.sep) - root.count(os.sep) >= depth:
            dirnames[:] = []
        if _STATE_FILE in filenames:
            found.append(dirpath)
            dirnames[:] = []  # trials' directories hold no experiments
    return found


def _read_results(logdir: str) -> list[dict]:
    return _json_lines(os.path.join(logdir, _RESULT_FILE))


def _json_lines(path: str) -> list[dict]:
    """A file of a JSON value per line (none if it is missing)."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue  # a line torn by a kill
    except FileNotFoundError:
        pass
    return rows


def _pandas(what: str):
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(f"ExperimentAnalysis.{what} needs pandas: pip install pandas "
                          f"(or pip install 'hpc_ray[tune]')") from None
    return pd


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _mode(mode: str | None) -> str:
    mode = mode or "max"
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
    return mode


def _flatten(config: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
