"""Ray 0.7's `policy_server` module: not provided (importing it says so)."""
from .not_provided import missing

missing(__name__)
