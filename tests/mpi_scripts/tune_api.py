"""Issue 36: the rest of Ray 0.7's Tune API, end to end on worker ranks.

Sections: tune.run's result (a list of trials that is also an analysis, and
return_trials=False); stop functions; user loggers and TensorBoard files
beside the default ones; the trainable's working directory; custom and
extra resources through resources_per_trial and default_resource_request;
export_formats; a trainable registered after its Experiment was made;
experiment-spec errors (a stop key no result has, a Trainable instance);
a reset_config that returns False under reuse_actors; a SuggestionAlgorithm;
restore= of a TensorFlow-style prefix; several experiments in one run; pinned ids
from another job.
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import json
import time
import types

import numpy as np

from _harness import (check, expect_raises, init_kwargs, mark_started, ok, poll_for, report,
                      section, started, tmp_path)

import hpc_ray as ray
from hpc_ray import tune
from hpc_ray.tune.logger import DEFAULT_LOGGERS, Logger
from hpc_ray.tune.resources import Resources
from hpc_ray.tune.suggest import SuggestionAlgorithm
from hpc_ray.tune.util import PINNED_OBJECT_PREFIX, get_pinned_object, pin_in_object_store

ray.init(**init_kwargs(resources={"R": 1}))
LOCAL = tmp_path("ray_results")

# A stand-in tensorboardX: the TensorBoard logger uses whichever writer imports.
SCALARS = []


class _Writer:
    def __init__(self, logdir, flush_secs=30):
        self.logdir = logdir

    def add_scalar(self, tag, value, global_step=None):
        SCALARS.append((os.path.basename(self.logdir), tag, value, global_step))

    def flush(self):
        pass

    def close(self):
        pass


sys.modules["tensorboardX"] = types.SimpleNamespace(SummaryWriter=_Writer)


def quadratic(config, reporter):
    for step in range(3):
        # A relative path: it lands in the trial's directory.
        with open("cwd_marker.txt", "a") as f:
            f.write(f"{step}\n")
        reporter(mean_loss=(config["x"] - 2) ** 2 + 1.0 / (step + 1))


class LineLogger(Logger):
    """A user's logger: one line per result in its own file."""

    def _init(self):
        self._file = open(os.path.join(self.logdir, "lines.txt"), "a")

    def on_result(self, result):
        self._file.write(f"{result['training_iteration']} {result['mean_loss']}\n")

    def flush(self):
        self._file.flush()

    def close(self):
        self._file.close()


with section("result"):
    trials = tune.run(quadratic, name="ret", local_dir=LOCAL, verbose=0,
                      config={"x": tune.grid_search([1, 2, 3])},
                      loggers=DEFAULT_LOGGERS + (LineLogger,))
    check(isinstance(trials, list) and len(trials) == 3, trials)
    check(all(t.status == "TERMINATED" for t in trials), [t.status for t in trials])
    check(trials.get_best_config("mean_loss", "min") == {"x": 2},
          trials.get_best_config("mean_loss", "min"))
    check(trials.get_best_logdir("mean_loss", "min") ==
          next(t.logdir for t in trials if t.config["x"] == 2))
    check(len(trials.dataframe()) == 3 and "config/x" in trials.dataframe().columns)
    check(trials.trials == list(trials))
    for t in trials:
        files = set(os.listdir(t.logdir))
        check({"result.json", "progress.csv", "params.json", "lines.txt",
               "cwd_marker.txt"} <= files, files)
        with open(os.path.join(t.logdir, "lines.txt")) as f:
            check([line.split()[0] for line in f] == ["1", "2", "3"])
        with open(os.path.join(t.logdir, "cwd_marker.txt")) as f:
            check(f.read() == "0\n1\n2\n")
    tb = [s for s in SCALARS if s[1] == "ray/tune/mean_loss"]
    check(len(tb) == 9 and sorted({s[3] for s in tb}) == [1, 2, 3], tb)
    analysis = tune.run(quadratic, name="ret2", local_dir=LOCAL, verbose=0,
                        config={"x": tune.grid_search([1, 3])}, return_trials=False)
    check(isinstance(analysis, tune.ExperimentAnalysis), type(analysis))
    check(len(analysis.trials) == 2 and analysis.get_best_config("mean_loss", "min") in
          ({"x": 1}, {"x": 3}), analysis.trials)
    # The whole results directory: every trial of both experiments.
    everything = tune.Analysis(LOCAL)
    check(len(everything.get_all_configs()) == 5, everything.get_all_configs())
    check(len(tune.ExperimentAnalysis(LOCAL).trials) == 5)
    check(os.path.basename(os.path.dirname(everything.get_best_logdir("mean_loss", "min")))
          == "ret", everything.get_best_logdir("mean_loss", "min"))
    report("best", trials.get_best_config("mean_loss", "min"))


def counter(config, reporter):
    for _ in range(100):
        reporter(value=1)


def tracked(config):
    tune.track.init()           # inside a trial: the trial's session, nothing to start
    for step in range(3):
        tune.track.log(mean_loss=float(step), in_trial_dir=os.getcwd() == tune.track.trial_dir())
    tune.track.shutdown()


with section("track"):
    trials = tune.run(tracked, name="tracked", local_dir=LOCAL, verbose=0)
    check(trials[0].last_result["training_iteration"] == 3, trials[0].last_result)
    check(trials[0].last_result["in_trial_dir"], trials[0].last_result)


with section("stop"):
    trials = tune.run(counter, name="stopfn", local_dir=LOCAL, verbose=0, num_samples=2,
                      stop=lambda trial_id, result: result["training_iteration"] >= 4)
    check([t.last_result["training_iteration"] for t in trials] == [4, 4],
          [t.last_result for t in trials])
    err = expect_raises(ValueError, tune.run, counter, name="badstop", local_dir=LOCAL,
                        verbose=0, stop=lambda result: True)
    check("trial_id, result" in str(err), err)
    err = expect_raises(tune.TuneError, tune.run, counter, name="nokey", local_dir=LOCAL,
                        verbose=0, stop={"mean_accuracy": 0.9})
    check("mean_accuracy" in str(err) and "value" in str(err), err)


class Exported(tune.Trainable):
    """Asks for an extra CPU (for the tasks it would start) through Resources."""

    @classmethod
    def default_resource_request(cls, config):
        return Resources(cpu=1, gpu=0, extra_cpu=1)

    def _train(self):
        return {"score": self.iteration, "done": self.iteration >= 1}

    def _export_model(self, export_formats, export_dir):
        path = os.path.join(export_dir, "model.txt")
        with open(path, "w") as f:
            f.write(",".join(export_formats))
        return {export_formats[0]: path}


with section("resources_export"):
    trials = tune.run(Exported, name="export", local_dir=LOCAL, verbose=0, num_samples=2,
                      export_formats=["txt"])
    check(all(t.status == "TERMINATED" for t in trials), [t.status for t in trials])
    for t in trials:
        check(t.resources.get("extra_cpu") == 1, t.resources)
        with open(os.path.join(t.logdir, "model.txt")) as f:
            check(f.read() == "txt")
    trials = tune.run(counter, name="custom", local_dir=LOCAL, verbose=0, num_samples=2,
                      stop={"training_iteration": 2},
                      resources_per_trial={"cpu": 1, "custom_resources": {"R": 1}})
    check([t.status for t in trials] == ["TERMINATED"] * 2, [t.status for t in trials])
    err = expect_raises(tune.TuneError, tune.run, counter, name="toomuch", local_dir=LOCAL,
                        verbose=0, resources_per_trial={"cpu": 1, "extra_gpu": 1})
    check("GPU" in str(err), err)


class NoReset(tune.Trainable):
    def _train(self):
        return {"score": 1, "done": True}

    def reset_config(self, new_config):
        return False


with section("spec"):
    late = tune.Experiment("late", "registered_later", local_dir=LOCAL,
                           stop={"training_iteration": 1})
    tune.register_trainable("registered_later", counter)
    trials = tune.run_experiments(late, verbose=0)
    check([t.status for t in trials] == ["TERMINATED"], trials)
    trials = tune.run_experiments({"envkey": {"run": counter, "env": "CartPole-v0",
                                              "stop": {"training_iteration": 1},
                                              "local_dir": LOCAL}}, verbose=0)
    check(trials[0].config == {"env": "CartPole-v0"}, trials[0].config)
    err = expect_raises(tune.TuneError, tune.run_experiments,
                        {"typo": {"run": counter, "stopp": {"training_iteration": 1}}})
    check("stopp" in str(err), err)
    err = expect_raises(tune.TuneError, tune.run, NoReset(), local_dir=LOCAL, verbose=0)
    check("not an instance" in str(err), err)
    err = expect_raises(tune.TuneError, tune.run, NoReset, name="noreset", local_dir=LOCAL,
                        verbose=0, num_samples=4, reuse_actors=True)
    check("reset_config() returned False" in str(err), err)
    trials = tune.run(NoReset, name="noreuse", local_dir=LOCAL, verbose=0, num_samples=3,
                      reuse_actors=False)
    check([t.status for t in trials] == ["TERMINATED"] * 3, trials)


class Steps(tune.Trainable):
    """Counts its iterations; the count survives a pause (a checkpoint)."""

    def _setup(self, config):
        self.count = 0

    def _train(self):
        self.count += 1
        return {"count": self.count}

    def _save(self, checkpoint_dir):
        return {"count": self.count}

    def _restore(self, state):
        self.count = state["count"]


class PrefixSaves(Steps):
    """Saves as TensorFlow's saver does: files named from a prefix it returns."""

    def _save(self, checkpoint_dir):
        prefix = os.path.join(checkpoint_dir, f"save-{self.count}")
        with open(prefix + ".index", "w") as f:
            f.write(str(self.count))
        return prefix

    def _restore(self, prefix):
        with open(prefix + ".index") as f:
            self.count = int(f.read())


with section("restore"):
    # tune.run(restore=) takes a checkpoint's directory or a file in it (what
    # Ray 0.7's save() returns, and RLlib's docs pass); each trial starts there.
    trainer = Steps({})
    for _ in range(4):
        trainer.train()
    saved = trainer.save(os.path.join(LOCAL, "saved"))
    trainer.stop()
    where = saved if os.path.isdir(saved) else os.path.dirname(saved)
    inside = os.path.join(where, sorted(os.listdir(where))[0])
    for path in (where, inside):
        trials = tune.run(Steps, name="restored", local_dir=LOCAL, verbose=0, restore=path,
                          stop={"training_iteration": 6})
        check(trials[0].last_result["count"] == 6 and
              trials[0].last_result["iterations_since_restore"] == 2,
              (path, trials[0].last_result))
    err = expect_raises(tune.TuneError, tune.run, Steps, local_dir=LOCAL, verbose=0,
                        restore=os.path.join(LOCAL, "nowhere"))
    check("nowhere" in str(err), err)
    # The docs' TensorFlow-style _save returns a prefix (saver.save writes
    # save-4.index, ...): save() returns it, and restore= takes it too.
    prefixed = PrefixSaves({})
    for _ in range(4):
        prefixed.train()
    prefix = prefixed.save(os.path.join(LOCAL, "prefixed"))
    prefixed.stop()
    check(prefix.endswith("save-4") and not os.path.exists(prefix), prefix)
    (trial,) = tune.run(PrefixSaves, name="from_prefix", local_dir=LOCAL, verbose=0,
                        restore=prefix, stop={"training_iteration": 6})
    check(trial.last_result["count"] == 6, trial.last_result)


with section("several_experiments_and_pins"):
    # run_experiments with two experiments: each one's trials in its own directory.
    multi = os.path.join(LOCAL, "multi")
    trials = tune.run_experiments(
        {"exp_a": {"run": quadratic, "config": {"x": tune.grid_search([1, 2])},
                   "local_dir": multi},
         "exp_b": {"run": quadratic, "config": {"x": tune.grid_search([3, 4, 5])},
                   "local_dir": multi}}, verbose=0)
    places = sorted((os.path.basename(os.path.dirname(t.logdir)), t.config["x"])
                    for t in trials)
    check(places == [("exp_a", 1), ("exp_a", 2), ("exp_b", 3), ("exp_b", 4), ("exp_b", 5)],
          places)
    for name, n in (("exp_a", 2), ("exp_b", 3)):
        analysis = tune.ExperimentAnalysis(os.path.join(multi, name))
        check(len(analysis.dataframe()) == n and len(analysis.trials) == n,
              (name, len(analysis.dataframe()), analysis.trials))
    # An experiment run again afresh under the same name: its analysis gives
    # this run's trials, not the earlier run's that share the directory.
    again = os.path.join(multi, "exp_a")
    tune.run(quadratic, name="exp_a", local_dir=multi, verbose=0,
             config={"x": tune.grid_search([7])})
    configs = list(tune.ExperimentAnalysis(again).get_all_configs().values())
    check(configs == [{"x": 7}], configs)
    # A pinned object's id from another job (a resumed trial's config keeps it)
    # names no object, or another object, here: a clear error, not a wrong array.
    pinned = pin_in_object_store(np.arange(5.0))
    check(get_pinned_object(pinned).sum() == 10.0)
    other = ray.put(np.zeros(5))
    for stale in (PINNED_OBJECT_PREFIX + "%040x" % 10**9, PINNED_OBJECT_PREFIX + other.hex(),
                  pinned[:-1] + ("0" if pinned[-1] != "0" else "1")):
        err = expect_raises(ValueError, get_pinned_object, stale)
        check("not an object pinned in this job" in str(err), (stale, err))


class PauseEach(tune.schedulers.FIFOScheduler):
    """Pauses a trial after each of its first results; records who ran when."""

    _supports_buffered_results = False

    def __init__(self):
        self.seen = []

    def on_trial_result(self, trial_runner, trial, result):
        self.seen.append((trial.config["i"], result["count"]))
        return self.PAUSE if result["count"] < 3 else self.CONTINUE

    def on_trial_complete(self, trial_runner, trial, result):
        self.seen.append((trial.config["i"], result["count"]))


with section("pause_order"):
    # Each trial takes the whole job (2 CPUs), so they take turns; a paused
    # trial waits behind those paused before it.
    sched = PauseEach()
    trials = tune.run(Steps, name="turns", local_dir=LOCAL, verbose=0, scheduler=sched,
                      config={"i": tune.grid_search([0, 1, 2])}, reuse_actors=True,
                      resources_per_trial={"cpu": 2}, stop={"count": 3})
    check([t.status for t in trials] == ["TERMINATED"] * 3, [t.status for t in trials])
    check(sched.seen == [(i, n) for n in (1, 2, 3) for i in (0, 1, 2)], sched.seen)


class StepsNoReset(Steps):
    def _train(self):
        if self.count == 0:
            # PBT only perturbs between trials that both run: the two meet
            # before their first result, however late the second one starts.
            mark_started("pbt")
            poll_for(lambda: started("pbt") >= 2, 30)
        time.sleep(0.05)  # (the two trials' results interleave)
        self.count += 1
        return {"count": self.count, "score": self.count * (1 + self.config["i"])}

    def reset_config(self, new_config):
        return False


with section("pbt_without_reset"):
    # PBT gives a running trial a new config in place; a trainable that cannot
    # reset is made anew from the donor's checkpoint, as Ray 0.7 restarts it (no
    # error: no actor moves to another trial here, both trials fit at once).
    pbt = tune.schedulers.PopulationBasedTraining(
        time_attr="training_iteration", metric="score", mode="max", perturbation_interval=1,
        hyperparam_mutations={"lr": [0.1, 0.2, 0.3]})
    trials = tune.run(StepsNoReset, name="pbt_noreset", local_dir=LOCAL, verbose=0,
                      scheduler=pbt, config={"lr": 0.1, "i": tune.grid_search([0, 1])},
                      stop={"training_iteration": 12})
    check([t.status for t in trials] == ["TERMINATED"] * 2, [t.status for t in trials])
    check(pbt._num_perturbations >= 1, pbt.debug_string())


class Walk(SuggestionAlgorithm):
    """Suggests x = 0, 1, 2, ... one at a time, after hearing how the last went."""

    def __init__(self):
        super().__init__(max_concurrent=1)
        self.next_x = 0
        self.completed = []

    def _suggest(self, trial_id):
        x, self.next_x = self.next_x, self.next_x + 1
        return {"x": x}

    def _on_complete(self, trial_id, result, error):
        self.completed.append(result["mean_loss"] if result else None)


with section("suggest"):
    walk = Walk()
    trials = tune.run(quadratic, name="walk", local_dir=LOCAL, verbose=0, num_samples=4,
                      search_alg=walk, config={"y": 1})
    check(sorted(t.config["x"] for t in trials) == [0, 1, 2, 3],
          [t.config for t in trials])
    check(all(t.config["y"] == 1 for t in trials))
    check(len(walk.completed) == 4 and all(v is not None for v in walk.completed),
          walk.completed)


class RaisesAtThree(tune.Trainable):
    def _train(self):
        if self._iteration == 2:
            raise ValueError("diverged at the third iteration")
        return {"mean_accuracy": self._iteration + 1}


class Epochs(tune.Trainable):
    """Ten epochs a call, counted in the user's own training_iteration."""

    def _train(self):
        return {"training_iteration": 10 * (self._iteration + 1)}


class StopsInItsDirectory(tune.Trainable):
    """No reset_config: under reuse_actors each trial gets a new instance."""

    def _train(self):
        return {"done": True}

    def _stop(self):
        with open("stopped.txt", "a") as f:   # relative: its trial's directory
            f.write(f"{self.config['n']}\n")


with section("results_and_hooks"):
    # The results reported before a trainable raised are logged (they were lost
    # with the batch the raise ended).
    (failed,) = tune.run(RaisesAtThree, name="raises", local_dir=LOCAL, verbose=0,
                         raise_on_failed_trial=False)
    with open(os.path.join(failed.logdir, "result.json")) as f:
        logged = [json.loads(line)["mean_accuracy"] for line in f]
    check(failed.status == "ERROR" and logged == [1, 2]
          and failed.last_result["mean_accuracy"] == 2, (failed.status, logged))
    # A training_iteration of the user's stands, as in Ray: the stop counts it.
    (epochs,) = tune.run(Epochs, name="epochs", local_dir=LOCAL, verbose=0,
                         stop={"training_iteration": 30})
    with open(os.path.join(epochs.logdir, "result.json")) as f:
        iterations = [json.loads(line)["training_iteration"] for line in f]
    check(iterations == [10, 20, 30], iterations)
    # A reused actor's old trainable stops in its own trial's directory.
    stopped = tune.run(StopsInItsDirectory, name="stops", local_dir=LOCAL, verbose=0,
                       reuse_actors=True, config={"n": tune.grid_search([1, 2, 3, 4])})
    found = {}
    for trial in stopped:
        with open(os.path.join(trial.logdir, "stopped.txt")) as f:
            found[trial.config["n"]] = f.read().split()
    check(found == {n: [str(n)] for n in (1, 2, 3, 4)}, found)

ray.shutdown()
ok("tune_api")
