"""``ray.experimental.sgd``, the docs' import path: the classes of ``hpc_ray.sgd``."""
from ...sgd import *  # noqa: F401,F403
from ...sgd import __all__  # noqa: F401
