"""``Trainer``: an RLlib algorithm as a Tune trainable (Ray 0.7 ``agents/trainer.py``).

A trainer owns a ``WorkerSet`` (a local rollout worker that learns, remote
ones that sample) and a policy optimizer. ``train()`` runs one iteration and
returns the documented result dict; ``save()``/``restore()`` checkpoint the
policies, filters and counters; ``compute_action()`` serves the policy.
"""
from __future__ import annotations

import copy
import logging
import os
import pickle
import tempfile
import time
import warnings
from typing import Any, Callable

import numpy as np

from ...runtime.head.resources import user_stacklevel
from ...tune.trainable import Trainable, default_logdir
from ..env.gym_compat import make_env_creator
from ..evaluation.metrics import collect_episodes, summarize_episodes
from ..evaluation.worker_set import WorkerSet
from ..offline.creators import validate_offline_config
from ..policy.policy import TF_ONLY
from ..policy.sample_batch import DEFAULT_POLICY_ID
from .config import CALLBACK_NAMES, COMMON_CONFIG, merge_config

__all__ = ["Trainer", "COMMON_CONFIG", "with_common_config"]

logger = logging.getLogger(__name__)


def with_common_config(extra_config: dict) -> dict:
    """``COMMON_CONFIG`` plus an algorithm's own keys."""
    config = copy.deepcopy(COMMON_CONFIG)
    config.update(extra_config)
    return config


#: Ray 0.7 config keys accepted but not acted on when True, and why.
_IGNORED_TRUE = {
    "sample_async": "each worker samples synchronously (A3C's workers still run "
                    "in parallel, one per actor)",
    "remote_worker_envs": "a worker's envs step in its own process, not as actors",
    "monitor": "no gym Monitor files are written (wrap the env in the env creator with "
               "gymnasium's RecordEpisodeStatistics or RecordVideo instead)",
}


def set_log_level(level) -> None:
    """``"log_level"``: the level of the ``hpc_ray.rllib`` loggers (and of
    ``ray.rllib``, the name 0.7 programs configure), in this process."""
    if level is None:
        return
    if isinstance(level, str) and not isinstance(logging.getLevelName(level.upper()), int):
        raise ValueError(f"config['log_level'] must be a logging level (DEBUG, INFO, WARN, "
                         f"ERROR), got {level!r}")
    for name in ("hpc_ray.rllib", "ray.rllib"):
        logging.getLogger(name).setLevel(level.upper() if isinstance(level, str) else level)


def _env_name(env: Any) -> str:
    return env if isinstance(env, str) else getattr(env, "__name__", str(env))


def _default_logger(prefix: str) -> Callable:
    def create(config: dict):
        from ...tune.logger import UnifiedLogger
        return UnifiedLogger(config, default_logdir(prefix))
    return create


class Trainer(Trainable):
    """Base class of RLlib algorithms; also a ``tune.Trainable``.

    Args:
        config: overrides of the algorithm's ``DEFAULT_CONFIG`` (unknown keys are
            rejected).
        env: an env name (registered with ``register_env``, or a gymnasium id;
            Ray 0.7's gym names such as "Pendulum-v0" are mapped), an env class, or
            None to use ``config["env"]``.
        logger_creator: as for ``tune.Trainable``.

    Raises:
        ValueError: an unknown or invalid config key, or no env.
    """

    _name = "Trainer"
    _default_config = COMMON_CONFIG
    _policy = None

    @property
    def __name__(self) -> str:  # noqa: A003 - Ray 0.7's trainer attribute
        """The trainer's name, "PG", "PPO", ... (0.7's callbacks read
        ``info["trainer"].__name__``); on the class it stays the class name."""
        return self._name

    def __init__(self, config: dict | None = None, env: Any = None,
                 logger_creator: Callable | None = None) -> None:
        config = dict(config or {})
        if env is not None:
            config["env"] = env
        self.workers: WorkerSet | None = None
        self.optimizer = None
        self._evaluation_workers = None
        if logger_creator is None:
            # Outside Tune, as Ray 0.7's: results go to ~/ray_results/<PG_env_date...>.
            logger_creator = _default_logger(f"{self._name}_{_env_name(config.get('env'))}")
        Trainable.__init__(self, config, logger_creator)

    # --- resources (Tune) ---------------------------------------------------------------

    @classmethod
    def default_resource_request(cls, config: dict) -> dict:
        cf = dict(cls._default_config)
        cf.update({k: v for k, v in (config or {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)})
        return {"cpu": cf["num_cpus_for_driver"], "gpu": cf["num_gpus"],
                "extra_cpu": cf["num_cpus_per_worker"] * cf["num_workers"],
                "extra_gpu": cf["num_gpus_per_worker"] * cf["num_workers"]}

    # --- set-up -------------------------------------------------------------------------

    def _setup(self, config: dict) -> None:
        env = config.get("env")
        merged = merge_config(self._default_config, config, type(self).__name__)
        self._validate_common(merged)
        #: The config as the user gave it, before the defaults (0.7's attribute).
        self.raw_user_config = config
        self.config = merged
        self._env_id = _env_name(env)
        if env is None:
            raise ValueError(f"{type(self).__name__} needs an env: pass env='CartPole-v0' "
                             "or config={'env': ...} (a registered name, a gymnasium id or "
                             "an env class)")
        self.env_creator = make_env_creator(env)
        import torch
        torch.set_num_threads(1)
        if merged["seed"] is not None:
            np.random.seed(merged["seed"])
            torch.manual_seed(merged["seed"])
        self._episode_history: list = []
        if merged["output"] == "logdir" and self.logdir == tempfile.gettempdir():
            # A trainer made outside Tune has no log directory of its own yet.
            self.logdir = default_logdir(f"{self._name}_{self._env_id}")
        self._init(merged, self.env_creator)
        if merged["evaluation_interval"]:
            eval_cfg = merge_config(merged, dict(merged["evaluation_config"]),
                                    type(self).__name__)
            eval_cfg["batch_mode"] = "complete_episodes"
            # Evaluation simulates unless its own config says otherwise.
            for key, value in (("input", "sampler"), ("output", None)):
                if key not in merged["evaluation_config"]:
                    eval_cfg[key] = value
            self._evaluation_workers = WorkerSet(self.env_creator, self._policy, eval_cfg, 0)

    def _validate_common(self, config: dict) -> None:
        if not config.get("use_pytorch", True):
            raise ValueError(f"{type(self).__name__}: \"use_pytorch\": False asks for "
                             f"TensorFlow. {TF_ONLY}. Leave use_pytorch at True.")
        if config.get("use_eager"):
            raise ValueError(f"\"use_eager\" is a TensorFlow option. {TF_ONLY}")
        for key in ("num_workers", "num_envs_per_worker", "sample_batch_size",
                    "train_batch_size"):
            value = config[key]
            minimum = 0 if key == "num_workers" else 1
            if key == "train_batch_size" and value == -1:
                continue  # DD-PPO: no central train batch
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ValueError(f"config[{key!r}] must be an int >= {minimum}, got {value!r}")
        for key, why in _IGNORED_TRUE.items():
            if config.get(key):
                warnings.warn(f"config[{key!r}] = True has no effect in hpc_ray.rllib: "
                              f"{why}", UserWarning, stacklevel=user_stacklevel())
        set_log_level(config["log_level"])
        if config["batch_mode"] not in ("truncate_episodes", "complete_episodes"):
            raise ValueError(f"config['batch_mode'] must be 'truncate_episodes' or "
                             f"'complete_episodes', got {config['batch_mode']!r}")
        if config["observation_filter"] not in ("NoFilter", "MeanStdFilter",
                                                "ConcurrentMeanStdFilter"):
            raise ValueError(f"config['observation_filter'] must be 'NoFilter' or "
                             f"'MeanStdFilter', got {config['observation_filter']!r}")
        if not 0.0 <= float(config["gamma"]) <= 1.0:
            raise ValueError(f"config['gamma'] must be in [0, 1], got {config['gamma']!r}")
        validate_offline_config(config)
        for name, fn in (config["callbacks"] or {}).items():
            if name not in CALLBACK_NAMES:
                raise ValueError(f"unknown callback {name!r} (known: {list(CALLBACK_NAMES)})")
            if fn is not None and not callable(fn):
                raise ValueError(f"callback {name!r} must be a function of one dict, "
                                 f"got {fn!r}")

    def _init(self, config: dict, env_creator: Callable) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _init()")

    def _make_workers(self, env_creator: Callable, policy, config: dict,
                      num_workers: int) -> WorkerSet:
        return WorkerSet(env_creator, policy, config, num_workers, self.logdir)

    # --- training -------------------------------------------------------------------------

    def train(self) -> dict:
        """One training iteration; the result dict (``episode_reward_mean``,
        ``timesteps_total``, ``info``...)."""
        if self.config["synchronize_filters"] and self.workers is not None:
            self.workers.sync_filters()
        result = Trainable.train(self)
        cb = self.config["callbacks"].get("on_train_result")
        if cb is not None:
            cb({"trainer": self, "result": result})
        return result

    def _train(self) -> dict:
        start = time.time()
        steps_before = self.optimizer.num_steps_sampled
        while True:
            self._train_step()
            elapsed = time.time() - start
            steps = self.optimizer.num_steps_sampled - steps_before
            if (elapsed >= self.config["min_iter_time_s"]
                    and steps >= self.config["timesteps_per_iteration"]):
                break
        result = self.optimizer.collect_metrics(
            self.config["collect_metrics_timeout"],
            min_history=self.config["metrics_smoothing_episodes"])
        result["timesteps_this_iter"] = self.optimizer.num_steps_sampled - steps_before
        result["info"] = dict(result.get("info", {}), learner=self.optimizer.learner_stats)
        result["config"] = self.config
        iteration = self._iteration + 1
        interval = self.config["evaluation_interval"]
        if interval and iteration % interval == 0:
            result["evaluation"] = self._evaluate()
        return result

    def _train_step(self) -> None:
        self.optimizer.step()

    def _evaluate(self) -> dict:
        """Run ``evaluation_num_episodes`` episodes with the current weights."""
        ev = self._evaluation_workers.local_worker()
        ev.set_weights(self.workers.local_worker().get_weights())
        ev.sync_filters(self.workers.local_worker().get_filters())
        episodes: list = []
        while len(episodes) < self.config["evaluation_num_episodes"]:
            ev.sample()
            episodes += collect_episodes(ev, [])
        return summarize_episodes(episodes)

    # --- serving ---------------------------------------------------------------------------

    def compute_action(self, observation, state=None, prev_action=None, prev_reward=None,
                       info=None, policy_id: str = DEFAULT_POLICY_ID, full_fetch: bool = False,
                       explore: bool = True):
        """The policy's action for one raw observation (preprocessed and filtered
        as in training).

        Args:
            observation: a raw observation from the env.
            state: a recurrent policy's RNN state: at an episode's start
                ``get_policy().get_initial_state()``, then the state this
                returned. Given, the answer is ``(action, state_out, info)``,
                as in Ray 0.7; None: a recurrent policy starts from its initial
                state and only the action is returned.
            prev_action, prev_reward: a_{t-1} and r_{t-1}, for models that read
                them (``lstm_use_prev_action_reward``); zeros when not given.
            policy_id: which policy acts.
            full_fetch: also return the state and the extra outputs.
            explore: sample from the action distribution (False: its mode).

        A ``Box`` action is clipped to the space's bounds when the config's
        ``clip_actions`` is set (the default), as the env would get it in training.
        """
        local = self.workers.local_worker()
        if policy_id not in local.policy_map:
            raise ValueError(f"unknown policy_id {policy_id!r} (known: {sorted(local.policy_map)})")
        policy = local.policy_map[policy_id]
        obs = local.preprocessors[policy_id].transform(observation)
        obs = local.filters[policy_id](obs, update=False)
        given = state is not None and len(state) > 0
        initial = policy.get_initial_state()
        if given and len(state) != len(initial):
            raise ValueError(f"policy {policy_id!r} has {len(initial)} RNN state tensors, "
                             f"got a state of {len(state)}: start from "
                             f"trainer.get_policy().get_initial_state()")
        action, state_out, extra = policy.compute_single_action(
            obs, list(state) if given else initial, prev_action, prev_reward, info,
            clip_actions=self.config.get("clip_actions", True), explore=explore)
        if given or full_fetch:
            return action, state_out, extra
        return action

    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID):
        """The local (learner) copy of a policy."""
        return self.workers.local_worker().get_policy(policy_id)

    def get_weights(self, policies=None) -> dict:
        return self.workers.local_worker().get_weights(policies)

    def set_weights(self, weights: dict) -> None:
        self.workers.local_worker().set_weights(weights)
        self.workers.sync_weights()

    def export_policy_model(self, export_dir: str, policy_id: str = DEFAULT_POLICY_ID) -> None:
        self.get_policy(policy_id).export_model(export_dir)

    def export_policy_checkpoint(self, export_dir: str, filename_prefix: str = "model",
                                 policy_id: str = DEFAULT_POLICY_ID) -> None:
        """Write the policy's state to ``<export_dir>/<filename_prefix>.pt``."""
        self.get_policy(policy_id).export_checkpoint(export_dir, filename_prefix)

    def _export_model(self, export_formats, export_dir) -> dict:
        """Ray 0.7's: ExportFormat.MODEL -> ``<export_dir>/model`` (the policy's
        model, ``model.pt``), CHECKPOINT -> ``<export_dir>/checkpoint`` (its state)."""
        from ...tune.trial import ExportFormat
        exported = {}
        if ExportFormat.CHECKPOINT in export_formats:
            path = os.path.join(export_dir, ExportFormat.CHECKPOINT)
            self.export_policy_checkpoint(path)
            exported[ExportFormat.CHECKPOINT] = path
        if ExportFormat.MODEL in export_formats:
            path = os.path.join(export_dir, ExportFormat.MODEL)
            self.export_policy_model(path)
            exported[ExportFormat.MODEL] = path
        return exported

    # --- checkpoints -------------------------------------------------------------------------

    def __getstate__(self) -> dict:
        state = {"worker": self.workers.local_worker().save()}
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.save()
        return state

    def __setstate__(self, state: dict) -> None:
        self.workers.local_worker().restore(state["worker"])
        remotes = self.workers.remote_workers()
        if remotes:
            from ... import api
            ref = api.put(state["worker"])
            api.get([w.restore.remote(ref) for w in remotes])
        if "optimizer" in state and self.optimizer is not None:
            self.optimizer.restore(state["optimizer"])

    def save(self, checkpoint_dir: str | None = None) -> str:
        """Write a checkpoint; return its path (give it to ``restore``)."""
        if checkpoint_dir is None and self.logdir == tempfile.gettempdir():
            self.logdir = default_logdir(f"{self._name}_{self._env_id}")
        return Trainable.save(self, checkpoint_dir)

    def _save(self, checkpoint_dir: str) -> str:
        path = os.path.join(checkpoint_dir, f"checkpoint-{self._iteration}")
        with open(path, "wb") as f:
            pickle.dump(self.__getstate__(), f)
        return path

    def _restore(self, checkpoint_path: str) -> None:
        if os.path.isdir(checkpoint_path):
            names = [n for n in os.listdir(checkpoint_path) if n.startswith("checkpoint-")]
            if not names:
                raise ValueError(f"no checkpoint-N file in {checkpoint_path!r}")
            checkpoint_path = os.path.join(checkpoint_path, names[0])
        with open(checkpoint_path, "rb") as f:
            self.__setstate__(pickle.load(f))

    def _stop(self) -> None:
        if self.optimizer is not None:
            self.optimizer.stop()
        if self.workers is not None:
            self.workers.stop()
        if self._evaluation_workers is not None:
            self._evaluation_workers.stop()

    @classmethod
    def resource_help(cls, config: dict) -> str:
        return ("\n\nYou can adjust the resource requests of RLlib agents by setting "
                "`num_workers` and other configs. See the DEFAULT_CONFIG defined by "
                "each agent for more info.")

    def __repr__(self) -> str:
        return self._name


def renamed_agent(cls: type) -> type:
    """Ray 0.7's deprecated ``<Alg>Agent`` name of ``cls`` (an ``<Alg>Trainer``):
    the same trainer, with a warning that names the new name."""
    old = cls.__name__.replace("Trainer", "Agent")

    def __init__(self, *args, **kwargs):
        import warnings
        warnings.warn(f"{old} has been renamed to {cls.__name__}", DeprecationWarning,
                      stacklevel=2)
        cls.__init__(self, *args, **kwargs)

    return type(old, (cls,), {"__init__": __init__, "__module__": cls.__module__})
