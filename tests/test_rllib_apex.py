"""Issue 37: Ape-X DQN and Ape-X DDPG with sharded replay actors, and multi-agent
DQN, on rollout workers (embedded mode, tests/mpi_scripts/rllib_offpolicy.py).

DDPG and TD3 in the pytest process: acting within the bounds, TD3's twin
critics and delayed actor updates, save -> restore -> same actions, bad configs.
Their Pendulum threshold runs are benchmarks/rllib_offpolicy.py's.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from hpc_ray.rllib.agents.ddpg import DDPGTrainer, TD3Trainer

QUICK = {"seed": 0, "min_iter_time_s": 0, "learning_starts": 200,
         "pure_exploration_steps": 200, "timesteps_per_iteration": 400,
         "sample_batch_size": 4, "train_batch_size": 32}


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_apex_ddpg_and_multiagent_on_workers(run):
    # (Ape-X DQN's run to reward 100 is test_apex_under_mpiexec's: once is enough.)
    values = run("rllib_offpolicy.py", 3, "apex_ddpg", "multiagent", mode="embedded",
                 timeout=170).assert_ok("rllib_offpolicy")
    steps, mean_q = values["apex_ddpg"]
    assert steps >= 2000 and np.isfinite(mean_q)
    policies, changed = values["multiagent"]
    assert policies == ["p0", "p1"]
    assert changed == {"p0": True, "p1": False}  # policies_to_train
    rows, steps = values["multiagent_shared"]
    assert rows > steps  # both agents' rows go to the one shared policy


@pytest.mark.parametrize("cls", [DDPGTrainer, TD3Trainer], ids=["DDPG", "TD3"])
def test_ddpg_td3_act_learn_and_restore(cls, tmp_path):
    trainer = cls(env="Pendulum-v0", config=dict(QUICK, actor_hiddens=[32],
                                                 critic_hiddens=[32]))
    for _ in range(2):
        result = trainer.train()
    stats = result["info"]["learner"]["default_policy"]
    assert np.isfinite(stats["critic_loss"]) and "actor_loss" in stats
    policy = trainer.get_policy()
    if cls is TD3Trainer:
        assert policy.model.twin_critic is not None
        assert policy.config["policy_delay"] == 2 and policy.config["smooth_target_policy"]
    else:
        assert policy.model.twin_critic is None
    obs = [gym.make("Pendulum-v1").reset(seed=s)[0] for s in range(10)]
    acts = [trainer.compute_action(o) for o in obs]
    assert all(a.shape == (1,) and -2.0 <= a[0] <= 2.0 for a in acts)
    path = trainer.save(str(tmp_path / "ckpt"))
    expected = [trainer.compute_action(o, explore=False) for o in obs]
    trainer.stop()
    other = cls(env="Pendulum-v0", config=dict(QUICK, actor_hiddens=[32],
                                               critic_hiddens=[32], seed=3))
    other.restore(path)
    assert all(np.array_equal(other.compute_action(o, explore=False), e)
               for o, e in zip(obs, expected))
    assert other.get_policy().num_updates == policy.num_updates
    other.stop()


def test_ddpg_bad_configs_name_the_fix():
    for bad, match in (({"exploration_noise_type": "pink"}, "'ou' or 'gaussian'"),
                       ({"policy_delay": 0}, "policy_delay"),
                       ({"tau": 0.0}, "tau"),
                       ({"parameter_noise": True}, "exploration_noise_type")):
        with pytest.raises(ValueError, match=match):
            DDPGTrainer(env="Pendulum-v0", config=dict(QUICK, **bad))
    with pytest.raises(ValueError, match="Box action space.*DQN"):
        DDPGTrainer(env="CartPole-v0", config=QUICK)
    from hpc_ray.rllib.agents.dqn import ApexTrainer
    with pytest.raises(ValueError, match="num_workers >= 1"):
        ApexTrainer(env="CartPole-v0", config={"num_workers": 0, "num_gpus": 0})


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_apex_under_mpiexec(run):
    # The same Ape-X run with the rollout workers and replay shards on mpiexec ranks.
    values = run("rllib_offpolicy.py", 3, "apex", mode="mpiexec", timeout=110).assert_ok(
        "rllib_offpolicy")
    reward, steps = values["apex"]
    assert reward >= 100 and steps <= 40_000, values["apex"]
    assert len(values["apex_shards"]) == 2 and min(values["apex_shards"]) > 0
