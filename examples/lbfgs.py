"""The Ray 0.2.2 docs' batch L-BFGS: the loss and gradient summed over actors,
each holding one batch of the data, minimized with scipy's ``fmin_l_bfgs_b``.

The docs' network is TensorFlow softmax regression on MNIST; here the same model
is written in numpy and trained on scikit-learn's bundled handwritten digits
(no download). ``full_loss`` and ``full_grad`` are the docs' own: put ``theta``
in the object store once, ask every actor, sum.

    python examples/lbfgs.py
    mpiexec -n 3 python -m hpc_ray examples/lbfgs.py --batch-size 100

Prints the loss as L-BFGS iterates and ends with ``batch L-BFGS: loss 2.2983 ->
0.0004 in 40 iterations over 4 actors, training accuracy 1.000`` (``--quick``). Needs scipy and
scikit-learn (``pip install scikit-learn`` brings both).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import hpc_ray as ray

NUM_FEATURES, NUM_CLASSES = 64, 10
dim = NUM_FEATURES * NUM_CLASSES + NUM_CLASSES


def load_batches(batch_size):
    """The digits in batches of ``batch_size`` (the docs: MNIST, 100 images a batch)."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    xs = (digits.data / 16.0).astype(np.float64)
    ys = np.eye(NUM_CLASSES)[digits.target]
    num_batches = len(xs) // batch_size
    return [(xs[i * batch_size:(i + 1) * batch_size], ys[i * batch_size:(i + 1) * batch_size])
            for i in range(num_batches)]


def unflatten(theta):
    k = NUM_FEATURES * NUM_CLASSES
    return theta[:k].reshape(NUM_FEATURES, NUM_CLASSES), theta[k:]


def probabilities(theta, xs):
    w, b = unflatten(theta)
    logits = xs @ w + b
    logits = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


@ray.remote
class Network(object):
    def __init__(self, xs, ys):
        # Initialize network: softmax regression on this actor's batch.
        self.xs = xs
        self.ys = ys

    def loss(self, theta):
        # compute the loss (cross-entropy, summed over the batch)
        p = probabilities(theta, self.xs)
        return -np.sum(self.ys * np.log(p + 1e-12))

    def grad(self, theta):
        # compute the gradient
        err = probabilities(theta, self.xs) - self.ys
        return np.concatenate([(self.xs.T @ err).ravel(), err.sum(axis=0)])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--maxiter", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="fewer actors and iterations")
    args = parser.parse_args(argv)
    try:
        import scipy.optimize
        import sklearn  # noqa: F401
    except ImportError:
        print("this example needs scipy and scikit-learn: pip install scikit-learn",
              file=sys.stderr)
        return 2
    batch_size, maxiter = (400, 40) if args.quick else (args.batch_size, args.maxiter)

    ray.init()
    batches = load_batches(batch_size)
    num_examples = sum(len(xs) for xs, _ in batches)

    # Turn the data into remote objects and give each batch to an actor.
    batch_ids = [(ray.put(xs), ray.put(ys)) for (xs, ys) in batches]
    actors = [Network.remote(xs_id, ys_id) for (xs_id, ys_id) in batch_ids]

    def full_loss(theta):
        theta_id = ray.put(theta)
        loss_ids = [actor.loss.remote(theta_id) for actor in actors]
        return sum(ray.get(loss_ids)) / num_examples

    def full_grad(theta):
        theta_id = ray.put(theta)
        grad_ids = [actor.grad.remote(theta_id) for actor in actors]
        # This conversion is necessary for use with fmin_l_bfgs_b.
        return (sum(ray.get(grad_ids)) / num_examples).astype("float64")

    iterations = []

    def report(theta):
        iterations.append(full_loss(theta))
        if len(iterations) % 5 == 0:
            print("iteration {:3d}: loss {:.4f}".format(len(iterations), iterations[-1]),
                  flush=True)

    np.random.seed(0)
    theta_init = 1e-2 * np.random.normal(size=dim)
    initial = full_loss(theta_init)
    result = scipy.optimize.fmin_l_bfgs_b(full_loss, theta_init, fprime=full_grad,
                                          maxiter=maxiter, callback=report)
    theta, final = result[0], result[1]
    xs = np.concatenate([xs for xs, _ in batches])
    ys = np.concatenate([ys for _, ys in batches])
    train_accuracy = float(np.mean(np.argmax(probabilities(theta, xs), axis=1)
                                   == np.argmax(ys, axis=1)))
    ray.shutdown()
    print("batch L-BFGS: loss {:.4f} -> {:.4f} in {} iterations over {} actors, "
          "training accuracy {:.3f}".format(initial, final, result[2]["nit"], len(actors),
                                            train_accuracy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
