"""What the head remembers of the past, within a memory budget.

Finished tasks (for ``tasks()``), timeline events (for ``timeline()``), signals
(for the experimental signal API) and dead actors (for the error a late call
gets) are kept newest last and dropped oldest first once their estimated size
passes the budget. Sizes are estimates — a fixed cost per record plus the
length of its strings and blobs — cheap enough for the task hot path.
"""
from __future__ import annotations

import collections
import itertools

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


class _Sent:
    """One source's signals kept: ``blobs[0]`` is number ``start`` of its signals.
    A source's numbers follow on from each other; they begin where the numbers of
    all signals added so far stood, so a source dropped and then heard again
    starts past every cursor into its old numbers."""

    __slots__ = ("start", "blobs")

    def __init__(self, start: int) -> None:
        self.start = start
        self.blobs: collections.deque = collections.deque()


class Signals:
    """Signals by source (("task", id) or ("actor", id)). Over the budget, the
    oldest signals of the source that sent least recently go first, and a source
    left with none goes too. A source's signals keep their numbers (``_Sent``),
    so a receiver's cursor into them stays right: a busy actor's were dropped
    whole, and its new ones then started again at 0, behind every receiver's
    cursor, and were never heard again."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.by_source: collections.OrderedDict = collections.OrderedDict()
        self.task_of: dict[int, int] = {}     # return object id -> task id
        self.returns_of: dict[int, tuple] = {}  # task id -> its return ids
        self.bytes = 0
        self.dropped = 0
        self.added = 0

    def add(self, source: tuple, blob: bytes, return_ids=()) -> None:
        sent = self.by_source.get(source)
        self.added += 1
        if sent is None:
            sent = self.by_source[source] = _Sent(self.added)
            self.bytes += SIGNAL_BYTES
        else:
            self.by_source.move_to_end(source)
        sent.blobs.append(blob)
        self.bytes += SIGNAL_BYTES + len(blob)
        if return_ids and source[1] not in self.returns_of:
            self.returns_of[source[1]] = tuple(return_ids)
            for oid in return_ids:
                self.task_of[oid] = source[1]
                self.bytes += SIGNAL_BYTES
        while self.bytes > self.budget:
            oldest, kept = next(iter(self.by_source.items()))
            if oldest == source and len(kept.blobs) <= 1:
                break   # (the newest signal stays)
            if not kept.blobs:
                self.forget(oldest)
                continue
            self.bytes -= SIGNAL_BYTES + len(kept.blobs.popleft())
            kept.start += 1
            self.dropped += 1

    def since(self, source: tuple, cursor: int) -> tuple[list, int]:
        """The signals ``source`` sent from its ``cursor``-th on that are kept, and
        the cursor after them."""
        sent = self.by_source.get(source)
        if sent is None:
            return [], cursor
        first = max(cursor - sent.start, 0)
        blobs = list(itertools.islice(sent.blobs, first, None))
        return blobs, max(cursor, sent.start + len(sent.blobs))

    def forget(self, source: tuple) -> list:
        """Drop ``source``'s signals (and its return ids' entries); returns them."""
        sent = self.by_source.pop(source, None)
        sigs = list(sent.blobs) if sent is not None else []
        if sent is not None:
            self.bytes -= SIGNAL_BYTES + sum(SIGNAL_BYTES + len(b) for b in sigs)
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
