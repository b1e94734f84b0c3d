"""Decentralized distributed PPO (DD-PPO, Wijmans et al. 2020).

No central learner: every rollout worker samples its own batch and runs PPO's
SGD on it; after each minibatch's ``backward()`` the workers average their
gradients with an allreduce (``hpc_ray.collective``, an MPI communicator over
the workers' ranks) and each applies the same mean, so their weights stay
identical. The trainer only starts iterations and gathers metrics::

    trainer ── ddppo_step.remote() ──▶ worker k (k = 1..n, in parallel):
        sample() → for each epoch, minibatch: grads → allreduce(MEAN) → apply
    trainer ◀── stats; worker 1's weights go to the local copy (compute_action)
"""
from __future__ import annotations

import numpy as np

from .... import api, collective
from ...evaluation.rollout_worker import RolloutWorker
from ...evaluation.worker_set import WorkerSet
from ...optimizers.policy_optimizer import PolicyOptimizer
from ...policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from ...utils.sgd import minibatches, policy_max_seq_len
from ..trainer import Trainer
from .ppo import DEFAULT_CONFIG as PPO_CONFIG
from .ppo import PPOTrainer

__all__ = ["DDPPOTrainer", "DEFAULT_CONFIG", "DDPPOWorker"]

DEFAULT_CONFIG = dict(
    PPO_CONFIG,
    # Steps each worker samples per iteration (there is no central train batch).
    sample_batch_size=100,
    # Ignored: every worker learns on its own sample_batch_size steps.
    train_batch_size=-1,
    sgd_minibatch_size=50,
    num_sgd_iter=10,
    num_workers=2,
    # Copy worker 1's weights to the trainer's local policy after each iteration.
    keep_local_weights_in_sync=True,
    # Accepted for configs written for Ray; the allreduce is MPI's here.
    torch_distributed_backend="mpi",
    batch_mode="truncate_episodes",
)


class DDPPOWorker(RolloutWorker):
    """A rollout worker that learns in lockstep with its peers."""

    def join_group(self, world_size: int, rank: int, group_name: str) -> int:
        collective.init_collective_group(world_size, rank, group_name=group_name)
        self._group = group_name
        self._world = world_size
        return rank

    def ddppo_step(self, num_sgd_iter: int, minibatch_size: int, seed: int) -> dict:
        batch = self.sample()
        policy = self.policy_map[DEFAULT_POLICY_ID]
        cols = dict(batch.items())
        adv = np.asarray(cols["advantages"], np.float32)
        cols["advantages"] = (adv - adv.mean()) / max(1e-4, float(adv.std()))
        batch = SampleBatch(cols)
        rng = np.random.default_rng(seed)
        size = min(minibatch_size, batch.count)
        stats: dict = {}
        for _ in range(num_sgd_iter):
            for minibatch in minibatches(batch, size, rng, policy_max_seq_len(policy)):
                grads, info = policy.compute_gradients(minibatch)
                flat = np.concatenate([g.ravel() for g in grads]).astype(np.float32)
                collective.allreduce(flat, self._group, collective.ReduceOp.MEAN)
                out, i = [], 0
                for g in grads:
                    out.append(flat[i:i + g.size].reshape(g.shape))
                    i += g.size
                policy.apply_gradients(out)
                stats = info.get("learner_stats", info)
        if "kl" in stats:
            policy.update_kl(stats["kl"])
        stats["sample_count"] = batch.count
        return stats


class _DDPPOOptimizer(PolicyOptimizer):
    def __init__(self, workers, config: dict) -> None:
        super().__init__(workers)
        self.config = config
        self._round = 0

    def step(self) -> dict:
        cfg = self.config
        self._round += 1
        seed = (cfg.get("seed") or 0) * 100003 + self._round
        results = api.get([w.ddppo_step.remote(cfg["num_sgd_iter"], cfg["sgd_minibatch_size"],
                                               seed + k)
                           for k, w in enumerate(self.workers.remote_workers())])
        count = sum(r.pop("sample_count") for r in results)
        self.num_steps_sampled += count
        self.num_steps_trained += count
        self.learner_stats = {DEFAULT_POLICY_ID: results[0]}
        if cfg["keep_local_weights_in_sync"]:
            w = api.get(self.workers.remote_workers()[0].get_weights.remote())
            self.workers.local_worker().set_weights(w)
        return self.learner_stats


class _DDPPOWorkerSet(WorkerSet):
    def add_workers(self, num_workers: int) -> None:
        cfg = self._config
        cls = api.remote(num_cpus=cfg.get("num_cpus_per_worker", 1),
                         num_gpus=cfg.get("num_gpus_per_worker", 0))(DDPPOWorker)
        start = len(self._remotes) + 1
        self._remotes += [self._make_worker(cls, i) for i in range(start, start + num_workers)]


class DDPPOTrainer(PPOTrainer):
    """PPO with gradients allreduced among the workers; no central learner."""

    _name = "DDPPO"
    _default_config = DEFAULT_CONFIG

    def _init(self, config: dict, env_creator) -> None:
        if config["num_workers"] < 1:
            raise ValueError(f"DDPPO needs num_workers >= 1 (the learners), got "
                             f"{config['num_workers']}")
        if config["batch_mode"] != "truncate_episodes":
            raise ValueError("DDPPO needs batch_mode='truncate_episodes' (every worker "
                             "must run the same number of minibatches)")
        from .ppo_policy import PPOTorchPolicy
        self._policy = PPOTorchPolicy
        self.workers = _DDPPOWorkerSet(env_creator, PPOTorchPolicy, config,
                                       config["num_workers"], self.logdir)
        self.workers.sync_weights()  # every learner starts from the same weights
        remotes = self.workers.remote_workers()
        group = f"ddppo-{id(self):x}-{np.random.randint(1 << 30):x}"
        api.get([w.join_group.remote(len(remotes), k, group) for k, w in enumerate(remotes)])
        self.optimizer = _DDPPOOptimizer(self.workers, config)

    def _train_step(self) -> None:
        self.optimizer.step()

    _train = Trainer._train
