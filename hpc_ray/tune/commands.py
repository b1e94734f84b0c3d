"""Ray 0.7's Tune CLI (``tune list-trials``, ``tune list-experiments``), here
``hpc-ray tune list-trials`` / ``list-experiments`` (or ``python -m hpc_ray.tune``):
tables of an experiment's trials and of a project's experiments, read from the
experiment state files, with 0.7's ``--sort``, ``--filter "<column> <op> <value>"``,
``--columns``, ``--result-columns`` and ``--output`` (CSV or pickle)."""
from __future__ import annotations

import datetime
import operator
import os

from .analysis import _pandas
from .error import TuneError
from .experiment_state import STATE_FILE, load_experiment_state
from .trial import Trial

__all__ = ["list_trials", "list_experiments"]

#: The columns each table shows unless ``--columns``/``--result-columns`` say.
DEFAULT_TRIAL_INFO = ("trainable_name", "experiment_tag", "trial_id", "status",
                      "last_update_time")
DEFAULT_RESULT_KEYS = ("training_iteration", "time_total_s", "timesteps_total",
                       "mean_accuracy", "mean_loss")
DEFAULT_EXPERIMENT_INFO = ("name", "total_trials", "running_trials", "terminated_trials",
                           "error_trials", "last_updated")

_OPERATORS = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
              ">=": operator.ge, ">": operator.gt}


def _stamp(path: str) -> str:
    try:
        return datetime.datetime.fromtimestamp(os.path.getmtime(path)).strftime(
            "%Y-%m-%d %H:%M:%S")
    except OSError:
        return ""


def _by_experiment(root: str) -> dict[str, list[Trial]]:
    """Experiment name -> its trials, from the state files in ``root`` and the
    directories right under it. A run of several experiments keeps one state file,
    in the first one's directory: each trial counts in its own directory's."""
    found: dict[str, list[Trial]] = {}
    places = [root] + [os.path.join(root, n) for n in sorted(os.listdir(root))]
    for place in places:
        if not os.path.isfile(os.path.join(place, STATE_FILE)):
            continue
        for trial in load_experiment_state(place)[1]:
            where = os.path.dirname(trial.logdir) if trial.logdir else place
            found.setdefault(os.path.basename(where), []).append(trial)
    return found


def _trials(experiment_dir: str) -> list[Trial]:
    name = os.path.basename(experiment_dir)
    trials = _by_experiment(os.path.dirname(experiment_dir)).get(name)
    if trials is None:
        trials = _by_experiment(experiment_dir).get(name)
    if trials is None:
        raise TuneError(f"no experiment at {experiment_dir!r}: no {STATE_FILE} lists its "
                        f"trials (pass local_dir/name of an experiment tune.run has written)")
    return trials


def list_trials(experiment_path: str, sort=None, output: str | None = None,
                filter_op: str | None = None, info_keys=None, result_keys=None):
    """Print (and return, as a DataFrame) a table of the experiment's trials."""
    pd = _pandas("list_trials")
    experiment_path = os.path.abspath(os.path.expanduser(experiment_path))
    rows = []
    for trial in _trials(experiment_path):
        row = {"trainable_name": trial.trainable_name, "experiment_tag": trial.experiment_tag,
               "trial_id": trial.trial_id, "status": trial.status, "logdir": trial.logdir,
               "last_update_time": _stamp(os.path.join(trial.logdir or "", "result.json"))}
        row.update({k: v for k, v in trial.last_result.items() if not isinstance(v, dict)})
        rows.append(row)
    columns = list(info_keys or DEFAULT_TRIAL_INFO) + list(result_keys or DEFAULT_RESULT_KEYS)
    return _show(pd.DataFrame(rows), columns, [*(info_keys or ()), *(result_keys or ())],
                 sort, output, filter_op)


def list_experiments(project_path: str, sort=None, output: str | None = None,
                     filter_op: str | None = None, info_keys=None):
    """Print (and return, as a DataFrame) a table of the experiments under a directory."""
    pd = _pandas("list_experiments")
    project_path = os.path.abspath(os.path.expanduser(project_path))
    if not os.path.isdir(project_path):
        raise TuneError(f"no directory {project_path!r}")
    rows = []
    for name, trials in sorted(_by_experiment(project_path).items()):
        statuses = [t.status for t in trials]
        stamps = [_stamp(os.path.join(t.logdir or "", "result.json")) for t in trials]
        rows.append({"name": name, "total_trials": len(statuses),
                     "running_trials": statuses.count(Trial.RUNNING),
                     "terminated_trials": statuses.count(Trial.TERMINATED),
                     "error_trials": statuses.count(Trial.ERROR),
                     "last_updated": max(stamps, default="")})
    return _show(pd.DataFrame(rows), list(info_keys or DEFAULT_EXPERIMENT_INFO),
                 list(info_keys or ()), sort, output, filter_op)


def _show(df, columns: list, asked: list, sort, output: str | None, filter_op: str | None):
    """Print ``df``'s ``columns`` (a default one no row has is left out; one the
    user ``asked`` for is an error)."""
    unknown = [c for c in asked if c not in df.columns and not df.empty]
    if unknown:
        raise TuneError(f"unknown column(s) {unknown}: the table has {sorted(df.columns)}")
    df = df.reindex(columns=[c for c in columns if c in df.columns])
    empty = [c for c in df.columns if df[c].isna().all() or (df[c] == "").all()]
    df = df.drop(columns=empty)
    if filter_op:
        df = _filtered(df, filter_op)
    if sort:
        keys = [sort] if isinstance(sort, str) else list(sort)
        missing = [k for k in keys if k not in df.columns]
        if missing:
            raise TuneError(f"cannot sort on {missing}: the table has {list(df.columns)}")
        df = df.sort_values(by=keys)
    print(_table(df))
    if empty:
        print(f"Dropped columns: {empty}")
    if output:
        ext = os.path.splitext(output)[1].lower()
        if ext == ".csv":
            df.to_csv(output, index=False)
        elif ext in (".pkl", ".pickle"):
            df.to_pickle(output)
        else:
            raise TuneError(f"--output must end in .csv, .pkl or .pickle, got {output!r}")
        print(f"Output saved at: {output}")
    return df


def _filtered(df, filter_op: str):
    parts = filter_op.split(None, 2)
    if len(parts) != 3 or parts[1] not in _OPERATORS:
        raise TuneError(f"--filter must be \"<column> <operator> <value>\" with an operator "
                        f"of {sorted(_OPERATORS)}, got {filter_op!r}")
    column, op, value = parts
    if column not in df.columns:
        raise TuneError(f"cannot filter on {column!r}: the table has {list(df.columns)}")
    if df[column].dtype.kind in "iuf":
        value = float(value)
    return df[_OPERATORS[op](df[column], value)]


def _table(df) -> str:
    if df.empty:
        return "(no rows)"
    try:
        from tabulate import tabulate
    except ImportError:
        return df.to_string(index=False)
    return tabulate(df, headers="keys", tablefmt="psql", showindex=False)
