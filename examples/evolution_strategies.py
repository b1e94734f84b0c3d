"""The Ray 0.2.2 docs' evolution strategies: ``Worker`` actors evaluate random
perturbations of a policy, drawn from one block of shared noise in the object
store, and the driver moves the policy towards the better ones.

The docs train a TensorFlow policy on MuJoCo's ``Humanoid-v1``; here the policy
is linear (numpy) and the environment gymnasium's ``CartPole-v1`` (``pip
install gymnasium`` or ``pip install -e '.[examples]'``). The structure is the
docs': ``create_shared_noise`` is a remote function whose result (a large
array, read in place from shared memory) goes to every worker's constructor;
each iteration puts ``theta`` in the store once and passes its id to
``do_rollouts``; the update uses centered ranks and Adam, as Ray's ES did.

    python examples/evolution_strategies.py
    mpiexec -n 3 python -m hpc_ray examples/evolution_strategies.py --iterations 30

Prints the mean episode reward of each iteration's rollouts and ends with
``evolution strategies: mean reward 2x.x -> 4xx.x in N iterations (best
5xx.x)``; CartPole's best is 500.
"""
from __future__ import annotations

import argparse
import sys
from collections import namedtuple

import numpy as np

import hpc_ray as ray

try:
    import gymnasium as gym
except ImportError:
    gym = None

Result = namedtuple("Result", ["noise_indices", "noisy_returns", "noisy_lengths"])


class LinearPolicy:
    """``action = argmax(observation @ W)``, W flat as the trainable vector."""

    def __init__(self, observation_size, num_actions):
        self.shape = (observation_size, num_actions)
        self.num_params = observation_size * num_actions
        self.flat = np.zeros(self.num_params)

    def get_trainable_flat(self):
        return self.flat.copy()

    def set_trainable_flat(self, flat):
        self.flat = np.asarray(flat, dtype=np.float64)

    def act(self, observation):
        return int(np.argmax(observation @ self.flat.reshape(self.shape)))

    def rollout(self, env, seed=None):
        observation, _ = env.reset(seed=seed)
        total, length, done = 0.0, 0, False
        while not done:
            observation, reward, terminated, truncated, _ = env.step(self.act(observation))
            total += reward
            length += 1
            done = terminated or truncated
        return total, length


class SharedNoiseTable(object):
    def __init__(self, noise):
        self.noise = noise
        assert self.noise.dtype == np.float32

    def get(self, i, dim):
        return self.noise[i:i + dim]

    def sample_index(self, stream, dim):
        return stream.randint(0, len(self.noise) - dim + 1)


@ray.remote
def create_shared_noise(count):
    # The docs: np.random.randn(250000000), 1 GB; the seed makes it the same
    # table on every run.
    noise = np.random.RandomState(123).randn(count).astype(np.float32)
    return noise


@ray.remote
class Worker(object):
    def __init__(self, config, policy_params, env_name, noise, seed=0):
        self.config = config
        self.env = gym.make(env_name)
        self.noise = SharedNoiseTable(noise)
        self.policy = LinearPolicy(*policy_params)
        self.rng = np.random.RandomState(seed)

    def do_rollouts(self, params, num_rollouts):
        noise_indices, returns, lengths = [], [], []
        for _ in range(num_rollouts):
            # Generate a random perturbation to the policy.
            noise_index = self.noise.sample_index(self.rng, self.policy.num_params)
            perturbation = self.config["noise_stdev"] * self.noise.get(
                noise_index, self.policy.num_params)

            self.policy.set_trainable_flat(params + perturbation)
            # Do rollout with the perturbed policy.
            rewards_pos, lengths_pos = self.policy.rollout(self.env)

            self.policy.set_trainable_flat(params - perturbation)
            # Do rollout with the perturbed policy.
            rewards_neg, lengths_neg = self.policy.rollout(self.env)

            noise_indices.append(noise_index)
            returns.append([rewards_pos, rewards_neg])
            lengths.append([lengths_pos, lengths_neg])
        # Return the rewards.
        return Result(noise_indices, returns, lengths)


def compute_centered_ranks(x):
    ranks = np.empty(x.size, dtype=int)
    ranks[x.ravel().argsort()] = np.arange(x.size)
    y = ranks.reshape(x.shape).astype(np.float64)
    return y / (x.size - 1) - 0.5


class Adam:
    def __init__(self, size, stepsize, beta1=0.9, beta2=0.999, epsilon=1e-08):
        self.m, self.v, self.t = np.zeros(size), np.zeros(size), 0
        self.stepsize, self.beta1, self.beta2, self.epsilon = stepsize, beta1, beta2, epsilon

    def update(self, theta, globalg):
        self.t += 1
        a = self.stepsize * np.sqrt(1 - self.beta2 ** self.t) / (1 - self.beta1 ** self.t)
        self.m = self.beta1 * self.m + (1 - self.beta1) * globalg
        self.v = self.beta2 * self.v + (1 - self.beta2) * (globalg * globalg)
        return theta - a * self.m / (np.sqrt(self.v) + self.epsilon)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-workers", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--rollouts-per-worker", type=int, default=5)
    parser.add_argument("--env", default="CartPole-v1", help="the docs: Humanoid-v1")
    parser.add_argument("--quick", action="store_true", help="a shorter run, for tests")
    args = parser.parse_args(argv)
    if gym is None:
        print("this example needs gymnasium: pip install gymnasium "
              "(or pip install -e '.[examples]')", file=sys.stderr)
        return 2
    iterations = 12 if args.quick else args.iterations
    num_workers = 2 if args.quick else args.num_workers
    config = {"noise_stdev": 0.1, "stepsize": 0.05, "l2coeff": 0.005}
    env_name = args.env

    ray.init()
    env = gym.make(env_name)
    policy_params = (env.observation_space.shape[0], env.action_space.n)
    policy = LinearPolicy(*policy_params)
    optimizer = Adam(policy.num_params, config["stepsize"])

    noise_id = create_shared_noise.remote(250_000 if args.quick else 25_000_000)
    noise = SharedNoiseTable(ray.get(noise_id))
    workers = [Worker.remote(config, policy_params, env_name, noise_id, seed=i)
               for i in range(num_workers)]

    history = []
    for iteration in range(iterations):
        # Get the current policy weights.
        theta = policy.get_trainable_flat()
        # Put the current policy weights in the object store.
        theta_id = ray.put(theta)
        # Use the actors to do rollouts, note that we pass in the ID of the policy
        # weights.
        rollout_ids = [worker.do_rollouts.remote(theta_id, args.rollouts_per_worker)
                       for worker in workers]
        # Get the results of the rollouts.
        results = ray.get(rollout_ids)
        # Update the policy.
        noise_indices = np.concatenate([r.noise_indices for r in results])
        returns = np.concatenate([r.noisy_returns for r in results])
        ranks = compute_centered_ranks(returns)
        weights = ranks[:, 0] - ranks[:, 1]
        g = sum(w * noise.get(i, policy.num_params) for w, i in zip(weights, noise_indices))
        g = g / returns.size
        theta = optimizer.update(theta, -g + config["l2coeff"] * theta)
        policy.set_trainable_flat(theta)
        history.append(float(returns.mean()))
        print("iteration {:3d}: mean episode reward {:6.1f} over {} episodes".format(
            iteration, history[-1], returns.size), flush=True)

    ray.shutdown()
    print("evolution strategies: mean reward {:.1f} -> {:.1f} in {} iterations "
          "(best {:.1f})".format(history[0], history[-1], iterations, max(history)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
