"""Synchronous and asynchronous parameter servers (the Ray docs' example) training
softmax regression on scikit-learn's bundled handwritten digits.

Both servers are single actors, as in the docs:

* synchronous: ``ParameterServer.apply_gradients(*gradients)`` averages one
  gradient from every ``Worker`` actor per step and returns the new weights,
  which the next round of ``compute_gradients`` calls receive as an object ref;
* asynchronous: ``worker_task`` remote functions hold the server's actor handle
  and loop ``pull`` -> compute an update -> ``push``, without waiting for each
  other.

Runs anywhere (needs numpy and scikit-learn: ``pip install scikit-learn``; the
digits data ship with it, nothing is downloaded):

    python examples/parameter_server.py                       # embedded
    mpiexec -n 3 python -m hpc_ray examples/parameter_server.py
    python examples/parameter_server.py --mode async --num-workers 4 --quick
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import hpc_ray as ray

NUM_CLASSES = 10


# --- the model: softmax regression, weights as one flat vector ---------------------


def load_data(seed: int = 0):
    """Digits scaled to [0, 1], split 80/20 into train and test with a fixed seed."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float64)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = x[order], y[order]
    split = int(0.8 * len(y))
    return (x[:split], y[:split]), (x[split:], y[split:])


class SoftmaxRegression:
    """``softmax(x @ W + b)`` with the cross-entropy loss; W and b live in one
    flat vector so that a parameter server can treat them as one array."""

    def __init__(self, num_features: int, num_classes: int = NUM_CLASSES):
        self.num_features = num_features
        self.num_classes = num_classes
        self.size = num_features * num_classes + num_classes

    def unflatten(self, flat: np.ndarray):
        k = self.num_features * self.num_classes
        return flat[:k].reshape(self.num_features, self.num_classes), flat[k:]

    def initial_weights(self) -> np.ndarray:
        return np.zeros(self.size)

    def probabilities(self, flat: np.ndarray, x: np.ndarray) -> np.ndarray:
        w, b = self.unflatten(flat)
        logits = x @ w + b
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)

    def gradient(self, flat: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        p = self.probabilities(flat, x)
        p[np.arange(len(y)), y] -= 1.0
        p /= len(y)
        return np.concatenate([(x.T @ p).ravel(), p.sum(axis=0)])

    def accuracy(self, flat: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        return float((self.probabilities(flat, x).argmax(axis=1) == y).mean())


# --- synchronous parameter server ----------------------------------------------------


@ray.remote
class ParameterServer(object):
    """Holds the weights; each step averages one gradient per worker."""

    def __init__(self, num_features: int, learning_rate: float):
        self.model = SoftmaxRegression(num_features)
        self.weights = self.model.initial_weights()
        self.learning_rate = learning_rate

    def apply_gradients(self, *gradients):
        self.weights = self.weights - self.learning_rate * np.mean(gradients, axis=0)
        return self.weights

    def get_weights(self):
        return self.weights


@ray.remote
class Worker(object):
    """Computes gradients on minibatches of its own shard of the training data."""

    def __init__(self, worker_index: int, num_workers: int, batch_size: int = 64):
        (x, y), _ = load_data()
        self.x, self.y = x[worker_index::num_workers], y[worker_index::num_workers]
        self.batch_size = batch_size
        self.rng = np.random.default_rng(worker_index)
        self.model = SoftmaxRegression(x.shape[1])

    def compute_gradients(self, weights):
        idx = self.rng.integers(0, len(self.y), self.batch_size)
        return self.model.gradient(weights, self.x[idx], self.y[idx])


def train_sync(num_workers: int, iterations: int, learning_rate: float,
               test: tuple, report_every: int) -> float:
    x_test, y_test = test
    model = SoftmaxRegression(x_test.shape[1])
    ps = ParameterServer.remote(x_test.shape[1], learning_rate)
    workers = [Worker.remote(i, num_workers) for i in range(num_workers)]
    current_weights = ps.get_weights.remote()
    for i in range(1, iterations + 1):
        gradients = [worker.compute_gradients.remote(current_weights) for worker in workers]
        current_weights = ps.apply_gradients.remote(*gradients)
        if i % report_every == 0 or i == iterations:
            accuracy = model.accuracy(ray.get(current_weights), x_test, y_test)
            print(f"sync  iteration {i:4d}: test accuracy {accuracy:.3f}", flush=True)
    accuracy = model.accuracy(ray.get(current_weights), x_test, y_test)
    for actor in workers + [ps]:
        ray.kill(actor)
    return accuracy


# --- asynchronous parameter server ---------------------------------------------------


@ray.remote
class AsyncParameterServer(object):
    """The docs' key-value server: ``push`` adds updates, ``pull`` returns values."""

    def __init__(self, keys, values):
        values = [value.copy() for value in values]
        self.weights = dict(zip(keys, values))
        self.pushes = 0

    def push(self, keys, values):
        for key, value in zip(keys, values):
            self.weights[key] += value
        self.pushes += 1

    def pull(self, keys):
        return [self.weights[key] for key in keys]

    def num_pushes(self):
        return self.pushes


@ray.remote
def worker_task(ps, keys, worker_index, num_workers, steps, learning_rate, batch_size=64):
    """Pull the latest weights, compute an update on a minibatch, push it."""
    (x, y), _ = load_data()
    x, y = x[worker_index::num_workers], y[worker_index::num_workers]
    model = SoftmaxRegression(x.shape[1])
    rng = np.random.default_rng(100 + worker_index)
    for _ in range(steps):
        weights = ray.get(ps.pull.remote(keys))[0]
        idx = rng.integers(0, len(y), batch_size)
        update = -learning_rate * model.gradient(weights, x[idx], y[idx])
        ps.push.remote(keys, [update])
    # A last pull orders after this task's pushes: when it returns they are applied.
    ray.get(ps.pull.remote(keys))
    return steps


def train_async(num_workers: int, iterations: int, learning_rate: float,
                test: tuple, report_every: float) -> float:
    x_test, y_test = test
    model = SoftmaxRegression(x_test.shape[1])
    keys = ["weights"]
    ps = AsyncParameterServer.remote(keys, [model.initial_weights()])
    steps = max(1, iterations // num_workers) * 2
    tasks = [worker_task.remote(ps, keys, i, num_workers, steps, learning_rate)
             for i in range(num_workers)]
    total = steps * num_workers
    printed = -1
    while True:
        ready, _ = ray.wait(tasks, num_returns=len(tasks), timeout=report_every)
        pushes = ray.get(ps.num_pushes.remote())
        if pushes != printed and len(ready) < len(tasks):
            weights = ray.get(ps.pull.remote(keys))[0]
            print(f"async {pushes:4d}/{total} updates: test accuracy "
                  f"{model.accuracy(weights, x_test, y_test):.3f}", flush=True)
            printed = pushes
        if len(ready) == len(tasks):
            break
    ray.get(tasks)
    accuracy = model.accuracy(ray.get(ps.pull.remote(keys))[0], x_test, y_test)
    ray.kill(ps)
    return accuracy


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("sync", "async", "both"), default="both")
    parser.add_argument("--num-workers", type=int, default=4,
                        help="worker actors (sync) or worker tasks (async)")
    parser.add_argument("--iterations", type=int, default=300,
                        help="synchronous steps; the async run makes about twice as many updates")
    parser.add_argument("--learning-rate", type=float, default=0.5)
    parser.add_argument("--quick", action="store_true", help="fewer steps, for tests")
    args = parser.parse_args(argv)
    try:
        import sklearn  # noqa: F401
    except ImportError:
        print("this example needs scikit-learn: pip install scikit-learn", file=sys.stderr)
        return 2
    iterations = 100 if args.quick else args.iterations

    info = ray.init()
    print(f"hpc_ray {info['mode']} job, {info['world_size']} ranks, "
          f"resources {ray.cluster_resources()}", flush=True)
    _, test = load_data()
    results = {}
    if args.mode in ("sync", "both"):
        t0 = time.time()
        results["sync"] = train_sync(args.num_workers, iterations, args.learning_rate, test,
                                     report_every=max(1, iterations // 5))
        print(f"sync  parameter server: final test accuracy {results['sync']:.3f} "
              f"({time.time() - t0:.1f} s)", flush=True)
    if args.mode in ("async", "both"):
        t0 = time.time()
        results["async"] = train_async(args.num_workers, iterations, args.learning_rate,
                                       test, report_every=0.5)
        print(f"async parameter server: final test accuracy {results['async']:.3f} "
              f"({time.time() - t0:.1f} s)", flush=True)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
