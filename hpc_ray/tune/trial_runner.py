"""The runner loop: moves trials between states; the trials run as hpc_ray actors.

::

    driver (rank 0)                                   worker ranks
    ─────────────────────────────────────────         ─────────────────────
    search_alg.next_trials() ─▶ PENDING trials
    scheduler.choose_trial_to_run() ─▶ start: an actor (new, or an idle one
        when reuse_actors) gets setup() + train() ──▶ TrialActor.train()
    ray.wait(in-flight train refs) ◀─── [(result, checkpoint bytes)] ┘
        log each result, store the checkpoints, then by stop criteria and
        scheduler.on_trial_result: next train() | PAUSE (save, release) |
        STOP (release) | an error: restart from the last checkpoint while
        num_failures <= max_failures, else ERROR

    every trial state change ─▶ one line appended to experiment_state.journal
        (a snapshot, experiment_state.json, replaces it atomically now and then)

Under FIFO a train() call runs several iterations (up to 0.25 s, ending at a
checkpoint), and the next pending trial is queued on the actor of a running
one that should end within its call (TrialActor.start), so the actor goes on
to it without a round trip to the driver; the queued trial holds no resources
of its own until its predecessor ends.

Trials hold resources (``resources_per_trial``) from start to pause or end; the
runner starts a trial only when the cluster's totals (``ray.cluster_resources``)
minus what its running trials hold can take it.  Checkpoints travel as bytes
and live on the driver's disk, so a node without a shared file system is fine.
"""
from __future__ import annotations

import json
import logging
import os
import time
from typing import Iterable

from .. import api as _ray
from ..actors import kill as _kill
from ..exceptions import RayError
from . import checkpoints as _checkpoints
from . import result as R
from .error import ResetConfigError, TuneError
from .experiment_state import JOURNAL_FILE, STATE_FILE, StateJournal, load_experiment_state
from .logger import TrialLogger, truncate_results
from .progress import ProgressReporter
from .resources import actor_options as _actor_options, demand as _demand, fits as _fits, held as _held
from .resources import resource_help as _resource_help, shape as _shape
from .schedulers.trial_scheduler import FIFOScheduler, TrialScheduler
from .suggest.search import tell_complete
from .trainable import unpack_dir
from .trial import Trial, _jsonable
from .trial_actor import TrialActor

__all__ = ["TrialRunner", "STATE_FILE", "JOURNAL_FILE", "load_experiment_state"]

logger = logging.getLogger(__name__)

#: Seconds a driver waits for trials' in-flight iterations on Slurm's warning
#: (the templates send it 300 s before the end) and on SIGTERM (KillWait, 30 s
#: by default, is all that is left then).
_PREEMPT_WAIT_S = 60.0
#: Seconds a trainable's ``_stop`` may take before its actor is killed anyway.
_STOP_TIMEOUT_S = 10.0
#: Under a scheduler that decides nothing per result (FIFO), one train() call
#: runs up to this many iterations or seconds: short trials then cost one round
#: trip each, while the status table and a preemption still hear back soon.
_BATCH_RESULTS = 1000
_BATCH_SECONDS = 0.25
_TERM_WAIT_S = 10.0


class TrialRunner:
    """Runs the trials of one experiment to completion (or preemption)."""

    def __init__(self, trainables: dict[str, tuple[bytes, bool]], search_alg,
                 scheduler: TrialScheduler | None, experiment_dir: str,
                 reuse_actors: bool = True, verbose: int = 2,
                 metadata: dict | None = None) -> None:
        #: trainable name -> (pickled trainable, is a function).  Function
        #: trainables cannot be checkpointed (as in Ray 0.7).
        self._trainables = trainables
        self._search_alg = search_alg
        self._scheduler = scheduler or FIFOScheduler()
        self._dir = experiment_dir
        self._reuse = reuse_actors
        self._trials: list[Trial] = []
        self._by_id: dict[str, Trial] = {}
        self._inflight: dict = {}           # train ref -> trial
        self._actors: dict[str, object] = {}  # trial_id -> actor handle
        self._loggers: dict[str, TrialLogger] = {}
        self._idle: list[tuple[tuple, object]] = []
        self._actor_class = _ray.remote(TrialActor)
        self._total = {k: float(v) for k, v in _ray.cluster_resources().items()}
        #: Counts pauses: paused trials resume in the order they were paused.
        self._pause_seq = 0
        self._metadata = dict(metadata or {})
        os.makedirs(experiment_dir, exist_ok=True)
        self._preempted = False
        self._draining = False
        self._used_cache: dict[str, float] | None = None
        self._journal = StateJournal(experiment_dir, self._metadata)
        #: Trials before this index are all finished (they never come back).
        self._first_open = 0
        self._progress = ProgressReporter(verbose, experiment_dir, self._scheduler,
                                          self._total)

    def _is_function(self, trial: Trial) -> bool:
        return self._trainables[trial.trainable_name][1]

    def _reusable(self, trial: Trial) -> bool:
        """Its actor may take another trial (the actor resets or rebuilds the
        trainable in place: TrialActor.setup)."""
        return self._reuse

    # --- the interface schedulers and search algorithms use -----------------------

    def get_trials(self) -> list[Trial]:
        return self._trials

    def unfinished_trials(self) -> list[Trial]:
        """The trials from the first one not finished on (finished trials never
        come back, so thousands of them cost no scan)."""
        trials = self._trials
        i = self._first_open
        while i < len(trials) and trials[i].is_finished():
            i += 1
        self._first_open = i
        return trials[i:]

    def has_resources(self, resources: dict) -> bool:
        shape = _shape(resources)
        if any(k[1:] == shape for k, _ in self._idle):
            return True  # an idle actor of that shape is handed over (or replaced)
        return _fits(resources, self._used(), self._total)

    def _used(self) -> dict[str, float]:
        """What running trials and idle actors hold; cached until a state changes."""
        if self._used_cache is None:
            running = [t.resources for t in self._trials
                       if t.status == Trial.RUNNING and t._predecessor is None]
            self._used_cache = _held(running + [dict(k[1:]) for k, _ in self._idle])
        return self._used_cache

    def add_trial(self, trial: Trial) -> None:
        self._trials.append(trial)
        self._by_id[trial.trial_id] = trial
        if trial.logdir is None:
            # Under its own experiment's directory (run_experiments with several
            # experiments); a Trial a search algorithm made without one, under the first.
            trial.logdir = os.path.join(trial.local_dir or self._dir, _checkpoints.dirname(trial))
        os.makedirs(trial.logdir, exist_ok=True)
        for name, v in _demand(trial.resources).items():
            if v and v > self._total.get(name, 0.0) + 1e-9:
                raise TuneError(
                    f"trial {trial} needs {name}={v:g} but the whole job has "
                    f"{self._total.get(name, 0):g} ({self._total}); start more ranks"
                    f"{_resource_help(trial.trainable_name, trial.config)}")
        self._scheduler.on_trial_add(self, trial)
        self._record(trial)

    def stop_trial(self, trial: Trial) -> None:
        """Stop a trial for good (schedulers call this for paused ones)."""
        if trial.status == Trial.RUNNING:
            self._release(trial, reusable=True)
        self._close_logger(trial)
        trial.status = Trial.TERMINATED
        self._record(trial)

    def unpause_trial(self, trial: Trial) -> None:
        if trial.status == Trial.PAUSED:
            trial.status = Trial.PENDING
            self._record(trial)

    def save_trial(self, trial: Trial) -> str | None:
        """Checkpoint a running trial now (its in-flight call, if any, first)."""
        actor = self._actors.get(trial.trial_id)
        if actor is None:
            return trial.checkpoint.path
        iteration, data = _ray.get(actor.save.remote())
        self._store_checkpoint(trial, data, iteration)
        return trial.checkpoint.path

    def exploit_trial(self, trial: Trial, new_config: dict, checkpoint_path: str | None) -> None:
        """Give ``trial`` a new config and another trial's checkpoint (PBT)."""
        trial.config = new_config
        trial._restore_from = checkpoint_path
        trial._pending_setup = True
        log = self._loggers.get(trial.trial_id)
        if log is not None:
            log.update_config(new_config)
        else:
            with open(os.path.join(trial.logdir, "params.json"), "w") as f:
                json.dump(_jsonable(new_config), f, indent=2, sort_keys=True,
                          default=repr)
        self._record(trial)

    # --- the loop ---------------------------------------------------------------

    def is_finished(self) -> bool:
        return (not self._inflight and self._search_alg.is_finished()
                and all(t.is_finished() for t in self._trials))

    def run(self) -> None:
        self._journal.snapshot(self._trials)
        try:
            while not self.is_finished():
                if self._preempted:
                    self._checkpoint_all(_PREEMPT_WAIT_S)
                    break
                self._step()
        except SystemExit:
            # SIGTERM after the hooks ran (hpc_ray.preempt): Slurm's KillWait is
            # short, so wait less for the in-flight iterations.
            if self._preempted:
                self._checkpoint_all(_TERM_WAIT_S)
            raise
        finally:
            self._shutdown_actors()
            self._journal.snapshot(self._trials)
            self._journal.close()
            for trial in self._trials:
                self._close_logger(trial)
            self._progress.report(self._trials, force=True)

    def request_preemption(self) -> None:
        """From a signal handler: checkpoint every running trial and stop the loop."""
        self._preempted = True

    def _step(self) -> None:
        for trial in self._search_alg.next_trials():
            self.add_trial(trial)
        self._start_what_fits()
        if not self._inflight:
            if self._search_alg.is_finished() and any(
                    t.status in (Trial.PENDING, Trial.PAUSED) for t in self._trials):
                stuck = [t for t in self._trials if t.status in (Trial.PENDING, Trial.PAUSED)]
                raise TuneError(f"{len(stuck)} trial(s) cannot start: the scheduler chose "
                                f"none of {stuck[:3]} (resources: {self._total})")
            if not self._search_alg.is_finished():
                time.sleep(0.01)  # a searcher waiting for results it does not have
            return
        ready, _ = _ray.wait(list(self._inflight), num_returns=1, timeout=1.0)
        if ready:
            more, _ = _ray.wait(list(self._inflight), num_returns=len(self._inflight), timeout=0)
            for ref in dict.fromkeys(list(ready) + list(more)):
                trial = self._inflight.pop(ref, None)
                if trial is not None:
                    self._process(trial, ref)
        self._progress.report(self._trials)

    def _start_what_fits(self) -> None:
        while True:
            trial = self._scheduler.choose_trial_to_run(self)
            if trial is None:
                break
            self._start(trial)
        for _key, actor in self._idle:
            self._terminate(actor)
        self._idle.clear()
        self._used_cache = None
        self._queue_successors()

    def _start(self, trial: Trial) -> None:
        checkpoint = None
        if trial.has_checkpoint():
            checkpoint = _checkpoints.read(trial.checkpoint.path)
        if trial._needs_truncate:
            # A restart (failure, resume): results after the checkpoint are run
            # again, so drop them from the files first.
            trial._needs_truncate = False
            trial.last_result = truncate_results(trial.logdir, trial.checkpoint.iteration)
        key = trial.resource_key()
        actor = None
        for i, (k, idle) in enumerate(self._idle):
            if k[1:] == key[1:]:
                del self._idle[i]
                self._used_cache = None
                if k == key:
                    actor = idle
                else:  # same resources, another trainable: make room
                    self._terminate(idle)
                break
        reuse = actor is not None
        if actor is None:
            blob = self._trainables[trial.trainable_name][0]
            actor = self._actor_class.options(**_actor_options(trial.resources)).remote(blob)
        self._actors[trial.trial_id] = actor
        actor.setup.remote(*trial.setup_args(checkpoint, reuse))
        trial._pending_setup = False
        trial._restore_from = None
        self._loggers[trial.trial_id] = TrialLogger(trial, trial.loggers)
        trial.status = Trial.RUNNING
        self._issue_train(trial)
        self._record(trial)

    def _issue_train(self, trial: Trial) -> None:
        if self._draining:
            return
        actor = self._actors[trial.trial_id]
        if trial._pending_setup:
            checkpoint = _checkpoints.read(trial._restore_from) if trial._restore_from else None
            actor.setup.remote(*trial.setup_args(checkpoint, True, same_trial=True))
            trial._pending_setup = False
            trial._restore_from = None
        if self._batched(trial):
            ref = actor.train.remote(_BATCH_RESULTS, _BATCH_SECONDS)
        else:
            ref = actor.train.remote()
        trial._inflight = ref
        self._inflight[ref] = trial

    def _batched(self, trial: Trial) -> bool:
        return (getattr(self._scheduler, "_supports_buffered_results", False)
                and isinstance(trial.stopping_criterion, dict))

    def _queue_successors(self) -> None:
        """Queue a pending trial behind each running one that will likely end
        within its current call (batched, no checkpoints), on the same actor: the
        actor goes on to it without waiting for the driver.  A trial that did not
        end after all makes its successor come back as "busy", to start later."""
        if not self._reuse:
            return  # (the per-trainable check is _reusable, below)
        open_trials = self.unfinished_trials()
        pending = (t for t in open_trials if t.status == Trial.PENDING
                   and not t.has_checkpoint() and not t._needs_truncate)
        for trial in open_trials:
            if (trial.status != Trial.RUNNING or not self._reusable(trial)
                    or trial._successor is not None
                    or trial._predecessor is not None or trial._inflight is None
                    or trial.checkpoint_freq or trial._outlived_call
                    or trial.export_formats
                    or not self._batched(trial)):
                continue
            nxt = next((t for t in pending if t.resource_key() == trial.resource_key()), None)
            if nxt is None:
                return
            actor = self._actors[trial.trial_id]
            self._actors[nxt.trial_id] = actor
            trial._successor, nxt._predecessor = nxt, trial
            self._loggers[nxt.trial_id] = TrialLogger(nxt, nxt.loggers)
            nxt.status = Trial.RUNNING
            ref = actor.start.remote(nxt.setup_args(None, True), _BATCH_RESULTS,
                                     _BATCH_SECONDS)
            nxt._inflight = ref
            self._inflight[ref] = nxt
            self._record(nxt)

    def _unqueue(self, trial: Trial) -> None:
        """A queued trial goes back to PENDING (its predecessor did not end)."""
        pred = trial._predecessor
        if pred is not None:
            pred._successor = None
        trial._predecessor = None
        self._actors.pop(trial.trial_id, None)
        if trial._inflight is not None:
            self._inflight.pop(trial._inflight, None)
            trial._inflight = None
        self._close_logger(trial)
        trial.status = Trial.PENDING
        self._record(trial)

    def _process(self, trial: Trial, ref) -> None:
        pred = trial._predecessor
        if pred is not None and pred._inflight is not None:
            # The actor ran the predecessor's call first: handle that first.
            pred_ref = pred._inflight
            self._inflight.pop(pred_ref, None)
            self._process(pred, pred_ref)
            if trial.status != Trial.RUNNING:
                return  # sent back to PENDING by the predecessor's fate
        trial._inflight = None
        try:
            batch = _ray.get(ref)
        except ResetConfigError as err:
            raise TuneError(f"trial {trial} could not reuse its actor: {err}") from None
        except RayError as err:
            self._on_error(trial, err)
            return
        if batch is None:  # "busy": queued behind a trial that did not end
            self._unqueue(trial)
            return
        if pred is not None:
            pred._successor = None
            trial._predecessor = None
            self._used_cache = None
        for result, checkpoint in batch:
            if not self._handle_result(trial, result, checkpoint):
                return
        # It outlived a whole call: queue no trial behind it (it would be "busy").
        trial._outlived_call = True
        self._issue_train(trial)

    def _handle_result(self, trial: Trial, result: dict, checkpoint: bytes | None) -> bool:
        """Log one result and act on it; True if the trial goes on running."""
        duplicate = bool(result.pop(R.RESULT_DUPLICATE, False))
        result.setdefault(R.TRIAL_ID, trial.trial_id)
        result.setdefault("experiment_tag", trial.experiment_tag)
        if trial.last_result.get(R.TRAINING_ITERATION) is not None and duplicate:
            result[R.TRAINING_ITERATION] = trial.last_result[R.TRAINING_ITERATION]
        if not trial.last_result and not result.get(R.DONE):
            trial.check_stop_keys(result)
        if not duplicate:
            self._loggers[trial.trial_id].on_result(result)
        trial.update_last_result(result)
        if checkpoint is not None:
            self._store_checkpoint(trial, checkpoint, result[R.TRAINING_ITERATION])
        self._search_alg.on_trial_result(trial.trial_id, result)
        stop = trial.should_stop(result)
        self._progress.trial_result(trial, result, final=stop)
        if stop:
            if trial.checkpoint_at_end and checkpoint is None and not self._is_function(trial):
                self.save_trial(trial)
            self._export(trial)
            self._scheduler.on_trial_complete(self, trial, result)
            tell_complete(self._search_alg, trial.trial_id, result=result)
            self._finish(trial, Trial.TERMINATED)
            return False
        decision = self._scheduler.on_trial_result(self, trial, result)
        if decision == TrialScheduler.CONTINUE:
            return True
        if decision == TrialScheduler.PAUSE:
            if trial._pending_setup:
                # PBT exploited and paused it: it resumes from the donor's checkpoint.
                if trial._restore_from:
                    self._store_checkpoint(trial, _checkpoints.read(trial._restore_from),
                                           _checkpoints.iteration_of(trial._restore_from))
                trial._pending_setup = False
                trial._restore_from = None
            else:
                self.save_trial(trial)
            self._release(trial, reusable=True)
            self._close_logger(trial)
            if trial.status == Trial.RUNNING:  # a scheduler may have unpaused it already
                self._pause_seq += 1
                trial._paused_seq = self._pause_seq
                trial.status = Trial.PAUSED
            self._record(trial)
            return False
        if decision == TrialScheduler.STOP:
            if trial.checkpoint_at_end and checkpoint is None and not self._is_function(trial):
                self.save_trial(trial)
            self._export(trial)
            tell_complete(self._search_alg, trial.trial_id, result=result)
            self._finish(trial, Trial.TERMINATED)
            return False
        raise TuneError(f"unknown scheduler decision {decision!r} "
                        f"(known: CONTINUE, PAUSE, STOP)")

    def _finish(self, trial: Trial, status: str) -> None:
        self._release(trial, reusable=status == Trial.TERMINATED)
        self._close_logger(trial)
        trial.status = status
        self._record(trial)

    def _on_error(self, trial: Trial, err: BaseException) -> None:
        trial.num_failures += 1
        text = f"{type(err).__name__}: {err}"
        trial.error_msg = text.splitlines()[0] if text else repr(err)
        trial.error_file = os.path.join(trial.logdir, "error.txt")
        with open(trial.error_file, "a") as f:
            f.write(f"Failure # {trial.num_failures} "
                    f"(occurred at {time.strftime('%Y-%m-%d_%H-%M-%S')})\n{text}\n\n")
        self._release(trial, reusable=False)
        self._close_logger(trial)
        if trial.should_recover():
            logger.info("trial %s failed (%d of %s allowed); restarting from %s", trial,
                        trial.num_failures, trial.max_failures,
                        trial.checkpoint.path or "scratch")
            trial.status = Trial.PENDING
            trial._pending_setup = False
            trial._needs_truncate = True
            self._record(trial)
            return
        trial.status = Trial.ERROR
        self._record(trial)
        self._scheduler.on_trial_error(self, trial)
        tell_complete(self._search_alg, trial.trial_id, error=True)

    # --- actors and checkpoints -----------------------------------------------------

    def _release(self, trial: Trial, reusable: bool) -> None:
        actor = self._actors.pop(trial.trial_id, None)
        ref = trial._inflight
        if ref is not None:
            self._inflight.pop(ref, None)
            trial._inflight = None
            reusable = False  # it is busy with an iteration nobody wants
        successor = trial._successor
        if successor is not None:
            trial._successor = None
            if reusable:
                # The actor goes on with the trial queued behind, which now
                # holds the resources.
                successor._predecessor = None
                self._used_cache = None
                return
            self._unqueue(successor)
        if actor is None:
            return
        if reusable and self._reusable(trial):
            self._idle.append((trial.resource_key(), actor))
            self._used_cache = None
        elif reusable:
            self._terminate(actor)
        else:
            try:
                _kill(actor)
            except RayError:
                pass

    def _terminate(self, actor) -> None:
        """Run the trainable's ``_stop``, then end the actor.  With ``ray.kill``,
        not ``__ray_terminate__``: an actor created right after another ended
        that way was never placed (hpc_ray runtime bug, see the tune notes)."""
        try:
            _ray.get(actor.stop.remote(), timeout=_STOP_TIMEOUT_S)
        except RayError:
            pass  # a _stop that fails or hangs must not hold up the experiment
        try:
            _kill(actor)
        except RayError:
            pass

    def _shutdown_actors(self) -> None:
        for trial in self._trials:
            if trial.trial_id in self._actors:
                self._release(trial, reusable=False)
        for _key, actor in self._idle:
            self._terminate(actor)
        self._idle.clear()
        self._used_cache = None

    def _store_checkpoint(self, trial: Trial, data: bytes, iteration: int) -> None:
        dropped = _checkpoints.store(trial, data, iteration)
        self._record(trial)
        _checkpoints.remove(dropped)  # only once the state file no longer names them

    def _export(self, trial: Trial) -> None:
        """``export_formats``: the trainable exports its model into the trial's
        directory as the trial ends (files from a node without the driver's
        disk come back as bytes)."""
        actor = self._actors.get(trial.trial_id)
        if not trial.export_formats or actor is None:
            return
        _exported, files = _ray.get(actor.export.remote(trial.export_formats, trial.logdir))
        if files is not None:
            unpack_dir(files, trial.logdir)

    def _checkpoint_all(self, wait_s: float) -> None:
        """Preemption: let in-flight iterations finish, checkpoint every running
        trial, and record it as PAUSED (a resumed job continues it from there)."""
        deadline = time.monotonic() + wait_s
        self._draining = True  # results are handled as usual, but no new iteration starts
        while self._inflight and time.monotonic() < deadline:
            ready, _ = _ray.wait(list(self._inflight), num_returns=len(self._inflight),
                                 timeout=max(0.0, deadline - time.monotonic()))
            for ref in ready:
                trial = self._inflight.pop(ref, None)
                if trial is not None:
                    self._process(trial, ref)
        for trial in self._trials:
            if trial.status == Trial.RUNNING and trial._inflight is None:
                try:
                    if not self._is_function(trial):
                        self.save_trial(trial)
                except Exception:  # noqa: BLE001 - keep the older checkpoint
                    logger.exception("could not checkpoint %s on preemption", trial)
                self._release(trial, reusable=False)
                self._close_logger(trial)
                trial.status = Trial.PAUSED
                self._record(trial)
        self._progress.note(f"Preempted: every running trial checkpointed; run again "
                            f"with resume=True to continue ({self._dir})")

    # --- the experiment state file ----------------------------------------------------

    def _record(self, trial: Trial) -> None:
        """Append ``trial``'s state to the journal.  Every state change comes
        through here."""
        self._used_cache = None
        self._journal.record(trial, self._trials)

    def restore_trials(self, trials: Iterable[Trial]) -> None:
        """Resume: finished trials stay; the others restart from their checkpoints."""
        for trial in trials:
            if not trial.is_finished():
                trial.status = Trial.PENDING
                trial._needs_truncate = True
            self._trials.append(trial)
            self._by_id[trial.trial_id] = trial
            if not trial.is_finished():
                self._scheduler.on_trial_add(self, trial)

    def _close_logger(self, trial: Trial) -> None:
        log = self._loggers.pop(trial.trial_id, None)
        if log is not None:
            log.close()
