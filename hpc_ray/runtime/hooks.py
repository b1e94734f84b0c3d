"""Hooks that the layers above the runtime install, so that the runtime never
imports them: ``hpc_ray.reusable`` reinitializes reusable variables after each
task (and sets a waiting task's aside while a nested one runs), and
``hpc_ray.actor`` gives a new actor its checkpoint hooks. Installed when
``hpc_ray`` is imported, which every process that runs user code does.
"""
from __future__ import annotations

from typing import Any, Callable


def _nothing() -> None:
    return None


def _no_checkpoints(actor: Any, actor_id: int, ctx: Any) -> None:
    return None


#: Called in an executor after every task and actor call.
after_task: Callable[[], None] = _nothing
#: Around a task run nested in another's wait, in its process:
#: ``token = nested_begin()`` before it, ``nested_end(token)`` after its after_task.
nested_begin: Callable[[], Any] = _nothing
nested_end: Callable[[Any], None] = lambda token: None
#: ``actor_created(actor, actor_id, ctx)`` -> the actor's checkpoint hooks, or None.
actor_created: Callable[[Any, int, Any], Any] = _no_checkpoints
