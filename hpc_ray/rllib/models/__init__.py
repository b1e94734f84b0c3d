"""Models, preprocessors and action distributions."""
from .action_dist import (ActionDistribution, Categorical, Deterministic, DiagGaussian,
                          Dirichlet)
from .catalog import MODEL_DEFAULTS, ModelCatalog
from .preprocessors import Preprocessor

__all__ = ["ModelCatalog", "MODEL_DEFAULTS", "Preprocessor", "ActionDistribution",
           "Categorical", "DiagGaussian", "Deterministic", "Dirichlet"]
