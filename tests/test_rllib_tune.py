"""RLlib trainers under ``tune.run``, in the pytest process (local mode).

Ray 0.7's answers to ``resources_per_trial`` given to a trainer that sizes
itself, the advice when a trainer needs more CPUs than the job has, and where
``"output": "logdir"`` writes. Each run is one short iteration on
``num_workers=0``.
"""
from __future__ import annotations

import pytest

import hpc_ray
from hpc_ray import tune


@pytest.fixture
def local_mode():
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
