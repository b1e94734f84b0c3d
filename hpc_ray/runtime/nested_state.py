"""What a task run in another task's wait must leave as it found it.

In Ray a task waiting in ``get`` keeps its worker process to itself. Here the
executor runs the rank's other tasks on its stack meanwhile
(``executor_transport.await_``). Each of those starts in the process as the
waiting task left it, as a task does in a reused Ray worker. What it changes in
the working directory, the environment and the resources the process holds
(``get_gpu_ids()``, ``CUDA_VISIBLE_DEVICES``) is undone when it ends, so the
waiting task goes on where it was: a subtask's ``os.chdir`` no longer moves its
caller's output files. torch's per-thread modes are the waiting thread's: a
nested task starts with gradients on and outside inference mode, as any task
starts in Ray, not in the ``torch.no_grad()`` its caller waits in (its
``backward()`` failed), and the caller gets back its modes and default dtype.
Its reusable variables are its own (``hooks.nested_begin``). Module globals and
other state are shared, as the threads of one process share them.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from . import hooks

#: The executor's record of what its current task holds (``Executor._set_gpus``).
HELD_FIELDS = ("held", "gpu_ids", "resources", "visible_gpus")


class OuterState:
    """The waiting task's working directory, environment and held resources."""

    __slots__ = ("cwd", "environ", "held", "torch", "reusables")

    def __init__(self, ctx: Any) -> None:
        try:
            self.cwd: str | None = os.getcwd()
        except OSError:   # (removed meanwhile: nothing to go back to)
            self.cwd = None
        # The encoded table behind os.environ: a copy and a comparison take under
        # a microsecond, where os.environ's own decode each entry (~20 us).
        self.environ = os.environ._data.copy()
        self.held = tuple(getattr(ctx, name) for name in HELD_FIELDS)
        torch = sys.modules.get("torch")
        self.torch = None if torch is None else _torch_modes_for_task(torch)
        self.reusables = hooks.nested_begin()

    def restore(self, ctx: Any) -> None:
        """(After the nested task's ``hooks.after_task``.)"""
        hooks.nested_end(self.reusables)
        if self.cwd is not None:
            try:
                if os.getcwd() != self.cwd:
                    os.chdir(self.cwd)
            except OSError:   # (the nested task's directory was removed)
                try:
                    os.chdir(self.cwd)
                except OSError:   # (and the waiting task's too)
                    pass
        raw = os.environ._data
        if raw != self.environ:
            for key in [k for k in raw if k not in self.environ]:
                del os.environ[os.fsdecode(key)]
            for key, value in self.environ.items():
                if raw.get(key) != value:
                    os.environ[os.fsdecode(key)] = os.fsdecode(value)
        for name, value in zip(HELD_FIELDS, self.held):
            setattr(ctx, name, value)
        if self.torch is not None:
            torch = sys.modules["torch"]
            grad, dtype, inference = self.torch
            if torch.get_default_dtype() != dtype:
                torch.set_default_dtype(dtype)
            torch.set_grad_enabled(grad)
            if inference is not None:
                inference.__exit__(None, None, None)


def _torch_modes_for_task(torch) -> tuple:
    """The waiting thread's (grad mode, default dtype, the guard that turned its
    inference mode off or None), after setting the modes a task starts with."""
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    inference = None
    if torch.is_inference_mode_enabled():
        inference = torch.inference_mode(False)
        inference.__enter__()
    if not grad:
        torch.set_grad_enabled(True)
    return grad, dtype, inference
