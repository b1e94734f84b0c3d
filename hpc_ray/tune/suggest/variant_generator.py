"""``ray.tune.suggest.variant_generator`` (Ray 0.7's import path): grid search and
sampling over a config, as ``BasicVariantGenerator`` uses them."""
from ..sample import function, generate_variants, grid_search, sample_from

__all__ = ["function", "generate_variants", "grid_search", "sample_from"]
