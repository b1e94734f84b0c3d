"""Trial schedulers: which trial runs next, which stop early, which are perturbed."""
from .async_hyperband import ASHAScheduler, AsyncHyperBandScheduler
from .hyperband import HyperBandScheduler
from .median_stopping_rule import MedianStoppingRule
from .pbt import PopulationBasedTraining
from .trial_scheduler import FIFOScheduler, TrialScheduler

__all__ = ["TrialScheduler", "FIFOScheduler", "HyperBandScheduler", "AsyncHyperBandScheduler",
           "ASHAScheduler", "MedianStoppingRule", "PopulationBasedTraining"]
