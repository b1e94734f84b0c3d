"""``ray.tune.suggest.suggestion`` (Ray 0.7's import path of the base class of
HyperOptSearch and other model-based searchers)."""
from .search import SuggestionAlgorithm

__all__ = ["SuggestionAlgorithm"]
