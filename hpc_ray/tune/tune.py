"""``tune.run`` and ``run_experiments``: an experiment from start (or resume) to end."""
from __future__ import annotations

import logging
import os

from .. import api as _ray
from .. import preempt as _preempt
from .analysis import ExperimentAnalysis, TrialList
from .error import TuneError
from .experiment import Experiment, convert_to_experiment_list, warn_ignored
from .schedulers.trial_scheduler import FIFOScheduler
from .suggest.basic_variant import BasicVariantGenerator
from .suggest.search import SuggestionAlgorithm
from .trial import Trial
from .trainable import _META
from .trial_actor import pack_trainable
from .experiment_state import JOURNAL_FILE, STATE_FILE, load_experiment_state
from .trial_runner import TrialRunner

__all__ = ["run", "run_experiments"]

logger = logging.getLogger(__name__)

#: The runner a Slurm warning signal should checkpoint (one experiment at a time).
_active_runner: TrialRunner | None = None
_hook_installed = False


def _on_preempt() -> None:
    if _active_runner is not None:
        _active_runner.request_preemption()


def run(run_or_experiment, name: str | None = None, stop: dict | None = None,
        config: dict | None = None, resources_per_trial: dict | None = None,
        num_samples: int = 1, local_dir: str | None = None, upload_dir=None,
        trial_name_creator=None, loggers=None, sync_function=None,
        checkpoint_freq: int = 0, checkpoint_at_end: bool = False,
        keep_checkpoints_num: int | None = None, checkpoint_score_attr=None,
        export_formats=None, max_failures: int = 3, restore: str | None = None,
        search_alg=None, scheduler=None, with_server: bool = False, server_port: int = 4321,
        verbose: int = 2, resume: bool | str = False, queue_trials: bool = False,
        reuse_actors: bool = True, trial_executor=None, raise_on_failed_trial: bool = True,
        return_trials: bool = True, ray_auto_init: bool = True):
    """Run an experiment: every trial of ``config`` × ``num_samples``, on the worker ranks.

    Args:
        run_or_experiment: a function ``f(config, reporter)`` (or ``f(config)``
            calling ``tune.report``), a ``tune.Trainable`` subclass, a registered
            name, or an ``Experiment``.
        name: the experiment's name: its directory is ``local_dir/name``.
        stop: stop a trial when a result reaches any of these values (or a
            function ``f(trial_id, result) -> bool``; a function that does not
            take these two arguments is a ``ValueError``).  A key that the
            trial's first result lacks is a ``TuneError``.
        config: the search space (``grid_search``, ``sample_from``, samplers).
        resources_per_trial: e.g. ``{"cpu": 1, "gpu": 1, "extra_cpu": 4,
            "custom_resources": {"R": 1}}`` or a ``tune.resources.Resources``
            (default: the trainable's ``default_resource_request``, else 1 CPU).
        num_samples: how many times the grid is repeated / the space sampled.
        local_dir: where experiment directories go (default ``~/ray_results``).
        loggers: ``tune.logger.Logger`` subclasses, used beside the default
            JSON, CSV and TensorBoard loggers.
        checkpoint_freq: checkpoint every this many iterations (class trainables).
        checkpoint_at_end: checkpoint when a trial ends.
        keep_checkpoints_num: keep only this many checkpoints per trial: the
            best by ``checkpoint_score_attr``, and always the newest.
        checkpoint_score_attr: the result attribute that ranks checkpoints
            (``"min-<attr>"``: lower is better); default ``training_iteration``
            (the newest are kept).
        export_formats: formats ``Trainable._export_model`` exports into the
            trial's directory when the trial ends.
        max_failures: restart a failed trial (from its last checkpoint, or from
            scratch without one) up to this many times; -1: without limit.
        search_alg: a search algorithm (default ``BasicVariantGenerator``).
        scheduler: a trial scheduler (default ``FIFOScheduler``).
        verbose: 0 silent, 1: the status table, throttled; 2: also each
            trial's results ("Result for <trial>:"), at most every 5 s per
            trial and its last one.
        resume: True: continue the experiment in ``local_dir/name`` from its
            state file (finished trials stay finished, the others continue from
            their checkpoints); without a state file it starts afresh.
        reuse_actors: run a new trial in a finished trial's actor (same
            trainable and resources): through ``reset_config`` when the trainable
            accepts it (function trainables do), else as a fresh instance of
            the class in that process.  Starting an actor costs a process start
            on the worker rank; reusing one costs nothing.  A ``reset_config``
            of the user's that returns False is a ``TuneError``.
        raise_on_failed_trial: raise ``TuneError`` if any trial ended in ERROR.
        upload_dir, sync_function, with_server: accepted for Ray 0.7's
            signature, with a warning that they have no effect here.
        return_trials: True (Ray 0.7): the list of trials, which also answers
            ``ExperimentAnalysis``'s methods; False: an ``ExperimentAnalysis``.

    Returns:
        The list of trials (a ``TrialList``: ``.dataframe()``,
        ``.get_best_config(metric, mode)``, ... work on it), or an
        ``ExperimentAnalysis`` with ``return_trials=False``.

    Raises:
        TuneError: a trial failed (with ``raise_on_failed_trial``), or the
            experiment cannot run (a trial needs more than the job has).
    """
    if isinstance(run_or_experiment, Experiment):
        experiment = run_or_experiment
    else:
        experiment = Experiment(name, run_or_experiment, stop=stop, config=config,
                                resources_per_trial=resources_per_trial,
                                num_samples=num_samples, local_dir=local_dir,
                                trial_name_creator=trial_name_creator,
                                checkpoint_freq=checkpoint_freq,
                                checkpoint_at_end=checkpoint_at_end,
                                keep_checkpoints_num=keep_checkpoints_num,
                                checkpoint_score_attr=checkpoint_score_attr,
                                loggers=loggers, export_formats=export_formats,
                                max_failures=max_failures, restore=restore,
                                upload_dir=upload_dir, sync_function=sync_function)
    trials = run_experiments([experiment], search_alg=search_alg, scheduler=scheduler,
                             with_server=with_server, verbose=verbose, resume=resume,
                             reuse_actors=reuse_actors, trial_executor=trial_executor,
                             raise_on_failed_trial=raise_on_failed_trial,
                             ray_auto_init=ray_auto_init)
    if return_trials:
        return trials
    return ExperimentAnalysis(experiment.experiment_dir, trials=list(trials))


def run_experiments(experiments, search_alg=None, scheduler=None, with_server: bool = False,
                    server_port: int = 4321, verbose: int = 2, resume: bool | str = False,
                    queue_trials: bool = False, reuse_actors: bool = False,
                    trial_executor=None, raise_on_failed_trial: bool = True,
                    ray_auto_init: bool = True) -> TrialList:
    """Run one or more experiments (``Experiment`` objects or a dict of specs)
    until every trial is done; see :func:`run` for the arguments.

    Returns:
        The list of trials of every experiment (a ``TrialList``).

    Raises:
        TuneError: a spec has an unknown key, a trainable is unknown or not a
            trainable, a stop key is missing from a result, a trial failed
            (with ``raise_on_failed_trial``).
    """
    global _active_runner, _hook_installed
    if with_server:
        warn_ignored("with_server=True", "there is no Tune web server or client; "
                     "read the status table or the trials' result.json instead")
    if trial_executor is not None:
        warn_ignored("trial_executor", "trials always run as actors on the worker ranks "
                     "(hpc_ray's own executor)")
    experiments = convert_to_experiment_list(experiments)
    _check_scheduler(scheduler, experiments)  # before a cluster starts for nothing
    if resume == "prompt":
        resume = True
    if ray_auto_init and not _ray.is_initialized():
        _ray.init()
    search_alg = search_alg or BasicVariantGenerator()
    scheduler = scheduler or FIFOScheduler()
    experiment_dir = experiments[0].experiment_dir
    trainables = {e.trainable_name: (pack_trainable(e.run), not isinstance(e.run, type))
                  for e in experiments}
    runner = TrialRunner(trainables, search_alg, scheduler, experiment_dir,
                         reuse_actors=reuse_actors, verbose=verbose,
                         metadata={"name": experiments[0].name})
    search_alg.add_configurations(experiments)
    state = load_experiment_state(experiment_dir) if resume else None
    if state is not None:
        _metadata, trials = state
        logger.info("resuming %s: %d trials", experiment_dir, len(trials))
        runner.restore_trials(trials)
        if isinstance(search_alg, BasicVariantGenerator):
            search_alg.skip_all()
        elif isinstance(search_alg, SuggestionAlgorithm):
            search_alg.skip(len(trials))
    else:
        if resume:
            logger.info("resume=True but %s has no %s: starting afresh", experiment_dir,
                        STATE_FILE)
        for stale in (STATE_FILE, JOURNAL_FILE):
            try:
                os.unlink(os.path.join(experiment_dir, stale))
            except FileNotFoundError:
                pass
        for experiment in experiments:
            if experiment.restore:
                _seed_restore(search_alg, experiment)
    if not _hook_installed:
        _preempt.on_preempt(_on_preempt)
        _hook_installed = True
    _active_runner = runner
    try:
        runner.run()
    finally:
        _active_runner = None
    trials = runner.get_trials()
    errored = [t for t in trials if t.status == Trial.ERROR]
    if errored and raise_on_failed_trial and not _preempt.preempted():
        raise TuneError(f"trials did not complete: {errored} (see each trial's error.txt)")
    return TrialList(trials, experiment_dir)


def _check_scheduler(scheduler, experiments: list[Experiment]) -> None:
    """A scheduler that pauses trials checkpoints them: with a function
    trainable that fails on the first pause, so fail before any trial starts."""
    if not getattr(scheduler, "pauses_trials", False):
        return
    for experiment in experiments:
        if not isinstance(experiment.run, type):
            raise TuneError(
                f"{type(scheduler).__name__} pauses trials, and a paused trial is "
                f"checkpointed, but {experiment.trainable_name!r} is a function "
                f"trainable, which cannot be checkpointed (as in Ray 0.7): write it as "
                f"a tune.Trainable subclass with _train/_save/_restore, or use a "
                f"scheduler that only stops trials (AsyncHyperBandScheduler/"
                f"ASHAScheduler, MedianStoppingRule with hard_stop=True, FIFOScheduler)")


def _seed_restore(search_alg, experiment: Experiment) -> None:
    """``restore=path``: every trial of the experiment starts from that checkpoint,
    named by its directory or by a file in it (Ray 0.7's ``save()`` returns the
    file, and RLlib's docs pass ``checkpoint_1/checkpoint-1``)."""
    from .trial import Checkpoint
    path = os.path.abspath(os.path.expanduser(experiment.restore))
    if os.path.isfile(path) or (not os.path.exists(path)
                                and os.path.isfile(os.path.join(os.path.dirname(path), _META))):
        # A file in the checkpoint, or the prefix a TensorFlow-style _save returned
        # (``checkpoint_6/save-6``, written as save-6.index, ...): its directory.
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise TuneError(f"restore={experiment.restore!r} is neither a checkpoint directory "
                        f"nor a file in one")
    for trial in getattr(search_alg, "_pending", []):
        trial.checkpoint = Checkpoint(path, 0)
