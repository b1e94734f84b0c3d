"""A trial's directory and checkpoints on the driver's disk.

Checkpoints travel between a trial actor and the driver as bytes (a packed
directory, ``Trainable.save_to_object``); here they become
``<logdir>/checkpoint_<iteration>/``, complete or absent, never half there.
"""
from __future__ import annotations

import os
import shutil

from .trainable import pack_dir, unpack_dir
from .trial import Checkpoint, Trial

__all__ = ["store", "remove", "read", "iteration_of", "dirname"]


def store(trial: Trial, data: bytes, iteration: int) -> list[Checkpoint]:
    """Write ``data`` as the trial's newest checkpoint; return the checkpoints
    beyond ``keep_checkpoints_num`` (for ``remove`` once the state file no
    longer names them)."""
    path = os.path.join(trial.logdir, f"checkpoint_{iteration}")
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    unpack_dir(data, tmp)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    trial.checkpoints = [c for c in trial.checkpoints if c.path != path]
    trial.checkpoint = Checkpoint(path, iteration)
    trial.checkpoints.append(trial.checkpoint)
    dropped = []
    keep = trial.keep_checkpoints_num
    if keep:
        while len(trial.checkpoints) > keep:
            dropped.append(trial.checkpoints.pop(0))
    return dropped


def remove(checkpoints: list[Checkpoint]) -> None:
    for old in checkpoints:
        shutil.rmtree(old.path, ignore_errors=True)


def read(path: str) -> bytes:
    """A checkpoint directory as bytes, for a trial actor to restore from."""
    return pack_dir(path)


def iteration_of(path: str) -> int:
    """The iteration of a ``checkpoint_<iteration>`` directory (0 if not named so)."""
    try:
        return int(os.path.basename(path.rstrip(os.sep)).rsplit("_", 1)[1])
    except (IndexError, ValueError):
        return 0


def dirname(trial: Trial) -> str:
    """The name of a trial's directory: trainable, id and tag."""
    tag = trial.experiment_tag.replace("/", "_")[:80]
    return f"{trial.trainable_name}_{trial.trial_id}_{tag}" if tag else \
        f"{trial.trainable_name}_{trial.trial_id}"
