"""Tune's trial schedulers on one checkpointable Trainable (Ray 0.7 docs, "Tune
Trial Schedulers"): FIFO, AsyncHyperBand (ASHA), HyperBand, the median stopping
rule and Population Based Training.

``MyTrainableClass`` climbs towards a score set by its "width" and "height"
(the best has both near 80) at a rate set by "lr"; its state is checkpointed,
so HyperBand can pause trials and PBT can clone the good ones.  The program
prints the best config and the iterations each scheduler spent.

    python examples/tune_schedulers.py --scheduler asha
    mpiexec -n 5 python -m hpc_ray examples/tune_schedulers.py --scheduler all
"""
import argparse
import json
import os
import random
import tempfile

import hpc_ray as ray
from hpc_ray import tune
from hpc_ray.tune.schedulers import (AsyncHyperBandScheduler, FIFOScheduler, HyperBandScheduler,
                                     MedianStoppingRule, PopulationBasedTraining)


class MyTrainableClass(tune.Trainable):
    def _setup(self, config):
        self.timestep = 0
        self.current = 0.0

    def _train(self):
        self.timestep += 1
        target = 100 - abs(self.config["width"] - 80) - abs(self.config["height"] - 80) / 2
        self.current += (target - self.current) * self.config.get("lr", 0.1)
        return {"episode_reward_mean": self.current, "timesteps_this_iter": 1}

    def _save(self, checkpoint_dir):
        path = os.path.join(checkpoint_dir, "checkpoint.json")
        with open(path, "w") as f:
            json.dump({"timestep": self.timestep, "current": self.current}, f)
        return path

    def _restore(self, checkpoint_path):
        with open(checkpoint_path) as f:
            state = json.load(f)
        self.timestep, self.current = state["timestep"], state["current"]

    def reset_config(self, new_config):
        self.config = new_config  # PBT's new lr takes effect from the next step
        return True


def scheduler(name, max_t):
    common = dict(metric="episode_reward_mean", mode="max")
    return {
        "fifo": lambda: FIFOScheduler(),
        "asha": lambda: AsyncHyperBandScheduler(time_attr="training_iteration", max_t=max_t,
                                                grace_period=3, reduction_factor=3, **common),
        "hyperband": lambda: HyperBandScheduler(time_attr="training_iteration", max_t=max_t,
                                                **common),
        "median": lambda: MedianStoppingRule(time_attr="training_iteration", grace_period=5,
                                             min_samples_required=3, **common),
        "pbt": lambda: PopulationBasedTraining(
            time_attr="training_iteration", perturbation_interval=5,
            hyperparam_mutations={"lr": [0.01, 0.03, 0.1, 0.3],
                                  "width": lambda: random.uniform(0, 100)}, **common),
    }[name]()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", default="all",
                        choices=["all", "fifo", "asha", "hyperband", "median", "pbt"])
    parser.add_argument("--num-samples", type=int, default=16)
    parser.add_argument("--max-t", type=int, default=27)
    parser.add_argument("--local-dir", default=os.path.join(tempfile.gettempdir(), "ray_results"))
    args = parser.parse_args()
    random.seed(0)
    ray.init()
    names = ["fifo", "asha", "hyperband", "median", "pbt"] if args.scheduler == "all" \
        else [args.scheduler]
    for name in names:
        trials = tune.run(
            MyTrainableClass, name=f"schedulers_{name}", scheduler=scheduler(name, args.max_t),
            stop={"training_iteration": args.max_t}, num_samples=args.num_samples,
            config={"width": tune.sample_from(lambda spec: random.uniform(0, 100)),
                    "height": tune.uniform(0, 100), "lr": tune.choice([0.01, 0.03, 0.1, 0.3])},
            local_dir=args.local_dir, verbose=1)
        best = max(trials, key=lambda t: t.last_result.get("episode_reward_mean", -1e9))
        spent = sum(t.last_result.get("training_iteration", 0) for t in trials)
        print(f"{name:9s}: best reward {best.last_result['episode_reward_mean']:.1f} with "
              f"width={best.config['width']:.0f} height={best.config['height']:.0f}; "
              f"{spent} iterations spent")


if __name__ == "__main__":
    main()
