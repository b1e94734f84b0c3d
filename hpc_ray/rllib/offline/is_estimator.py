"""Ray 0.7's module path of ``ImportanceSamplingEstimator``."""
from .off_policy_estimator import ImportanceSamplingEstimator

__all__ = ["ImportanceSamplingEstimator"]
