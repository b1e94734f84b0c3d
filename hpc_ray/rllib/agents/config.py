"""``COMMON_CONFIG``: the config keys every trainer takes (Ray 0.7 ``agents/trainer.py``).

Keys whose meaning is TensorFlow's (``tf_session_args``...) are accepted and
ignored so that configs written for Ray 0.7 load unchanged.
"""
from __future__ import annotations

import copy
import difflib

from ..models.catalog import MODEL_DEFAULTS

__all__ = ["COMMON_CONFIG", "merge_config", "CALLBACK_NAMES", "refuse_use_lstm"]

#: The documented callback names (``callbacks`` config).
CALLBACK_NAMES = ("on_episode_start", "on_episode_step", "on_episode_end", "on_sample_end",
                  "on_train_result", "on_postprocess_traj")

COMMON_CONFIG: dict = {
    # === Debugging ===
    "monitor": False,
    "log_level": "INFO",
    "callbacks": {name: None for name in CALLBACK_NAMES},
    "ignore_worker_failures": False,
    "use_eager": False,
    # hpc_ray.rllib runs on PyTorch only: True by default (Ray 0.7: False).
    "use_pytorch": True,
    # === Policy ===
    "model": MODEL_DEFAULTS,
    "optimizer": {},
    # === Environment ===
    "gamma": 0.99,
    "horizon": None,
    "soft_horizon": False,
    "env_config": {},
    "env": None,
    "clip_rewards": None,
    "clip_actions": True,
    "preprocessor_pref": "deepmind",
    "lr": 0.0001,
    # === Evaluation ===
    "evaluation_interval": None,
    "evaluation_num_episodes": 10,
    "evaluation_config": {},
    # === Resources ===
    "num_workers": 2,
    "num_gpus": 0,
    "num_cpus_per_worker": 1,
    "num_gpus_per_worker": 0,
    "custom_resources_per_worker": {},
    "num_cpus_for_driver": 1,
    # === Execution ===
    "num_envs_per_worker": 1,
    "sample_batch_size": 200,
    "train_batch_size": 200,
    "batch_mode": "truncate_episodes",
    "sample_async": False,
    "observation_filter": "NoFilter",
    "synchronize_filters": True,
    "tf_session_args": {},
    "local_tf_session_args": {},
    "compress_observations": False,
    "collect_metrics_timeout": 180,
    "metrics_smoothing_episodes": 100,
    "remote_worker_envs": False,
    "remote_env_batch_wait_ms": 0,
    "min_iter_time_s": 0,
    "timesteps_per_iteration": 0,
    # Seeds numpy, random, torch and the envs of every worker (Ray 0.7.2+).
    "seed": None,
    # === Offline Datasets ===
    "input": "sampler",
    "input_evaluation": ["is", "wis"],
    "postprocess_inputs": False,
    "shuffle_buffer_size": 0,
    "output": None,
    "output_compress_columns": ["obs", "new_obs"],
    "output_max_file_size": 64 * 1024 * 1024,
    # === Multiagent ===
    "multiagent": {
        "policies": {},
        "policy_mapping_fn": None,
        "policies_to_train": None,
    },
}

#: Dict-valued keys whose own keys are free (the user's).
_FREE_DICTS = ("env_config", "optimizer", "custom_options", "evaluation_config",
               "tf_session_args", "local_tf_session_args", "policies", "custom_resources_per_worker")


def merge_config(defaults: dict, overrides: dict, trainer_name: str = "Trainer",
                 path: str = "") -> dict:
    """``defaults`` updated by ``overrides``, recursively, rejecting unknown keys.

    Raises:
        ValueError: a key of ``overrides`` is not in ``defaults`` (named with the
            valid choices).
    """
    merged = copy.deepcopy(defaults)
    for key, value in (overrides or {}).items():
        where = f"{path}{key}"
        if key not in defaults:
            close = difflib.get_close_matches(str(key), list(defaults), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown config parameter {where!r} for {trainer_name}{hint}; valid "
                f"{'keys of ' + path.rstrip('.') if path else 'keys'}: {sorted(defaults)}")
        if (isinstance(value, dict) and isinstance(defaults[key], dict)
                and key not in _FREE_DICTS and defaults[key]):
            merged[key] = merge_config(defaults[key], value, trainer_name, where + ".")
        else:
            merged[key] = copy.deepcopy(value) if not callable(value) else value
    return merged


#: The trainers whose policies learn with a recurrent model (``use_lstm`` or a
#: custom model with RNN state), as Ray 0.7's policy gradient algorithms do.
RECURRENT_TRAINERS = "PG, A2C, A3C, PPO, APPO, IMPALA and DDPPO"


def refuse_use_lstm(config: dict, trainer: str, why: str) -> None:
    """Raise ``ValueError`` when ``config["model"]["use_lstm"]`` is set for a
    trainer that cannot learn with a recurrent model."""
    if (config.get("model") or {}).get("use_lstm"):
        raise ValueError(f"{trainer} does not support \"use_lstm\": True ({why}); "
                         f"recurrent models work with {RECURRENT_TRAINERS}")
