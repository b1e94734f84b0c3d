"""``ray.experimental.sgd.pytorch.utils`` (Ray 0.7): the trainer's default
optimizer creator and the helpers a ``PyTorchTrainer`` user's code imports.

    from hpc_ray.experimental.sgd.pytorch import PyTorchTrainer, utils
    trainer = PyTorchTrainer(model_creator, data_creator,
                             optimizer_creator=utils.sgd_mse_optimizer)

torch is imported when a function that needs it runs, not with this module.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable

from ....sgd.pytorch import sgd_mse_optimizer

if TYPE_CHECKING:
    import torch

__all__ = ["AverageMeter", "TimerStat", "sgd_mse_optimizer", "train", "validate"]


class AverageMeter:
    """The running average of a value (per batch, weighted by batch size)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.val = 0.0
        self.avg = 0.0
        self.sum = 0.0
        self.count = 0

    def update(self, val: float, n: int = 1) -> None:
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class TimerStat:
    """``with timer:`` blocks' mean duration in seconds."""

    def __init__(self) -> None:
        self._total = 0.0
        self._count = 0
        self._start = 0.0

    def __enter__(self) -> "TimerStat":
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self._total += time.perf_counter() - self._start
        self._count += 1

    @property
    def mean(self) -> float:
        return self._total / self._count if self._count else 0.0


def train(train_iterator: Iterable, model: "torch.nn.Module", criterion,
          optimizer) -> dict:
    """One epoch over ``train_iterator``'s ``(features, target)`` batches.

    Returns:
        ``batch_time``, ``batch_processed`` (samples), ``train_loss``,
        ``data_time`` and the mean seconds of each step (``fwd``, ``grad``, ``apply``).
    """
    batch_time, data_time, losses = AverageMeter(), AverageMeter(), AverageMeter()
    timers = {k: TimerStat() for k in ("fwd", "grad", "apply")}
    model.train()
    end = time.time()
    for features, target in train_iterator:
        data_time.update(time.time() - end)
        with timers["fwd"]:
            output = model(features)
            loss = criterion(output, target)
            losses.update(loss.item(), features.size(0))
        with timers["grad"]:
            optimizer.zero_grad()
            loss.backward()
        with timers["apply"]:
            optimizer.step()
        batch_time.update(time.time() - end)
        end = time.time()
    stats = {"batch_time": batch_time.avg, "batch_processed": losses.count,
             "train_loss": losses.avg, "data_time": data_time.avg}
    stats.update({k: t.mean for k, t in timers.items()})
    return stats


def validate(val_loader: Iterable, model: "torch.nn.Module", criterion) -> dict:
    """One pass over ``val_loader`` without gradients.

    Returns:
        ``batch_time``, ``validation_loss`` and, for outputs with a class
        dimension, ``mean_accuracy`` (the argmax against the target).
    """
    import torch

    batch_time, losses = AverageMeter(), AverageMeter()
    correct = total = 0
    model.eval()
    with torch.no_grad():
        end = time.time()
        for features, target in val_loader:
            output = model(features)
            loss = criterion(output, target)
            losses.update(loss.item(), features.size(0))
            if output.dim() > 1 and output.size(1) > 1 and target.dim() == 1:
                correct += (output.argmax(1) == target).sum().item()
                total += target.size(0)
            batch_time.update(time.time() - end)
            end = time.time()
    stats = {"batch_time": batch_time.avg, "validation_loss": losses.avg}
    if total:
        stats["mean_accuracy"] = correct / total
    return stats
