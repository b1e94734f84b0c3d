"""Refs in asyncio and concurrent.futures code: ``await ref``, ``as_future(ref)``."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading

#: One thread resolves futures for a process, so awaiting never blocks the loop.
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=4, thread_name_prefix="hpc_ray-future")
        return _pool


def concurrent_future(ref) -> concurrent.futures.Future:
    from . import context
    return _executor().submit(lambda: context.current().get([ref], None)[0])


def as_future(ref) -> asyncio.Future:
    """An asyncio future for ``ref`` on the running loop (Ray's ``async_api.as_future``)."""
    return asyncio.wrap_future(concurrent_future(ref))
