"""Tune's exceptions."""
from ..exceptions import RayError


class TuneError(RayError):
    """An experiment could not run as asked (failed trials, bad arguments, no resources)."""


class ResetConfigError(TuneError):
    """A reused trial actor's ``reset_config`` returned False (``reuse_actors``)."""
