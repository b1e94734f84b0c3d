"""Ray 0.7's `external_multi_agent_env` module: not provided (importing it says so)."""
from ..utils.not_provided import missing

missing(__name__)
