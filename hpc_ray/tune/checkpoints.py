"""A trial's directory and checkpoints on the driver's disk.

Checkpoints travel between a trial actor and the driver as bytes (a packed
directory, ``Trainable.save_to_object``); here they become
``<logdir>/checkpoint_<iteration>/``, complete or absent, never half there.
"""
from __future__ import annotations

import logging
import numbers
import os
import shutil

from .result import TRAINING_ITERATION
from .trainable import pack_dir, unpack_dir
from .trial import Checkpoint, Trial

__all__ = ["store", "best", "remove", "read", "iteration_of", "dirname"]

logger = logging.getLogger(__name__)


def store(trial: Trial, data: bytes, iteration: int) -> list[Checkpoint]:
    """Write ``data`` as the trial's newest checkpoint; return the checkpoints
    that ``keep_checkpoints_num`` no longer keeps (for ``remove`` once the state
    file no longer names them).  ``trial.last_result`` is the result the
    checkpoint was taken at."""
    path = os.path.join(trial.logdir, f"checkpoint_{iteration}")
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    unpack_dir(data, tmp)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    trial.checkpoints = [c for c in trial.checkpoints if c.path != path]
    trial.checkpoint = Checkpoint(path, iteration, _score_of(trial))
    trial.checkpoints.append(trial.checkpoint)
    keep = trial.keep_checkpoints_num
    if not keep or len(trial.checkpoints) <= keep:
        return []
    kept = set(map(id, best(trial.checkpoints, trial.checkpoint_score_attr, keep)))
    # Ray 0.7's CheckpointManager: the best ``keep`` by the score attribute, and
    # the newest one whatever its score (restarts, resume and PBT use it).
    kept.add(id(trial.checkpoint))
    dropped = [c for c in trial.checkpoints if id(c) not in kept]
    trial.checkpoints = [c for c in trial.checkpoints if id(c) in kept]
    return dropped


def best(checkpoints: list[Checkpoint], score_attr: str | None, n: int) -> list[Checkpoint]:
    """The ``n`` best of ``checkpoints`` by ``score_attr`` (``min-<attr>``: the
    lowest; None or ``training_iteration``: the newest); ties go to the newer.
    Checkpoints whose result lacked the attribute are not ranked."""
    attr, sign = _attr_and_sign(score_attr)
    if attr == TRAINING_ITERATION:
        ranked = [(c.iteration, c.iteration, c) for c in checkpoints]
    else:
        ranked = [(sign * c.score, c.iteration, c) for c in checkpoints
                  if isinstance(c.score, numbers.Real) and not isinstance(c.score, bool)]
    ranked.sort(key=lambda r: (r[0], r[1]), reverse=True)
    return [c for _p, _i, c in ranked[:n]]


def _attr_and_sign(score_attr: str | None) -> tuple[str, int]:
    if not score_attr:
        return TRAINING_ITERATION, 1
    if score_attr.startswith("min-"):
        return score_attr[4:], -1
    return score_attr, 1


def _score_of(trial: Trial):
    attr, _sign = _attr_and_sign(trial.checkpoint_score_attr)
    if attr == TRAINING_ITERATION:
        return None
    score = trial.last_result.get(attr)
    if score is None and trial.keep_checkpoints_num:
        logger.warning("trial %s: its result has no %r (checkpoint_score_attr), so its "
                       "checkpoint is kept only while it is the newest", trial, attr)
    return score


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
    """The name of a trial's directory: Ray 0.7's (the trial's name, its
    ``trial_name_creator``'s where given, cut to 100 characters), then the
    trial's id, which keeps it unique."""
    return f"{str(trial).replace(os.sep, '_')[:100]}_{trial.trial_id}"
