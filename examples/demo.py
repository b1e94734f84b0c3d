"""The hpc_ray demo: tasks, objects, nested tasks and an actor, in one short job.

Runs anywhere:
    python examples/demo.py                    # embedded: spawns local workers
    mpiexec -n 4 python -m hpc_ray examples/demo.py
"""
import time

import numpy as np

import hpc_ray as ray


@ray.remote
def sample_pi(n: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    xy = rng.random((n, 2))
    return 4.0 * float(((xy ** 2).sum(axis=1) <= 1.0).mean())


@ray.remote
def column_means(block: np.ndarray) -> np.ndarray:
    return block.mean(axis=0)


@ray.remote
def tree_sum(values: list) -> float:
    """Sums by splitting into sub-tasks: tasks that submit tasks and wait on them."""
    if len(values) <= 4:
        return float(sum(values))
    mid = len(values) // 2
    return sum(ray.get([tree_sum.remote(values[:mid]), tree_sum.remote(values[mid:])]))


@ray.remote
class RunningMean:
    def __init__(self):
        self.total, self.count = 0.0, 0

    def add(self, value: float) -> float:
        self.total += value
        self.count += 1
        return self.total / self.count


def main() -> None:
    info = ray.init()
    print(f"hpc_ray {info['mode']} job, {info['world_size']} ranks, "
          f"resources {ray.cluster_resources()}")

    t0 = time.time()
    estimates = ray.progress([sample_pi.remote(200_000, seed) for seed in range(32)],
                             desc="pi samples")
    print(f"pi ~ {np.mean(estimates):.4f} from {len(estimates)} tasks "
          f"in {time.time() - t0:.2f} s")

    data = ray.put(np.random.default_rng(0).random((2_000_000, 4)))  # 64 MB, shared memory
    print("column means:", np.round(ray.get(column_means.remote(data)), 3))

    print("tree sum of 0..99:", ray.get(tree_sum.remote(list(range(100)))))

    mean = RunningMean.remote()
    for est in estimates[:8]:
        latest = mean.add.remote(est)
    print(f"actor running mean of 8 estimates: {ray.get(latest):.4f}")

    ray.shutdown()
    print("demo finished")


if __name__ == "__main__":
    main()
