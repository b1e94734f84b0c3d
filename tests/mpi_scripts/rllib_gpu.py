"""RLlib on a GPU node: ``init(num_gpus=1)``, the learner on the GPU, rollout
workers on the CPU.

Sections ("ppo", "tune"; default both): a PPOTrainer built in the driver with
``num_gpus=1`` and one rollout worker, then ``tune.run("PPO")`` with
``num_gpus=1`` (the trial's trainer is an actor holding the GPU). Each reports
the devices it saw; ``EXPECT`` is "cuda" where torch sees a GPU, else "cpu"
(so the script also runs, and checks the plumbing, on a CPU-only machine).
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import math

import numpy as np
import torch
from _harness import check, init_kwargs, ok, report, section, tmp_path

import hpc_ray as ray
from hpc_ray import tune
from hpc_ray.rllib.agents import ppo

WHICH = set(sys.argv[1:]) or {"ppo", "tune"}
EXPECT = "cuda" if torch.cuda.is_available() else "cpu"
ray.init(**init_kwargs(num_gpus=1))

PPO_SMALL = {"num_workers": 1, "num_gpus": 1, "seed": 0, "train_batch_size": 400,
             "sample_batch_size": 100, "sgd_minibatch_size": 100, "num_sgd_iter": 3}


def _worker_device(worker):
    return worker.get_policy().device.type


def _note_device(info):
    # Runs in the trial's actor: its learner's device, for the driver to read.
    info["result"]["policy_device"] = info["trainer"].get_policy().device.type


if "ppo" in WHICH:
    with section("ppo"):
        trainer = ppo.PPOTrainer(env="CartPole-v1", config=PPO_SMALL)
        rewards = [trainer.train()["episode_reward_mean"] for _ in range(3)]
        report("ppo_rewards", rewards)
        check(all(math.isfinite(r) for r in rewards), rewards)
        policy = trainer.get_policy()
        check(policy.device.type == EXPECT, policy.device)
        devices = sorted({p.device.type for p in policy.model.parameters()})
        check(devices == [EXPECT], devices)
        report("ppo_devices", trainer.workers.foreach_worker(_worker_device))
        weights = trainer.get_weights()["default_policy"]
        check(all(isinstance(w, np.ndarray) for w in weights.values()),
              {k: type(w).__name__ for k, w in weights.items()})
        action = trainer.compute_action(np.zeros(4, np.float32))
        check(int(action) in (0, 1), action)
        trainer.stop()

if "tune" in WHICH:
    with section("tune"):
        config = dict(PPO_SMALL, env="CartPole-v1",
                      callbacks={"on_train_result": _note_device})
        trials = tune.run("PPO", name="ppo_gpu", local_dir=tmp_path("ray_results"),
                          verbose=1, stop={"training_iteration": 2}, config=config)
        trial = trials[0]
        report("tune_status", trial.status)
        report("tune_device", trial.last_result.get("policy_device"))
        check(trial.status == "TERMINATED", trial.status)
        check(trial.last_result.get("policy_device") == EXPECT, trial.last_result)

ok("rllib_gpu")
