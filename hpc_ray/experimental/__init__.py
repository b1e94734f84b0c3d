"""Ray 0.7's ``ray.experimental``: signals, async, named actors, sgd, and
``get``/``wait`` over collections of refs."""
from . import named_actors, signal
from .api import get, set_resource, wait
from .named_actors import get_actor, register_actor

__all__ = ["async_api", "get", "get_actor", "named_actors", "register_actor", "set_resource",
           "sgd", "signal", "wait"]


def __getattr__(name: str):
    # hpc_ray.experimental.sgd imports the training code, async_api asyncio,
    # only when asked for.
    if name in ("sgd", "async_api"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
