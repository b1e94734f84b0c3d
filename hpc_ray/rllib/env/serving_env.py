"""Ray 0.7's `serving_env` module: not provided (importing it says so)."""
from ..utils.not_provided import missing

missing(__name__)
