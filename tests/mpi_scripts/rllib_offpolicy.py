"""Issue 37: off-policy RLlib on rollout workers (actors on the ranks).

Sections: "apex" (Ape-X DQN on CartPole, 2 workers feeding 2 replay shards),
"apex_ddpg" (Ape-X DDPG on Pendulum, a few iterations), "multiagent" (DQN
with two policies on workers: policies_to_train, shared and separate weights).
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _rllib_envs import register_two_cartpoles
from _harness import check, init_kwargs, ok, report, section

import numpy as np

import hpc_ray as ray
from hpc_ray.rllib.agents.ddpg import ApexDDPGTrainer
from hpc_ray.rllib.agents.dqn import ApexTrainer, DQNTrainer

WHICH = set(sys.argv[1:]) or {"apex", "apex_ddpg", "multiagent"}
ray.init(**init_kwargs())

SMALL = {"model": {"fcnet_hiddens": [64]}, "hiddens": [64], "lr": 1e-3, "seed": 0,
         "min_iter_time_s": 0}


register_two_cartpoles()

if "apex" in WHICH:
    with section("apex"):
        trainer = ApexTrainer(env="CartPole-v0", config=dict(
            SMALL, num_workers=2, num_gpus=0, buffer_size=50000, learning_starts=1000,
            train_batch_size=64, sample_batch_size=25, target_network_update_freq=1000,
            timesteps_per_iteration=2000,
            optimizer={"num_replay_buffer_shards": 2, "max_weight_sync_delay": 200}))
        while True:
            result = trainer.train()
            if result["episode_reward_mean"] >= 100 or result["timesteps_total"] >= 40000:
                break
        report("apex", [result["episode_reward_mean"], result["timesteps_total"]])
        shards = trainer.optimizer.replay_stats()
        report("apex_shards", [s["added_count"] for s in shards])
        # Every step sampled reached a shard; batches sent after the result was
        # counted (at most one per worker, 25 steps each) may be there already.
        extra = sum(s["added_count"] for s in shards) - result["timesteps_total"]
        check(0 <= extra <= 2 * 25, (shards, result["timesteps_total"]))
        check(result["info"]["num_weight_syncs"] > 0, result["info"])
        check(result["info"]["num_steps_trained"] > result["timesteps_total"], result["info"])
        trainer.stop()

if "apex_ddpg" in WHICH:
    with section("apex_ddpg"):
        trainer = ApexDDPGTrainer(env="Pendulum-v0", config=dict(
            num_workers=2, seed=0, min_iter_time_s=0, learning_starts=500,
            pure_exploration_steps=500, buffer_size=20000, train_batch_size=64,
            sample_batch_size=25, timesteps_per_iteration=1000,
            optimizer={"num_replay_buffer_shards": 2}))
        for _ in range(2):
            result = trainer.train()
        stats = result["info"]["learner"]["default_policy"]
        report("apex_ddpg", [result["timesteps_total"], stats["mean_q"]])
        action = trainer.compute_action(np.zeros(3, np.float32), explore=False)
        check(action.shape == (1,) and -2.0 <= float(action[0]) <= 2.0, action)
        trainer.stop()

if "multiagent" in WHICH:
    with section("multiagent"):
        trainer = DQNTrainer(env="two_cartpoles", config=dict(
            SMALL, num_workers=1, learning_starts=200, timesteps_per_iteration=500,
            multiagent={"policies": {"p0": (None, None, None, {}),
                                     "p1": (None, None, None, {"lr": 0.0})},
                        "policy_mapping_fn": lambda agent_id: f"p{agent_id}",
                        "policies_to_train": ["p0"]}))
        before = trainer.get_weights()
        for _ in range(3):
            result = trainer.train()
        after = trainer.get_weights()
        changed = {p: any(not np.array_equal(before[p][k], after[p][k]) for k in before[p])
                   for p in before}
        report("multiagent", [sorted(result["policy_reward_mean"]), changed])
        remote = ray.get(trainer.workers.remote_workers()[0].get_weights.remote())
        # Weights go out before each step's sampling: the worker acts with p0's learned ones.
        check(any(not np.array_equal(remote["p0"][k], before["p0"][k]) for k in before["p0"]),
              "the worker did not get p0's new weights")
        trainer.stop()
        # Shared weights: both agents map to one policy, which learns from both.
        trainer = DQNTrainer(env="two_cartpoles", config=dict(
            SMALL, num_workers=1, learning_starts=200, timesteps_per_iteration=500,
            multiagent={"policies": {"shared": (None, None, None, {})},
                        "policy_mapping_fn": lambda agent_id: "shared"}))
        result = trainer.train()
        buf = trainer.optimizer.replay_buffers["shared"]
        report("multiagent_shared", [len(buf), result["timesteps_total"]])
        trainer.stop()

ray.shutdown()
ok("rllib_offpolicy")
