"""Work in steps; checkpoint to HDF5 when Slurm warns of the end; resume after requeue.

As a Slurm job that requeues itself (slurm/requeue.sbatch forwards Slurm's USR1
warning to this driver, and requeues the job once the driver has stopped)::

    sbatch slurm/requeue.sbatch examples/checkpoint_resume.py --steps 500 --checkpoint run.h5

Without Slurm::

    hpc-ray run -n 4 examples/checkpoint_resume.py --steps 50 --checkpoint run.h5
    kill -USR1 <driver pid>      # checkpoints and stops; run the same command again to resume

Each step runs ``--tasks`` remote tasks and records their sum.  The state (the next
step and the per-step sums) is replaced as a whole after each step, so the hook,
which may run between any two bytecodes of the main thread, always saves a
consistent pair.  The answer does not depend on where the run was interrupted.
"""
from __future__ import annotations

import argparse
import os
import time

import h5py
import numpy as np

import hpc_ray as ray
from hpc_ray.preempt import on_preempt, preempted, requeue_count


@ray.remote
def work(step: int, i: int) -> int:
    # Stands in for real work; deterministic, so a resumed run gives the same answer.
    return (step * 31 + i * 7) % 101


def load(path: str, steps: int) -> tuple[int, np.ndarray]:
    """(next step, per-step sums) from the checkpoint, or a fresh start."""
    if not os.path.exists(path):
        return 0, np.zeros(steps, dtype=np.int64)
    with h5py.File(path, "r") as f:
        sums = np.zeros(steps, dtype=np.int64)
        saved = f["step_sums"][...]
        sums[: len(saved)] = saved[:steps]
        return int(f.attrs["next_step"]), sums


def save(path: str, next_step: int, sums: np.ndarray) -> None:
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["next_step"] = next_step
        f.attrs["requeue_count"] = requeue_count()
        f.create_dataset("step_sums", data=sums)
    os.replace(tmp, path)  # a kill in mid-write leaves the previous checkpoint whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps in the whole run")
    parser.add_argument("--tasks", type=int, default=8, help="remote tasks per step")
    parser.add_argument("--step-seconds", type=float, default=0.5,
                        help="extra time per step, standing in for heavier work")
    parser.add_argument("--checkpoint", default="checkpoint.h5", help="HDF5 checkpoint file")
    args = parser.parse_args()

    ray.init()
    next_step, sums = load(args.checkpoint, args.steps)
    if next_step:
        print(f"resumed from step {next_step} of {args.steps} "
              f"(job requeued {requeue_count()} times)", flush=True)
    state = (next_step, sums)

    @on_preempt
    def checkpoint() -> None:
        # Runs in the main thread on SIGUSR1, between two of its bytecodes:
        # save the last consistent state and print nothing (print is not reentrant).
        step, step_sums = state
        save(args.checkpoint, step, step_sums)

    for step in range(next_step, args.steps):
        if preempted():
            break
        total = sum(ray.get([work.remote(step, i) for i in range(args.tasks)]))
        new_sums = state[1].copy()
        new_sums[step] = total
        state = (step + 1, new_sums)
        print(f"step {step} done", flush=True)
        time.sleep(args.step_seconds)

    if preempted():
        # The hook saved the state of the moment the signal came; the step that was
        # running then has finished since, so save again: the resumed run starts
        # after it.  (Were the driver killed before getting here, the hook's
        # checkpoint would still be there.)
        save(args.checkpoint, *state)
        print(f"checkpointed at step {state[0]} to {args.checkpoint}; stopping", flush=True)
        return
    save(args.checkpoint, args.steps, state[1])
    print(f"done: {args.steps} steps, total {int(state[1].sum())}", flush=True)


if __name__ == "__main__":
    main()
