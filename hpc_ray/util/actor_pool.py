"""``ActorPool``: a fixed set of actors, each given one value at a time (Ray's
``ray.util.ActorPool``, 0.8 and later).

    pool = ActorPool([Worker.remote() for _ in range(4)])
    results = list(pool.map(lambda a, v: a.work.remote(v), values))   # in order
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from .. import api
from ..exceptions import GetTimeoutError

__all__ = ["ActorPool"]


class ActorPool:
    """Calls ``fn(actor, value)`` on whichever actor is idle; results come back in
    submission order (``get_next``) or as they finish (``get_next_unordered``)."""

    def __init__(self, actors: list) -> None:
        self._idle = list(actors)
        self._future_of: dict = {}        # ref -> (index, actor)
        self._index_of: dict = {}         # index -> ref
        self._next_task = 0
        self._next_return = 0
        self._pending: list = []          # (fn, value) waiting for an idle actor

    def map(self, fn: Callable, values: Iterable) -> Iterator[Any]:
        """``fn(actor, v)`` for each value; the results in the values' order."""
        return self._map(fn, values, self.get_next)

    def map_unordered(self, fn: Callable, values: Iterable) -> Iterator[Any]:
        """As ``map``, the results as they finish."""
        return self._map(fn, values, self.get_next_unordered)

    def _map(self, fn: Callable, values: Iterable, next_result: Callable) -> Iterator[Any]:
        self._drain()
        for v in values:
            self.submit(fn, v)
        while self.has_next():
            yield next_result()

    def submit(self, fn: Callable, value: Any) -> None:
        """Run ``fn(actor, value)`` on an idle actor, or once one is idle."""
        if not self._idle:
            self._pending.append((fn, value))
            return
        actor = self._idle.pop()
        ref = fn(actor, value)
        self._future_of[ref] = (self._next_task, actor)
        self._index_of[self._next_task] = ref
        self._next_task += 1

    def has_next(self) -> bool:
        """Whether results are due (submitted and not yet returned)."""
        return bool(self._future_of)   # (values wait only while every actor is busy)

    def get_next(self, timeout: float | None = None) -> Any:
        """The next result in submission order (GetTimeoutError past ``timeout``)."""
        if not self.has_next():
            raise StopIteration("no more results to get")
        if self._next_return >= self._next_task:
            raise ValueError("get_next() after get_next_unordered() took the next result: "
                             "use one or the other")
        ref = self._index_of[self._next_return]
        if timeout is not None and not api.wait([ref], timeout=timeout)[0]:
            raise GetTimeoutError(f"ActorPool.get_next: no result within {timeout} s")
        del self._index_of[self._next_return]
        self._next_return += 1
        return self._finish(ref)

    def get_next_unordered(self, timeout: float | None = None) -> Any:
        """Whichever result is done first (GetTimeoutError past ``timeout``)."""
        if not self.has_next():
            raise StopIteration("no more results to get")
        ready, _ = api.wait(list(self._future_of), num_returns=1, timeout=timeout)
        if not ready:
            raise GetTimeoutError(f"ActorPool.get_next_unordered: no result within {timeout} s")
        ref = ready[0]
        index = self._future_of[ref][0]
        del self._index_of[index]
        self._next_return = max(self._next_return, index + 1)
        return self._finish(ref)

    def _finish(self, ref) -> Any:
        _, actor = self._future_of.pop(ref)
        self.push(actor)
        return api.get(ref)

    def _drain(self) -> None:
        while self.has_next():
            self.get_next_unordered()

    def has_free(self) -> bool:
        """Whether an actor is idle (with no value waiting for one)."""
        return bool(self._idle) and not self._pending

    def pop_idle(self):
        """Take an idle actor out of the pool (None if none is idle)."""
        return self._idle.pop() if self.has_free() else None

    def push(self, actor) -> None:
        """Add an actor (back) to the pool; a waiting value goes to it."""
        self._idle.append(actor)
        if self._pending:
            fn, value = self._pending.pop(0)
            self.submit(fn, value)
