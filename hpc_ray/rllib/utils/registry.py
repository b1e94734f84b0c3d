"""Registrations that reach every process of the job.

A custom model or env registered in the driver must also exist in the rollout
workers (actors on other ranks) and in a Tune trial's trainer. Each
registration is applied here at once and, through
``hpc_ray.run_function_on_all_workers``, in every worker process, now and
later (before ``init()`` it is kept until the job starts).
"""
from __future__ import annotations

from typing import Callable

from ... import api

__all__ = ["register_everywhere"]


def register_everywhere(install: Callable[[], None]) -> None:
    """Run ``install()`` here and in every worker process of the job."""
    install()
    api.run_function_on_all_workers(lambda _info, _install=install: _install())
