"""Utilities: observation filters, registrations."""
from .filter import MeanStdFilter, NoFilter

__all__ = ["MeanStdFilter", "NoFilter"]
