"""What the head remembers of the past, within a memory budget.

Finished tasks (for ``tasks()``), timeline events (for ``timeline()``), signals
(for the experimental signal API) and dead actors (for the error a late call
gets) are kept newest last and dropped oldest first once their estimated size
passes the budget. Sizes are estimates — a fixed cost per record plus the
length of its strings and blobs — cheap enough for the task hot path.
"""
from __future__ import annotations

import collections

#: Default budget for all of history together (setting: HPC_RAY_HEAD_HISTORY_BYTES).
DEFAULT_BUDGET = 64 << 20

# Estimated bytes per record: a tuple with its floats and ints, plus its deque
# slot. benchmarks/head_memory.py measures what the budget does to rank 0's RSS.
TASK_RECORD_BYTES = 400
EVENT_BYTES = 350
SIGNAL_BYTES = 120
DEAD_ACTOR_BYTES = 300
#: Failed tasks whose error text is kept (``errors()``), the newest, and the
#: longest text kept of one (its start and its end, where the exception is).
FAILURES_KEPT = 1000
FAILURE_TEXT_CHARS = 4000


class BoundedLog:
    """A deque of records with a byte budget; counts what it dropped."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.items: collections.deque = collections.deque()
        self.sizes: collections.deque = collections.deque()
        self.bytes = 0
        self.dropped = 0

    def append(self, item, size: int) -> None:
        self.items.append(item)
        self.sizes.append(size)
        self.bytes += size
        self._trim()

    def extend(self, items: list, sizes: list) -> None:
        """``append`` of many at once (a batch of direct calls' summaries)."""
        self.items.extend(items)
        self.sizes.extend(sizes)
        self.bytes += sum(sizes)
        self._trim()

    def _trim(self) -> None:
        while self.bytes > self.budget and self.items:
            self.items.popleft()
            self.bytes -= self.sizes.popleft()
            self.dropped += 1

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class Signals:
    """Signals by source (("task", id) or ("actor", id)), oldest sources dropped first."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.by_source: collections.OrderedDict = collections.OrderedDict()
        self.task_of: dict[int, int] = {}     # return object id -> task id
        self.returns_of: dict[int, tuple] = {}  # task id -> its return ids
        self.bytes = 0
        self.dropped = 0

    def add(self, source: tuple, blob: bytes, return_ids=()) -> None:
        sigs = self.by_source.get(source)
        if sigs is None:
            sigs = self.by_source[source] = []
        sigs.append(blob)
        self.bytes += SIGNAL_BYTES + len(blob)
        if return_ids:
            self.returns_of[source[1]] = tuple(return_ids)
            for oid in return_ids:
                self.task_of[oid] = source[1]
                self.bytes += SIGNAL_BYTES
        while self.bytes > self.budget and len(self.by_source) > 1:
            self.dropped += len(self.forget(next(iter(self.by_source))))

    def get(self, source: tuple) -> list:
        return self.by_source.get(source, [])

    def forget(self, source: tuple) -> list:
        """Drop ``source``'s signals (and its return ids' entries); returns them."""
        sigs = self.by_source.pop(source, None) or []
        self.bytes -= sum(SIGNAL_BYTES + len(b) for b in sigs)
        if source[0] == "task":
            for oid in self.returns_of.pop(source[1], ()):
                self.task_of.pop(oid, None)
                self.bytes -= SIGNAL_BYTES
        return sigs


class History:
    """The four bounded logs, sharing one budget (half to tasks, a quarter to events),
    and the newest failed tasks' error texts (at most FAILURES_KEPT, each cut to
    FAILURE_TEXT_CHARS: about 4 MB)."""

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        self.budget = budget
        self.tasks = BoundedLog(budget // 2)
        self.events = BoundedLog(budget // 4)
        self.signals = Signals(budget // 8)
        self.dead_actors = collections.OrderedDict()   # actor id -> (class name, reason)
        self.dead_budget = max(1, (budget // 8) // DEAD_ACTOR_BYTES)
        self.dead_dropped = 0
        #: task id -> the text of the error it failed with (``errors()``' message).
        self.failures: collections.OrderedDict = collections.OrderedDict()

    def task_finished(self, summary: tuple) -> None:
        self.tasks.append(summary, TASK_RECORD_BYTES + len(summary[1]))

    def tasks_finished(self, summaries: list) -> None:
        """``task_finished`` of each of ``summaries``."""
        self.tasks.extend(summaries, [TASK_RECORD_BYTES + len(s[1]) for s in summaries])

    def event(self, ev) -> None:
        self.events.append(ev, EVENT_BYTES)

    def events_added(self, events: list) -> None:
        """``event`` of each of ``events``."""
        self.events.extend(events, [EVENT_BYTES] * len(events))

    def task_failed(self, task_id: int, text: str) -> None:
        if len(text) > FAILURE_TEXT_CHARS:
            keep = FAILURE_TEXT_CHARS // 2
            text = f"{text[:keep]}\n[...]\n{text[-keep:]}"
        self.failures[task_id] = text
        if len(self.failures) > FAILURES_KEPT:
            self.failures.popitem(last=False)

    def actor_dead(self, actor_id: int, class_name: str, reason: str) -> None:
        self.dead_actors[actor_id] = (class_name, reason)
        while len(self.dead_actors) > self.dead_budget:
            self.dead_actors.popitem(last=False)
            self.dead_dropped += 1
