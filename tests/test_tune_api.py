"""Issue 36: the rest of Ray 0.7's Tune API.

- End to end on worker ranks (tests/mpi_scripts/tune_api.py): tune.run's
  result, stop functions, user and TensorBoard loggers, the trial's working
  directory, custom/extra resources, export_formats, late registration,
  spec errors, reset_config returning False, a SuggestionAlgorithm.
- Pure parts without MPI: ExperimentAnalysis over a tree of experiments,
  spec validation, search algorithms' configurations, Resources, tune.track
  outside Tune, loggers, the median stopping rule, the order paused trials
  resume in.
"""
from __future__ import annotations

import json
import os
import sys
import types

import pytest

from hpc_ray import tune
from hpc_ray.tune.trial import Trial


@pytest.mark.mpi
def test_tune_api_end_to_end(run):
    values = run("tune_api.py", 3, mode="embedded", timeout=90).assert_ok("tune_api")
    assert values["best"] == {"x": 2}


# --- results on disk ------------------------------------------------------------------


def _write_trial(logdir, config, losses):
    os.makedirs(logdir)
    with open(os.path.join(logdir, "params.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(logdir, "result.json"), "w") as f:
        for i, loss in enumerate(losses, 1):
            f.write(json.dumps({"training_iteration": i, "loss": loss}) + "\n")


def test_analysis_walks_every_experiment_under_a_directory(tmp_path):
    _write_trial(tmp_path / "exp_a" / "f_1", {"x": 1}, [3.0, 2.0])
    _write_trial(tmp_path / "exp_a" / "f_2", {"x": 2}, [1.0, 0.5])
    _write_trial(tmp_path / "exp_b" / "f_3", {"x": 3}, [0.1])
    (tmp_path / "exp_b" / "f_3" / "checkpoint_1").mkdir()
    everything = tune.Analysis(str(tmp_path))
    assert sorted(c["x"] for c in everything.get_all_configs().values()) == [1, 2, 3]
    assert everything.get_best_config("loss", "min") == {"x": 3}
    assert everything.get_best_info("loss", "max")["loss"] == 3.0
    one = tune.ExperimentAnalysis(str(tmp_path / "exp_a"))
    assert one.get_best_config("loss", "min") == {"x": 2}
    df = one.dataframe(metric="loss", mode="min")
    assert sorted(df["loss"]) == [0.5, 2.0] and "config/x" in df.columns
    assert len(one.dataframe(True)) == 2            # Ray 0.7's dataframe(refresh)
    paths = everything.get_trial_checkpoints_paths(str(tmp_path / "exp_b" / "f_3"), "loss")
    assert paths == [(str(tmp_path / "exp_b" / "f_3" / "checkpoint_1"), 0.1)]
    with pytest.raises(tune.TuneError, match="no experiment directory"):
        tune.ExperimentAnalysis(str(tmp_path / "missing"))


def test_run_result_is_a_list_of_trials_and_an_analysis(tmp_path):
    from hpc_ray.tune.analysis import TrialList

    trials = []
    for x, losses in ((1, [2.0]), (2, [0.2])):
        trial = Trial("f", {"x": x})
        trial.logdir = str(tmp_path / "exp" / f"f_{x}")
        _write_trial(trial.logdir, {"x": x}, losses)
        trials.append(trial)
    result = TrialList(trials, str(tmp_path / "exp"))
    assert result == trials and result[0] is trials[0] and len(result) == 2
    assert result.trials == trials
    assert result.get_best_config("loss", "min") == {"x": 2}
    assert result.get_best_trial("loss", "min") is trials[1]
    assert result.get_best_logdir("loss", "max") == trials[0].logdir
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        result.nonsense


# --- checkpoints kept -----------------------------------------------------------------


def _checkpoint_every_iteration(trial, scores):
    from hpc_ray.tune import checkpoints
    from hpc_ray.tune.trainable import pack_dir

    src = os.path.dirname(trial.logdir)
    data = pack_dir(src)
    for i, score in enumerate(scores, 1):
        trial.last_result = {"training_iteration": i, "acc": score}
        checkpoints.remove(checkpoints.store(trial, data, i))
    return sorted(c.iteration for c in trial.checkpoints)


@pytest.mark.parametrize("attr, kept", [
    (None, [4, 5]),                   # 0.7's default, training_iteration: the newest
    ("training_iteration", [4, 5]),
    ("acc", [2, 4, 5]),               # the best two (0.9, 0.8), and the newest (0.1)
    ("min-acc", [1, 5]),              # the lowest two (0.05, and 0.01 the newest)
])
def test_keep_checkpoints_num_keeps_the_best_by_checkpoint_score_attr(tmp_path, attr, kept):
    from hpc_ray.tune.experiment import Experiment

    exp = Experiment("e", _train, keep_checkpoints_num=2, checkpoint_score_attr=attr,
                     local_dir=str(tmp_path))
    trial = exp.make_trial({}, "")
    trial.logdir = str(tmp_path / "e" / "t")
    os.makedirs(trial.logdir)
    scores = [0.2, 0.9, 0.3, 0.8, 0.1] if attr != "min-acc" else [0.05, 0.9, 0.2, 0.8, 0.01]
    assert _checkpoint_every_iteration(trial, scores) == kept
    on_disk = sorted(int(d.split("_")[1]) for d in os.listdir(trial.logdir))
    assert on_disk == kept
    # The newest is the trial's checkpoint (restarts, resume and PBT use it).
    assert trial.checkpoint.iteration == 5 and os.path.isdir(trial.checkpoint.path)
    again = Trial.from_state(json.loads(json.dumps(trial.to_state())))
    assert again.checkpoint_score_attr == attr
    assert [(c.iteration, c.score) for c in again.checkpoints] == \
        [(c.iteration, c.score) for c in trial.checkpoints]
    assert Experiment.from_json("e", exp.spec).checkpoint_score_attr == attr


def test_checkpoint_score_attr_must_be_a_result_key():
    from hpc_ray.tune.experiment import Experiment

    with pytest.raises(ValueError, match="checkpoint_score_attr must be a result key"):
        Experiment("e", _train, checkpoint_score_attr=3)


# --- experiment specs ---------------------------------------------------------------


def _train(config, reporter):
    reporter(loss=1.0)


def test_experiment_spec_errors_name_the_problem():
    from hpc_ray.tune.experiment import Experiment, convert_to_experiment_list

    with pytest.raises(tune.TuneError, match=r"unknown key\(s\) \['stopp'\]"):
        convert_to_experiment_list({"e": {"run": _train, "stopp": {}}})
    (exp,) = convert_to_experiment_list({"e": {"run": _train, "env": "Pong-v0",
                                               "config": {"lr": 0.1}}})
    assert exp.config == {"lr": 0.1, "env": "Pong-v0"}

    class Model(tune.Trainable):
        def _train(self):
            return {}

    with pytest.raises(tune.TuneError, match="not an instance"):
        Experiment("e", Model())
    with pytest.raises(ValueError, match=r"must take \(trial_id, result\)"):
        Experiment("e", _train, stop=lambda result: True)
    Experiment("e", _train, stop=lambda trial_id, result: False)
    spec = Experiment("e", _train, config={"a": 1}, num_samples=2).spec
    (again,) = convert_to_experiment_list({"e": spec})
    assert (again.config, again.num_samples, again.run) == ({"a": 1}, 2, _train)
    # A name is looked up when the experiment runs.
    late = Experiment("e", "defined_later_36")
    with pytest.raises(tune.TuneError, match="unknown trainable 'defined_later_36'"):
        late.run
    tune.register_trainable("defined_later_36", _train)
    assert late.run is _train


def test_ray_07_tune_names_default_results_dir_and_export_format(monkeypatch):
    from hpc_ray.tune.experiment import Experiment
    from hpc_ray.tune.result import DEFAULT_RESULTS_DIR
    from hpc_ray.tune.trial import ExportFormat

    assert DEFAULT_RESULTS_DIR == os.path.expanduser(
        os.environ.get("TUNE_RESULT_DIR", "~/ray_results"))
    assert Experiment("e", _train).local_dir == os.path.abspath(DEFAULT_RESULTS_DIR)
    formats = [" Model", "checkpoint"]
    ExportFormat.validate(formats)
    assert formats == [ExportFormat.MODEL, ExportFormat.CHECKPOINT] == ["model", "checkpoint"]
    with pytest.raises(tune.TuneError, match="unsupported export format 'onnx'"):
        ExportFormat.validate(["onnx"])


def test_options_without_effect_warn(tmp_path):
    from hpc_ray.exceptions import RayError

    with pytest.warns(UserWarning) as record:
        with pytest.raises(RayError, match="ray.init"):  # stops before any trial
            tune.run(_train, upload_dir="s3://bucket", sync_function="aws s3 sync",
                     with_server=True, local_dir=str(tmp_path), ray_auto_init=False)
    texts = [str(w.message) for w in record]
    for option in ("upload_dir", "sync_function", "with_server=True"):
        assert sum(t.startswith(f"{option} has no effect") for t in texts) == 1, texts
    # Each warning names the user's line, not Tune's own.
    assert {w.filename for w in record} == {__file__}, [w.filename for w in record]
    with pytest.warns(UserWarning, match="trial_executor has no effect") as record:
        with pytest.raises(RayError, match="ray.init"):
            tune.run(_train, trial_executor=object(), local_dir=str(tmp_path),
                     ray_auto_init=False)
    assert record[0].filename == __file__
    with pytest.warns(UserWarning, match="upload_dir has no effect"):
        tune.Experiment("e", _train, upload_dir="s3://bucket")


def test_resources_per_trial_forms():
    from hpc_ray.tune.resources import Resources, actor_options, demand, normalize

    flat = normalize({"cpu": 2, "extra_cpu": 1, "custom_resources": {"R": 1},
                      "extra_custom_resources": {"R": 2}})
    assert actor_options(flat) == {"num_cpus": 2, "num_gpus": 0, "resources": {"R": 1}}
    assert demand(flat) == {"CPU": 3, "GPU": 0, "R": 3}
    res = Resources(cpu=1, gpu=1, extra_gpu=2, custom_resources={"R": 1})
    assert normalize(res)["extra_gpu"] == 2 and res.gpu_total() == 3
    assert res.summary_string() == "1 CPUs, 3 GPUs, 1 R"
    with pytest.raises(ValueError, match=r"resources_per_trial\['cpu'\] must be a number"):
        normalize({"cpu": -1})


def test_resources_per_trial_functions_of_the_trial_config():
    # Ray 0.7's RLlib docs: "gpu": lambda spec: spec.config.num_gpus.
    from hpc_ray.tune.experiment import Experiment

    exp = Experiment("e", _train, config={"w": tune.grid_search([1, 2])},
                     resources_per_trial={"cpu": 1,
                                          "extra_cpu": lambda spec: spec.config.w})
    trials = [exp.make_trial({"w": w}, f"w={w}") for w in (1, 2)]
    assert [t.resources["extra_cpu"] for t in trials] == [1, 2]
    bad = Experiment("bad", _train, resources_per_trial={"gpu": lambda spec: -1})
    with pytest.raises(ValueError, match=r"resources_per_trial\['gpu'\] must be a number"):
        bad.make_trial({}, "x")


# --- search algorithms ----------------------------------------------------------------


def test_variant_generator_takes_a_dict_of_specs():
    from hpc_ray.tune.suggest import BasicVariantGenerator
    from hpc_ray.tune.suggest.variant_generator import grid_search

    assert tune.suggest.grid_search is grid_search is tune.grid_search
    gen = BasicVariantGenerator()
    gen.add_configurations({"e": {"run": _train, "num_samples": 2,
                                  "config": {"a": grid_search([1, 2, 3])}}})
    trials = gen.next_trials()
    assert sorted(t.config["a"] for t in trials) == [1, 1, 2, 2, 3, 3]
    assert gen.is_finished()


def test_suggestion_algorithm_asks_one_at_a_time():
    from hpc_ray.tune.suggest import SuggestionAlgorithm

    class Counting(SuggestionAlgorithm):          # Ray 0.7's examples skip super().__init__
        def __init__(self):
            self._max_concurrent = 1
            self.n = 0

        def _suggest(self, trial_id):
            self.n += 1
            return {"n": self.n} if self.n <= 2 else None

    search = Counting()
    search.add_configurations({"e": {"run": _train, "num_samples": 3, "config": {"k": 1}}})
    (first,) = search.next_trials()
    assert first.config == {"k": 1, "n": 1} and search.next_trials() == []
    search.on_trial_complete(first.trial_id, result={"loss": 1})
    (second,) = search.next_trials()
    assert second.config == {"k": 1, "n": 2}
    search.on_trial_complete(second.trial_id, result={"loss": 1})
    assert search.next_trials() == [] and not search.is_finished()   # _suggest said None


def test_trial_names_and_tags_are_ray_07s():
    """``PPO_CartPole-v0_0_lr=0.01`` (the docs' form), the directory that name and
    the trial's id, and a grid inside a list tagged by name and index."""
    from hpc_ray.tune import checkpoints
    from hpc_ray.tune.sample import generate_variants

    rl = Trial("PPO", {"env": "CartPole-v0", "lr": 0.01}, experiment_tag="0_lr=0.01")
    assert str(rl) == "PPO_CartPole-v0_0_lr=0.01"
    assert checkpoints.dirname(rl) == f"PPO_CartPole-v0_0_lr=0.01_{rl.trial_id}"
    plain = Trial("train_func", {"lr": 0.2}, experiment_tag="0_lr=0.2,momentum=1")
    assert str(plain) == "train_func_0_lr=0.2,momentum=1"
    tags = [tag for tag, _ in generate_variants(
        {"nn_layers": [tune.grid_search([64, 32]), 16], "opt": {"lr": tune.grid_search([0.1])}})]
    assert tags == ["nn_layers_0=64,lr=0.1", "nn_layers_0=32,lr=0.1"]


def test_hyperopt_search_suggests_from_its_space_and_learns():
    """Ray 0.7's HyperOptSearch: points to evaluate first (a choice by its index),
    then TPE over the space; it minimizes (x - 3)^2 given as a reward to maximize."""
    hp = pytest.importorskip("hyperopt").hp
    from hpc_ray.tune.suggest import HyperOptSearch

    space = {"x": hp.uniform("x", -10, 10), "act": hp.choice("act", ["relu", "tanh"])}
    search = HyperOptSearch(space, max_concurrent=2, reward_attr="reward",
                            points_to_evaluate=[{"x": 3.0, "act": 1}], n_initial_points=5,
                            random_state_seed=0)
    search.add_configurations({"e": {"run": _train, "num_samples": 30, "config": {"k": 1}}})
    first, second = search.next_trials()
    assert first.config == {"k": 1, "x": 3.0, "act": "tanh"}
    assert search.next_trials() == []                      # max_concurrent
    rewards = []
    pending = [first, second]
    while pending:
        trial = pending.pop(0)
        assert -10 <= trial.config["x"] <= 10 and trial.config["act"] in ("relu", "tanh")
        rewards.append(-(trial.config["x"] - 3) ** 2)
        search.on_trial_complete(trial.trial_id, result={"reward": rewards[-1]})
        pending += search.next_trials()
    assert len(rewards) == 30 and search.is_finished()
    # TPE's last ten beat the random start (the given point aside).
    assert sum(rewards[-10:]) / 10 > sum(rewards[1:6]) / 5, rewards


def test_hyperopt_search_error_without_hyperopt(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_hyperopt(name, *args, **kwargs):
        if name == "hyperopt" or name.startswith("hyperopt."):
            raise ImportError("No module named 'hyperopt'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hyperopt)
    from hpc_ray.tune.suggest.hyperopt import HyperOptSearch
    with pytest.raises(ImportError, match=r"pip install 'hpc_ray\[tune-hyperopt\]'"):
        HyperOptSearch({}, metric="m", mode="max")


# --- loggers and tune.track -----------------------------------------------------------


def test_user_logger_and_tensorboard_beside_the_defaults(tmp_path, monkeypatch):
    from hpc_ray.tune.logger import DEFAULT_LOGGERS, Logger, TrialLogger

    seen = []

    class Recorder(Logger):
        def on_result(self, result):
            seen.append(result["loss"])

    scalars = []

    class Writer:
        def __init__(self, logdir, flush_secs=30):
            pass

        def add_scalar(self, tag, value, global_step=None):
            scalars.append((tag, value, global_step))

        def flush(self):
            pass

        def close(self):
            pass

    monkeypatch.setitem(sys.modules, "tensorboardX", types.SimpleNamespace(SummaryWriter=Writer))
    trial = Trial("f", {"x": 1})
    trial.logdir = str(tmp_path / "t")
    log = TrialLogger(trial, DEFAULT_LOGGERS + (Recorder,))
    log.on_result({"training_iteration": 1, "loss": 0.5, "nested": {"acc": 0.9}})
    log.close()
    assert seen == [0.5]
    assert ("ray/tune/loss", 0.5, 1) in scalars and ("ray/tune/nested/acc", 0.9, 1) in scalars
    assert sorted(os.listdir(trial.logdir)) == ["params.json", "params.pkl", "progress.csv",
                                                "result.json"]


def test_unified_logger_and_pretty_print(tmp_path):
    from hpc_ray.tune.logger import NoopLogger, UnifiedLogger, pretty_print

    log = UnifiedLogger({"lr": 0.1}, str(tmp_path / "t"), loggers=[NoopLogger])
    log.on_result({"training_iteration": 1, "loss": 0.5})
    log.close()
    assert json.loads((tmp_path / "t" / "result.json").read_text())["loss"] == 0.5
    text = pretty_print({"loss": 0.5, "config": {"lr": 0.1}, "info": {"steps": 3}})
    assert "loss: 0.5" in text and "steps: 3" in text and "lr" not in text


def test_results_carry_config_neg_mean_loss_and_timesteps_since_restore(tmp_path):
    import csv

    from hpc_ray.tune.logger import CSVLogger, JsonLogger

    class Model(tune.Trainable):
        def _train(self):
            return {"mean_loss": 2.0, "timesteps_this_iter": 10}

        def _save(self, checkpoint_dir):
            return {}

        def _restore(self, state):
            pass

    model = Model({"lr": 0.1, "net": {"width": 4}})
    model.train()
    result = model.train()
    assert result["config"] == {"lr": 0.1, "net": {"width": 4}}
    assert result["neg_mean_loss"] == -2.0
    assert result["timesteps_since_restore"] == 20 and result["timesteps_total"] == 20
    path = model.save(str(tmp_path / "ckpt"))
    model.restore(path)
    assert model.train()["timesteps_since_restore"] == 10
    model.config = dict(model.config, lr=0.2)  # as PBT's exploit sets it
    last = model.train()
    assert last["config"]["lr"] == 0.2
    for cls in (CSVLogger, JsonLogger):
        log = cls(model.config, str(tmp_path))
        log.on_result(result)
        log.on_result(last)
        log.close()
    with open(tmp_path / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # One column holding the config as JSON text, not a column per key.
    assert [json.loads(r["config"])["lr"] for r in rows] == [0.1, 0.2]
    assert not any(k.startswith("config/") for k in rows[0])
    lines = (tmp_path / "result.json").read_text().splitlines()
    assert json.loads(lines[-1])["config"] == {"lr": 0.2, "net": {"width": 4}}
    analysis = tune.ExperimentAnalysis(str(tmp_path))
    assert analysis.dataframe()["config/lr"].tolist() == [0.2]


def test_trainable_on_its_own_logs_through_logger_creator(tmp_path):
    from hpc_ray.tune.logger import UnifiedLogger

    class Model(tune.Trainable):
        def _train(self):
            return {"loss": 1.0 / (self.iteration + 1)}

    model = Model({"lr": 0.1}, logger_creator=lambda config: UnifiedLogger(
        config, str(tmp_path / "alone")))
    model.train()
    model.train()
    model.stop()
    assert model.logdir == str(tmp_path / "alone")
    text = (tmp_path / "alone" / "result.json").read_text()
    rows = [json.loads(line) for line in text.splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2]


def test_trainables_outside_tune_save_into_directories_of_their_own(tmp_path, monkeypatch):
    # Not the temporary directory every process shares (two would overwrite
    # each other's checkpoint_1): one of their own under TUNE_RESULT_DIR.
    monkeypatch.setenv("TUNE_RESULT_DIR", str(tmp_path))

    class Count(tune.Trainable):
        def _setup(self, config):
            self.n = config.get("start", 0)

        def _train(self):
            self.n += 1
            return {"n": self.n}

        def _save(self, checkpoint_dir):
            return {"n": self.n}

        def _restore(self, state):
            self.n = state["n"]

    a, b = Count({"start": 10}), Count()
    a.train()
    b.train()
    saved_a, saved_b = a.save(), b.save()
    assert saved_a != saved_b
    assert all(p.startswith(str(tmp_path) + os.sep) for p in (saved_a, saved_b))
    b.restore(saved_a)
    assert b.train()["n"] == 12


def test_save_returns_the_checkpoint_path_as_ray_07_did(tmp_path):
    """0.7's ``save()`` returns the path ``_save`` returned (RLlib's
    ``checkpoint_1/checkpoint-1``), or the file a dict went into; ``restore``
    takes that path or its directory."""
    from hpc_ray.tune import Trainable

    class ToFile(Trainable):
        def _setup(self, config):
            self.n = 0

        def _train(self):
            self.n += 1
            return {"n": self.n}

        def _save(self, checkpoint_dir):
            path = os.path.join(checkpoint_dir, f"model-{self.n}")
            with open(path, "w") as f:
                f.write(str(self.n))
            return path

        def _restore(self, path):
            with open(path) as f:
                self.n = int(f.read())

    class ToDict(ToFile):
        def _save(self, checkpoint_dir):
            return {"n": self.n}

        def _restore(self, state):
            self.n = state["n"]

    for cls in (ToFile, ToDict):
        t = cls()
        t.train()
        path = t.save(str(tmp_path / cls.__name__))
        assert os.path.isfile(path) and os.path.dirname(path) == str(tmp_path / cls.__name__)
        if cls is ToFile:
            assert os.path.basename(path) == "model-1"
        for given in (path, os.path.dirname(path)):
            other = cls()
            other.restore(given)
            assert other.train()["n"] == 2


def test_track_outside_tune_writes_a_trial_of_its_own(tmp_path):
    with pytest.raises(ValueError, match=r"call tune.track.init\(\) first"):
        tune.track.log(loss=1.0)
    tune.track.init(experiment_dir=str(tmp_path), trial_name="by_hand")
    try:
        tune.track.log(loss=1.0)
        tune.track.log(loss=0.5)
        assert tune.track.trial_dir() == str(tmp_path / "by_hand")
    finally:
        tune.track.shutdown()
    with open(tmp_path / "by_hand" / "result.json") as f:
        rows = [json.loads(line) for line in f]
    assert [(r["training_iteration"], r["loss"]) for r in rows] == [(1, 1.0), (2, 0.5)]
    with pytest.raises(ValueError):
        tune.track.log(loss=1.0)


# --- schedulers -----------------------------------------------------------------------


class _Runner:
    def __init__(self, trials):
        self.trials = trials

    def get_trials(self):
        return self.trials

    def has_resources(self, resources):
        return True


def test_a_searcher_whose_on_trial_complete_skips_super_still_gets_every_trial(tmp_path):
    # Ray 0.7's searchers override on_trial_complete without super() (its base
    # kept no count): the run stopped at max_concurrent trials and hung.
    from hpc_ray import tune
    from hpc_ray.tune.suggest import SuggestionAlgorithm

    class Learns(SuggestionAlgorithm):
        def __init__(self):
            super().__init__(max_concurrent=2)
            self.n, self.heard = 0, []

        def _suggest(self, trial_id):
            self.n += 1
            return {"x": self.n}

        def on_trial_complete(self, trial_id, result=None, error=False, early_terminated=False):
            self.heard.append(result["x"])

    def trainable(config, reporter):
        reporter(x=config["x"], done=True)

    import hpc_ray as ray

    searcher = Learns()
    ray.init(local_mode=True)
    try:
        trials = tune.run(trainable, num_samples=5, search_alg=searcher, verbose=0,
                          local_dir=str(tmp_path))
    finally:
        ray.shutdown()
    assert len(trials) == 5 and sorted(searcher.heard) == [1, 2, 3, 4, 5]


def test_median_rule_compares_with_trials_that_reached_the_same_time():
    from hpc_ray.tune.schedulers import MedianStoppingRule, TrialScheduler

    rule = MedianStoppingRule(time_attr="t", metric="m", mode="max", grace_period=2,
                              min_samples_required=2)
    a, b, c, d = (Trial("f", {"i": i}) for i in range(4))
    runner = _Runner([a, b, c, d])
    for t in range(1, 6):
        rule.on_trial_result(runner, a, {"t": t, "m": 10.0 if t < 2 else 1.0})
    # b completed at t=4: its final result counts.
    for t in range(1, 4):
        rule.on_trial_result(runner, b, {"t": t, "m": 3.0})
    rule.on_trial_complete(runner, b, {"t": 4, "m": 3.0})
    # c stopped at t=2: it did not reach t=4, so it is not compared at t=4.
    for t in (1, 2):
        rule.on_trial_result(runner, c, {"t": t, "m": 100.0})
    # At t=4 the others are a (mean over t=2..4, the 10.0 before the grace
    # period left out: 1.0) and b (3.0): median 2.0.
    assert rule.on_trial_result(runner, d, {"t": 4, "m": 1.5}) == TrialScheduler.STOP
    e = Trial("f", {"i": 5})
    assert rule.on_trial_result(runner, e, {"t": 4, "m": 2.5}) == TrialScheduler.CONTINUE


def test_paused_trials_resume_in_the_order_they_were_paused():
    from hpc_ray.tune.schedulers import FIFOScheduler

    trials = [Trial("f", {"i": i}) for i in range(3)]
    for trial, seq in zip(trials, (3, 1, 2)):
        trial.status, trial._paused_seq = Trial.PAUSED, seq
    fifo, runner, order = FIFOScheduler(), _Runner(trials), []
    while (trial := fifo.choose_trial_to_run(runner)) is not None:
        order.append(trial.config["i"])
        trial.status = Trial.RUNNING
    assert order == [1, 2, 0]


def test_trial_name_creator_names_the_trial_directory():
    # Ray 0.7 makes the directory from str(trial): a trial_name_creator's name
    # is what a researcher looks for in ~/ray_results (it showed in the table only).
    from hpc_ray.tune import checkpoints

    named = Trial("f", {"k": 1}, trial_name_creator=lambda t: f"custom/k{t.config['k']}")
    assert checkpoints.dirname(named) == f"custom_k1_{named.trial_id}"
    plain = Trial("f", {"k": 1}, experiment_tag="0_k=1")
    assert checkpoints.dirname(plain) == f"f_0_k=1_{plain.trial_id}"


def test_trial_name_creator_survives_the_state_file():
    # A resumed experiment's trials keep their names (the table, "Result for").
    named = Trial("f", {"k": 1}, trial_name_creator=tune.function(lambda t: "custom_k1"))
    named.logdir = "/results/exp/custom_k1_x"
    again = Trial.from_state(json.loads(json.dumps(named.to_state())))
    assert str(again) == "custom_k1"


def test_status_table_shows_trials_queued_on_an_actor_as_pending(tmp_path):
    # A trial queued behind a running one (reuse_actors) is RUNNING to the
    # runner, but it has not started: the table says PENDING and counts no CPU.
    from hpc_ray.tune.progress import ProgressReporter
    from hpc_ray.tune.schedulers.trial_scheduler import FIFOScheduler

    running, queued = Trial("f", {"i": 0}), Trial("f", {"i": 1})
    running.status = queued.status = Trial.RUNNING
    queued._predecessor = running
    table = ProgressReporter(1, str(tmp_path), FIFOScheduler(), {"CPU": 1}).table(
        [running, queued])
    assert "(1 RUNNING, 1 PENDING)" in table and "Resources requested: 1/1 CPUs" in table
    assert f" - {queued}: PENDING" in table


def test_tune_cli_lists_trials_and_experiments(tmp_path):
    # Ray 0.7's `tune list-trials` / `tune list-experiments`, as `hpc-ray tune ...`,
    # over the state of a run of two experiments (one state file, in the first's
    # directory, as run_experiments writes it).
    from click.testing import CliRunner

    from hpc_ray.cli import main
    from hpc_ray.tune.experiment_state import StateJournal

    trials = []
    for exp, x, status, loss in (("exp_a", 1, Trial.TERMINATED, 0.5),
                                 ("exp_a", 2, Trial.ERROR, None),
                                 ("exp_b", 3, Trial.RUNNING, 2.0)):
        trial = Trial("f", {"x": x}, experiment_tag=f"0_x={x}")
        trial.status = status
        trial.logdir = str(tmp_path / exp / f"f_{x}")
        os.makedirs(trial.logdir)
        if loss is not None:
            trial.last_result = {"training_iteration": 1, "mean_loss": loss}
        trials.append(trial)
    StateJournal(str(tmp_path / "exp_a"), {"name": "exp_a"}).snapshot(trials)
    ids = [t.trial_id for t in trials]

    def cli(*args):
        result = CliRunner().invoke(main, ["tune", *args])
        return result.exit_code, result.output

    code, out = cli("list-trials", str(tmp_path / "exp_a"))
    assert code == 0 and ids[0] in out and ids[1] in out and ids[2] not in out, out
    assert "ERROR" in out and "mean_loss" in out
    code, out = cli("list-trials", str(tmp_path / "exp_b"), "--columns", "trial_id,status",
                    "--result-columns", "mean_loss")
    assert code == 0 and out.split() == ["trial_id", "status", "mean_loss",
                                         ids[2], "RUNNING", "2.0"], out
    code, out = cli("list-trials", str(tmp_path / "exp_a"), "--filter", "mean_loss < 1")
    assert code == 0 and ids[0] in out and ids[1] not in out, out
    table = tmp_path / "experiments.csv"
    code, out = cli("list-experiments", str(tmp_path), "--sort", "name", "--output", str(table))
    assert code == 0, out
    # (last_updated, empty where no trial wrote a result, is dropped.)
    assert table.read_text().splitlines() == [
        "name,total_trials,running_trials,terminated_trials,error_trials",
        "exp_a,2,0,1,1", "exp_b,1,1,0,0"], table.read_text()
    code, out = cli("list-trials", str(tmp_path / "exp_a"), "--filter", "status is ERROR")
    assert code == 2 and "--filter must be" in out, out
