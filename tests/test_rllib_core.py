"""Issue 35: hpc_ray.rllib's building blocks, in the pytest process (no workers).

Trainers with ``num_workers=0`` sample and learn on their local worker, so
these run without ``hpc_ray.init()``: sample batches, GAE, filters, config
errors, TensorFlow-only errors, custom envs (old gym API, gymnasium API,
``VectorEnv``, ``MultiAgentEnv`` with two policies), a custom torch model,
save -> restore -> same actions. Training runs on workers are in
tests/test_rllib_train.py.
"""
from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch.nn as nn

from hpc_ray import tune
from hpc_ray.rllib import MultiAgentEnv, SampleBatch, VectorEnv
from hpc_ray.rllib.agents import a3c, pg, ppo
from hpc_ray.rllib.agents.registry import get_agent_class
from hpc_ray.rllib.evaluation import RolloutWorker, compute_advantages
from hpc_ray.rllib.models import ModelCatalog
from hpc_ray.rllib.models.pytorch.model import TorchModel
from hpc_ray.rllib.policy import MultiAgentBatch, build_tf_policy
from hpc_ray.rllib.utils.filter import MeanStdFilter

LOCAL = {"num_workers": 0, "seed": 0}


# --- sample batches, GAE, filters -----------------------------------------------------


def test_sample_batch_concat_slice_shuffle_and_pickle():
    a = SampleBatch(obs=np.arange(6).reshape(3, 2), rewards=[1.0, 2.0, 3.0], eps_id=[1, 1, 2])
    b = SampleBatch(obs=np.arange(4).reshape(2, 2), rewards=[4.0, 5.0], eps_id=[3, 3])
    c = SampleBatch.concat_samples([a, b])
    assert c.count == 5 and c["rewards"].tolist() == [1, 2, 3, 4, 5]
    assert [len(e) for e in c.split_by_episode()] == [2, 1, 2]
    assert sorted(c.shuffle(np.random.default_rng(0))["rewards"].tolist()) == [1, 2, 3, 4, 5]
    assert pickle.loads(pickle.dumps(c))["obs"].tolist() == c["obs"].tolist()
    with pytest.raises(ValueError, match="same length"):
        SampleBatch(obs=[1, 2], rewards=[1.0])
    m = MultiAgentBatch.concat_samples([MultiAgentBatch({"p": a}, 3), MultiAgentBatch({"p": b}, 2)])
    assert m.count == 5 and m.policy_batches["p"].count == 5


def test_gae_and_reward_to_go():
    batch = SampleBatch(rewards=[1.0, 1.0, 1.0], vf_preds=[0.5, 0.5, 0.5])
    out = compute_advantages(batch, 0.0, gamma=1.0, lambda_=1.0, use_gae=True)
    assert out["value_targets"].tolist() == [3.0, 2.0, 1.0]
    assert out["advantages"].tolist() == [2.5, 1.5, 0.5]
    out = compute_advantages(SampleBatch(rewards=[1.0, 1.0]), 10.0, gamma=0.5, use_gae=False)
    assert out["advantages"].tolist() == [1.0 + 0.5 + 2.5, 1.0 + 5.0]


def test_mean_std_filter_merges_worker_buffers():
    rng = np.random.default_rng(0)
    xs = rng.normal(3.0, 2.0, size=(2000, 2))
    learner, w1, w2 = (MeanStdFilter((2,)) for _ in range(3))
    for x in xs[:1000]:
        w1(x)
    for x in xs[1000:]:
        w2(x)
    for w in (w1, w2):
        learner.apply_changes(w.copy())
        w.clear_buffer()
    w1.sync(learner)
    assert learner.rs.n == w1.rs.n == 2000
    assert np.allclose(learner.rs.mean, xs.mean(0))
    assert np.allclose(learner.rs.std, xs.std(0, ddof=1), rtol=1e-6)


# --- configs and errors ----------------------------------------------------------------


def test_unknown_and_bad_config_keys_are_rejected():
    with pytest.raises(ValueError, match=r"unknown config parameter 'num_worker'.*did you mean"):
        ppo.PPOTrainer(env="CartPole-v0", config={"num_worker": 1})
    with pytest.raises(ValueError, match=r"model.fcnet_hidden"):
        ppo.PPOTrainer(env="CartPole-v0", config={"model": {"fcnet_hidden": [8]}})
    with pytest.raises(ValueError, match="batch_mode"):
        pg.PGTrainer(env="CartPole-v0", config=dict(LOCAL, batch_mode="episodes"))
    with pytest.raises(ValueError, match="sgd_minibatch_size"):
        ppo.PPOTrainer(env="CartPole-v0", config=dict(LOCAL, sgd_minibatch_size=500,
                                                      train_batch_size=200))
    with pytest.raises(ValueError, match="needs an env"):
        pg.PGTrainer(config=LOCAL)
    with pytest.raises(ValueError, match="register_env"):
        pg.PGTrainer(env="NoSuchEnv-v9", config=LOCAL)
    with pytest.raises(ValueError, match="available"):
        get_agent_class("SAC")


def test_agent_names_of_ray_07_are_the_trainers_with_a_warning():
    # 0.7's docs still write pg.PGAgent(env=..., config=...) (multi-agent section).
    with pytest.warns(DeprecationWarning, match="PGAgent has been renamed to PGTrainer"):
        agent = pg.PGAgent(env="CartPole-v0", config=LOCAL)
    assert isinstance(agent, pg.PGTrainer) and agent._name == "PG"
    assert agent.train()["timesteps_total"] > 0
    agent.stop()
    assert issubclass(ppo.PPOAgent, ppo.PPOTrainer) and issubclass(a3c.A3CAgent, a3c.A3CTrainer)


def test_tensorflow_only_apis_name_the_torch_way():
    with pytest.raises(ValueError, match="build_torch_policy"):
        pg.PGTrainer(env="CartPole-v0", config=dict(LOCAL, use_pytorch=False))
    with pytest.raises(NotImplementedError, match="build_torch_policy"):
        build_tf_policy("X", loss_fn=None)
    with pytest.raises(NotImplementedError, match="get_torch_model"):
        ModelCatalog.get_model({}, None, None, 2, {})


def test_default_configs_and_result_keys():
    assert ppo.DEFAULT_CONFIG["num_sgd_iter"] == 30 and ppo.DEFAULT_CONFIG["lambda"] == 1.0
    assert a3c.DEFAULT_CONFIG["sample_batch_size"] == 10
    trainer = pg.PGTrainer(env="CartPole-v0", config=dict(LOCAL, train_batch_size=400))
    result = trainer.train()
    for key in ("episode_reward_mean", "episode_reward_min", "episode_reward_max",
                "episode_len_mean", "episodes_this_iter", "timesteps_total",
                "training_iteration", "info", "time_this_iter_s"):
        assert key in result, key
    assert result["timesteps_total"] >= 400
    assert result["config"]["train_batch_size"] == 400  # the merged config, as 0.7
    assert result["timesteps_since_restore"] == result["timesteps_total"]
    assert "learner" in result["info"] and result["info"]["num_steps_sampled"] >= 400
    assert trainer.get_policy().get_weights()
    assert trainer.workers.foreach_worker(lambda w: w.worker_index) == [0]
    trainer.stop()


# --- envs ----------------------------------------------------------------------------


class OldGymCorridor:
    """The old gym API: reset() -> obs, step() -> 4 values. Walk right to the end."""

    def __init__(self, config):
        self.length = config.get("corridor_length", 5)
        self.observation_space = gym.spaces.Box(0.0, self.length, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self):
        self.pos = 0
        return np.array([self.pos], np.float32)

    def step(self, action):
        self.pos = max(0, self.pos + (1 if action == 1 else -1))
        done = self.pos >= self.length
        return np.array([self.pos], np.float32), 1.0 if done else -0.1, done, {}


class GymnasiumCorridor(gym.Env):
    def __init__(self, config):
        self.inner = OldGymCorridor(config)
        self.observation_space, self.action_space = self.inner.observation_space, \
            self.inner.action_space

    def reset(self, *, seed=None, options=None):
        return self.inner.reset(), {}

    def step(self, action):
        obs, r, done, info = self.inner.step(action)
        return obs, r, done, False, info


def _learn_corridor(env_name):
    tune.register_env(env_name, lambda cfg: (OldGymCorridor if "old" in env_name
                                             else GymnasiumCorridor)(cfg))
    trainer = pg.PGTrainer(env=env_name, config=dict(
        LOCAL, lr=0.01, train_batch_size=500, env_config={"corridor_length": 5},
        model={"fcnet_hiddens": [16]}))
    first = trainer.train()["episode_reward_mean"]
    for _ in range(12):
        result = trainer.train()
    trainer.stop()
    return first, result


@pytest.mark.parametrize("api", ["old", "gymnasium"])
def test_custom_env_through_register_env_learns(api):
    first, result = _learn_corridor(f"corridor_{api}")
    # Optimal: 4 steps of -0.1 and +1 -> 0.6, in 5 steps.
    assert result["episode_reward_mean"] > 0.4 > first, (first, result["episode_reward_mean"])
    assert result["episode_len_mean"] < 8


class CountingVectorEnv(VectorEnv):
    """Three CartPoles stepped as one batch by the env itself."""

    def __init__(self, config):
        self.envs = [gym.make("CartPole-v1") for _ in range(3)]
        self.num_envs = 3
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.vector_steps = 0

    def vector_reset(self):
        return [e.reset(seed=i)[0] for i, e in enumerate(self.envs)]

    def reset_at(self, index):
        return self.envs[index].reset()[0]

    def vector_step(self, actions):
        self.vector_steps += 1
        out = [e.step(int(a)) for e, a in zip(self.envs, actions)]
        return ([o[0] for o in out], [o[1] for o in out], [o[2] or o[3] for o in out],
                [o[4] for o in out])


def test_vector_env_and_num_envs_per_worker():
    tune.register_env("vec_cartpole", lambda cfg: CountingVectorEnv(cfg))
    trainer = ppo.PPOTrainer(env="vec_cartpole", config=dict(
        LOCAL, sample_batch_size=50, train_batch_size=300, sgd_minibatch_size=100,
        num_sgd_iter=1))
    result = trainer.train()
    assert result["timesteps_total"] == 300  # two samples of 50 steps x 3 envs
    env = trainer.workers.local_worker().async_env.venv
    assert env.vector_steps == 100
    trainer.stop()
    worker = RolloutWorker(lambda ctx: gym.make("CartPole-v1"), pg.PGTorchPolicy,
                           batch_steps=20, num_envs=4, policy_config=pg.DEFAULT_CONFIG)
    assert worker.sample().count == 80


class TwoAgentCartPole(MultiAgentEnv):
    """Two independent CartPoles, agents 0 and 1; the episode ends when both fall."""

    def __init__(self, config):
        self.envs = [gym.make("CartPole-v1") for _ in range(2)]
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space

    def reset(self):
        self.dones = set()
        return {i: e.reset()[0] for i, e in enumerate(self.envs)}

    def step(self, action_dict):
        obs, rew, done, info = {}, {}, {}, {}
        for i, action in action_dict.items():
            o, r, term, trunc, _ = self.envs[i].step(int(action))
            obs[i], rew[i], done[i], info[i] = o, r, term or trunc, {}
            if done[i]:
                self.dones.add(i)
        done["__all__"] = len(self.dones) == 2
        return obs, rew, done, info


def test_multi_agent_env_with_two_policies():
    tune.register_env("two_cartpoles", lambda cfg: TwoAgentCartPole(cfg))
    env = TwoAgentCartPole({})
    policies = {f"p{i}": (None, env.observation_space, env.action_space, {"lr": lr})
                for i, lr in ((0, 1e-3), (1, 0.0))}
    trainer = pg.PGTrainer(env="two_cartpoles", config=dict(
        LOCAL, train_batch_size=400, multiagent={
            "policies": policies, "policy_mapping_fn": lambda agent_id: f"p{agent_id}",
            "policies_to_train": ["p0"]}))
    before = {p: trainer.get_policy(p).get_weights() for p in ("p0", "p1")}
    result = trainer.train()
    assert set(result["policy_reward_mean"]) == {"p0", "p1"}
    assert set(result["info"]["learner"]) == {"p0"}
    after = {p: trainer.get_policy(p).get_weights() for p in ("p0", "p1")}
    changed = {p: any(not np.array_equal(before[p][k], after[p][k]) for k in before[p])
               for p in before}
    assert changed == {"p0": True, "p1": False}
    action = trainer.compute_action(env.reset()[1], policy_id="p1")
    assert action in (0, 1)
    trainer.stop()


# --- models, checkpoints -------------------------------------------------------------


class TinyTorchModel(TorchModel):
    """The docs' custom torch model shape: (logits, features, value, state)."""

    calls = 0

    def __init__(self, obs_space, num_outputs, options):
        TorchModel.__init__(self, obs_space, num_outputs, options)
        size = options["custom_options"]["size"]
        self.body = nn.Sequential(nn.Linear(int(np.prod(obs_space.shape)), size), nn.Tanh())
        self.pi = nn.Linear(size, num_outputs)
        self.vf = nn.Linear(size, 1)

    def _forward(self, input_dict, hidden_state):
        TinyTorchModel.calls += 1
        h = self.body(input_dict["obs"])
        return self.pi(h), h, self.vf(h).squeeze(-1), hidden_state


def test_custom_torch_model_is_used():
    ModelCatalog.register_custom_model("tiny", TinyTorchModel)
    trainer = a3c.A2CTrainer(env="CartPole-v0", config=dict(
        LOCAL, min_iter_time_s=0, train_batch_size=100,
        model={"custom_model": "tiny", "custom_options": {"size": 7}}))
    trainer.train()
    model = trainer.get_policy().model
    assert isinstance(model, TinyTorchModel) and model.body[0].out_features == 7
    assert TinyTorchModel.calls > 100
    trainer.stop()


def test_save_restore_gives_the_same_actions(tmp_path):
    config = dict(LOCAL, train_batch_size=400, sgd_minibatch_size=100, num_sgd_iter=2,
                  observation_filter="MeanStdFilter")
    trainer = ppo.PPOTrainer(env="CartPole-v0", config=config)
    trainer.train()
    path = trainer.save(str(tmp_path / "ckpt"))
    obs = [gym.make("CartPole-v1").reset(seed=s)[0] for s in range(20)]
    expected = [trainer.compute_action(o, explore=False) for o in obs]
    logits = trainer.compute_action(obs[0], full_fetch=True)[2]["behaviour_logits"]
    kl = trainer.get_policy().kl_coeff
    trainer.stop()

    other = ppo.PPOTrainer(env="CartPole-v0", config=dict(config, seed=123))
    other.restore(path)
    assert [other.compute_action(o, explore=False) for o in obs] == expected
    assert np.allclose(other.compute_action(obs[0], full_fetch=True)[2]["behaviour_logits"],
                       logits)
    assert other.get_policy().kl_coeff == kl
    assert other.training_iteration == 1 and other.train()["training_iteration"] == 2
    other.stop()


def test_build_torch_policy_and_with_updates():
    from hpc_ray.rllib.policy import build_torch_policy

    def loss(policy, batch):
        logits, _, _, _ = policy.model({"obs": batch["obs"]}, [])
        return -(policy.dist_class(logits).logp(batch["actions"]) * batch["rewards"]).mean()

    MyPolicy = build_torch_policy(name="MyTorchPolicy", loss_fn=loss)
    MyTrainer = pg.PGTrainer.with_updates(name="MyPG", default_policy=MyPolicy)
    trainer = MyTrainer(env="CartPole-v0", config=dict(LOCAL, train_batch_size=200))
    assert type(trainer.get_policy()).__name__ == "MyTorchPolicy"
    assert trainer.train()["timesteps_total"] >= 200
    trainer.stop()


def test_callbacks_custom_metrics_and_evaluation():
    seen = {"train_results": 0, "samples": 0}

    def on_episode_end(info):
        episode = info["episode"]
        episode.custom_metrics["pole_steps"] = episode.length

    def on_sample_end(info):
        seen["samples"] += info["samples"].count

    def on_train_result(info):
        seen["train_results"] += 1
        info["result"]["callback_ok"] = True

    trainer = pg.PGTrainer(env="CartPole-v0", config=dict(
        LOCAL, train_batch_size=300, evaluation_interval=1, evaluation_num_episodes=3,
        callbacks={"on_episode_end": on_episode_end, "on_sample_end": on_sample_end,
                   "on_train_result": on_train_result}))
    result = trainer.train()
    metrics = result["custom_metrics"]
    assert metrics["pole_steps_mean"] == pytest.approx(result["episode_len_mean"])
    assert result["callback_ok"] and seen["train_results"] == 1
    assert seen["samples"] >= 300
    assert result["evaluation"]["episodes_this_iter"] >= 3
    with pytest.raises(ValueError, match="callbacks.on_step.*on_episode_step"):
        pg.PGTrainer(env="CartPole-v0", config=dict(LOCAL, callbacks={"on_step": print}))
    trainer.stop()


def test_every_documented_trainer_is_registered_and_pickles_by_reference():
    from hpc_ray.tune.registry import get_trainable
    for name in ("PG", "A2C", "A3C", "PPO", "APPO", "IMPALA", "ES", "ARS", "DDPPO"):
        cls = get_trainable(name)
        assert cls is get_agent_class(name)
        assert pickle.loads(pickle.dumps(cls)) is cls  # Tune ships the class to trial actors
        assert cls._name == name


def test_old_env_names_and_continuous_actions():
    # Ray 0.7's names: Pendulum-v0 (gymnasium: v1), MountainCar-v0; Box actions
    # use a diagonal Gaussian, clipped to the bounds before env.step.
    trainer = ppo.PPOTrainer(env="Pendulum-v0", config=dict(
        LOCAL, train_batch_size=200, sgd_minibatch_size=100, num_sgd_iter=1))
    result = trainer.train()
    assert result["timesteps_total"] == 200 and result["episodes_this_iter"] == 1
    action = trainer.compute_action(np.zeros(3, np.float32))
    assert action.shape == (1,)
    batch = trainer.workers.local_worker().sample()
    assert batch["actions"].shape == (200, 1) and batch["action_logp"].shape == (200,)
    trainer.stop()
    trainer = pg.PGTrainer(env="MountainCar-v0", config=dict(LOCAL, train_batch_size=200))
    assert trainer.train()["timesteps_total"] == 200
    trainer.stop()


class PhasedCartPole(gym.Env):
    """CartPole with a curriculum phase the trainer sets (the 0.7 docs' example)."""

    def __init__(self, config):
        self.inner = gym.make("CartPole-v1")
        self.observation_space, self.action_space = self.inner.observation_space, \
            self.inner.action_space
        self.phase = 0

    def set_phase(self, phase):
        self.phase = phase
        return phase

    def reset(self, *, seed=None, options=None):
        return self.inner.reset(seed=seed)

    def step(self, action):
        return self.inner.step(action)


def test_foreach_env_sets_a_curriculum_phase_on_every_env():
    # Ray 0.7's curriculum learning: foreach_worker(lambda ev: ev.foreach_env(...)).
    tune.register_env("phased_cartpole", lambda cfg: PhasedCartPole(cfg))
    trainer = pg.PGTrainer(env="phased_cartpole", config=dict(
        LOCAL, num_envs_per_worker=2, train_batch_size=100))
    trainer.train()
    out = trainer.workers.foreach_worker(
        lambda ev: ev.foreach_env(lambda env: env.set_phase(2)))
    assert out == [[2, 2]]
    envs = trainer.workers.local_worker().async_env.get_unwrapped()
    assert [e.phase for e in envs] == [2, 2]
    trainer.stop()

    class OpaqueBaseEnv:  # a BaseEnv with no sub-envs to show: func gets it whole
        def get_unwrapped(self):
            return []

    base = OpaqueBaseEnv()
    holder = type("W", (), {"async_env": base})()
    assert RolloutWorker.foreach_env(holder, lambda env: env) == [base]


def test_ray_07_utility_names():
    from hpc_ray.rllib.optimizers import AsyncSamplesOptimizer, PolicyOptimizer
    from hpc_ray.rllib.utils import deep_update, merge_dicts
    from hpc_ray.rllib.utils.annotations import DeveloperAPI, PublicAPI, override

    assert issubclass(AsyncSamplesOptimizer, PolicyOptimizer)
    # The docs' APEX_DEFAULT_CONFIG = merge_dicts(DQN_CONFIG, {...}): a deep copy.
    base = {"lr": 1.0, "optimizer": {"a": 1, "b": 2}}
    merged = merge_dicts(base, {"optimizer": {"b": 3, "c": 4}, "new": 5})
    assert merged == {"lr": 1.0, "optimizer": {"a": 1, "b": 3, "c": 4}, "new": 5}
    assert base == {"lr": 1.0, "optimizer": {"a": 1, "b": 2}}
    with pytest.raises(ValueError, match="Unknown config parameter `x`"):
        deep_update({"lr": 1}, {"x": 2}, False, [])
    with pytest.raises(ValueError, match="Unknown config parameter `c`"):
        deep_update({"optimizer": {"a": 1}}, {"optimizer": {"c": 2}}, False, [])
    out = deep_update({"optimizer": {"a": 1}}, {"optimizer": {"c": 2}}, False, ["optimizer"])
    assert out == {"optimizer": {"a": 1, "c": 2}}

    @PublicAPI
    class Base:
        @DeveloperAPI
        def step(self):
            return 1

    class Child(Base):
        @override(Base)
        def step(self):
            return 2

    assert Child().step() == 2
    with pytest.raises(NameError, match="does not override any method of Base"):
        class Bad(Base):
            @override(Base)
            def stepp(self):
                pass


def test_sample_async_and_remote_worker_envs_warn_that_they_do_nothing():
    with pytest.warns(UserWarning) as record:
        trainer = pg.PGTrainer(env="CartPole-v0", config=dict(
            LOCAL, sample_async=True, remote_worker_envs=True))
    texts = [str(w.message) for w in record]
    assert any("config['sample_async'] = True has no effect" in t for t in texts), texts
    assert any("config['remote_worker_envs'] = True has no effect" in t for t in texts), texts
    trainer.stop()


def test_trainer_instance_name_is_the_ray_07_trainer_name():
    names = []

    def on_train_result(info):  # the 0.7 docs' callback reads info["trainer"].__name__
        names.append(info["trainer"].__name__)

    trainer = pg.PGTrainer(env="CartPole-v0", config=dict(
        LOCAL, train_batch_size=100, callbacks={"on_train_result": on_train_result}))
    trainer.train()
    assert names == ["PG"] and trainer.__name__ == "PG"
    assert pg.PGTrainer.__name__ == "PGTrainer" and type(trainer).__name__ == "PGTrainer"
    assert ppo.PPOTrainer.__name__ == "PPOTrainer"
    trainer.stop()


def test_rollout_out_is_ray_07s_episode_list_and_no_render_is_accepted(tmp_path):
    from click.testing import CliRunner

    from hpc_ray.cli import rllib_rollout, rllib_train
    from hpc_ray.rllib.agents.registry import ALGORITHMS

    trainer = pg.PGTrainer(env="CartPole-v0", config=dict(LOCAL, train_batch_size=100))
    trainer.train()
    checkpoint = trainer.save(str(tmp_path / "ckpt"))
    trainer.stop()
    out = tmp_path / "rollouts.pkl"
    res = CliRunner().invoke(rllib_rollout, [checkpoint, "--run", "PG", "--env", "CartPole-v0",
                                             "--steps", "60", "--no-render", "--out", str(out)])
    assert res.exit_code == 0, res.output
    with open(out, "rb") as f:
        episodes = pickle.load(f)
    assert sum(len(e) for e in episodes) == 60
    for episode in episodes:
        for obs, action, next_obs, reward, done in episode:
            assert np.shape(obs) == (4,) == np.shape(next_obs) and reward == 1.0
        assert [s[4] for s in episode[:-1]] == [False] * (len(episode) - 1)
    assert all(e[-1][4] for e in episodes[:-1])  # every episode but the last one ended
    assert np.array_equal(episodes[0][1][0], episodes[0][0][2])  # obs follows next_obs
    help_text = CliRunner().invoke(rllib_train, ["--help"]).output
    assert all(name in help_text for name in ALGORITHMS), help_text
