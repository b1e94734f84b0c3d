"""Refs in asyncio and concurrent.futures code (``await ref``, ``as_future(ref)``),
and ``async def`` actor methods (``run_method``)."""
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


#: The event loop ``async def`` actor methods run on: one per process, made on
#: first use and kept, so that tasks a call leaves on it run on in later calls.
_method_loop: asyncio.AbstractEventLoop | None = None


def run_method(coroutine):
    """Run an ``async def`` actor method's coroutine to its end and return its value.

    Calls to one actor still run one at a time, in order (Ray 0.7 has no async
    actors; Ray 0.8's run calls concurrently, up to ``max_concurrency``, which
    is not honoured here): a method may await refs and asyncio, but a call that
    waits for a later call to the same actor waits forever."""
    global _method_loop
    if _method_loop is None:
        _method_loop = asyncio.new_event_loop()
    return _method_loop.run_until_complete(coroutine)
