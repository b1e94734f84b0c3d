"""The experiment state files: ``experiment_state.json`` (a snapshot) and
``experiment_state.journal`` (one JSON line per trial state change since)."""
from __future__ import annotations

import json
import os
import time

from .trial import Trial

__all__ = ["STATE_FILE", "JOURNAL_FILE", "StateJournal", "load_experiment_state"]

STATE_FILE = "experiment_state.json"
JOURNAL_FILE = "experiment_state.journal"
#: Journal lines per trial before a fresh snapshot replaces the journal: a
#: snapshot costs O(trials), a line O(1); compacting every few changes per
#: trial keeps both the files and the write cost linear in the work done.
_COMPACT_PER_TRIAL = 4


class StateJournal:
    """Writes an experiment's state: a line per trial state change, and now
    and then a snapshot of every trial that replaces the journal."""

    def __init__(self, experiment_dir: str, metadata: dict) -> None:
        self._dir = experiment_dir
        self._metadata = metadata
        #: The journal, appended with one os.write per state change, and the
        #: sequence number of the last line (the snapshot records it too).
        self._fd: int | None = None
        self._seq = 0
        self._lines = 0

    def record(self, trial: Trial, trials: list[Trial]) -> None:
        """Append ``trial``'s state (one write: a kill keeps it or not)."""
        self._seq += 1
        state = trial.to_state()
        state["seq"] = self._seq
        if self._fd is None:
            self._fd = os.open(os.path.join(self._dir, JOURNAL_FILE),
                               os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self._fd, (json.dumps(state) + "\n").encode())
        self._lines += 1
        if self._lines > _COMPACT_PER_TRIAL * len(trials) + 100:
            self.snapshot(trials)

    def snapshot(self, trials: list[Trial]) -> None:
        state = {"version": 1, "timestamp": time.time(), "metadata": self._metadata,
                 "seq": self._seq, "trials": [t.to_state() for t in trials]}
        path = os.path.join(self._dir, STATE_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        # The journal's lines are in the snapshot now (a kill before this line
        # leaves them there: the snapshot's seq tells the reader to skip them).
        if self._fd is None:
            open(os.path.join(self._dir, JOURNAL_FILE), "w").close()
        else:
            os.ftruncate(self._fd, 0)
        self._lines = 0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def load_experiment_state(experiment_dir: str) -> tuple[dict, list[Trial]] | None:
    """The trials of an experiment directory: its snapshot, then its journal."""
    path = os.path.join(experiment_dir, STATE_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        state = json.load(f)
    trials: dict[str, dict] = {t["trial_id"]: t for t in state["trials"]}
    seq = state.get("seq", 0)
    journal = os.path.join(experiment_dir, JOURNAL_FILE)
    if os.path.exists(journal):
        with open(journal) as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # the last line, torn by a kill
                if entry.get("seq", seq + 1) > seq:  # else already in the snapshot
                    trials[entry["trial_id"]] = entry
    return state.get("metadata", {}), [Trial.from_state(t) for t in trials.values()]
