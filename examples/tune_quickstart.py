"""Tune's quick start (Ray 0.7 docs, "Tune: Scalable Hyperparameter Search"):
a grid search over a training function that reports through ``reporter``.

The "model" is a small logistic regression trained by SGD with momentum on a
synthetic, linearly separable problem, so it needs nothing but numpy; the
status table shows each trial's accuracy as it trains.

    python examples/tune_quickstart.py                     # embedded
    mpiexec -n 3 python -m hpc_ray examples/tune_quickstart.py
"""
import argparse
import os
import tempfile

import numpy as np

import hpc_ray as ray
from hpc_ray import tune


def make_data(n=2000, d=10, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    x = rng.normal(size=(n, d))
    y = (x @ w > 0).astype(float)
    return x, y


def train_func(config, reporter):  # add a reporter arg
    x, y = make_data()
    w = np.zeros(x.shape[1])
    velocity = np.zeros_like(w)
    rng = np.random.default_rng(1)
    for epoch in range(config["epochs"]):
        for batch in np.array_split(rng.permutation(len(x)), 20):
            p = 1 / (1 + np.exp(-x[batch] @ w))
            grad = x[batch].T @ (p - y[batch]) / len(batch)
            velocity = config["momentum"] * velocity - config["lr"] * grad
            w += velocity
        accuracy = float(((x @ w > 0) == (y > 0.5)).mean() * 100)
        reporter(mean_accuracy=accuracy, epoch=epoch)  # report metrics


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local-dir", default=os.path.join(tempfile.gettempdir(), "ray_results"))
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    ray.init()
    all_trials = tune.run(
        train_func,
        name="quick-start",
        stop={"mean_accuracy": 99},
        config={"momentum": tune.grid_search([0.1, 0.5, 0.9]),
                "lr": tune.grid_search([0.01, 0.1]),
                "epochs": args.epochs},
        local_dir=args.local_dir,
        verbose=1,
    )
    analysis = tune.ExperimentAnalysis(os.path.join(args.local_dir, "quick-start"))
    best = analysis.get_best_config("mean_accuracy", "max")
    print(f"{len(all_trials)} trials; best config {best}")


if __name__ == "__main__":
    main()
