"""Issue 35: RLlib trainers learn CartPole on rollout workers (actors on the ranks).

Arguments: which sections ("ppo", "pg", "a3c", "impala", "es", "ars", "quick";
default the first six). Each
trains with a fixed seed until Ray's regression threshold or its timestep
budget, and reports the reward reached and the timesteps it took. The PPO
section also checks the worker set (foreach_worker, MeanStdFilter synced
across workers) and compute_action after training.
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _rllib_envs import register_two_cartpoles
from _harness import check, init_kwargs, ok, report, section

import hpc_ray as ray
from hpc_ray.rllib.agents import a3c, ars, es, pg, ppo
from hpc_ray.rllib.agents.impala import ImpalaTrainer
from hpc_ray.rllib.agents.ppo.appo import APPOTrainer

WHICH = set(sys.argv[1:]) or {"ppo", "pg", "a3c", "impala", "es", "ars"}
ray.init(**init_kwargs())


register_two_cartpoles()


def train_until(trainer, threshold, budget):
    while True:
        result = trainer.train()
        if result["episode_reward_mean"] >= threshold or result["timesteps_total"] >= budget:
            return result


if "ppo" in WHICH:
    with section("ppo"):
        # Ray's tuned cartpole-ppo regression config.
        trainer = ppo.PPOTrainer(env="CartPole-v0", config={
            "num_workers": 2, "seed": 0, "gamma": 0.99, "lr": 3e-4,
            "observation_filter": "MeanStdFilter", "num_sgd_iter": 6,
            "vf_share_layers": True, "vf_loss_coeff": 0.01,
            "model": {"fcnet_hiddens": [32], "fcnet_activation": "linear"}})
        result = train_until(trainer, 150, 100_000)
        report("ppo", [result["episode_reward_mean"], result["timesteps_total"]])
        indexes = trainer.workers.foreach_worker_with_index(lambda w, i: (i, w.worker_index))
        check(indexes == [(0, 0), (1, 1), (2, 2)], indexes)
        trainer.workers.sync_filters()
        counts = trainer.workers.foreach_worker(lambda w: w.filters["default_policy"].rs.n)
        report("ppo_filter_counts", counts)
        check(len(set(counts)) == 1 and counts[0] >= result["timesteps_total"] // 2, counts)
        import gymnasium as gym
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=0)
        total = 0.0
        for _ in range(500):
            obs, r, term, trunc, _ = env.step(int(trainer.compute_action(obs, explore=False)))
            total += r
            if term or trunc:
                break
        report("ppo_greedy_return", total)
        trainer.stop()

if "pg" in WHICH:
    with section("pg"):
        trainer = pg.PGTrainer(env="CartPole-v0", config={"num_workers": 1, "seed": 0})
        result = train_until(trainer, 100, 100_000)
        report("pg", [result["episode_reward_mean"], result["timesteps_total"]])
        trainer.stop()

if "a3c" in WHICH:
    with section("a3c"):
        trainer = a3c.A3CTrainer(env="CartPole-v0", config={
            "num_workers": 2, "gamma": 0.95, "seed": 0, "min_iter_time_s": 0})
        result = train_until(trainer, 100, 100_000)
        report("a3c", [result["episode_reward_mean"], result["timesteps_total"]])
        trainer.stop()

if "impala" in WHICH:
    with section("impala"):
        trainer = ImpalaTrainer(env="CartPole-v0", config={
            "num_workers": 2, "seed": 0, "min_iter_time_s": 0, "timesteps_per_iteration": 5000})
        result = train_until(trainer, 150, 500_000)
        report("impala", [result["episode_reward_mean"], result["timesteps_total"]])
        trainer.stop()

if "es" in WHICH:
    with section("es"):
        trainer = es.ESTrainer(env="CartPole-v0", config={
            "num_workers": 2, "seed": 0, "noise_size": 2_000_000, "episodes_per_batch": 50,
            "train_batch_size": 500, "eval_prob": 0.05})
        infos = ray.get([w.noise_table_info.remote() for w in trainer._workers])
        report("es_noise", infos)
        result = train_until(trainer, 150, 500_000)
        report("es", [result["episode_reward_mean"], result["timesteps_total"]])
        trainer.stop()

if "ars" in WHICH:
    with section("ars"):
        trainer = ars.ARSTrainer(env="CartPole-v0", config={
            "num_workers": 2, "seed": 0, "noise_size": 2_000_000, "num_rollouts": 50,
            "rollouts_used": 25, "eval_prob": 0.5})
        result = train_until(trainer, 50, 500_000)
        report("ars", [result["episode_reward_mean"], result["timesteps_total"]])
        trainer.stop()

if "quick" in WHICH:
    # DD-PPO and APPO learn something in 8-10k steps (their runs to the
    # thresholds are in benchmarks/rllib.py, workload "thresholds"); a
    # multi-agent env with two policies samples on remote workers.
    with section("ddppo"):
        import numpy as np
        trainer = ppo.DDPPOTrainer(env="CartPole-v0", config={
            "num_workers": 2, "seed": 0, "lr": 3e-4, "sample_batch_size": 500,
            "sgd_minibatch_size": 100, "num_sgd_iter": 6, "vf_share_layers": True,
            "vf_loss_coeff": 0.01, "model": {"fcnet_hiddens": [32], "fcnet_activation": "linear"}})
        rewards = [trainer.train()["episode_reward_mean"] for _ in range(8)]
        weights = trainer.workers.foreach_worker(lambda w: w.get_weights()["default_policy"])
        same = all(all(np.array_equal(weights[1][k], w[k]) for k in w) for w in weights)
        report("ddppo", [rewards[0], rewards[-1], same])
        trainer.stop()
    with section("multiagent"):
        trainer = pg.PGTrainer(env="two_cartpoles", config={
            "num_workers": 2, "seed": 0, "train_batch_size": 400, "multiagent": {
                "policies": {"p0": (None, None, None, {}), "p1": (None, None, None, {})},
                "policy_mapping_fn": lambda agent_id: f"p{agent_id}"}})
        result = trainer.train()
        report("multiagent", sorted(result["policy_reward_mean"]))
        trainer.stop()
    for name, cls in (("appo", APPOTrainer),):
        with section(name):
            trainer = cls(env="CartPole-v0", config={
                "num_workers": 2, "seed": 0, "min_iter_time_s": 0,
                "timesteps_per_iteration": 5000})
            rewards = [trainer.train()["episode_reward_mean"] for _ in range(2)]
            report(name, rewards)
            trainer.stop()

ray.shutdown()
ok("rllib_train")
