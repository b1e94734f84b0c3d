"""``RolloutWorker``: envs plus policies, producing sample batches (Ray 0.7).

A trainer holds one local ``RolloutWorker`` (its learner copy of the policies)
and ``num_workers`` remote ones: the same class made an hpc_ray actor
(``WorkerSet``), placed by the scheduler over the allocation's ranks. Their
``sample()`` results travel through the object store as numpy columns.
"""
from __future__ import annotations

import os
import random
import socket
from typing import Any, Callable

import numpy as np

from ..env.base_env import to_base_env
from ..env.env_context import EnvContext
from ..models.catalog import ModelCatalog
from ..policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch
from ..utils.filter import get_filter
from .interface import EvaluatorInterface
from .sampler import Sampler

__all__ = ["RolloutWorker", "PolicyEvaluator"]


class RolloutWorker(EvaluatorInterface):
    """Collects experiences with its policies and can learn from them.

    Args:
        env_creator: ``env_creator(env_context) -> env`` (gym, gymnasium,
            ``MultiAgentEnv`` or ``VectorEnv``).
        policy: a ``Policy`` class, or ``{policy_id: (cls, obs_space, act_space,
            config)}`` for several (``None`` spaces: the env's).
        policy_mapping_fn: agent id -> policy id (multi-agent).
        policies_to_train: the ids that learn (None: all).
        batch_steps: steps per env per ``sample()``.
        batch_mode: "truncate_episodes" or "complete_episodes".
        episode_horizon: steps after which an episode ends.
        soft_horizon: at ``episode_horizon``, end the episode without resetting
            the env (its rows are not marked done).
        num_envs: envs stepped together on this worker.
        observation_filter: "NoFilter" or "MeanStdFilter".
        clip_rewards: clip rewards to their sign.
        clip_actions: clip actions to the action space's bounds.
        env_config: passed to ``env_creator`` inside an ``EnvContext``.
        model_config: the ``model`` config.
        policy_config: the trainer's config, given to each policy.
        worker_index: 0 for the local worker, 1.. for remote ones.
        callbacks: the ``callbacks`` dict.
        seed: seeds numpy, random, torch and the envs (plus ``worker_index``).
        log_dir: where ``"output": "logdir"`` writes.
        input_creator: ``IOContext -> InputReader`` (default: from the config's
            ``"input"``; None or "sampler": simulate).
        input_evaluation: off-policy estimators for offline input ("is", "wis",
            "simulation"; default: the config's ``"input_evaluation"``).
        output_creator: ``IOContext -> OutputWriter`` (default: from ``"output"``).
    """

    def __init__(self, env_creator: Callable, policy, policy_mapping_fn=None,
                 policies_to_train=None, tf_session_creator=None, batch_steps: int = 100,
                 batch_mode: str = "truncate_episodes", episode_horizon=None,
                 preprocessor_pref="deepmind", sample_async=False, compress_observations=False,
                 num_envs: int = 1, observation_filter: str = "NoFilter",
                 clip_rewards=None, clip_actions: bool = True, env_config=None,
                 model_config=None, policy_config=None, worker_index: int = 0,
                 monitor_path=None, log_dir=None, log_level=None, callbacks=None,
                 input_creator=None, input_evaluation=None, output_creator=None,
                 remote_worker_envs=False, remote_env_batch_wait_ms=0, soft_horizon=False,
                 seed: int | None = None, _fake_sampler=False) -> None:
        import torch
        if worker_index > 0:
            # Rollout workers share a node's cores: one thread each.
            torch.set_num_threads(1)
        self.worker_index = worker_index
        self.policy_config = dict(policy_config or {})
        if log_level is not None and worker_index > 0:
            from ..agents.trainer import set_log_level
            set_log_level(log_level)
        if seed is not None:
            s = seed + 1000 * worker_index
            np.random.seed(s)
            random.seed(s)
            torch.manual_seed(s)
        env_context = EnvContext(env_config or {}, worker_index)
        self.env_context = env_context
        self.env_creator = env_creator

        def make_env(vector_index: int):
            return env_creator(env_context.copy_with_overrides(vector_index=vector_index))

        env_seed = None if seed is None else seed + 1000 * worker_index
        self.async_env = to_base_env(make_env, num_envs, env_seed)
        self.env = self.async_env.get_unwrapped()[0] if self.async_env.get_unwrapped() \
            else None
        self.num_envs = self.async_env.num_envs
        model_config = dict(model_config or {})
        specs = self._policy_specs(policy)
        self.policy_map: dict[str, Any] = {}
        self.preprocessors: dict[str, Any] = {}
        self.filters: dict[str, Any] = {}
        for pid, (cls, obs_space, act_space, conf) in specs.items():
            merged = dict(self.policy_config, **(conf or {}))
            merged["model"] = dict(model_config, **(conf or {}).get("model", {}))
            prep = ModelCatalog.get_preprocessor_for_space(obs_space, merged["model"])
            self.preprocessors[pid] = prep
            self.filters[pid] = get_filter(observation_filter, prep.shape)
            self.policy_map[pid] = cls(prep.observation_space, act_space, merged)
        if len(self.policy_map) > 1 or DEFAULT_POLICY_ID not in self.policy_map:
            if policy_mapping_fn is None:
                raise ValueError("several policies need multiagent.policy_mapping_fn "
                                 "(agent id -> policy id)")
        self.policy_mapping_fn = policy_mapping_fn or (lambda agent_id: DEFAULT_POLICY_ID)
        self.policies_to_train = list(policies_to_train or self.policy_map)
        if clip_rewards is None:
            clip_rewards = False
        self.callbacks = callbacks or {}
        self.sampler = Sampler(
            self.async_env, self.policy_map, self.policy_mapping_fn, self.preprocessors,
            self.filters, batch_steps, batch_mode, episode_horizon or _env_horizon(self.env),
            bool(clip_rewards), clip_actions, self.callbacks, worker=self,
            soft_horizon=soft_horizon)
        self.batch_steps = batch_steps
        self._setup_offline(log_dir, input_creator, input_evaluation, output_creator)

    def _setup_offline(self, log_dir, input_creator, input_evaluation, output_creator) -> None:
        """The "input"/"output" config: readers and writers are made here, in the
        worker's own process, from the config (no closures cross processes)."""
        from ..offline.creators import make_input_creator, make_output_creator
        from ..offline.io_context import IOContext
        from ..offline.off_policy_estimator import ESTIMATORS
        cfg = self.policy_config
        self.io_context = IOContext(log_dir, cfg, self.worker_index, self)
        if input_creator is None and "input" in cfg:
            input_creator = make_input_creator(cfg)
        if output_creator is None and cfg.get("output") is not None:
            output_creator = make_output_creator(cfg)
        self.input_reader = input_creator(self.io_context) if input_creator else None
        self.output_writer = output_creator(self.io_context) if output_creator else None
        if input_evaluation is None:
            input_evaluation = cfg.get("input_evaluation") or []
        self.reward_estimators = []
        self._simulate = False
        if self.input_reader is not None:
            policy = self.policy_map.get(DEFAULT_POLICY_ID)
            for name in input_evaluation:
                if name == "simulation":
                    self._simulate = True
                elif policy is not None:
                    self.reward_estimators.append(
                        ESTIMATORS[name](policy, cfg.get("gamma", 0.99)))
        self._postprocess_inputs = bool(cfg.get("postprocess_inputs", False))

    def _policy_specs(self, policy) -> dict:
        env = self.async_env
        if isinstance(policy, dict):
            specs = {}
            for pid, spec in policy.items():
                cls, obs_space, act_space, conf = spec
                obs_space = obs_space if obs_space is not None else env.observation_space
                act_space = act_space if act_space is not None else env.action_space
                if obs_space is None or act_space is None:
                    raise ValueError(f"policy {pid!r} needs its observation and action "
                                     "spaces: the env has no observation_space/action_space")
                specs[pid] = (cls, obs_space, act_space, conf)
            return specs
        return {DEFAULT_POLICY_ID: (policy, env.observation_space, env.action_space, {})}

    # --- sampling ---------------------------------------------------------------------

    def sample(self):
        """Collect ``batch_steps * num_envs`` env steps.

        Returns:
            a ``SampleBatch`` (single-agent) or a ``MultiAgentBatch``.
        """
        if self.input_reader is None:
            batch = self.sampler.sample()
        else:
            batch = self.input_reader.next()
            if self._postprocess_inputs:
                batch = self._postprocess(batch)
            for est in self.reward_estimators:
                est.process(batch)
            if self._simulate:
                self.sampler.sample()  # for the episode metrics only
        if self.output_writer is not None:
            self.output_writer.write(batch)
        return batch

    def _postprocess(self, batch):
        """``postprocess_trajectory`` by the current policies, episode by episode."""
        if isinstance(batch, MultiAgentBatch):
            return MultiAgentBatch({pid: self._postprocess_one(self.policy_map[pid], b)
                                    for pid, b in batch.policy_batches.items()}, batch.count)
        return self._postprocess_one(self.policy_map[DEFAULT_POLICY_ID], batch)

    @staticmethod
    def _postprocess_one(policy, batch: SampleBatch) -> SampleBatch:
        if SampleBatch.EPS_ID not in batch:
            return policy.postprocess_trajectory(batch.copy())
        return SampleBatch.concat_samples(
            [policy.postprocess_trajectory(ep.copy()) for ep in batch.split_by_episode()])

    @classmethod
    def as_remote(cls, num_cpus: float | None = None, num_gpus: float | None = None,
                  resources: dict | None = None):
        """This class as an actor class with those resources (Ray 0.7's)."""
        from ... import api
        return api.remote(num_cpus=num_cpus, num_gpus=num_gpus, resources=resources)(cls)

    def sample_with_count(self):
        batch = self.sample()
        return batch, batch.count

    def get_metrics(self) -> list:
        """The episodes finished since the last call, and the off-policy estimates."""
        out = list(self.sampler.get_metrics())
        for est in self.reward_estimators:
            out.extend(est.get_metrics())
        return out

    # --- learning ---------------------------------------------------------------------

    def learn_on_batch(self, samples) -> dict:
        """Update the trainable policies on ``samples``; return their stats by policy."""
        out = {}
        for pid, batch in _by_policy(samples).items():
            if pid in self.policies_to_train:
                out[pid] = self.policy_map[pid].learn_on_batch(batch)
        return out if isinstance(samples, MultiAgentBatch) else out.get(DEFAULT_POLICY_ID, {})

    def compute_gradients(self, samples):
        grads, infos = {}, {}
        for pid, batch in _by_policy(samples).items():
            if pid in self.policies_to_train:
                grads[pid], infos[pid] = self.policy_map[pid].compute_gradients(batch)
        if isinstance(samples, MultiAgentBatch):
            return grads, infos
        return grads[DEFAULT_POLICY_ID], infos[DEFAULT_POLICY_ID]

    def apply_gradients(self, grads) -> None:
        if isinstance(grads, dict):
            for pid, g in grads.items():
                self.policy_map[pid].apply_gradients(g)
        else:
            self.policy_map[DEFAULT_POLICY_ID].apply_gradients(grads)

    # --- state ------------------------------------------------------------------------

    def get_weights(self, policies=None) -> dict:
        return {pid: p.get_weights() for pid, p in self.policy_map.items()
                if policies is None or pid in policies}

    def set_weights(self, weights: dict) -> None:
        for pid, w in weights.items():
            self.policy_map[pid].set_weights(w)

    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID):
        return self.policy_map.get(policy_id)

    def for_policy(self, func: Callable, policy_id: str = DEFAULT_POLICY_ID):
        return func(self.policy_map[policy_id])

    def foreach_policy(self, func: Callable) -> list:
        return [func(p, pid) for pid, p in self.policy_map.items()]

    def foreach_trainable_policy(self, func: Callable) -> list:
        return [func(self.policy_map[pid], pid) for pid in self.policies_to_train]

    def foreach_env(self, func: Callable) -> list:
        """``func`` applied to each of this worker's envs, as Ray 0.7 does it: the
        user's envs (``async_env.get_unwrapped()``), or the ``BaseEnv`` itself
        when it has none to show (a user's own ``BaseEnv``).

        Returns:
            The list of ``func``'s return values.
        """
        envs = self.async_env.get_unwrapped()
        if not envs:
            return [func(self.async_env)]
        return [func(e) for e in envs]

    def get_filters(self, flush_after: bool = False) -> dict:
        out = {pid: f.as_serializable() for pid, f in self.filters.items()}
        if flush_after:
            for f in self.filters.values():
                f.clear_buffer()
        return out

    def sync_filters(self, new_filters: dict) -> None:
        for pid, f in new_filters.items():
            self.filters[pid].sync(f)

    def save(self) -> dict:
        return {"filters": self.get_filters(),
                "state": {pid: p.get_state() for pid, p in self.policy_map.items()}}

    def restore(self, objs: dict) -> None:
        self.sync_filters(objs["filters"])
        for pid, state in objs["state"].items():
            self.policy_map[pid].set_state(state)

    def set_global_vars(self, global_vars: dict) -> None:
        for p in self.policy_map.values():
            p.on_global_var_update(global_vars)

    def get_node_id(self) -> tuple[str, int]:
        return socket.gethostname(), os.getpid()

    def stop(self) -> None:
        self.async_env.stop()
        close = getattr(self.output_writer, "close", None)
        if close is not None:
            close()


#: Ray 0.6's name of RolloutWorker, still documented in 0.7.
PolicyEvaluator = RolloutWorker


def _by_policy(samples) -> dict:
    if isinstance(samples, MultiAgentBatch):
        return samples.policy_batches
    if isinstance(samples, SampleBatch):
        return {DEFAULT_POLICY_ID: samples}
    raise TypeError(f"expected a SampleBatch or MultiAgentBatch, got {type(samples).__name__}")


def _env_horizon(env) -> int | None:
    spec = getattr(env, "spec", None)
    return getattr(spec, "max_episode_steps", None) if spec is not None else None
