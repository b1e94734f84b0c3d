"""A shared-memory prioritized replay buffer filled by explorer tasks (cpprb's
``MPPrioritizedReplayBuffer`` with Ray, as in cpprb's "mp_with_ray" example).

Explorer tasks step gymnasium's CartPole with an epsilon-greedy linear Q-function
and add their transitions to one prioritized replay buffer that lives in shared
memory; the driver samples minibatches from it, takes TD(0) steps on the linear
Q-function, updates the priorities with the new |TD| errors and sends fresh
weights to the explorers through a multiprocessing ``Manager`` queue. A manager
``Event`` tells the explorers to stop.

The trick that makes manager proxies usable in tasks: the workers must share
the driver's multiprocessing authkey, which ``run_function_on_all_workers`` sets
on every worker (base64, because an ``AuthenticationString`` refuses to pickle).

Needs the optional packages cpprb and gymnasium:

    pip install cpprb gymnasium            # or: pip install -e '.[rl]'

Runs anywhere:

    python examples/replay_buffer.py                            # embedded
    mpiexec -n 3 python -m hpc_ray examples/replay_buffer.py
    python examples/replay_buffer.py --quick --explorers 2
"""
from __future__ import annotations

import argparse
import base64
import multiprocessing as mp
import os
import sys
import time

import numpy as np

import hpc_ray as ray

try:
    import gymnasium as gym
    from cpprb import MPPrioritizedReplayBuffer, ReplayBuffer
except ImportError as exc:  # optional dependencies (the "rl" extra)
    gym = None
    _MISSING = exc
else:
    _MISSING = None


class Model:
    """A linear Q-function on CartPole's 4 observations (plus a bias).

    The seed leaves the model out ("# omit"); this one is small and honest about
    TD errors, which is all the prioritized buffer needs. It is not expected to
    solve CartPole: the example is about the buffer and the explorers."""

    def __init__(self, env, w=None, epsilon: float = 0.1, seed: int = 0):
        self.env = env
        self.n_actions = env.action_space.n
        n_features = env.observation_space.shape[0] + 1
        self.w = np.zeros((n_features, self.n_actions)) if w is None else w
        self.epsilon = epsilon
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def features(obs: np.ndarray) -> np.ndarray:
        obs = np.atleast_2d(obs)
        return np.hstack([obs, np.ones((obs.shape[0], 1))])

    def q(self, obs: np.ndarray) -> np.ndarray:
        return self.features(obs) @ self.w

    def train(self, transitions: dict, gamma: float = 0.99, lr: float = 0.01) -> np.ndarray:
        """One importance-weighted TD(0) step on a minibatch; returns the new |TD|."""
        obs, act = transitions["obs"], transitions["act"].astype(int).ravel()
        rew, done = transitions["rew"].ravel(), transitions["done"].ravel()
        target = rew + gamma * (1.0 - done) * self.q(transitions["next_obs"]).max(axis=1)
        rows = np.arange(len(act))
        td = target - self.q(obs)[rows, act]
        weights = transitions.get("weights", np.ones_like(td)).ravel()
        grad = np.zeros_like(self.w)
        np.add.at(grad.T, act, (weights * td)[:, None] * self.features(obs))
        self.w += lr * np.clip(grad / len(act), -1.0, 1.0)
        return np.abs(target - self.q(obs)[rows, act])

    def __call__(self, obs: np.ndarray) -> int:
        """Epsilon-greedy action for one observation."""
        if self.rng.random() < self.epsilon:
            return int(self.env.action_space.sample())
        return int(self.q(obs)[0].argmax())


@ray.remote
def explorer(env_name, global_rb, env_dict, q, stop, seed):
    """Step the environment, add finished episodes to the shared buffer, pick up
    new weights from the queue, until ``stop`` is set."""
    try:
        buffer_size = 200
        local_rb = ReplayBuffer(buffer_size, env_dict)
        env = gym.make(env_name)
        env.action_space.seed(seed)
        model = Model(env, seed=seed)
        obs, _ = env.reset(seed=seed)
        steps = episodes = 0
        while not stop.is_set():
            if not q.empty():
                try:
                    model.w = q.get_nowait()
                except Exception:  # another explorer took it first
                    pass
            act = model(obs)
            next_obs, rew, terminated, truncated, _ = env.step(act)
            local_rb.add(obs=obs, act=act, rew=rew, next_obs=next_obs, done=terminated)
            steps += 1
            if terminated or truncated or local_rb.get_stored_size() == buffer_size:
                local_rb.on_episode_end()
                global_rb.add(**local_rb.get_all_transitions())
                local_rb.clear()
                if terminated or truncated:
                    episodes += 1
                    obs, _ = env.reset()
                else:
                    obs = next_obs
            else:
                obs = next_obs
        return steps, episodes
    finally:
        stop.set()


def evaluate(env_name: str, w: np.ndarray, episodes: int = 5) -> float:
    env = gym.make(env_name)
    model = Model(env, w=w, epsilon=0.0)
    total = 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=1000 + i)
        done = False
        while not done:
            obs, rew, terminated, truncated, _ = env.step(model(obs))
            total += rew
            done = terminated or truncated
    return total / episodes


def run(n_explorers: int, nwarmup: int, ntrain: int, update_freq: int) -> dict:
    env_name = "CartPole-v1"
    env = gym.make(env_name)
    buffer_size = int(1e5)
    env_dict = {"obs": {"shape": env.observation_space.shape},
                "act": {},
                "rew": {},
                "next_obs": {"shape": env.observation_space.shape},
                "done": {}}
    alpha = 0.5
    beta = 0.4
    batch_size = 32

    # The workers must share this process's authkey to talk to the manager.
    encoded = base64.b64encode(mp.current_process().authkey)

    def auth_fn(*args):
        mp.current_process().authkey = base64.b64decode(encoded)

    ray.worker.global_worker.run_function_on_all_workers(auth_fn)

    # Before Python 3.13 a process that merely attaches to a SharedMemory segment
    # registers it with its own resource tracker, which unlinks it (and warns) when
    # that process exits. Only the driver, which created the buffer, should track it.
    if sys.version_info < (3, 13):
        driver_pid = os.getpid()

        def untrack_shared_memory(*args):
            if os.getpid() != driver_pid:
                from multiprocessing import resource_tracker
                register = resource_tracker.register

                def register_except_shm(name, rtype):
                    if rtype != "shared_memory":
                        register(name, rtype)

                resource_tracker.register = register_except_shm

        ray.run_function_on_all_workers(untrack_shared_memory)

    # `BaseContext.Manager()` starts a SyncManager process: the buffer's data live
    # in shared memory, its locks and events behind the manager.
    m = mp.get_context().Manager()
    try:
        q = m.Queue()
        stop = m.Event()
        stop.clear()
        rb = MPPrioritizedReplayBuffer(buffer_size, env_dict, alpha=alpha,
                                       ctx=m, backend="SharedMemory")
        model = Model(env)

        print(f"Start {n_explorers} explorers", flush=True)
        explorers = [explorer.remote(env_name, rb, env_dict, q, stop, seed)
                     for seed in range(n_explorers)]

        print("Start warmup", flush=True)
        deadline = time.monotonic() + 60
        while rb.get_stored_size() < nwarmup and not stop.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the explorers stored only {rb.get_stored_size()} "
                                   f"transitions in 60 s")
            time.sleep(0.1)

        print(f"Start training ({rb.get_stored_size()} transitions stored)", flush=True)
        recent = []
        for i in range(ntrain):
            if stop.is_set():
                break
            s = rb.sample(batch_size, beta)
            absTD = model.train(s)
            rb.update_priorities(s["indexes"], absTD + 1e-6)
            recent.append(float(absTD.mean()))
            if i % update_freq == 0:
                q.put(model.w.copy())
                print(f"step {i:5d}: mean |TD| {np.mean(recent):.3f}, "
                      f"{rb.get_stored_size()} transitions stored", flush=True)
                recent = []
        print("Finish training", flush=True)
        stop.set()
        results = ray.get(explorers, timeout=60)
        stored = rb.get_stored_size()
    finally:
        m.shutdown()
    steps = sum(s for s, _ in results)
    episodes = sum(e for _, e in results)
    score = evaluate(env_name, model.w)
    print(f"explorers: {steps} steps, {episodes} episodes; buffer: {stored} transitions; "
          f"greedy return of the trained Q-function: {score:.1f}", flush=True)
    return {"steps": steps, "episodes": episodes, "stored": stored, "score": score}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--explorers", type=int, default=None,
                        help="explorer tasks (default: one per CPU of the job)")
    parser.add_argument("--warmup", type=int, default=500,
                        help="transitions to collect before training")
    parser.add_argument("--train-steps", type=int, default=3000)
    parser.add_argument("--update-freq", type=int, default=500,
                        help="send weights to the explorers every this many steps")
    parser.add_argument("--quick", action="store_true", help="a short run, for tests")
    args = parser.parse_args(argv)
    if _MISSING is not None:
        print(f"this example needs cpprb and gymnasium ({_MISSING}); install them with\n"
              f"    pip install cpprb gymnasium      (or: pip install -e '.[rl]')",
              file=sys.stderr)
        return 2
    ntrain = 500 if args.quick else args.train_steps
    update_freq = 100 if args.quick else args.update_freq

    info = ray.init()
    print(f"hpc_ray {info['mode']} job, {info['world_size']} ranks, "
          f"resources {ray.cluster_resources()}", flush=True)
    n_explorers = args.explorers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    try:
        run(n_explorers, args.warmup, ntrain, update_freq)
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
