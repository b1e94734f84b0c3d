"""Ray 0.7's RLlib names that hpc_ray.rllib lacked: ``LocalMultiGPUOptimizer``
(the docs' PPO trainer template), ``FilterManager``, ``EvaluatorInterface``,
``SyncSampler``/``AsyncSampler`` and the ``Deterministic``/``Dirichlet`` action
distributions. Everything runs on real gymnasium envs; the worker-actor part
runs in tests/mpi_scripts/rllib_names07.py (embedded mode, two workers).
"""
from __future__ import annotations

import logging
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import hpc_ray as ray
from hpc_ray.rllib.agents import ppo
from hpc_ray.rllib.agents.pg import DEFAULT_CONFIG as PG_CONFIG
from hpc_ray.rllib.agents.pg.pg_policy import PGTorchPolicy
from hpc_ray.rllib.agents.ppo.ppo import (DEFAULT_CONFIG, validate_config,
                                          warn_about_bad_reward_scales, warn_about_obs_filter)
from hpc_ray.rllib.agents.ppo.ppo_policy import PPOTorchPolicy
from hpc_ray.rllib.agents.trainer_template import build_trainer
from hpc_ray.rllib.evaluation import (AsyncSampler, EvaluatorInterface, RolloutWorker,
                                      SampleBatch, SyncSampler)
from hpc_ray.rllib.models import Deterministic, Dirichlet, ModelCatalog
from hpc_ray.rllib.optimizers import LocalMultiGPUOptimizer, SyncSamplesOptimizer
from hpc_ray.rllib.utils import FilterManager
from hpc_ray.rllib.utils.filter import MeanStdFilter, NoFilter

logger = logging.getLogger(__name__)

SMALL_PPO = {"num_workers": 0, "seed": 0, "train_batch_size": 400, "sample_batch_size": 100,
             "sgd_minibatch_size": 100, "num_sgd_iter": 3}


# --- the docs' PPO trainer template with LocalMultiGPUOptimizer ---------------------------
# As written in the 0.7 docs ("Building Policies", Example 1), PPOTorchPolicy for PPOTFPolicy.


def choose_policy_optimizer(workers, config):
    if config["simple_optimizer"]:
        return SyncSamplesOptimizer(
            workers,
            num_sgd_iter=config["num_sgd_iter"],
            train_batch_size=config["train_batch_size"])
    return LocalMultiGPUOptimizer(
        workers,
        sgd_batch_size=config["sgd_minibatch_size"],
        num_sgd_iter=config["num_sgd_iter"],
        num_gpus=config["num_gpus"],
        sample_batch_size=config["sample_batch_size"],
        num_envs_per_worker=config["num_envs_per_worker"],
        train_batch_size=config["train_batch_size"],
        standardize_fields=["advantages"],
        straggler_mitigation=config["straggler_mitigation"])


def update_kl(trainer, fetches):
    if "kl" in fetches:
        # single-agent
        trainer.workers.local_worker().for_policy(
            lambda pi: pi.update_kl(fetches["kl"]))
    else:
        def update(pi, pi_id):
            if pi_id in fetches:
                pi.update_kl(fetches[pi_id]["kl"])
            else:
                logger.debug("No data for {}, not updating kl".format(pi_id))
        # multi-agent
        trainer.workers.local_worker().foreach_trainable_policy(update)


PPOTrainer = build_trainer(
    name="PPOTrainer",
    default_config=DEFAULT_CONFIG,
    default_policy=PPOTorchPolicy,
    make_policy_optimizer=choose_policy_optimizer,
    validate_config=validate_config,
    after_optimizer_step=update_kl,
    before_train_step=warn_about_obs_filter,
    after_train_result=warn_about_bad_reward_scales)


def test_docs_ppo_template_trains_with_local_multi_gpu_optimizer():
    trainer = PPOTrainer(env="CartPole-v0", config=dict(SMALL_PPO, lr=1e-3))
    try:
        assert type(trainer.optimizer) is LocalMultiGPUOptimizer
        assert trainer.optimizer.devices == ["cpu"]
        results = [trainer.train() for _ in range(3)]
        assert [r["timesteps_total"] for r in results] == [400, 800, 1200]
        assert all(math.isfinite(r["episode_reward_mean"]) and r["episode_reward_mean"] >= 8
                   for r in results)
        info = results[-1]["info"]
        # 4 minibatches of 100 rows per epoch; the stats are the last epoch's means.
        assert info["num_steps_trained"] == 1200 and info["grad_time_ms"] > 0
        stats = info["learner"]["default_policy"]
        assert math.isfinite(stats["kl"]) and stats["kl"] >= 0
        # update_kl (the docs' multi-agent branch) moved the coefficient off 0.2.
        assert trainer.get_policy().kl_coeff != 0.2
    finally:
        trainer.stop()
    simple = PPOTrainer(env="CartPole-v0", config=dict(SMALL_PPO, simple_optimizer=True))
    try:
        assert type(simple.optimizer) is SyncSamplesOptimizer
        assert simple.train()["timesteps_total"] == 400
    finally:
        simple.stop()


def test_builtin_ppo_uses_local_multi_gpu_optimizer_and_standardizes_advantages():
    trainer = ppo.PPOTrainer(env="CartPole-v0", config=SMALL_PPO)
    try:
        opt = trainer.optimizer
        assert isinstance(opt, LocalMultiGPUOptimizer)
        assert (opt.batch_size, opt.num_sgd_iter, opt.train_batch_size) == (100, 3, 400)
        assert opt.standardize_fields == ("advantages",)
        batch = trainer.workers.local_worker().sample()
        out = opt._standardized(batch)["advantages"]
        assert abs(float(out.mean())) < 1e-5 and abs(float(out.std()) - 1) < 1e-3
        assert trainer.train()["timesteps_total"] == 400
    finally:
        trainer.stop()
    with pytest.raises(ValueError, match="sgd_batch_size must be >= 1, got 0"):
        LocalMultiGPUOptimizer(trainer.workers, sgd_batch_size=0)


def test_worker_actors_ppo_filter_manager_and_interface(run):
    values = run("rllib_names07.py", 3, mode="embedded", timeout=100).assert_ok(
        "rllib_names07")
    assert [r[1] for r in values["ppo"]] == [200]
    assert all(math.isfinite(r[0]) and math.isfinite(r[2]) for r in values["ppo"])
    f = values["filters"]
    # Each worker saw observations of its own since the last sync.
    assert all(b[2] > 0 for b in f["before"])
    assert f["merged_n"] == f["before_local"] + sum(b[2] for b in f["before"])
    assert [k[0] for k in f["kept"]] == [b[0] for b in f["before"]]  # update_remote=False
    # After a full synchronize every worker holds the local statistics, buffers flushed.
    for n, mean, buffered in f["after"]:
        assert n == f["local"][0] and buffered == 0
        assert np.allclose(mean, f["local"][1])
    i = values["interface"]
    assert i["host"] and i["count"] == 50 and i["num_grads"] > 0
    assert i["learn"] == ["learner_stats"]


# --- EvaluatorInterface ----------------------------------------------------------------


class LinearEvaluator(EvaluatorInterface):
    """An evaluator that is not a RolloutWorker: y = w * x by gradient steps."""

    def __init__(self):
        self.w = 0.0

    def sample(self):
        x = np.linspace(-1, 1, 8)
        return SampleBatch(obs=x, rewards=3.0 * x)

    def compute_gradients(self, samples):
        x, y = samples["obs"], samples["rewards"]
        return float(np.mean(2 * (self.w * x - y) * x)), {"batch_count": samples.count}

    def apply_gradients(self, grads):
        self.w -= 0.5 * grads

    def get_weights(self):
        return self.w

    def set_weights(self, weights):
        self.w = weights


def test_evaluator_interface_is_rolloutworkers_base_and_learns_by_default():
    worker = RolloutWorker(lambda ctx: gym.make("CartPole-v1"), PGTorchPolicy,
                           policy_config=dict(PG_CONFIG), batch_steps=20)
    assert isinstance(worker, EvaluatorInterface)
    assert worker.sample().count == 20
    ev = LinearEvaluator()
    for _ in range(30):
        info = ev.learn_on_batch(ev.sample())
    assert info == {"batch_count": 8} and abs(ev.get_weights() - 3.0) < 1e-3
    other = LinearEvaluator()
    other.set_weights(ev.get_weights())
    assert other.apply(lambda e, k: e.w * k, 2) == pytest.approx(6.0, abs=1e-2)
    with pytest.raises(NotImplementedError, match="EvaluatorInterface must implement sample"):
        EvaluatorInterface().sample()


# --- SyncSampler, AsyncSampler --------------------------------------------------------


def _sampler_args(obs_filter=None):
    env = gym.make("CartPole-v1")
    prep = ModelCatalog.get_preprocessor_for_space(env.observation_space, {})
    policy = PGTorchPolicy(prep.observation_space, env.action_space, dict(PG_CONFIG))
    pid = "default_policy"
    return (env, {pid: policy}, lambda agent_id: pid, {pid: prep},
            {pid: obs_filter or NoFilter()}, False)


def test_sync_sampler_batches_metrics_and_extra_batches():
    packed = SyncSampler(*_sampler_args(MeanStdFilter((4,))), 50, {}, pack=True)
    batches = [packed.get_data() for _ in range(3)]
    assert [b.count for b in batches] == [50, 50, 50]
    assert packed.obs_filters["default_policy"].rs.n >= 150  # the filter saw every step
    # Without packing a batch also ends where an episode ends.
    cut = SyncSampler(*_sampler_args(), 50, {})
    for _ in range(4):
        b = cut.get_data()
        assert b.count == 50 or (b.count < 50 and bool(b["dones"][-1]))
    metrics = cut.get_metrics()
    assert metrics and all(m.episode_length == m.episode_reward for m in metrics)
    # Whole episodes; an episode's extra batch comes from get_extra_batches().
    whole = SyncSampler(*_sampler_args(), float("inf"), {"on_postprocess_traj": lambda info:
                        info["episode"].add_extra_batch(info["post_batch"].slice(0, 1))})
    b = whole.get_data()
    assert b["dones"].tolist() == [False] * (b.count - 1) + [True]
    assert [m.episode_length for m in whole.get_metrics()] == [b.count]
    assert [e.count for e in whole.get_extra_batches()] == [1]
    assert whole.get_extra_batches() == []
    nxt = whole.next()
    assert nxt.count == whole.get_metrics()[0].episode_length + 1


def test_async_sampler_samples_in_its_thread_until_shutdown():
    sampler = AsyncSampler(*_sampler_args(), 40, {}, pack=True)
    sampler.start()
    try:
        assert [sampler.get_data().count for _ in range(3)] == [40, 40, 40]
        assert sampler.get_metrics()  # 120 CartPole steps finish some episodes
        assert sampler.get_extra_batches() == []
    finally:
        sampler.shutdown = True
        sampler.join(10)
    assert not sampler.is_alive()
    hole = AsyncSampler(*_sampler_args(), 40, {}, blackhole_outputs=True)
    with pytest.raises(ValueError, match=r"blackhole_outputs=True\) keeps no batches"):
        hole.get_data()


# --- Deterministic, Dirichlet ----------------------------------------------------------


def test_dirichlet_matches_torch_and_samples_sum_to_one():
    assert ray.rllib.models.Dirichlet is Dirichlet  # 0.7's path, hpc_ray as ray
    torch.manual_seed(0)
    logits = torch.randn(6, 3)
    dist = Dirichlet(logits)
    ref = torch.distributions.Dirichlet(torch.exp(logits) + 1e-7)
    x = dist.sample()
    assert x.shape == (6, 3) and torch.allclose(x.sum(-1), torch.ones(6))
    assert bool((x >= 0).all())
    assert torch.allclose(dist.logp(x), ref.log_prob(x), atol=1e-4)
    assert torch.allclose(dist.entropy(), ref.entropy())
    assert torch.allclose(dist.deterministic_sample(), ref.mean)
    other = Dirichlet(logits + 1.0)
    assert torch.allclose(dist.kl(other), torch.distributions.kl_divergence(ref, other.dist))
    assert torch.allclose(dist.kl(dist), torch.zeros(6), atol=1e-5)
    space = gym.spaces.Box(0.0, 1.0, (3,))
    assert Dirichlet.required_model_output_shape(space, {}) == 3


def test_deterministic_returns_its_inputs():
    assert ray.rllib.models.Deterministic is Deterministic
    inputs = torch.tensor([[0.5, -1.0], [2.0, 0.25]])
    dist = Deterministic(inputs)
    assert torch.equal(dist.sample(), inputs) and torch.equal(dist.deterministic_sample(), inputs)
    assert dist.logp(inputs).tolist() == [0.0, 0.0]
    space = gym.spaces.Box(-1.0, 1.0, (2,))
    assert ModelCatalog.get_action_dist(space, {}, dist_type="deterministic") == (Deterministic, 2)
