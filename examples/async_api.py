"""The Ray 0.7 docs' Async API examples (``ray.experimental.async_api``).

Object refs become asyncio futures: ``async_api.as_future(ref)``, and (as in
later Ray) ``await ref`` inside a coroutine. The program runs the docs'
snippets in order:

1. "Converting Ray objects into asyncio futures": ``as_future(f.remote())`` run
   to completion on the event loop gives ``{'key1': ['value']}``;
2. "Example Usage", Async Ray: four ``f`` tasks gathered as futures give
   ``[1, 1, 1, 1]`` (the docs write ``asyncio.gather(tasks)``, which asyncio
   rejects: a list is not awaitable, so this is ``asyncio.gather(*tasks)``);
3. ``await ref`` in a coroutine, mixed with plain asyncio sleeps.

    python examples/async_api.py
    mpiexec -n 3 python -m hpc_ray examples/async_api.py

Ends with ``async: as_future {'key1': ['value']}, gather [1, 1, 1, 1], await 14``.
``--quick`` makes the tasks sleep 0.1 s instead of the docs' 1 s.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time

import hpc_ray as ray
from hpc_ray.experimental import async_api

#: How long each task sleeps (the docs: 1 second; --quick: 0.1).
SLEEP = 1.0


def main(argv=None) -> int:
    global SLEEP
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="0.1 s tasks, for tests")
    args = parser.parse_args(argv)
    if args.quick:
        SLEEP = 0.1
    sleep = SLEEP

    # --- Converting Ray objects into asyncio futures -------------------------------
    @ray.remote
    def f():
        time.sleep(sleep)
        return {'key1': ['value']}

    ray.init()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)   # what asyncio.get_event_loop() did by itself in 2019
    future = async_api.as_future(f.remote())
    converted = asyncio.get_event_loop().run_until_complete(future)  # {'key1': ['value']}
    print(converted)

    # --- Example Usage: Async Ray -------------------------------------------------
    @ray.remote
    def f():
        time.sleep(sleep)
        return 1

    loop = asyncio.get_event_loop()
    tasks = [async_api.as_future(f.remote())
             for i in range(4)]
    results = loop.run_until_complete(
        asyncio.gather(*tasks))
    print(results)

    # --- await a ref in a coroutine (later Ray's spelling) ------------------------
    @ray.remote
    def square(x):
        time.sleep(sleep / 10)
        return x * x

    async def sum_of_squares(n):
        total = 0
        for ref in [square.remote(i) for i in range(n)]:
            total += await ref
            await asyncio.sleep(0)    # the loop stays free for other coroutines
        return total

    awaited = loop.run_until_complete(sum_of_squares(4))   # 0 + 1 + 4 + 9
    print(awaited)
    loop.close()
    ray.shutdown()
    print(f"async: as_future {converted}, gather {results}, await {awaited}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
