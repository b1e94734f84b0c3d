"""``SampleBatch`` and ``MultiAgentBatch``: columns of numpy arrays, one row per step.

Batches cross the object store as plain dicts of numpy arrays, so a batch a
rollout worker returns is read by the learner on the same node without a copy
(the arrays come back read-only: concatenating or slicing makes new ones).
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import numpy as np

__all__ = ["SampleBatch", "MultiAgentBatch", "DEFAULT_POLICY_ID"]

#: The policy id of single-agent training.
DEFAULT_POLICY_ID = "default_policy"


class SampleBatch:
    """A batch of experiences: a dict of equal-length numpy columns.

    Args:
        *args, **kwargs: as for ``dict``: column name -> list or array.
    """

    CUR_OBS = "obs"
    NEXT_OBS = "new_obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    PREV_ACTIONS = "prev_actions"
    PREV_REWARDS = "prev_rewards"
    DONES = "dones"
    INFOS = "infos"
    EPS_ID = "eps_id"
    UNROLL_ID = "unroll_id"
    AGENT_INDEX = "agent_index"
    ACTION_PROB = "action_prob"
    ACTION_LOGP = "action_logp"
    VF_PREDS = "vf_preds"
    BEHAVIOUR_LOGITS = "behaviour_logits"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.data: dict[str, np.ndarray] = {
            k: (v if isinstance(v, np.ndarray) else _to_array(v))
            for k, v in dict(*args, **kwargs).items()}
        lengths = {k: len(v) for k, v in self.data.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"SampleBatch columns must have the same length, got {lengths}")
        self.count = next(iter(lengths.values()), 0)

    # --- construction -----------------------------------------------------------

    @staticmethod
    def concat_samples(samples: list) -> "SampleBatch | MultiAgentBatch":
        """Concatenate a list of batches (of one kind) into one."""
        samples = [s for s in samples if s.count > 0] or samples[:1]
        if samples and isinstance(samples[0], MultiAgentBatch):
            return MultiAgentBatch.concat_samples(samples)
        if not samples:
            return SampleBatch()
        keys = samples[0].keys()
        return SampleBatch({k: np.concatenate([s[k] for s in samples]) for k in keys})

    def concat(self, other: "SampleBatch") -> "SampleBatch":
        """This batch followed by ``other``, as a new batch."""
        return SampleBatch.concat_samples([self, other])

    def copy(self) -> "SampleBatch":
        return SampleBatch({k: np.array(v, copy=True) for k, v in self.data.items()})

    # --- access -------------------------------------------------------------------

    def rows(self) -> Iterator[dict]:
        """Each row as a dict (slow: for inspection and tests)."""
        for i in range(self.count):
            yield {k: v[i] for k, v in self.data.items()}

    def columns(self, keys: Iterable[str]) -> list[np.ndarray]:
        return [self.data[k] for k in keys]

    def shuffle(self, rng: np.random.Generator | None = None) -> "SampleBatch":
        """Rows in a random order (a new batch; this one is unchanged)."""
        perm = (rng or np.random.default_rng()).permutation(self.count)
        return SampleBatch({k: v[perm] for k, v in self.data.items()})

    def split_by_episode(self) -> list["SampleBatch"]:
        """One batch per episode id, in order of appearance."""
        eps = self.data[self.EPS_ID]
        cuts = np.flatnonzero(eps[1:] != eps[:-1]) + 1
        bounds = [0, *cuts.tolist(), self.count]
        return [self.slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]

    def slice(self, start: int, end: int) -> "SampleBatch":
        return SampleBatch({k: v[start:end] for k, v in self.data.items()})

    def keys(self):
        return self.data.keys()

    def items(self):
        return self.data.items()

    def get(self, key: str, default=None):
        return self.data.get(key, default)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.data[key]

    def __setitem__(self, key: str, item) -> None:
        item = item if isinstance(item, np.ndarray) else _to_array(item)
        if self.data and len(item) != self.count:
            raise ValueError(f"column {key!r} has {len(item)} rows, the batch has {self.count}")
        if not self.data:
            self.count = len(item)
        self.data[key] = item

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def __iter__(self):
        return iter(self.data)

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"SampleBatch({self.count}: {list(self.data)})"

    def __reduce__(self):
        # A dict of arrays: pickle-5 buffers travel out of band, zero-copy.
        return (SampleBatch, (self.data,))


class MultiAgentBatch:
    """Batches of several policies from the same env steps.

    Args:
        policy_batches: policy id -> ``SampleBatch``.
        count: the number of env steps these batches were collected in.
    """

    def __init__(self, policy_batches: dict[str, SampleBatch], count: int) -> None:
        self.policy_batches = policy_batches
        self.count = count

    @staticmethod
    def wrap_as_needed(batches: dict[str, SampleBatch], count: int):
        """A ``SampleBatch`` for the single default policy, else a ``MultiAgentBatch``."""
        if len(batches) == 1 and DEFAULT_POLICY_ID in batches:
            return batches[DEFAULT_POLICY_ID]
        return MultiAgentBatch(batches, count)

    @staticmethod
    def concat_samples(samples: list["MultiAgentBatch"]) -> "MultiAgentBatch":
        parts: dict[str, list[SampleBatch]] = {}
        total = 0
        for s in samples:
            if not isinstance(s, MultiAgentBatch):
                raise TypeError(f"cannot concatenate a MultiAgentBatch with {type(s).__name__}")
            for pid, b in s.policy_batches.items():
                parts.setdefault(pid, []).append(b)
            total += s.count
        return MultiAgentBatch({p: SampleBatch.concat_samples(b) for p, b in parts.items()},
                               total)

    def copy(self) -> "MultiAgentBatch":
        return MultiAgentBatch({p: b.copy() for p, b in self.policy_batches.items()},
                               self.count)

    def total(self) -> int:
        """Rows over all policies (>= ``count`` when several agents act per step)."""
        return sum(b.count for b in self.policy_batches.values())

    def __repr__(self) -> str:
        return f"MultiAgentBatch({self.count}: {self.policy_batches})"


def _to_array(value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == object and len(value) and isinstance(value[0], np.ndarray):
        try:
            return np.stack(value)
        except ValueError:
            pass
    return arr
