"""RLlib trainers under ``tune.run``, in the pytest process (local mode).

Ray 0.7's answers to ``resources_per_trial`` given to a trainer that sizes
itself, the advice when a trainer needs more CPUs than the job has, and where
``"output": "logdir"`` writes. Each run is one short iteration on
``num_workers=0``.
"""
from __future__ import annotations

import os

import pytest

import hpc_ray
from hpc_ray import tune


@pytest.fixture
def local_mode(monkeypatch, tmp_path):
    # A local-mode trial runs in this process and enters its directory: come back.
    monkeypatch.chdir(tmp_path)
    hpc_ray.init(local_mode=True, num_cpus=2)
    yield
    hpc_ray.shutdown()


def test_resources_per_trial_of_an_rllib_trainer_is_refused(local_mode, tmp_path):
    with pytest.raises(ValueError, match=r"have been automatically set to .* by its "
                                         r"`default_resource_request\(\)` method. Please "
                                         r"clear the `resources_per_trial` option"):
        tune.run("PG", config={"env": "CartPole-v0", "num_workers": 0},
                 resources_per_trial={"cpu": 1}, stop={"training_iteration": 1},
                 local_dir=str(tmp_path), verbose=0)


def test_a_trainer_too_big_for_the_job_is_told_to_lower_num_workers(local_mode, tmp_path):
    with pytest.raises(tune.TuneError) as err:
        tune.run("PG", config={"env": "CartPole-v0", "num_workers": 2},
                 stop={"training_iteration": 1}, local_dir=str(tmp_path), verbose=0)
    assert "needs CPU=3 but the whole job has 2" in str(err.value)
    assert "num_workers" in str(err.value)
    assert "resources_per_trial" not in str(err.value)


def test_output_logdir_writes_into_the_trial_directory(local_mode, tmp_path):
    def on_train_result(info):
        info["result"]["trainer_logdir"] = info["trainer"].logdir

    trials = tune.run("PG", config={
        "env": "CartPole-v0", "output": "logdir", "num_workers": 0,
        "train_batch_size": 50, "sample_batch_size": 50,
        "callbacks": {"on_train_result": tune.function(on_train_result)}},
        stop={"training_iteration": 1}, local_dir=str(tmp_path / "results"), verbose=0)
    logdir = trials[0].logdir
    assert trials[0].last_result["trainer_logdir"] == logdir
    outputs = [f for f in os.listdir(logdir) if f.startswith("output-")]
    assert len(outputs) == 1 and outputs[0].endswith("_worker-0_0.json")
