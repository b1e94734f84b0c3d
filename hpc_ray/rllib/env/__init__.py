"""Environment interfaces: ``MultiAgentEnv``, ``VectorEnv``, ``EnvContext``."""
from .base_env import BaseEnv
from .env_context import EnvContext
from .multi_agent_env import MultiAgentEnv
from .vector_env import VectorEnv

__all__ = ["BaseEnv", "EnvContext", "MultiAgentEnv", "VectorEnv"]
