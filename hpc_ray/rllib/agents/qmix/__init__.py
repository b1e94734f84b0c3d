"""QMIX and VDN for grouped agents."""
from ..trainer import renamed_agent
from .qmix import DEFAULT_CONFIG, QMixTrainer
from .qmix_policy import QMixTorchPolicy

QMixAgent = renamed_agent(QMixTrainer)

__all__ = ["QMixAgent", "QMixTrainer", "DEFAULT_CONFIG", "QMixTorchPolicy"]
