"""hpc_ray.tune: Ray 0.7's Tune on hpc_ray; trials run as actors on the worker ranks.

    import hpc_ray as ray
    from hpc_ray import tune

    def train(config, reporter):
        for i in range(10):
            reporter(mean_loss=(config["x"] - 3) ** 2)

    trials = tune.run(train, config={"x": tune.grid_search([1, 2, 3, 4])},
                      stop={"training_iteration": 10})

Experiments are resumable across jobs: ``resume=True`` continues from the
experiment directory's state file, and a Slurm warning signal (see
``hpc_ray.on_preempt``) checkpoints every running trial before the job ends.
"""
from . import logger, resources, schedulers, suggest, track, util
from .analysis import Analysis, ExperimentAnalysis
from .error import TuneError
from .experiment import Experiment
from .function_runner import StatusReporter, report
from .registry import register_env, register_trainable
from .sample import (choice, function, grid_search, loguniform, quniform, randint, randn,
                     sample_from, uniform)
from .trainable import Trainable
from .trial import Trial
from .tune import run, run_experiments

__all__ = [
    "Analysis", "Experiment", "ExperimentAnalysis", "StatusReporter", "Trainable", "Trial",
    "TuneError", "choice", "function", "grid_search", "loguniform", "quniform", "randint",
    "randn", "register_env", "register_trainable", "report", "run", "run_experiments",
    "sample_from", "schedulers", "suggest", "track", "uniform", "util", "logger", "resources",
]
