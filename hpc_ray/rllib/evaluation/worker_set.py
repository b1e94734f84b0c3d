"""``WorkerSet``: the trainer's local rollout worker and its remote actors.

::

    trainer ── sync_weights(): ray.put(weights) once ──▶ every remote worker
               (one object in the store; workers on a node map the same copy)
    trainer ◀── sample.remote() refs ── remote workers (batches in the store)

Remote workers are ``hpc_ray.remote(RolloutWorker)`` actors with
``num_cpus_per_worker`` CPUs each; the scheduler spreads them over the ranks
of the allocation.

Devices: the local worker is the learner, in the trainer's process; its
policies get the trainer's ``num_gpus`` (``LEARNER_GPUS_KEY``) and use CUDA
when it is > 0. Remote workers use CUDA only with ``num_gpus_per_worker`` > 0
(the ids they hold in ``CUDA_VISIBLE_DEVICES``).
"""
from __future__ import annotations

from typing import Any, Callable

from ... import api
from ...actors import kill
from ..policy.torch_policy import LEARNER_GPUS_KEY
from ..utils.filter_manager import FilterManager
from .rollout_worker import RolloutWorker

__all__ = ["WorkerSet"]


class WorkerSet:
    """A local ``RolloutWorker`` plus ``num_workers`` remote ones.

    Args:
        env_creator: the env creator.
        policy: a policy class or a multi-agent policy dict.
        trainer_config: the trainer's merged config.
        num_workers: remote workers to start.
        logdir: the trainer's log directory.
    """

    def __init__(self, env_creator: Callable, policy, trainer_config: dict | None = None,
                 num_workers: int = 0, logdir: str | None = None) -> None:
        self._env_creator = env_creator
        self._policy = policy
        self._config = dict(trainer_config or {})
        self._logdir = logdir
        self._local = self._make_worker(RolloutWorker, 0)
        self._remotes: list = []
        self.add_workers(num_workers)

    def local_worker(self) -> RolloutWorker:
        return self._local

    def remote_workers(self) -> list:
        return list(self._remotes)

    def add_workers(self, num_workers: int) -> None:
        """Start ``num_workers`` more remote workers."""
        cfg = self._config
        cls = api.remote(num_cpus=cfg.get("num_cpus_per_worker", 1),
                         num_gpus=cfg.get("num_gpus_per_worker", 0),
                         resources=cfg.get("custom_resources_per_worker") or None
                         )(RolloutWorker)
        start = len(self._remotes) + 1
        self._remotes += [self._make_worker(cls, i) for i in range(start, start + num_workers)]

    def _make_worker(self, cls, worker_index: int):
        cfg = self._config
        ma = cfg.get("multiagent", {}) or {}
        policy = self._policy
        if ma.get("policies"):
            policy = {pid: (spec[0] or self._policy, *spec[1:])
                      for pid, spec in ma["policies"].items()}
        kwargs = dict(
            env_creator=self._env_creator, policy=policy,
            policy_mapping_fn=ma.get("policy_mapping_fn"),
            policies_to_train=ma.get("policies_to_train"),
            batch_steps=cfg.get("sample_batch_size", 200),
            batch_mode=cfg.get("batch_mode", "truncate_episodes"),
            episode_horizon=cfg.get("horizon"),
            num_envs=cfg.get("num_envs_per_worker", 1),
            observation_filter=cfg.get("observation_filter", "NoFilter"),
            clip_rewards=cfg.get("clip_rewards"), clip_actions=cfg.get("clip_actions", True),
            env_config=cfg.get("env_config", {}), model_config=cfg.get("model", {}),
            policy_config=(dict(cfg, **{LEARNER_GPUS_KEY: cfg.get("num_gpus", 0)})
                           if worker_index == 0 else cfg),
            worker_index=worker_index,
            callbacks=cfg.get("callbacks", {}), seed=cfg.get("seed"),
            soft_horizon=cfg.get("soft_horizon", False), log_dir=self._logdir,
            log_level=cfg.get("log_level"))
        if cls is RolloutWorker:
            return RolloutWorker(**kwargs)
        return cls.remote(**kwargs)

    # --- fan-out ------------------------------------------------------------------------

    def sync_weights(self) -> None:
        """Send the local worker's weights to every remote worker (one ``put``)."""
        if self._remotes:
            ref = api.put(self._local.get_weights())
            api.get([w.set_weights.remote(ref) for w in self._remotes])

    def foreach_worker(self, func: Callable[[RolloutWorker], Any]) -> list:
        """``func(worker)`` on the local worker and every remote one; the results."""
        local = func(self._local)
        return [local] + api.get([w.apply.remote(func) for w in self._remotes])

    def foreach_worker_with_index(self, func: Callable[[RolloutWorker, int], Any]) -> list:
        """``func(worker, index)``; index 0 is the local worker."""
        local = func(self._local, 0)
        return [local] + api.get([w.apply.remote(func, i + 1)
                                  for i, w in enumerate(self._remotes)])

    def foreach_policy(self, func: Callable) -> list:
        out = self._local.foreach_policy(func)
        for res in api.get([w.foreach_policy.remote(func) for w in self._remotes]):
            out.extend(res)
        return out

    def foreach_trainable_policy(self, func: Callable) -> list:
        return self._local.foreach_trainable_policy(func)

    def sync_filters(self) -> None:
        """Merge every remote worker's new observation statistics into the local
        filters, then send the merged filters back (``MeanStdFilter``)."""
        local = self._local.filters
        if all(type(f).__name__ == "NoFilter" for f in local.values()):
            return
        FilterManager.synchronize(local, self._remotes)

    def stop(self) -> None:
        """Stop every worker and end the remote actors."""
        try:
            self._local.stop()
        except Exception:  # noqa: BLE001 - closing envs is best effort
            pass
        for w in self._remotes:
            try:
                kill(w)
            except Exception:  # noqa: BLE001 - the actor may be gone already
                pass
        self._remotes = []
