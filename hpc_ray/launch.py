"""Environment detection and start-up: ``hpc_ray.runtime.launch`` under its old name.

The module lives in the runtime (which imports nothing above itself); this name
stays for programs and scripts that import ``hpc_ray.launch``.
"""
import sys

from .runtime import launch as _launch

sys.modules[__name__] = _launch
