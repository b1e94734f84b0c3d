"""Ray 0.7's ``SyncSampler`` and ``AsyncSampler`` over the rollout worker's ``Sampler``.

0.7's constructors and methods (``get_data``, ``get_metrics``,
``get_extra_batches``, ``next``) on the env loop of ``sampler.py``: a
``SyncSampler`` steps the env in the caller's thread, an ``AsyncSampler`` in a
thread of its own that queues batches ahead of ``get_data()``.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

from ..env.base_env import to_base_env
from ..offline.input_reader import InputReader
from .episode import RolloutMetrics
from .rollout_worker import _env_horizon
from .sampler import Sampler, _with_extra

__all__ = ["SyncSampler", "AsyncSampler"]

logger = logging.getLogger(__name__)



def _sampler_07(env, policies, policy_mapping_fn, preprocessors, obs_filters, clip_rewards,
                unroll_length, callbacks, horizon, pack, clip_actions,
                soft_horizon) -> Sampler:
    """A ``Sampler`` from 0.7's ``SyncSampler``/``AsyncSampler`` arguments:
    ``unroll_length`` steps of each env per batch (cut at an episode's end too
    unless ``pack``), or whole episodes when it is None or infinite."""
    base_env = to_base_env(lambda index: env, 1, None)
    if horizon is None:
        unwrapped = base_env.get_unwrapped()
        horizon = _env_horizon(unwrapped[0]) if unwrapped else None
    whole = unroll_length is None or unroll_length == float("inf")
    if not whole and int(unroll_length) < 1:
        raise ValueError(f"unroll_length must be >= 1, got {unroll_length!r}")
    sampler = Sampler(base_env, policies, policy_mapping_fn, preprocessors, obs_filters,
                      1 if whole else int(unroll_length),
                      "complete_episodes" if whole else "truncate_episodes", horizon,
                      bool(clip_rewards), clip_actions, callbacks or {},
                      soft_horizon=soft_horizon)
    sampler._cut_at_episode_end = not pack
    return sampler


def _attach(owner, env, policies, policy_mapping_fn, preprocessors, obs_filters,
            clip_rewards, unroll_length, callbacks, horizon, pack, clip_actions,
            soft_horizon) -> None:
    """Give a 0.7 sampler (``owner``) its ``_sampler`` and 0.7's attributes."""
    owner._sampler = _sampler_07(env, policies, policy_mapping_fn, preprocessors,
                                 obs_filters, clip_rewards, unroll_length, callbacks,
                                 horizon, pack, clip_actions, soft_horizon)
    owner.base_env = owner._sampler.env
    owner.policies = policies
    owner.policy_mapping_fn = policy_mapping_fn
    owner.preprocessors = preprocessors
    owner.obs_filters = obs_filters
    owner.unroll_length = unroll_length
    owner.horizon = owner._sampler.horizon


class SyncSampler(InputReader):
    """Steps ``env`` with ``policies`` in the caller's thread (Ray 0.7's).

    Args:
        env: a gym or gymnasium env, ``MultiAgentEnv``, ``VectorEnv`` or ``BaseEnv``.
        policies: policy id -> ``Policy``.
        policy_mapping_fn: agent id -> policy id.
        preprocessors, obs_filters: policy id -> ``Preprocessor`` / filter.
        clip_rewards: clip rewards to their sign.
        unroll_length: env steps of each env per batch; None or ``float("inf")``:
            whole episodes.
        callbacks: the ``callbacks`` dict (``on_episode_start``...).
        horizon: steps after which an episode ends (None: the env's limit).
        pack: pack several episodes into one batch of ``unroll_length`` steps
            (False: a batch also ends where an episode ends).
        tf_sess: ignored (no TensorFlow here).
        clip_actions: clip ``Box`` actions to the space's bounds.
        soft_horizon: at ``horizon``, end the episode without resetting the env.
    """

    def __init__(self, env, policies: dict, policy_mapping_fn: Callable, preprocessors: dict,
                 obs_filters: dict, clip_rewards: bool, unroll_length, callbacks: dict | None,
                 horizon: int | None = None, pack: bool = False, tf_sess=None,
                 clip_actions: bool = True, soft_horizon: bool = False) -> None:
        _attach(self, env, policies, policy_mapping_fn, preprocessors, obs_filters,
                clip_rewards, unroll_length, callbacks, horizon, pack, clip_actions,
                soft_horizon)

    def get_data(self):
        """The next batch of experiences (without the episodes' extra batches)."""
        return self._sampler.collect()

    def get_metrics(self) -> list[RolloutMetrics]:
        """The episodes finished since the last call."""
        return self._sampler.get_metrics()

    def get_extra_batches(self) -> list:
        """The batches episodes gave ``add_extra_batch`` since the last call."""
        return self._sampler.take_extra_batches()

    def next(self):
        """``get_data()`` followed by ``get_extra_batches()``, as one batch."""
        out = self.get_data()
        extra = self.get_extra_batches()
        return _with_extra(out, extra) if extra else out


class AsyncSampler(threading.Thread, InputReader):
    """Steps ``env`` with ``policies`` in a thread of its own (Ray 0.7's).

    ::

        thread: collect() ──batch──▶ queue (5 at most) ──▶ get_data()
                finished episodes ──▶ metrics queue ──▶ get_metrics()
                extra batches ─────▶ extra queue ────▶ get_extra_batches()

    The arguments are ``SyncSampler``'s, plus ``blackhole_outputs`` (drop the
    batches, keep only the episode metrics). Call ``start()`` (``get_data()``
    starts the thread if it was not); set ``shutdown = True`` to end it.

    The policies act in the thread under their lock, so a learner may update
    them meanwhile; observation filters are updated in the thread too (0.7
    required a concurrent filter; here a filter read while the thread samples
    may be one observation behind).
    """

    #: Batches sampled ahead of ``get_data()`` before the thread waits (0.7's).
    QUEUE_SIZE = 5
    #: Seconds between checks of ``shutdown`` while the queue is full.
    _POLL_S = 0.1

    def __init__(self, env, policies: dict, policy_mapping_fn: Callable, preprocessors: dict,
                 obs_filters: dict, clip_rewards: bool, unroll_length, callbacks: dict | None,
                 horizon: int | None = None, pack: bool = False, tf_sess=None,
                 clip_actions: bool = True, blackhole_outputs: bool = False,
                 soft_horizon: bool = False) -> None:
        threading.Thread.__init__(self, name="AsyncSampler", daemon=True)
        _attach(self, env, policies, policy_mapping_fn, preprocessors, obs_filters,
                clip_rewards, unroll_length, callbacks, horizon, pack, clip_actions,
                soft_horizon)
        self.blackhole_outputs = blackhole_outputs
        self.queue: queue.Queue = queue.Queue(self.QUEUE_SIZE)
        self.extra_batches: queue.Queue = queue.Queue()
        self.metrics_queue: queue.Queue = queue.Queue()
        self.shutdown = False

    def run(self) -> None:
        try:
            while not self.shutdown:
                batch = self._sampler.collect()
                for m in self._sampler.get_metrics():
                    self.metrics_queue.put(m)
                for b in self._sampler.take_extra_batches():
                    self.extra_batches.put(b)
                if not self.blackhole_outputs:
                    self._put(batch)
        except BaseException as exc:  # noqa: BLE001 - handed to get_data()'s caller
            logger.debug("AsyncSampler's thread failed", exc_info=True)
            self._put(exc)

    def _put(self, item) -> None:
        while not self.shutdown:
            try:
                self.queue.put(item, timeout=self._POLL_S)
                return
            except queue.Full:
                continue

    def get_data(self):
        """The next batch the thread sampled (waiting for it).

        Raises:
            the exception that ended the sampling thread, or ``RuntimeError``
            when it ended otherwise.
        """
        if self.blackhole_outputs:
            raise ValueError("AsyncSampler(blackhole_outputs=True) keeps no batches; "
                             "read get_metrics()")
        if self.ident is None:
            self.start()
        while True:
            try:
                item = self.queue.get(timeout=1.0)
                break
            except queue.Empty:
                if not self.is_alive():
                    try:
                        item = self.queue.get_nowait()
                        break
                    except queue.Empty:
                        raise RuntimeError("Sampling thread has died") from None
        if isinstance(item, BaseException):
            raise item
        return item

    def get_metrics(self) -> list[RolloutMetrics]:
        """The episodes finished since the last call."""
        return _drain(self.metrics_queue)

    def get_extra_batches(self) -> list:
        """The batches episodes gave ``add_extra_batch`` since the last call."""
        return _drain(self.extra_batches)

    def next(self):
        """``get_data()`` followed by ``get_extra_batches()``, as one batch."""
        out = self.get_data()
        extra = self.get_extra_batches()
        return _with_extra(out, extra) if extra else out


def _drain(q: queue.Queue) -> list:
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out
