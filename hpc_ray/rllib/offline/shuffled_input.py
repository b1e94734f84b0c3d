"""Ray 0.7's module path of ``ShuffledInput``."""
from .mixed_input import ShuffledInput

__all__ = ["ShuffledInput"]
