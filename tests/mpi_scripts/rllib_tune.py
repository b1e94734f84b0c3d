"""Issue 35: RLlib trainers as Tune trainables.

Phase "run": ``tune.run("PPO", ...)`` (result.json, progress.csv, checkpoints),
then ``run_experiments`` of a YAML experiment file (``run: PG``, a custom env
registered with ``register_env``, reaching the trial's trainer and its workers).
Phase "first": a PPO experiment with checkpoints every iteration, killed by the
test once a checkpoint exists. Phase "resume": ``tune.run(resume=True)``
continues it from that checkpoint.
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import json

import numpy as np
import yaml
from _harness import check, init_kwargs, ok, report, section, tmp_path

import hpc_ray as ray
from hpc_ray import tune
from hpc_ray.tune.registry import register_env

PHASE = sys.argv[1]
LOCAL = tmp_path("ray_results")
ray.init(**init_kwargs())


class Corridor:
    """An env in the old gym API, registered by name."""

    def __init__(self, config):
        import gymnasium as gym
        self.length = config["corridor_length"]
        self.observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self):
        self.pos = 0
        return np.array([self.pos], np.float32)

    def step(self, action):
        self.pos = max(0, self.pos + (1 if action == 1 else -1))
        done = self.pos >= self.length
        return np.array([self.pos], np.float32), 1.0 if done else -0.1, done, {}


PPO_SMALL = {"env": "CartPole-v0", "num_workers": 1, "seed": 0, "train_batch_size": 400,
             "sgd_minibatch_size": 100, "num_sgd_iter": 3}

if PHASE == "run":
    with section("tune.run PPO"):
        trials = tune.run("PPO", name="ppo_cartpole", local_dir=LOCAL, verbose=1,
                          stop={"training_iteration": 2}, checkpoint_freq=1,
                          config=PPO_SMALL)
        trial = trials[0]
        check(trial.status == "TERMINATED", trial.status)
        files = sorted(os.listdir(trial.logdir))
        report("ppo_files", files)
        with open(os.path.join(trial.logdir, "result.json")) as f:
            rows = [json.loads(line) for line in f]
        report("ppo_rows", [[r["training_iteration"], r["timesteps_total"]] for r in rows])
        check("episode_reward_mean" in rows[-1] and "info" in rows[-1], sorted(rows[-1]))
    with section("run_experiments YAML"):
        register_env("corridor", lambda config: Corridor(config))
        spec = yaml.safe_load("""
corridor-pg:
    run: PG
    env: corridor
    stop:
        training_iteration: 10
    config:
        num_workers: 1
        seed: 0
        lr: 0.01
        train_batch_size: 500
        env_config:
            corridor_length: 5
        model:
            fcnet_hiddens: [16]
""")
        for exp in spec.values():
            exp["local_dir"] = LOCAL
        trials = tune.run_experiments(spec, verbose=1)
        last = trials[0].last_result
        report("yaml_pg", [last["training_iteration"], last["episode_reward_mean"]])
elif PHASE in ("first", "resume"):
    with section(PHASE):
        trials = tune.run("PPO", name="ppo_resume", local_dir=LOCAL, verbose=1,
                          stop={"training_iteration": 6}, checkpoint_freq=1,
                          resume=PHASE == "resume",
                          config=PPO_SMALL)
        with open(os.path.join(trials[0].logdir, "result.json")) as f:
            rows = [json.loads(line) for line in f]
        report("resume_rows", [[r["training_iteration"], r["iterations_since_restore"],
                                r["timesteps_total"]] for r in rows])
        check(trials[0].status == "TERMINATED", trials[0].status)

ray.shutdown()
ok("rllib_tune")
