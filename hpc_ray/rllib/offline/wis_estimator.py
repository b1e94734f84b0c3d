"""Ray 0.7's module path of ``WeightedImportanceSamplingEstimator``."""
from .off_policy_estimator import WeightedImportanceSamplingEstimator

__all__ = ["WeightedImportanceSamplingEstimator"]
