"""The Ray 0.2.2 docs' hyperparameter search: random search, results as they
finish, and the adaptive variant that continues promising experiments.

The docs' ``train_cnn_and_compute_accuracy`` trains a convolutional network on
MNIST with TensorFlow (and, as printed, returns a random number). Here it
really trains: a softmax-regression classifier in numpy, by minibatch SGD with
input dropout, on scikit-learn's bundled handwritten digits (8x8 images, no
download). The hyperparameters and the sampling are the docs' own (learning
rate, batch size, dropout, initial weight stddev), so most random
configurations are bad and the search has something to find.

    python examples/hyperparameter_search.py
    mpiexec -n 3 python -m hpc_ray examples/hyperparameter_search.py --trials 20 --steps 100

Prints each accuracy as it arrives and ends with ``hyperparameter search: best
validation accuracy 0.9xx (random search), 0.9xx (as they finish), 0.9xx
(adaptive)``. Needs scikit-learn (``pip install scikit-learn``).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import hpc_ray as ray

#: Epochs per training segment (the docs' ``--steps``); --quick uses fewer.
EPOCHS = 3


def load_digits_split(seed=0):
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float64)
    y = digits.target.astype(np.int64)
    order = np.random.RandomState(seed).permutation(len(y))
    x, y = x[order], y[order]
    split = int(0.8 * len(y))
    return x[:split], np.eye(10)[y[:split]], x[split:], np.eye(10)[y[split:]]


def train(hyperparameters, weights, images, labels, epochs, seed):
    """Minibatch SGD on the softmax cross-entropy; returns the new weights."""
    rng = np.random.RandomState(seed)
    lr = hyperparameters["learning_rate"]
    batch_size = int(hyperparameters["batch_size"])
    keep = 1.0 - hyperparameters["dropout"]
    w, b = weights
    w, b = w.copy(), b.copy()
    with np.errstate(all="ignore"):   # a diverging learning rate is a bad trial, not an error
        for _ in range(epochs):
            order = rng.permutation(len(images))
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                x = images[idx] * (rng.rand(len(idx), images.shape[1]) < keep) / keep
                logits = x @ w + b
                logits -= logits.max(axis=1, keepdims=True)
                p = np.exp(logits)
                p /= p.sum(axis=1, keepdims=True)
                err = (p - labels[idx]) / len(idx)
                w -= lr * (x.T @ err)
                b -= lr * err.sum(axis=0)
    return w, b


def accuracy(weights, images, labels):
    w, b = weights
    with np.errstate(all="ignore"):
        predicted = np.argmax(images @ w + b, axis=1)
    return float(np.mean(predicted == np.argmax(labels, axis=1)))


def trial_seed(hyperparameters):
    """The same seed for the same configuration, in any process."""
    return int(hyperparameters["dropout"] * 2**31) % 2**31


def initial_weights(hyperparameters, seed):
    rng = np.random.RandomState(seed)
    return (hyperparameters["stddev"] * rng.randn(64, 10), np.zeros(10))


@ray.remote
def train_cnn_and_compute_accuracy(hyperparameters,
                                   train_images,
                                   train_labels,
                                   validation_images,
                                   validation_labels):
    # Construct a network, train it, and return the accuracy on the
    # validation data.
    seed = trial_seed(hyperparameters)
    weights = train(hyperparameters, initial_weights(hyperparameters, seed),
                    train_images, train_labels, EPOCHS, seed)
    return accuracy(weights, validation_images, validation_labels)


def generate_hyperparameters():
    # Randomly choose values for the hyperparameters.
    return {"learning_rate": 10 ** np.random.uniform(-5, 5),
            "batch_size": np.random.randint(1, 100),
            "dropout": np.random.uniform(0, 1),
            "stddev": 10 ** np.random.uniform(-5, 5)}


def basic_random_search(num_trials, data):
    train_images, train_labels, validation_images, validation_labels = data
    # Generate a bunch of hyperparameter configurations.
    hyperparameter_configurations = [generate_hyperparameters() for _ in range(num_trials)]

    # Launch some experiments.
    results = []
    for hyperparameters in hyperparameter_configurations:
        results.append(train_cnn_and_compute_accuracy.remote(hyperparameters,
                                                             train_images,
                                                             train_labels,
                                                             validation_images,
                                                             validation_labels))

    # Get the results.
    accuracies = ray.get(results)
    best = int(np.argmax(accuracies))
    print("random search: accuracies {}".format(np.round(accuracies, 3).tolist()))
    print("random search: best {:.3f} with {}".format(accuracies[best],
                                                      hyperparameter_configurations[best]))
    return max(accuracies)


def as_they_finish(num_trials, num_results, data):
    train_images, train_labels, validation_images, validation_labels = data
    hyperparameter_configurations = [generate_hyperparameters() for _ in range(num_trials)]

    # Launch some experiments.
    remaining_ids = []
    for hyperparameters in hyperparameter_configurations:
        remaining_ids.append(train_cnn_and_compute_accuracy.remote(hyperparameters,
                                                                   train_images,
                                                                   train_labels,
                                                                   validation_images,
                                                                   validation_labels))

    # Whenever a new experiment finishes, print the value and start a new
    # experiment.
    accuracies = []
    for i in range(num_results):
        ready_ids, remaining_ids = ray.wait(remaining_ids, num_returns=1)
        accuracy = ray.get(ready_ids[0])
        print("Accuracy is {}".format(accuracy))
        accuracies.append(accuracy)
        # Start a new experiment.
        new_hyperparameters = generate_hyperparameters()
        remaining_ids.append(train_cnn_and_compute_accuracy.remote(new_hyperparameters,
                                                                    train_images,
                                                                    train_labels,
                                                                    validation_images,
                                                                    validation_labels))
    # Not in the docs: collect the experiments still running, so the job ends clean.
    accuracies.extend(ray.get(remaining_ids))
    return max(accuracies)


# --- More sophisticated hyperparameter search ------------------------------------


@ray.remote
def train_segment(hyperparameters, data, model=None):
    # Train a network, and return the accuracy on the validation data as well
    # as the latest version of the model. If the model argument is not None,
    # this will continue training an existing model.
    train_images, train_labels, validation_images, validation_labels = data
    seed = trial_seed(hyperparameters)
    if model is None:
        model = {"hyperparameters": hyperparameters, "segments": 0,
                 "weights": initial_weights(hyperparameters, seed)}
    new_model = dict(model, segments=model["segments"] + 1,
                     weights=train(hyperparameters, model["weights"], train_images,
                                   train_labels, EPOCHS, seed + model["segments"]))
    validation_accuracy = accuracy(new_model["weights"], validation_images,
                                   validation_labels)
    return validation_accuracy, new_model


def is_promising(accuracy, accuracies):
    # Return true if the model is doing well and false otherwise: here, when it
    # is at least as good as the median of the segments seen so far (the docs
    # flip a coin).
    return accuracy >= np.median(accuracies)


def adaptive_search(num_starting, num_segments, data):
    data_id = ray.put(data)
    # Start some experiments.
    remaining_ids = []
    for _ in range(num_starting):
        experiment_id = train_segment.remote(generate_hyperparameters(), data_id, model=None)
        remaining_ids.append(experiment_id)

    accuracies = []
    best = (0.0, None)
    for i in range(num_segments):
        # Whenever a segment of an experiment finishes, decide if it looks promising
        # or not.
        ready_ids, remaining_ids = ray.wait(remaining_ids, num_returns=1)
        experiment_id = ready_ids[0]
        current_accuracy, current_model = ray.get(experiment_id)
        accuracies.append(current_accuracy)
        best = max(best, (current_accuracy, current_model["segments"]), key=lambda t: t[0])

        if is_promising(current_accuracy, accuracies):
            # Continue running the experiment.
            experiment_id = train_segment.remote(current_model["hyperparameters"], data_id,
                                                 model=current_model)
        else:
            # Start a new experiment.
            experiment_id = train_segment.remote(generate_hyperparameters(), data_id)

        remaining_ids.append(experiment_id)
    for current_accuracy, current_model in ray.get(remaining_ids):
        best = max(best, (current_accuracy, current_model["segments"]), key=lambda t: t[0])
    print("adaptive: best {:.3f} after {} segments of training".format(*best))
    return best[0]


def main(argv=None) -> int:
    global EPOCHS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20,
                        help="experiments launched at once")
    parser.add_argument("--results", type=int, default=100,
                        help="results processed as they finish (the docs: 100)")
    parser.add_argument("--steps", type=int, default=EPOCHS, help="epochs per experiment")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter trials, for tests")
    args = parser.parse_args(argv)
    try:
        import sklearn  # noqa: F401
    except ImportError:
        print("this example needs scikit-learn: pip install scikit-learn", file=sys.stderr)
        return 2
    EPOCHS = 2 if args.quick else args.steps
    trials, results = (10, 20) if args.quick else (args.trials, args.results)
    np.random.seed(args.seed)

    ray.init()
    train_images, train_labels, validation_images, validation_labels = load_digits_split()
    train_images = ray.put(train_images)
    train_labels = ray.put(train_labels)
    validation_images = ray.put(validation_images)
    validation_labels = ray.put(validation_labels)
    data = (train_images, train_labels, validation_images, validation_labels)

    best_random = basic_random_search(trials, data)
    best_streamed = as_they_finish(trials, results, data)
    best_adaptive = adaptive_search(trials, results, load_digits_split())
    ray.shutdown()
    print("hyperparameter search: best validation accuracy {:.3f} (random search), "
          "{:.3f} (as they finish), {:.3f} (adaptive)".format(best_random, best_streamed,
                                                              best_adaptive))
    return 0


if __name__ == "__main__":
    sys.exit(main())
