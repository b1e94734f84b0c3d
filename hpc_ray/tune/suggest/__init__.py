"""Search algorithms: where trials' configs come from."""
from .basic_variant import BasicVariantGenerator
from .search import SearchAlgorithm, SuggestionAlgorithm

__all__ = ["BasicVariantGenerator", "SearchAlgorithm", "SuggestionAlgorithm", "OptunaSearch"]


def __getattr__(name):
    # Optional libraries load only when asked for.
    if name == "OptunaSearch":
        from .optuna import OptunaSearch
        return OptunaSearch
    raise AttributeError(name)
