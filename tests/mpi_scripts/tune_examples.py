"""Issue 10: the seed's Tune examples on small objectives with known optima.

Sections: the function API (reporter, tune.report, tune.track with a pinned
object) with grid search; a Trainable with checkpoints and random search
(sample_from reading spec.config);
ASHA, HyperBand and the median stopping rule against FIFO (iterations spent);
PBT against the same population without exploitation; a trial that segfaults,
retried from its checkpoint, and one that fails past max_failures.
Argument "quick": only the first two sections (for the mpiexec launch).
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import json
import re
import signal

from _harness import check, expect_raises, init_kwargs, ok, report, section, tmp_path

import hpc_ray as ray
from hpc_ray import tune
from hpc_ray.tune.util import get_pinned_object, pin_in_object_store
from hpc_ray.tune.schedulers import (AsyncHyperBandScheduler, FIFOScheduler, HyperBandScheduler,
                                     MedianStoppingRule, PopulationBasedTraining)

QUICK = "quick" in sys.argv[1:]
ray.init(**init_kwargs())
LOCAL = tmp_path("ray_results")


def files_of(trial):
    return sorted(f for f in os.listdir(trial.logdir) if not f.startswith("."))


def results_of(trial):
    with open(os.path.join(trial.logdir, "result.json")) as f:
        return [json.loads(line) for line in f]


def states(trials):
    out = {}
    for t in trials:
        out[t.status] = out.get(t.status, 0) + 1
    return out


# --- function API, grid search ------------------------------------------------------

def train_func(config, reporter):
    for step in range(5):
        reporter(mean_loss=(config["x"] - 3) ** 2 + 1.0 / (step + 1), step=step)


def tracked_func(config):
    # tune.track (Ray 0.7.2) and a pinned object (tune.util) read in the trial.
    data = get_pinned_object(config["data"])
    for step in range(3):
        tune.track.log(total=float(data.sum()) * config["x"], step=step,
                       in_trial_dir=os.path.isdir(tune.track.trial_dir()))


def modern_func(config):
    for step in range(3):
        if step == 2:
            tune.report({"score": -abs(config["x"] - 2) - config["offset"]})  # Ray 2 style
        else:
            tune.report(score=-abs(config["x"] - 2) - config["offset"])


with section("function"):
    trials = tune.run(train_func, name="func", local_dir=LOCAL, verbose=1,
                      config={"x": tune.grid_search([1, 2, 3, 4])})
    check(states(trials) == {"TERMINATED": 4}, states(trials))
    check(all(t.last_result["training_iteration"] == 5 for t in trials),
          [t.last_result for t in trials])
    # Auto-filled results (Ray 0.7's list) include where the trial ran.
    for key in ("done", "hostname", "node_ip", "pid", "time_this_iter_s", "time_total_s"):
        check(key in trials[0].last_result, (key, trials[0].last_result))
    for t in trials:
        names = files_of(t)
        check({"params.json", "result.json", "progress.csv"} <= set(names), names)
        check([r["training_iteration"] for r in results_of(t)] == [1, 2, 3, 4, 5])
    ea = tune.ExperimentAnalysis(os.path.join(LOCAL, "func"))
    best = ea.get_best_config("mean_loss", "min")
    check(best == {"x": 3}, best)
    report("func_best", best)
    # Ray 0.7's trial name, then the trial's id: train_func_2_x=3_<id>.
    check(re.fullmatch(r"train_func_2_x=3_[0-9a-f]{8}",
                       os.path.basename(ea.get_best_logdir("mean_loss", "min"))),
          ea.get_best_logdir("mean_loss", "min"))
    try:
        import pandas  # noqa: F401
        df = ea.dataframe()
        check(len(df) == 4 and "config/x" in df.columns, df)
    except ImportError:
        expect_raises(ImportError, ea.dataframe)
    trials = tune.run(modern_func, name="modern", local_dir=LOCAL, verbose=0, num_samples=2,
                      config={"x": tune.grid_search([1, 2, 3]), "offset": tune.choice([0.0])})
    check(len(trials) == 6 and states(trials) == {"TERMINATED": 6}, states(trials))
    best = max(trials, key=lambda t: t.last_result["score"])
    check(best.config["x"] == 2, best.config)
    import numpy as np
    data_id = pin_in_object_store(np.arange(1000))
    trials = tune.run(tracked_func, name="tracked", local_dir=LOCAL, verbose=0,
                      config={"x": tune.grid_search([1, 2]), "data": data_id})
    check(states(trials) == {"TERMINATED": 2}, states(trials))
    totals = sorted(t.last_result["total"] for t in trials)
    check(totals == [499500.0, 999000.0], totals)
    check(all(t.last_result["training_iteration"] == 3 and t.last_result["in_trial_dir"]
              for t in trials), [t.last_result for t in trials])

# --- Trainable with checkpoints, random search ------------------------------------------------


class Quadratic(tune.Trainable):
    """score rises to -(x - 2)^2 + y; checkpointed state is the step count."""

    def _setup(self, config):
        self.x, self.y = config["x"], config["y"]
        self.steps = 0

    def _train(self):
        self.steps += 1
        return {"score": -(self.x - 2) ** 2 + self.y * min(self.steps, 4) / 4,
                "steps": self.steps}

    def _save(self, checkpoint_dir):
        path = os.path.join(checkpoint_dir, "state.json")
        with open(path, "w") as f:
            json.dump({"steps": self.steps}, f)
        return path

    def _restore(self, path):
        with open(path) as f:
            self.steps = json.load(f)["steps"]


with section("trainable"):
    trials = tune.run(Quadratic, name="cls", local_dir=LOCAL, verbose=1, num_samples=3,
                      stop={"training_iteration": 6}, checkpoint_freq=2,
                      checkpoint_at_end=True,
                      config={"x": tune.grid_search([1.0, 2.0]),
                              "y": tune.sample_from(lambda spec: spec.config.x * 0.5),
                              "z": tune.uniform(0, 1)})
    check(states(trials) == {"TERMINATED": 6}, states(trials))
    for t in trials:
        check(t.config["y"] == t.config["x"] * 0.5 and 0 <= t.config["z"] <= 1, t.config)
        names = files_of(t)
        check({"checkpoint_2", "checkpoint_4", "checkpoint_6"} <= set(names), names)
        check(t.checkpoint.iteration == 6, t.checkpoint)
        check(t.last_result["steps"] == 6, t.last_result)
    ea = tune.ExperimentAnalysis(os.path.join(LOCAL, "cls"))
    check(ea.get_best_config("score", "max")["x"] == 2.0)
    report("cls_trials", len(trials))

# --- a searcher library behind an extra: Optuna ------------------------------------------------


def parabola(config, reporter):
    reporter(loss=(config["x"] - 0.3) ** 2)


with section("optuna"):
    try:
        import optuna  # noqa: F401
    except ImportError:
        from hpc_ray.tune.suggest import OptunaSearch
        err = expect_raises(ImportError, OptunaSearch, {"x": tune.uniform(0, 1)})
        check(err is not None and "pip install 'hpc_ray[tune-optuna]'" in str(err), err)
        report("optuna", "absent")
    else:
        from hpc_ray.tune.suggest import OptunaSearch
        search = OptunaSearch({"x": tune.uniform(0, 1)}, metric="loss", mode="min", seed=0,
                              max_concurrent=2)
        trials = tune.run(parabola, name="optuna", local_dir=LOCAL, verbose=0, num_samples=8,
                          search_alg=search)
        check(states(trials) == {"TERMINATED": 8}, states(trials))
        best = min(t.last_result["loss"] for t in trials)
        check(best < 0.1, best)
        check(len(search._study.trials) == 8
              and all(t.state.name == "COMPLETE" for t in search._study.trials),
              search._study.trials)
        report("optuna", "ran")

if QUICK:
    ray.shutdown()
    ok("tune_examples")
    sys.exit(0)

# --- early stopping against FIFO ---------------------------------------------------------------


def curve(config, reporter):
    """acc rises towards config["q"]; the best trial has the largest q."""
    for i in range(1, 28):
        reporter(acc=config["q"] * (1 - 0.5 ** i))


class Curve(tune.Trainable):
    def _setup(self, config):
        self.q, self.i = config["q"], 0

    def _train(self):
        self.i += 1
        return {"acc": self.q * (1 - 0.5 ** self.i)}

    def _save(self, checkpoint_dir):
        return {"i": self.i}

    def _restore(self, state):
        self.i = state["i"]


# Mixed order: ASHA halves against the results seen so far.
QS = {"q": tune.grid_search([0.5, 0.9, 0.1, 0.7, 0.2, 0.6, 0.3, 0.4])}


def iterations(trials):
    return sum(t.last_result.get("training_iteration", 0) for t in trials)


with section("schedulers"):
    fifo = tune.run(curve, name="fifo", local_dir=LOCAL, verbose=0, config=QS,
                    stop={"training_iteration": 27}, scheduler=FIFOScheduler())
    asha = tune.run(curve, name="asha", local_dir=LOCAL, verbose=0, config=QS,
                    stop={"training_iteration": 27},
                    scheduler=AsyncHyperBandScheduler(metric="acc", mode="max", max_t=27,
                                                      grace_period=1, reduction_factor=3))
    hb = tune.run(Curve, name="hyperband", local_dir=LOCAL, verbose=0, config=QS,
                  stop={"training_iteration": 27},
                  scheduler=HyperBandScheduler(metric="acc", mode="max", max_t=27))
    median = tune.run(curve, name="median", local_dir=LOCAL, verbose=0, config=QS,
                      stop={"training_iteration": 27},
                      scheduler=MedianStoppingRule(time_attr="training_iteration", metric="acc",
                                                   mode="max", grace_period=3,
                                                   min_samples_required=2))
    spent = {"fifo": iterations(fifo), "asha": iterations(asha), "hyperband": iterations(hb),
             "median": iterations(median)}
    report("iterations", spent)
    check(spent["fifo"] == 8 * 27, spent)
    for name, trials in (("asha", asha), ("hyperband", hb), ("median", median)):
        check(spent[name] < spent["fifo"], (name, spent))
        check(states(trials) == {"TERMINATED": 8}, (name, states(trials)))
        best = max(trials, key=lambda t: t.last_result["acc"])
        check(best.config["q"] == 0.9, (name, best.config))
        check(best.last_result["training_iteration"] == 27, (name, best.last_result))

# --- PBT against the same population without exploitation ----------------------------------------


class Climber(tune.Trainable):
    """score grows by lr per step: the population's good lr is 1.0."""

    def _setup(self, config):
        self.score = 0.0

    def _train(self):
        self.score += self.config["lr"]
        return {"score": self.score}

    def _save(self, checkpoint_dir):
        return {"score": self.score}

    def _restore(self, state):
        self.score = state["score"]

    def reset_config(self, new_config):
        self.config = new_config
        return True


def population(quantile):
    return tune.run(
        Climber, name=f"pbt{quantile}", local_dir=LOCAL, verbose=0,
        config={"lr": tune.grid_search([0.01, 0.02, 0.05, 1.0])},
        stop={"training_iteration": 12},
        scheduler=PopulationBasedTraining(time_attr="training_iteration", metric="score",
                                          mode="max", perturbation_interval=2,
                                          quantile_fraction=quantile,
                                          resample_probability=0.0,
                                          hyperparam_mutations={"lr": [0.01, 0.02, 0.05, 1.0]}))


with section("pbt"):
    exploit, plain = population(0.25), population(0.0)
    mean_exploit = sum(t.last_result["score"] for t in exploit) / 4
    mean_plain = sum(t.last_result["score"] for t in plain) / 4
    report("pbt", {"exploit": mean_exploit, "plain": mean_plain})
    check(mean_exploit > mean_plain, (mean_exploit, mean_plain))
    check(states(exploit) == {"TERMINATED": 4}, states(exploit))
    check(any(f.startswith("pbt_policy_") for f in os.listdir(os.path.join(LOCAL, "pbt0.25"))))

# --- faults: a segfault retried from its checkpoint; failures past max_failures -------------------


class Crashy(tune.Trainable):
    """Segfaults at iteration 3 of its first run; records where each run started."""

    def _setup(self, config):
        self.i = 0
        self.marker = config["marker"]

    def _train(self):
        self.i += 1
        if self.i == 3 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.config.get("always_fail") and self.i == 2:
            raise ValueError("always fails at iteration 2")
        return {"value": self.i, "started_at": self.config.get("started", 0)}

    def _save(self, checkpoint_dir):
        return {"i": self.i}

    def _restore(self, state):
        self.i = state["i"]
        with open(self.marker + ".restored", "a") as f:
            f.write(f"{self.i}\n")


with section("faults"):
    marker = tmp_path("crashed-once")
    trials = tune.run(Crashy, name="segv", local_dir=LOCAL, verbose=0, checkpoint_freq=1,
                      max_failures=2, stop={"training_iteration": 5},
                      config={"marker": marker})
    (t,) = trials
    check(t.status == "TERMINATED" and t.num_failures == 1, (t.status, t.num_failures))
    check([r["training_iteration"] for r in results_of(t)] == [1, 2, 3, 4, 5], results_of(t))
    with open(marker + ".restored") as f:
        check(f.read().split() == ["2"], "restored from checkpoint_2")
    check(os.path.exists(os.path.join(t.logdir, "error.txt")))
    report("segv_failures", t.num_failures)

    marker2 = tmp_path("never")
    open(marker2, "w").close()  # no segfault in this experiment
    cfg = {"marker": marker2, "always_fail": tune.grid_search([False, True])}
    trials = tune.run(Crashy, name="fail", local_dir=LOCAL, verbose=0, checkpoint_freq=1,
                      max_failures=1, stop={"training_iteration": 4}, config=cfg,
                      raise_on_failed_trial=False)
    check(states(trials) == {"TERMINATED": 1, "ERROR": 1}, states(trials))
    bad = [t for t in trials if t.status == "ERROR"][0]
    check(bad.num_failures == 2, bad.num_failures)
    with open(bad.error_file) as f:
        text = f.read()
    check(text.count("Failure # ") == 2 and "always fails at iteration 2" in text, text)
    err = expect_raises(tune.TuneError, tune.run, Crashy, name="fail2", local_dir=LOCAL,
                        verbose=0, max_failures=0, stop={"training_iteration": 4},
                        config={"marker": marker2, "always_fail": True})
    check(err is not None and "did not complete" in str(err), err)

ray.shutdown()
ok("tune_examples")
