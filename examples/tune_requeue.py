"""A hyperparameter sweep as a batch job that survives its time limit.

Submit it with the requeue template (or ``hpc-ray submit --requeue``): Slurm's
warning signal makes Tune checkpoint every running trial and return; the job
exits 0 and requeues itself; the next run (``resume=True``) continues every
unfinished trial from its checkpoint, and finished trials stay finished.  The
same command starts the sweep the first time (no state file yet).

    sbatch slurm/requeue.sbatch examples/tune_requeue.py --local-dir $HOME/ray_results
    hpc-ray submit --requeue --ntasks 8 --time 00:30:00 examples/tune_requeue.py
    python examples/tune_requeue.py --quick              # on a laptop
"""
import argparse
import os
import time

import hpc_ray as ray
from hpc_ray import preempt, tune


class Annealer(tune.Trainable):
    """Minimizes (x - 0.3)^2 by noisy steps; checkpoints its position."""

    def _setup(self, config):
        self.x = config["x0"]

    def _train(self):
        time.sleep(self.config["step_seconds"])
        self.x -= self.config["lr"] * 2 * (self.x - 0.3)
        return {"loss": (self.x - 0.3) ** 2}

    def _save(self, checkpoint_dir):
        return {"x": self.x}

    def _restore(self, state):
        self.x = state["x"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local-dir", default=os.path.expanduser("~/ray_results"))
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--step-seconds", type=float, default=1.0,
                        help="seconds per training iteration")
    parser.add_argument("--quick", action="store_true", help="a few seconds in all")
    args = parser.parse_args()
    step = 0.0 if args.quick else args.step_seconds
    iterations = 20 if args.quick else args.iterations
    ray.init()
    print(f"run {preempt.requeue_count() + 1} of the sweep", flush=True)
    trials = tune.run(Annealer, name="requeue_sweep", local_dir=args.local_dir,
                      resume=True, checkpoint_freq=10, checkpoint_at_end=True,
                      stop={"training_iteration": iterations},
                      config={"lr": tune.grid_search([0.001, 0.01, 0.1]),
                              "x0": tune.grid_search([-1.0, 2.0]), "step_seconds": step},
                      verbose=1)
    if preempt.preempted():
        print("checkpointed; the next run continues the sweep", flush=True)
        return
    best = min(trials, key=lambda t: t.last_result["loss"])
    print(f"done: best lr={best.config['lr']} x0={best.config['x0']} "
          f"loss={best.last_result['loss']:.3g}")


if __name__ == "__main__":
    main()
