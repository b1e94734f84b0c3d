"""The Ray docs' A3C (0.2.2 and 0.7): ``Runner`` actors simulate the environment
continuously in a thread; the driver asks each for a gradient with the latest
weights, applies whichever arrives first (``ray.wait``) and sends that runner
the new weights.

The docs' policy is a TensorFlow LSTM on Atari Pong. Here it is an actor-critic
written in numpy (a softmax policy and a value function, both linear in the
observation) on gymnasium's ``CartPole-v1`` (``pip install gymnasium`` or
``pip install -e '.[examples]'``). ``Runner``, ``RunnerThread``,
``process_rollout`` (generalized advantage estimation with gamma 0.99 and
lambda 1.0) and the driver loop follow the docs' code.

    python examples/a3c.py --num-workers 2
    mpiexec -n 3 python -m hpc_ray examples/a3c.py --num-workers 2

Prints the mean reward of recent episodes as training goes and ends with ``A3C:
mean episode reward 2x.x -> 1xx.x after N steps (K gradients from W runners)``.
"""
from __future__ import annotations

import argparse
import queue
import sys
import threading
from collections import namedtuple

import numpy as np

import hpc_ray as ray

try:
    import gymnasium as gym
except ImportError:
    gym = None

Batch = namedtuple("Batch", ["si", "a", "adv", "r", "terminal"])


def create_env(env_name):
    return gym.make(env_name)


# --- the policy: linear softmax actor and linear critic, in numpy ----------------


class LinearActorCritic:
    """pi(a|s) = softmax(s @ Wp + bp), V(s) = s @ wv + bv."""

    def __init__(self, ob_space_size, num_actions, seed=0):
        rng = np.random.RandomState(seed)
        self.params = {"Wp": 0.01 * rng.randn(ob_space_size, num_actions),
                       "bp": np.zeros(num_actions),
                       "wv": np.zeros(ob_space_size), "bv": np.zeros(1)}
        self.rng = np.random.RandomState(seed + 1)

    def get_weights(self):
        return {k: v.copy() for k, v in self.params.items()}

    def set_weights(self, weights):
        self.params = {k: np.array(v) for k, v in weights.items()}

    def probabilities(self, states):
        logits = states @ self.params["Wp"] + self.params["bp"]
        logits = logits - logits.max(axis=-1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=-1, keepdims=True)

    def value(self, state):
        return float(state @ self.params["wv"] + self.params["bv"][0])

    def act(self, state):
        p = self.probabilities(state)
        return int(self.rng.choice(len(p), p=p)), self.value(state)

    def compute_gradients(self, batch, vf_coeff=0.5, entropy_coeff=0.01):
        """Gradients of the A3C loss (policy, value, entropy) for gradient *descent*."""
        si, a, adv, r = batch.si, batch.a, batch.adv, batch.r
        p = self.probabilities(si)
        onehot = np.eye(p.shape[1])[a]
        # d(-sum adv * log pi(a|s)) / d logits = -(onehot - p) * adv
        dlogits = -(onehot - p) * adv[:, None]
        # entropy bonus: d(-H)/d logits = p * (log p + H)
        logp = np.log(p + 1e-12)
        entropy = -(p * logp).sum(axis=1, keepdims=True)
        dlogits += entropy_coeff * p * (logp + entropy)
        v = si @ self.params["wv"] + self.params["bv"][0]
        dv = vf_coeff * 2 * (v - r)
        n = len(a)
        return {"Wp": si.T @ dlogits / n, "bp": dlogits.sum(axis=0) / n,
                "wv": si.T @ dv / n, "bv": np.array([dv.sum() / n])}


class Adam:
    def __init__(self, weights, stepsize=0.01, beta1=0.9, beta2=0.999, epsilon=1e-8):
        self.m = {k: np.zeros_like(v) for k, v in weights.items()}
        self.v = {k: np.zeros_like(v) for k, v in weights.items()}
        self.t, self.stepsize = 0, stepsize
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def apply_gradients(self, policy, gradient):
        self.t += 1
        a = self.stepsize * np.sqrt(1 - self.beta2 ** self.t) / (1 - self.beta1 ** self.t)
        for k, g in gradient.items():
            self.m[k] = self.beta1 * self.m[k] + (1 - self.beta1) * g
            self.v[k] = self.beta2 * self.v[k] + (1 - self.beta2) * g * g
            policy.params[k] -= a * self.m[k] / (np.sqrt(self.v[k]) + self.epsilon)


# --- rollouts, as in the universe starter agent ---------------------------------


class PartialRollout(object):
    """a piece of a complete rollout. We run our agent, and process its experience
    once it has processed enough steps."""

    def __init__(self):
        self.states, self.actions, self.rewards, self.values = [], [], [], []
        self.r = 0.0
        self.terminal = False
        self.episode_rewards = []

    def add(self, state, action, reward, value, terminal):
        self.states += [state]
        self.actions += [action]
        self.rewards += [reward]
        self.values += [value]
        self.terminal = terminal


def discount(x, gamma):
    out = np.zeros_like(x)
    running = 0.0
    for t in reversed(range(len(x))):
        running = x[t] + gamma * running
        out[t] = running
    return out


def process_rollout(rollout, gamma, lambda_=1.0):
    """given a rollout, compute its returns and the advantage"""
    batch_si = np.asarray(rollout.states)
    batch_a = np.asarray(rollout.actions)
    rewards = np.asarray(rollout.rewards, dtype=np.float64)
    vpred_t = np.asarray(rollout.values + [rollout.r])

    rewards_plus_v = np.asarray(rollout.rewards + [rollout.r])
    batch_r = discount(rewards_plus_v, gamma)[:-1]
    delta_t = rewards + gamma * vpred_t[1:] - vpred_t[:-1]
    # this formula for the advantage comes "Generalized Advantage Estimation":
    # https://arxiv.org/abs/1506.02438
    batch_adv = discount(delta_t, gamma * lambda_)
    return Batch(batch_si, batch_a, batch_adv, batch_r, rollout.terminal)


def env_runner(env, policy, num_local_steps):
    """The thread's loop: step the environment, yield a rollout every
    ``num_local_steps`` steps (or at the end of an episode)."""
    last_state, _ = env.reset()
    episode_reward = 0.0
    while True:
        rollout = PartialRollout()
        for _ in range(num_local_steps):
            action, value = policy.act(last_state)
            state, reward, terminated, truncated, _ = env.step(action)
            episode_reward += reward
            rollout.add(last_state, action, reward, value, terminated)
            last_state = state
            if terminated or truncated:
                rollout.episode_rewards.append(episode_reward)
                episode_reward = 0.0
                last_state, _ = env.reset()
                # The episode ends this batch. Cut off by the time limit (not
                # failed), its value estimate stands for the rest.
                rollout.terminal = True
                rollout.r = policy.value(state) if truncated and not terminated else 0.0
                break
        else:
            rollout.r = policy.value(last_state)
        yield rollout


class RunnerThread(threading.Thread):
    """Interacts with the environment continuously, handing partial rollouts
    to the actor through a small queue (it blocks when the queue is full)."""

    def __init__(self, env, policy, num_local_steps):
        super().__init__(daemon=True)
        self.queue = queue.Queue(5)
        self.num_local_steps = num_local_steps
        self.env = env
        self.policy = policy
        self.stopped = threading.Event()

    def start_runner(self):
        self.start()

    def run(self):
        rollout_provider = env_runner(self.env, self.policy, self.num_local_steps)
        while not self.stopped.is_set():
            rollout = next(rollout_provider)
            while not self.stopped.is_set():
                try:
                    self.queue.put(rollout, timeout=0.1)
                    break
                except queue.Full:
                    continue


@ray.remote
class Runner(object):
    """Actor object to start running simulation on workers.
    Gradient computation is also executed on this object."""
    def __init__(self, env_name, actor_id):
        # starts simulation environment, policy, and thread.
        # Thread will continuously interact with the simulation environment
        self.env = env = create_env(env_name)
        self.id = actor_id
        self.policy = LinearActorCritic(env.observation_space.shape[0], env.action_space.n,
                                        seed=actor_id)
        self.runner = RunnerThread(env, self.policy, 20)
        self.start()

    def start(self):
        # starts the simulation thread
        self.runner.start_runner()

    def pull_batch_from_queue(self):
        """ self explanatory:  take a rollout from the queue of the thread runner. """
        rollout = self.runner.queue.get(timeout=600.0)
        episode_rewards = list(rollout.episode_rewards)
        while not rollout.terminal:
            try:
                more = self.runner.queue.get_nowait()
            except queue.Empty:
                break
            # extend with the next piece (the docs' rollout.extend)
            for field in ("states", "actions", "rewards", "values"):
                getattr(rollout, field).extend(getattr(more, field))
            rollout.r, rollout.terminal = more.r, more.terminal
            episode_rewards += more.episode_rewards
        rollout.episode_rewards = episode_rewards
        return rollout

    def compute_gradient(self, params):
        self.policy.set_weights(params)
        rollout = self.pull_batch_from_queue()
        batch = process_rollout(rollout, gamma=0.99, lambda_=1.0)
        gradient = self.policy.compute_gradients(batch)
        info = {"id": self.id,
                "size": len(batch.a),
                "episode_rewards": rollout.episode_rewards}
        return gradient, info

    # Not in the docs: stop the simulation thread before the actor goes away.
    def stop(self):
        self.runner.stopped.set()
        self.runner.join(timeout=5)


def train(num_workers, env_name="CartPole-v1", max_steps=20000, report_every=2000):
    # Setup a copy of the environment
    # Instantiate a copy of the policy - mainly used as a placeholder
    env = create_env(env_name)
    policy = LinearActorCritic(env.observation_space.shape[0], env.action_space.n, 0)
    optimizer = Adam(policy.get_weights())
    obs = 0

    # Start simulations on actors
    agents = [Runner.remote(env_name, i) for i in range(num_workers)]

    # Start gradient calculation tasks on each actor
    parameters = policy.get_weights()
    gradient_list = [agent.compute_gradient.remote(parameters) for agent in agents]

    episode_rewards, history, next_report, num_gradients = [], [], report_every, 0
    while obs < max_steps:  # Replace with your termination condition
        # wait for some gradient to be computed - unblock as soon as the earliest arrives
        done_id, gradient_list = ray.wait(gradient_list)

        # get the results of the task from the object store
        gradient, info = ray.get(done_id)[0]
        obs += info["size"]
        num_gradients += 1
        episode_rewards += info["episode_rewards"]

        # apply update, get the weights from the model, start a new task on the same
        # actor object
        optimizer.apply_gradients(policy, gradient)
        parameters = policy.get_weights()
        gradient_list.extend([agents[info["id"]].compute_gradient.remote(parameters)])

        if obs >= next_report and episode_rewards:
            history.append(float(np.mean(episode_rewards[-20:])))
            print("steps {:6d}: mean reward of the last {} episodes {:6.1f}".format(
                obs, min(20, len(episode_rewards)), history[-1]), flush=True)
            next_report += report_every

    ray.get(gradient_list)
    ray.get([agent.stop.remote() for agent in agents])
    return policy, history, obs, num_gradients


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--env", default="CartPole-v1", help="the docs: PongDeterministic-v4")
    parser.add_argument("--max-steps", type=int, default=60000)
    parser.add_argument("--quick", action="store_true", help="a shorter run, for tests")
    args = parser.parse_args(argv)
    if gym is None:
        print("this example needs gymnasium: pip install gymnasium "
              "(or pip install -e '.[examples]')", file=sys.stderr)
        return 2
    max_steps = 20000 if args.quick else args.max_steps

    ray.init()
    _, history, steps, num_gradients = train(args.num_workers, args.env, max_steps,
                                             report_every=max_steps // 10)
    ray.shutdown()
    print("A3C: mean episode reward {:.1f} -> {:.1f} after {} steps ({} gradients from {} "
          "runners)".format(history[0], history[-1], steps, num_gradients, args.num_workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
