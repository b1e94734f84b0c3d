"""Ray 0.7's ``ray.experimental``: signals, async, named actors, sgd, and
``get``/``wait`` over collections of refs."""
from . import async_api, named_actors, signal
from .api import get, set_resource, wait
from .named_actors import get_actor, register_actor

__all__ = ["async_api", "get", "get_actor", "named_actors", "register_actor", "set_resource",
           "sgd", "signal", "wait"]


def __getattr__(name: str):
    # hpc_ray.experimental.sgd imports the training code only when asked for.
    if name == "sgd":
        import importlib
        return importlib.import_module(".sgd", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
