"""QMIX and VDN for grouped agents."""
from .qmix import DEFAULT_CONFIG, QMixTrainer
from .qmix_policy import QMixTorchPolicy

__all__ = ["QMixTrainer", "DEFAULT_CONFIG", "QMixTorchPolicy"]
