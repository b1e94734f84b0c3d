"""``build_trainer``: a ``Trainer`` class from a policy and a few functions."""
from __future__ import annotations

import sys
from typing import Callable

from ..optimizers.sync_samples import SyncSamplesOptimizer
from .trainer import COMMON_CONFIG, Trainer

__all__ = ["build_trainer"]


def build_trainer(name: str, default_policy, default_config: dict | None = None,
                  validate_config: Callable | None = None,
                  get_initial_state: Callable | None = None,
                  get_policy_class: Callable | None = None,
                  before_init: Callable | None = None, make_workers: Callable | None = None,
                  make_policy_optimizer: Callable | None = None,
                  after_init: Callable | None = None,
                  before_train_step: Callable | None = None,
                  after_optimizer_step: Callable | None = None,
                  after_train_result: Callable | None = None,
                  collect_metrics_fn: Callable | None = None,
                  before_evaluate_fn: Callable | None = None, mixins: list | None = None) -> type:
    """Make a ``Trainer`` subclass (Ray 0.7's template).

    Args:
        name: the trainer's name ("PPO"), used by Tune and in log directories.
        default_policy: the policy class (``build_torch_policy``).
        default_config: the algorithm's ``DEFAULT_CONFIG``.
        validate_config: ``(config) -> None``, raising on bad values.
        get_policy_class: ``(config) -> policy class`` to pick a policy per config.
        before_init, after_init: ``(trainer) -> None``.
        make_workers: ``(trainer, env_creator, policy, config) -> WorkerSet``.
        make_policy_optimizer: ``(workers, config) -> PolicyOptimizer``
            (default: ``SyncSamplesOptimizer`` over ``train_batch_size``).
        before_train_step: ``(trainer) -> None`` before each optimizer step.
        after_optimizer_step: ``(trainer, fetches) -> None``.
        after_train_result: ``(trainer, result) -> None``.
        collect_metrics_fn: ``(trainer) -> dict`` instead of the optimizer's metrics.
        mixins: classes placed before ``Trainer`` in the bases.

    Returns:
        the trainer class; ``.with_updates(**kw)`` makes a variant.
    """
    original_kwargs = dict(locals())
    base = type("_Base", tuple(mixins or []) + (Trainer,), {})

    class trainer_cls(base):
        _name = name
        _default_config = default_config or COMMON_CONFIG
        _policy = default_policy

        def _init(self, config, env_creator):
            if validate_config:
                validate_config(config)
            policy = get_policy_class(config) if get_policy_class else default_policy
            self._policy = policy
            if before_init:
                before_init(self)
            if make_workers:
                self.workers = make_workers(self, env_creator, policy, config)
            else:
                self.workers = self._make_workers(env_creator, policy, config,
                                                  config["num_workers"])
            if make_policy_optimizer:
                self.optimizer = make_policy_optimizer(self.workers, config)
            else:
                self.optimizer = SyncSamplesOptimizer(
                    self.workers, train_batch_size=config["train_batch_size"])
            self.train_exec_impl = None
            if after_init:
                after_init(self)

        def _train_step(self):
            if before_train_step:
                before_train_step(self)
            fetches = self.optimizer.step()
            if after_optimizer_step:
                after_optimizer_step(self, fetches)

        def _train(self):
            result = Trainer._train(self)
            if collect_metrics_fn:
                result.update(collect_metrics_fn(self))
            if after_train_result:
                after_train_result(self, result)
            return result

    @classmethod
    def with_updates(cls, **overrides):
        """A new trainer class with some of ``build_trainer``'s arguments replaced."""
        new_cls = build_trainer(**dict(original_kwargs, **overrides))
        new_cls.__module__ = sys._getframe(1).f_globals.get("__name__", __name__)
        return new_cls

    trainer_cls.with_updates = with_updates
    trainer_cls.__name__ = name + "Trainer" if not name.endswith("Trainer") else name
    trainer_cls.__qualname__ = trainer_cls.__name__
    trainer_cls.__module__ = sys._getframe(1).f_globals.get("__name__", __name__)
    return trainer_cls
