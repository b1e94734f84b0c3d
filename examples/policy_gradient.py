"""The Ray docs' "Learning to Play Pong" (seed 004 and the 0.2.2 docs): policy
gradients with parallel rollouts, each task using a *reusable* gym environment.

``compute_gradient`` is a remote function that plays one game with the current
model, reading the environment from ``ray.reusables.env`` (built once per
worker, reset after every task that used it), and returns the gradient and the
game's reward as two object refs. The driver launches a batch of games, sums
their gradients and updates the model with RMSProp, as in Andrej Karpathy's
code that the docs adapt.

Atari ROMs cannot be installed here, so the game is gymnasium's
``CartPole-v1`` (``pip install gymnasium`` or ``pip install -e '.[examples]'``)
and the network takes CartPole's 4 numbers instead of Pong's 80x80 pixels;
policy_forward, policy_backward, discount_rewards and the update are
Karpathy's, in numpy.

    python examples/policy_gradient.py --batch-size 10
    mpiexec -n 3 python -m hpc_ray examples/policy_gradient.py --batch-size 10

Prints the mean reward of each batch and ends with ``policy gradient: mean
reward per game 2x.x -> 1xx.x over N batches of 10 games``.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import hpc_ray as ray

try:
    import gymnasium as gym
except ImportError:
    gym = None

# Hyperparameters (Karpathy's, with a learning rate for CartPole).
H = 16                 # number of hidden layer neurons
learning_rate = 1e-2
gamma = 0.99           # discount factor for reward
decay_rate = 0.99      # decay factor for RMSProp leaky sum of grad^2
D = 4                  # input dimensionality: CartPole's observation (Pong: 80x80)
ENV_NAME = "CartPole-v1"   # the docs: "Pong-v0"


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))  # sigmoid "squashing" function to interval [0,1]


def discount_rewards(r):
    """take 1D float array of rewards and compute discounted reward"""
    discounted_r = np.zeros_like(r)
    running_add = 0
    for t in reversed(range(0, r.size)):
        running_add = running_add * gamma + r[t]
        discounted_r[t] = running_add
    return discounted_r


def policy_forward(x, model):
    h = np.dot(model["W1"], x)
    h[h < 0] = 0  # ReLU nonlinearity
    logp = np.dot(model["W2"], h)
    p = sigmoid(logp)
    return p, h  # return probability of taking action 1, and hidden state


def policy_backward(eph, epx, epdlogp, model):
    """backward pass. (eph is array of intermediate hidden states)"""
    dW2 = np.dot(eph.T, epdlogp).ravel()
    dh = np.outer(epdlogp, model["W2"])
    dh[eph <= 0] = 0  # backpro prelu
    dW1 = np.dot(dh.T, epx)
    return {"W1": dW1, "W2": dW2}


# Function for initializing the gym environment.
def env_initializer():
    return gym.make(ENV_NAME)


# Function for reinitializing the gym environment in order to guarantee that
# the state of the game is reset after each remote task.
def env_reinitializer(env):
    env.reset()
    return env


@ray.remote(num_return_vals=2)
def compute_gradient(model):
    # Retrieve the game environment.
    env = ray.reusables.env
    # Reset the game.
    observation, _ = env.reset()
    xs, hs, dlogps, drs = [], [], [], []
    reward_sum = 0
    done = False
    while not done:
        # Choose an action using policy_forward.
        x = np.asarray(observation, dtype=np.float64)
        aprob, h = policy_forward(x, model)
        action = 1 if np.random.uniform() < aprob else 0
        xs.append(x)
        hs.append(h)
        y = 1 if action == 1 else 0  # a "fake label"
        dlogps.append(y - aprob)  # grad that encourages the action that was taken
        # Take the action and observe the new state of the world.
        observation, reward, terminated, truncated, _ = env.step(action)
        reward_sum += reward
        drs.append(reward)
        done = terminated or truncated
    # Compute a gradient using policy_backward. Return the gradient and reward.
    epx = np.vstack(xs)
    eph = np.vstack(hs)
    epdlogp = np.vstack(dlogps)
    epr = np.vstack(drs)
    discounted_epr = discount_rewards(epr)
    # standardize the rewards to be unit normal (helps control the gradient estimator variance)
    discounted_epr -= np.mean(discounted_epr)
    discounted_epr /= np.std(discounted_epr) + 1e-8
    epdlogp *= discounted_epr  # modulate the gradient with advantage (PG magic happens right here.)
    return policy_backward(eph, epx, epdlogp, model), reward_sum


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", default=10, type=int,
                        help="The number of rollouts to do per batch.")
    parser.add_argument("--iterations", default=60, type=int,
                        help="The number of model updates to perform.")
    parser.add_argument("--quick", action="store_true", help="a shorter run, for tests")
    args = parser.parse_args(argv)
    if gym is None:
        print("this example needs gymnasium: pip install gymnasium "
              "(or pip install -e '.[examples]')", file=sys.stderr)
        return 2
    batch_size = args.batch_size
    iterations = 30 if args.quick else args.iterations

    ray.init()

    # Create a reusable variable for the gym environment.
    ray.reusables.env = ray.Reusable(env_initializer, env_reinitializer)

    # Initialize the model ("Xavier" initialization).
    np.random.seed(0)
    model = {}
    model["W1"] = np.random.randn(H, D) / np.sqrt(D)
    model["W2"] = np.random.randn(H) / np.sqrt(H)
    # update buffers that add up gradients over a batch
    grad_buffer = {k: np.zeros_like(v) for k, v in model.items()}
    rmsprop_cache = {k: np.zeros_like(v) for k, v in model.items()}

    history = []
    for iteration in range(iterations):
        model_id = ray.put(model)
        grads, reward_sums = [], []
        # Launch tasks to compute gradients from multiple rollouts in parallel.
        for i in range(batch_size):
            grad_id, reward_sum_id = compute_gradient.remote(model_id)
            grads.append(grad_id)
            reward_sums.append(reward_sum_id)
        for grad in ray.get(grads):
            for k in model:
                grad_buffer[k] += grad[k]  # accumulate grad over batch
        # perform rmsprop parameter update every batch_size episodes
        for k, v in model.items():
            g = grad_buffer[k]  # gradient
            rmsprop_cache[k] = decay_rate * rmsprop_cache[k] + (1 - decay_rate) * g ** 2
            model[k] += learning_rate * g / (np.sqrt(rmsprop_cache[k]) + 1e-5)
            grad_buffer[k] = np.zeros_like(v)  # reset batch gradient buffer
        history.append(float(np.mean(ray.get(reward_sums))))
        print("batch {:3d}: mean reward per game {:6.1f}".format(iteration, history[-1]),
              flush=True)

    ray.shutdown()
    first, last = np.mean(history[:3]), np.mean(history[-3:])
    print("policy gradient: mean reward per game {:.1f} -> {:.1f} over {} batches of {} "
          "games".format(first, last, iterations, batch_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
