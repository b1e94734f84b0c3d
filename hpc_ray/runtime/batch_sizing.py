"""How many queued tasks a worker rank hands an idle executor at once: of a
backlog, about EXECUTOR_BATCH_SECONDS of work at each function's average time on
the rank (``FunctionTimes``). Pure; used by ``worker_state.WorkerState``."""
from __future__ import annotations

#: Most tasks sent to an executor at once (batches amortize the pipe's cost).
EXECUTOR_BATCH = 64
#: An executor's batch of a backlog holds about this many seconds of work, at
#: each task's function's average time on the rank (``batch_length``), small
#: against the head's PREFETCH_SECONDS. Each batch costs the rank and the
#: executor a wake-up and a round trip on the pipe, which with more ranks than
#: cores were most of their CPU per tiny task (benchmarks/ranks.py).
EXECUTOR_BATCH_SECONDS = 0.002
#: A function's average counts once this many of its tasks ended on the rank:
#: a helper that returned at once the first time may wait for minutes the next.
TIMED_AFTER = 8
#: Functions whose times a rank keeps; past this many it starts afresh.
MAX_TIMED_FUNCTIONS = 1024


def batch_length(fns, share: int, fn_seconds: dict) -> int:
    """How many queued tasks (``fns``: their function ids, in queue order) an idle
    executor takes, ``share`` being its part of the queue.

    What an executor holds cannot be given back to the head for an idle rank, so
    by default only a backlog is batched: an eighth of the share (a short queue
    goes one task at a time). A function with an average time here
    (``fn_seconds``, see ``FunctionTimes``) is batched by time instead: up to
    the whole share, about EXECUTOR_BATCH_SECONDS of work. A function with none
    counts as an eighth of that time."""
    unknown = EXECUTOR_BATCH_SECONDS / max(1, share // 8)
    spent = 0.0
    n = 0
    for fn in fns:
        if n >= share:
            break
        cost = fn_seconds.get(fn, unknown)
        if n and spent + cost > EXECUTOR_BATCH_SECONDS:
            break
        spent += cost
        n += 1
    return n


class FunctionTimes:
    """How long each function's tasks ran on this rank: ``seconds`` holds a moving
    average per function once TIMED_AFTER of its tasks ended."""

    __slots__ = ("seconds", "warming")

    def __init__(self) -> None:
        self.seconds: dict = {}
        #: function id -> (tasks ended, their total seconds), before TIMED_AFTER.
        self.warming: dict = {}

    def record(self, fn, took: float) -> None:
        seconds = self.seconds
        avg = seconds.get(fn)
        if avg is not None:
            seconds[fn] = 0.9 * avg + 0.1 * took
            return
        n, total = self.warming.get(fn, (0, 0.0))
        n += 1
        total += took
        if n < TIMED_AFTER:
            if len(self.warming) >= MAX_TIMED_FUNCTIONS:
                self.warming.clear()
            self.warming[fn] = (n, total)
            return
        self.warming.pop(fn, None)
        if len(seconds) >= MAX_TIMED_FUNCTIONS:
            seconds.clear()
        seconds[fn] = total / n
