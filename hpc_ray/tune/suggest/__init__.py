"""Search algorithms: where trials' configs come from."""
from ..sample import function, grid_search, sample_from
from .basic_variant import BasicVariantGenerator
from .search import SearchAlgorithm, SuggestionAlgorithm

__all__ = ["BasicVariantGenerator", "SearchAlgorithm", "SuggestionAlgorithm", "OptunaSearch",
           "HyperOptSearch", "function", "grid_search", "sample_from"]


def __getattr__(name):
    # Optional libraries load only when asked for.
    if name == "OptunaSearch":
        from .optuna import OptunaSearch
        return OptunaSearch
    if name == "HyperOptSearch":
        from .hyperopt import HyperOptSearch
        return HyperOptSearch
    raise AttributeError(name)
