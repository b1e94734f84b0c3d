"""``hpc-ray rllib train``: run RLlib experiments from flags or YAML files (Ray 0.7 ``train.py``).

    hpc-ray rllib train --run PPO --env CartPole-v0 --stop '{"episode_reward_mean": 150}'
    hpc-ray rllib train -f cartpole-ppo.yaml
    mpiexec -n 8 hpc-ray rllib train -f cartpole-ppo.yaml     # workers on the ranks
"""
from __future__ import annotations

import json
import os

__all__ = ["run_train", "experiments_from_args"]


def experiments_from_args(config_file: str | None, run: str | None, env: str | None,
                          config: str | None, stop: str | None, checkpoint_freq: int,
                          checkpoint_at_end: bool, local_dir: str | None,
                          experiment_name: str) -> dict:
    """The ``run_experiments`` spec from a YAML file or from the flags.

    Raises:
        ValueError: neither a file nor ``--run`` was given, or bad JSON/YAML.
    """
    if config_file:
        import yaml
        with open(os.path.expanduser(config_file)) as f:
            experiments = yaml.safe_load(f)
        if not isinstance(experiments, dict):
            raise ValueError(f"{config_file}: expected a mapping of experiment names to specs")
    else:
        if not run:
            raise ValueError("give an experiment file (-f FILE) or an algorithm (--run PPO)")
        experiments = {experiment_name: {
            "run": run, "env": env, "config": json.loads(config or "{}"),
            "stop": json.loads(stop or "{}")}}
    for spec in experiments.values():
        if checkpoint_freq:
            spec.setdefault("checkpoint_freq", checkpoint_freq)
        if checkpoint_at_end:
            spec.setdefault("checkpoint_at_end", True)
        if local_dir:
            spec.setdefault("local_dir", local_dir)
        if not spec.get("env") and not spec.get("config", {}).get("env"):
            raise ValueError("the experiment has no env: set 'env:' in the file or --env")
    return experiments


def run_train(experiments: dict, resume: bool = False, num_cpus: int | None = None,
              verbose: int = 2) -> list:
    """Start hpc_ray if needed and run the experiments with Tune; the trials."""
    from .. import api
    from .. import tune
    from . import _register_all
    _register_all()
    if not api.is_initialized():
        api.init(num_cpus=num_cpus)
    return tune.run_experiments(experiments, resume=resume, verbose=verbose)


if __name__ == "__main__":
    # ``python -m hpc_ray.rllib.train`` or ``python hpc_ray/rllib/train.py``, as Ray
    # 0.7's docs run ``python ray/rllib/train.py``: the same as ``hpc-ray rllib train``.
    from hpc_ray.cli import rllib_train
    rllib_train(prog_name="rllib train")
