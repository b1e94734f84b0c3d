"""The Ray docs' "A More Interesting Actor Example": a gym environment in an actor.

An actor holds a simulator's mutable state; its methods step and reset it. The
docs use ``gym.make("Pong-v0")``; Atari ROMs cannot be installed here, so this
runs gymnasium's ``CartPole-v1`` (``pip install gymnasium``, or
``pip install -e '.[examples]'``). Only the import and the environment's name
differ from the docs: gymnasium's ``step`` returns ``(obs, reward, terminated,
truncated, info)`` where gym's returned ``(obs, reward, done, info)``.

The program plays whole episodes through the actor (action 0 or 1 by a fixed
rule) and checks them against the same environment stepped here in the driver:
the actor's state is the simulator's, so both see the same observations.

    python examples/gym_actor.py
    mpiexec -n 3 python -m hpc_ray examples/gym_actor.py

Ends with ``gym actor: N episodes, M steps, rewards [...] match the local
environment: True``.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import hpc_ray as ray

try:
    import gymnasium as gym
except ImportError:  # the docs' gym, where it is installed
    try:
        import gym
    except ImportError:
        gym = None

ENV_NAME = "CartPole-v1"   # the docs: "Pong-v0"


@ray.remote
class GymEnvironment(object):
    def __init__(self, name):
        self.env = gym.make(name)
        self.env.reset()

    def step(self, action):
        return self.env.step(action)

    def reset(self):
        self.env.reset()

    # Not in the docs: a seeded reset, so the driver can replay the same episode.
    def reset_with_seed(self, seed):
        return self.env.reset(seed=seed)[0]


def policy(observation):
    """Push the cart towards where the pole leans."""
    return int(observation[2] + 0.5 * observation[3] > 0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 episodes, for tests")
    args = parser.parse_args(argv)
    if gym is None:
        print("this example needs gymnasium: pip install gymnasium "
              "(or pip install -e '.[examples]')", file=sys.stderr)
        return 2
    episodes = 2 if args.quick else args.episodes

    ray.init()
    # We can then instantiate an actor and schedule a task on that actor as follows.
    pong = GymEnvironment.remote(ENV_NAME)
    pong.step.remote(0)  # Take action 0 in the simulator.
    pong.reset.remote()

    local = gym.make(ENV_NAME)
    rewards, steps, same = [], 0, True
    for episode in range(episodes):
        observation = ray.get(pong.reset_with_seed.remote(episode))
        expected, _ = local.reset(seed=episode)
        same &= bool(np.allclose(observation, expected))
        total, done = 0.0, False
        while not done:
            action = policy(observation)
            observation, reward, terminated, truncated, _ = ray.get(pong.step.remote(action))
            expected, _, _, _, _ = local.step(action)
            same &= bool(np.allclose(observation, expected))
            total += reward
            steps += 1
            done = terminated or truncated
        rewards.append(total)
        print(f"episode {episode}: reward {total:.0f}", flush=True)
    ray.shutdown()
    print(f"gym actor: {episodes} episodes, {steps} steps, rewards "
          f"{[int(r) for r in rewards]} match the local environment: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
