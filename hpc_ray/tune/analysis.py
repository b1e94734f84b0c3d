"""``ExperimentAnalysis``: read an experiment directory back (results, best config)."""
from __future__ import annotations

import json
import os

from .error import TuneError

__all__ = ["ExperimentAnalysis", "Analysis"]


class ExperimentAnalysis:
    """The trials of an experiment directory, from their ``result.json`` files.

    Args:
        experiment_path: the experiment's directory (``local_dir/name``) or its
            ``experiment_state.json``.
    """

    def __init__(self, experiment_path: str, trials=None) -> None:
        path = os.path.abspath(os.path.expanduser(experiment_path))
        if os.path.isfile(path):
            path = os.path.dirname(path)
        if not os.path.isdir(path):
            raise TuneError(f"no experiment directory at {experiment_path!r}")
        self._dir = path
        self._trials = trials
        #: logdir -> every result of the trial, in order.
        self.trial_dataframes_raw: dict[str, list[dict]] = {}
        #: logdir -> the trial's config.
        self._configs: dict[str, dict] = {}
        for entry in sorted(os.listdir(path)):
            logdir = os.path.join(path, entry)
            result_file = os.path.join(logdir, "result.json")
            if not os.path.isfile(result_file):
                continue
            rows = []
            with open(result_file) as f:
                for line in f:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        continue
            self.trial_dataframes_raw[logdir] = rows
            params = os.path.join(logdir, "params.json")
            if os.path.isfile(params):
                with open(params) as f:
                    self._configs[logdir] = json.load(f)

    @property
    def experiment_dir(self) -> str:
        return self._dir

    def results(self) -> dict[str, dict]:
        """logdir -> the trial's last result."""
        return {d: rows[-1] for d, rows in self.trial_dataframes_raw.items() if rows}

    def get_all_configs(self) -> dict[str, dict]:
        """logdir -> config."""
        return dict(self._configs)

    def dataframe(self, metric: str | None = None, mode: str | None = None):
        """One row per trial (its last result, or its best by ``metric``/``mode``),
        with ``config/...`` columns and ``logdir``.  Needs pandas."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("ExperimentAnalysis.dataframe() needs pandas: "
                              "pip install pandas (or pip install 'hpc_ray[tune]')") from None
        return pd.DataFrame(self._rows(metric, mode))

    def _rows(self, metric: str | None, mode: str | None) -> list[dict]:
        rows = []
        for logdir, results in self.trial_dataframes_raw.items():
            if not results:
                continue
            if metric:
                scored = [r for r in results if metric in r]
                if not scored:
                    continue
                pick = (max if _mode(mode) == "max" else min)(scored, key=lambda r: r[metric])
            else:
                pick = results[-1]
            row = dict(pick)
            for key, value in _flatten(self._configs.get(logdir, {})).items():
                row[f"config/{key}"] = value
            row["logdir"] = logdir
            rows.append(row)
        return rows

    def trial_dataframes(self) -> dict:
        """logdir -> a DataFrame of every result (needs pandas)."""
        import pandas as pd
        return {d: pd.DataFrame(rows) for d, rows in self.trial_dataframes_raw.items()}

    def get_best_logdir(self, metric: str, mode: str = "max") -> str | None:
        """The logdir of the trial with the best ``metric`` over all its results."""
        best, best_dir = None, None
        sign = 1 if _mode(mode) == "max" else -1
        for logdir, results in self.trial_dataframes_raw.items():
            for r in results:
                if metric in r and isinstance(r[metric], (int, float)):
                    if best is None or sign * r[metric] > sign * best:
                        best, best_dir = r[metric], logdir
        return best_dir

    def get_best_config(self, metric: str, mode: str = "max") -> dict | None:
        """The config of the trial with the best ``metric``."""
        logdir = self.get_best_logdir(metric, mode)
        return None if logdir is None else self._configs.get(logdir)


#: Ray 0.7.x's other name.
Analysis = ExperimentAnalysis


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
