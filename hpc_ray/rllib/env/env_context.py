"""``EnvContext``: the ``env_config`` dict an env creator receives, with its place."""
from __future__ import annotations

__all__ = ["EnvContext"]


class EnvContext(dict):
    """``env_config`` plus the worker and vector index of the env being made.

    Args:
        env_config: the user's ``env_config``.
        worker_index: 0 for the local worker, 1.. for remote ones.
        vector_index: which of the worker's ``num_envs_per_worker`` envs.
        remote: whether the env runs in its own process (always False here).
    """

    def __init__(self, env_config: dict, worker_index: int, vector_index: int = 0,
                 remote: bool = False) -> None:
        dict.__init__(self, env_config or {})
        self.worker_index = worker_index
        self.vector_index = vector_index
        self.remote = remote

    def copy_with_overrides(self, env_config=None, worker_index=None, vector_index=None,
                            remote=None) -> "EnvContext":
        return EnvContext(
            dict(self) if env_config is None else env_config,
            self.worker_index if worker_index is None else worker_index,
            self.vector_index if vector_index is None else vector_index,
            self.remote if remote is None else remote)
