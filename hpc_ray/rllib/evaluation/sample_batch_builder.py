"""Build sample batches a row at a time (Ray 0.7 ``evaluation/sample_batch_builder.py``).

``SampleBatchBuilder`` is what the docs' "Converting external experiences to
batch format" example fills with ``add_values(obs=..., actions=..., ...)`` and
hands to a ``JsonWriter``. ``MultiAgentSampleBatchBuilder`` keeps one builder
per agent, postprocesses each agent's trajectory with its policy, and returns
one batch per policy (what ``MultiAgentEpisode.new_batch_builder()`` gives).
The sampler itself keeps its rows in its own lists (``sampler._Trajectory``).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

import numpy as np

from ..policy.sample_batch import MultiAgentBatch, SampleBatch

__all__ = ["SampleBatchBuilder", "MultiAgentSampleBatchBuilder"]


class SampleBatchBuilder:
    """A ``SampleBatch`` built one row (or one batch) at a time."""

    def __init__(self) -> None:
        self.buffers: dict[str, list] = defaultdict(list)
        self.count = 0
        #: Numbers the batches this builder returns (their ``unroll_id`` column).
        self.unroll_id = 0

    def add_values(self, **values: Any) -> None:
        """Add one row: column name -> value."""
        for k, v in values.items():
            self.buffers[k].append(v)
        self.count += 1

    def add_batch(self, batch: SampleBatch) -> None:
        """Add every row of ``batch``."""
        for k, column in batch.items():
            self.buffers[k].extend(column)
        self.count += batch.count

    def build_and_reset(self) -> SampleBatch:
        """The rows added so far as a ``SampleBatch`` (with an ``unroll_id``
        column); the builder starts empty again."""
        columns = {}
        for k, v in self.buffers.items():
            if len(v) != self.count:
                raise ValueError(f"column {k!r} has {len(v)} values for {self.count} rows: "
                                 f"give every column in each add_values() call")
            columns[k] = _column(v)
        batch = SampleBatch(columns)
        batch[SampleBatch.UNROLL_ID] = np.full(batch.count, self.unroll_id, np.int64)
        self.buffers.clear()
        self.count = 0
        self.unroll_id += 1
        return batch


class MultiAgentSampleBatchBuilder:
    """Rows per agent, postprocessed per agent, returned per policy.

    Args:
        policy_map: policy id -> ``Policy`` (for ``postprocess_trajectory``).
        clip_rewards: clip each trajectory's rewards to their sign before
            postprocessing.
        postp_callback: the ``on_postprocess_traj`` callback, or None.
    """

    def __init__(self, policy_map: dict, clip_rewards: bool = False,
                 postp_callback: Callable | None = None) -> None:
        self.policy_map = policy_map
        self.clip_rewards = clip_rewards
        self.postp_callback = postp_callback
        self.policy_builders = {pid: SampleBatchBuilder() for pid in policy_map}
        self.agent_builders: dict[Any, SampleBatchBuilder] = {}
        self.agent_to_policy: dict[Any, str] = {}
        #: Env steps these rows came from (the caller counts them, as in 0.7).
        self.count = 0

    def total(self) -> int:
        """Rows postprocessed so far, over every policy."""
        return sum(b.count for b in self.policy_builders.values())

    def has_pending_agent_data(self) -> bool:
        return bool(self.agent_builders)

    def add_values(self, agent_id, policy_id: str, **values: Any) -> None:
        """Add one row of ``agent_id``'s trajectory, which ``policy_id`` controls."""
        if policy_id not in self.policy_map:
            raise ValueError(f"unknown policy_id {policy_id!r} (known: {sorted(self.policy_map)})")
        if agent_id not in self.agent_builders:
            self.agent_builders[agent_id] = SampleBatchBuilder()
            self.agent_to_policy[agent_id] = policy_id
        self.agent_builders[agent_id].add_values(**values)

    def postprocess_batch_so_far(self, episode=None) -> None:
        """Postprocess each agent's rows with its policy and file them by policy."""
        pre = {a: (self.policy_map[self.agent_to_policy[a]], b.build_and_reset())
               for a, b in self.agent_builders.items()}
        if self.clip_rewards:
            for _, batch in pre.values():
                batch[SampleBatch.REWARDS] = np.sign(batch[SampleBatch.REWARDS])
        for agent_id, (policy, batch) in sorted(pre.items(), key=lambda kv: str(kv[0])):
            others = {a: pb for a, pb in pre.items() if a != agent_id}
            post = policy.postprocess_trajectory(batch, others, episode)
            if self.postp_callback is not None:
                self.postp_callback({"agent_id": agent_id, "episode": episode,
                                     "pre_batch": pre[agent_id], "post_batch": post,
                                     "all_pre_batches": pre})
            self.policy_builders[self.agent_to_policy[agent_id]].add_batch(post)
        self.agent_builders.clear()
        self.agent_to_policy.clear()

    def build_and_reset(self, episode=None):
        """Every row so far, postprocessed: a ``SampleBatch`` for the single
        default policy, else a ``MultiAgentBatch``; the builder starts empty."""
        self.postprocess_batch_so_far(episode)
        batches = {pid: b.build_and_reset() for pid, b in self.policy_builders.items()
                   if b.count > 0}
        count, self.count = self.count, 0
        return MultiAgentBatch.wrap_as_needed(batches, count)


def _column(values: list) -> np.ndarray:
    if values and isinstance(values[0], dict):
        out = np.empty(len(values), object)  # infos: keep the dicts whole
        out[:] = values
        return out
    return np.asarray(values)
