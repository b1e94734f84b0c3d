"""The status table printed while an experiment runs, throttled for batch logs.

On a terminal the table is printed at most every ``HPC_RAY_TUNE_STATUS_INTERVAL``
seconds (default 1 s); when stdout is a file (a batch job's log) at most every
30 s by default, so a day-long sweep does not fill the log.  The final table is
always printed.  ``verbose=2`` also prints each trial's results ("Result for
<trial>:"), throttled per trial, as Ray 0.7 does.
"""
from __future__ import annotations

import sys
import time

from .. import _config
from . import result as R
from .logger import pretty_print
from .trial import Trial

__all__ = ["ProgressReporter"]

#: Trials listed per state before "... N more not shown".
MAX_TRIALS_SHOWN = 20
#: verbose=2 prints a trial's results at most this often (Ray 0.7's
#: DEBUG_PRINT_INTERVAL): every result of a 10 ms iteration would drown the log.
RESULT_PRINT_INTERVAL_S = 5.0
_ORDER = (Trial.RUNNING, Trial.PAUSED, Trial.PENDING, Trial.TERMINATED, Trial.ERROR)


def _interval() -> float:
    default = 1.0 if sys.stdout.isatty() else 30.0
    return max(0.0, _config.os_environ_get("TUNE_STATUS_INTERVAL", default, float))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def shown_status(trial: Trial) -> str:
    """A trial's status as the table shows it: one queued on another's actor
    (``TrialRunner._queue_successors``) is RUNNING to the runner but still waits."""
    if trial.status == Trial.RUNNING and trial._predecessor is not None:
        return Trial.PENDING
    return trial.status


def trial_line(trial: Trial) -> str:
    r = trial.last_result
    status = shown_status(trial)
    parts = [f"{trial}: {status}"]
    if r.get(R.PID) is not None and status == Trial.RUNNING:
        parts[0] += f" [pid={r[R.PID]}]"
    if R.TRAINING_ITERATION in r:
        parts.append(f"{r[R.TRAINING_ITERATION]} iter")
    if R.TIME_TOTAL_S in r:
        parts.append(f"{r[R.TIME_TOTAL_S]:.3g} s")
    shown = {R.TRAINING_ITERATION, R.TIME_TOTAL_S, R.DONE, R.PID, R.HOSTNAME, R.NODE_IP,
             R.TIME_THIS_ITER_S, R.EXPERIMENT_ID, R.TRIAL_ID, "date", "timestamp",
             "time_since_restore", "iterations_since_restore", "experiment_tag",
             R.TIMESTEPS_SINCE_RESTORE, R.NEG_MEAN_LOSS}
    metrics = [f"{k}={_fmt(v)}" for k, v in r.items()
               if k not in shown and isinstance(v, (int, float)) and not isinstance(v, bool)]
    parts += metrics[:4]
    if trial.status == Trial.ERROR and trial.error_file:
        parts.append(f"error: {trial.error_file}")
    return ", ".join(parts)


class ProgressReporter:
    """Prints ``== Status ==`` tables to stdout (verbose >= 1)."""

    def __init__(self, verbose: int, experiment_dir: str, scheduler, totals: dict) -> None:
        self._verbose = verbose
        self._dir = experiment_dir
        self._scheduler = scheduler
        self._totals = totals
        self._interval = _interval()
        self._last = 0.0
        self._last_counts: dict | None = None
        #: trial_id -> when its last result was printed (verbose=2).
        self._printed: dict[str, float] = {}

    def report(self, trials: list[Trial], force: bool = False) -> None:
        if self._verbose < 1:
            return
        now = time.monotonic()
        if not force and now - self._last < self._interval:
            return
        self._last = now
        sys.stdout.write(self.table(trials) + "\n")
        sys.stdout.flush()

    def trial_result(self, trial: Trial, result: dict, final: bool = False) -> None:
        """verbose=2: "Result for <trial>:" and the result, pretty-printed, at most
        every ``RESULT_PRINT_INTERVAL_S`` per trial, and always its last one."""
        if self._verbose < 2:
            return
        now = time.monotonic()
        last = self._printed.get(trial.trial_id)
        if not final and last is not None and now - last < RESULT_PRINT_INTERVAL_S:
            return
        self._printed[trial.trial_id] = now
        body = pretty_print(result).rstrip("\n").replace("\n", "\n  ")
        sys.stdout.write(f"Result for {trial}:\n  {body}\n\n")
        sys.stdout.flush()

    def note(self, text: str) -> None:
        if self._verbose >= 1:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    def table(self, trials: list[Trial]) -> str:
        counts: dict[str, int] = {}
        for t in trials:
            counts[shown_status(t)] = counts.get(shown_status(t), 0) + 1
        cpu = gpu = 0.0
        for t in trials:
            if shown_status(t) == Trial.RUNNING:
                cpu += t.resources.get("cpu", 1) + t.resources.get("extra_cpu", 0)
                gpu += t.resources.get("gpu", 0) + t.resources.get("extra_gpu", 0)
        lines = ["== Status =="]
        debug = self._scheduler.debug_string()
        if debug:
            lines.append(debug)
        lines.append(f"Resources requested: {cpu:g}/{self._totals.get('CPU', 0):g} CPUs, "
                     f"{gpu:g}/{self._totals.get('GPU', 0):g} GPUs")
        lines.append(f"Result logdir: {self._dir}")
        lines.append(f"Number of trials: {len(trials)} "
                     f"({', '.join(f'{n} {s}' for s, n in counts.items())})")
        for status in _ORDER:
            group = [t for t in trials if shown_status(t) == status]
            if not group:
                continue
            lines.append(f"{status} trials:")
            for t in group[:MAX_TRIALS_SHOWN]:
                lines.append(f" - {trial_line(t)}")
            if len(group) > MAX_TRIALS_SHOWN:
                lines.append(f"  ... {len(group) - MAX_TRIALS_SHOWN} more not shown")
        return "\n".join(lines) + "\n"
