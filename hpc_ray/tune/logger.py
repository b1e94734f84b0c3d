"""Per-trial files: ``params.json``, ``params.pkl``, ``result.json`` (one JSON line
per result), ``progress.csv``, and ``error.txt`` when the trial failed."""
from __future__ import annotations

import csv
import json
import os
import pickle
from typing import Any

from .trial import Trial, _jsonable

__all__ = ["TrialLogger", "truncate_results"]

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


class TrialLogger:
    """Writes one trial's files; each line is flushed, so a killed job keeps them."""

    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self.logdir = trial.logdir
        os.makedirs(self.logdir, exist_ok=True)
        with open(os.path.join(self.logdir, PARAMS_FILE), "w") as f:
            json.dump(_jsonable(trial.config), f, indent=2, sort_keys=True, default=repr)
        try:
            with open(os.path.join(self.logdir, "params.pkl"), "wb") as f:
                pickle.dump(trial.config, f)
        except Exception:  # noqa: BLE001 - a config that does not pickle plainly
            pass
        self._json = open(os.path.join(self.logdir, RESULT_FILE), "a")
        progress = os.path.join(self.logdir, PROGRESS_FILE)
        self._fields: list[str] | None = None
        if os.path.exists(progress) and os.path.getsize(progress) > 0:
            with open(progress, newline="") as f:
                self._fields = next(csv.reader(f), None)
        self._csv_file = open(progress, "a", newline="")
        self._csv = None
        if self._fields:
            self._csv = csv.DictWriter(self._csv_file, self._fields, extrasaction="ignore")

    def on_result(self, result: dict) -> None:
        clean = _jsonable(result)
        self._json.write(json.dumps(clean) + "\n")
        self._json.flush()
        flat = _flatten(clean)
        if self._csv is None:
            self._fields = list(flat)
            self._csv = csv.DictWriter(self._csv_file, self._fields, extrasaction="ignore")
            self._csv.writeheader()
        self._csv.writerow(flat)
        self._csv_file.flush()

    def close(self) -> None:
        for f in (self._json, self._csv_file):
            try:
                f.close()
            except OSError:
                pass


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
