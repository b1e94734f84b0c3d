"""Tune's exceptions."""
from ..exceptions import RayError


class TuneError(RayError):
    """An experiment could not run as asked (failed trials, bad arguments, no resources)."""
