"""The object table: who holds each object, where its bytes are, who waits for it.

An object's holders are counted in ``refs``: every process that has a live
``ObjectRef`` to it (one count per process, sent as HOLD/RELEASE), every task
that takes it as an argument or returns it (counted by the task transitions in
``tasks.py``), and every object whose pickled value contains a ref to it.
An entry is freed — its store blocks given back and the refs it contains
released — as soon as its value is known and nothing holds it. Freeing walks a
worklist, never recursion, so a chain of any length is released in one call.

A reader on a node without a copy gets a fetch plan: copy the bytes into a
block reserved on its node. Readers of that node who ask while the copy is on
its way get the same plan, into the same block (``copying``), so a node holds
one copy however many of its ranks read the object at once; each reader's rank
copies the same bytes, and the block is given back only after the last of
those copies has landed (``arrivals``).
"""
from __future__ import annotations

from ...transport.messages import FETCH_PLAN
from ...transport.serialization import ERROR, SHM, dumps
from ..store import Allocator
from ..values import store_full


class ObjectEntry:
    __slots__ = ("record", "refs", "contained", "locations", "copying", "waiters")

    def __init__(self) -> None:
        self.record: tuple | None = None       #: the value, once known
        self.refs = 0                          #: holders (see the module docstring)
        self.contained: list[int] = ()         #: refs pickled inside this value
        self.locations: dict[int, tuple] = {}  #: node -> SHM record of a copy there
        self.copying: dict[int, tuple] = {}    #: node -> the copy on its way there
        self.waiters: list = []                #: tasks and requests waiting for the value


class ObjectTable:
    """Entries by object id, and the placement of bytes in every node's store."""

    def __init__(self, nodes, store_size: int, node_leader: dict[int, int]) -> None:
        self.entries: dict[int, ObjectEntry] = {}
        self.allocators = {n: Allocator(store_size) for n in nodes}
        self.store_size = store_size
        self.node_leader = node_leader
        #: Copies each node has received from another node's store (one per
        #: transfer over MPI, duplicates included) and their bytes: ``ray.nodes()``.
        self.received = {n: 0 for n in nodes}
        self.received_bytes = {n: 0 for n in nodes}
        #: (node, offset) of a block copies were planned into -> the copies still
        #: to land there; the block is given back after the last one.
        self.arrivals: dict[tuple[int, int], int] = {}
        #: Ids whose freeing ``on_free(oid)`` is told of (actors' lifetime tokens).
        self.watched: set[int] = set()
        self.on_free = None

    def __contains__(self, oid: int) -> bool:
        return oid in self.entries

    def __getitem__(self, oid: int) -> ObjectEntry:
        return self.entries[oid]

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, oid: int) -> ObjectEntry | None:
        return self.entries.get(oid)

    def entry(self, oid: int) -> ObjectEntry:
        e = self.entries.get(oid)
        if e is None:
            e = self.entries[oid] = ObjectEntry()
        return e

    def ready(self, oid: int) -> bool:
        e = self.entries.get(oid)
        return e is not None and e.record is not None

    # --- holders ----------------------------------------------------------------

    def hold(self, oids) -> None:
        entries = self.entries
        for oid in oids:
            e = entries.get(oid)
            if e is None:
                e = entries[oid] = ObjectEntry()
            e.refs += 1

    def release(self, oids) -> None:
        """Drop one hold on each of ``oids``; free what nothing holds any more."""
        entries = self.entries
        todo = list(oids)
        while todo:
            oid = todo.pop()
            e = entries.get(oid)
            if e is None:
                continue
            e.refs -= 1
            if e.refs <= 0 and e.record is not None and not e.waiters:
                todo.extend(self._free(oid, e))

    def _free(self, oid: int, e: ObjectEntry):
        """Forget ``oid`` and give back its bytes; returns the refs it contained."""
        del self.entries[oid]
        rec = e.record
        if rec is not None and rec[0] == SHM:
            self.allocators[rec[1]].free(rec[2], rec[3])
        for copy in list(e.locations.values()) + list(e.copying.values()):
            if (copy[1], copy[2]) not in self.arrivals:   # (else the last arrival frees it)
                self.allocators[copy[1]].free(copy[2], copy[3])
        if oid in self.watched:
            self.watched.discard(oid)
            self.on_free(oid)
        return e.contained or ()

    # --- values -----------------------------------------------------------------

    def seal(self, oid: int, rec: tuple, contained) -> list:
        """The value of ``oid`` became known; returns the waiters to notify.

        A value that arrives twice (a retried task that did return after all)
        keeps the first; the second's store block is given back.
        """
        e = self.entries.get(oid)
        if e is None:
            e = self.entries[oid] = ObjectEntry()
        if e.record is not None:
            if rec[0] == SHM:
                self.allocators[rec[1]].free(rec[2], rec[3])
            return []
        e.record = rec
        if contained:
            e.contained = list(contained)
            self.hold(contained)
        waiters, e.waiters = e.waiters, []
        return waiters

    def free_if_unheld(self, oid: int) -> None:
        """Called after a seal's waiters ran: nothing may hold the value."""
        e = self.entries.get(oid)
        if e is not None and e.refs <= 0 and e.record is not None and not e.waiters:
            contained = self._free(oid, e)
            if contained:
                self.release(contained)

    # --- store bytes ------------------------------------------------------------

    def alloc(self, node: int, size: int) -> int | None:
        return self.allocators[node].alloc(size)

    def free_block(self, node: int, offset: int, size: int) -> None:
        self.allocators[node].free(offset, size)

    def add_location(self, oid: int, rec: tuple) -> None:
        """A copy of ``oid`` was made on ``rec``'s node (a fetch from another node)."""
        e = self.entries.get(oid)
        node = rec[1]
        self.received[node] = self.received.get(node, 0) + 1
        self.received_bytes[node] = self.received_bytes.get(node, 0) + rec[3]
        key = (node, rec[2])
        due = self.arrivals.get(key, 1) - 1
        if due:
            self.arrivals[key] = due
        else:
            self.arrivals.pop(key, None)
        planned = e.copying.get(node) if e is not None else None
        if planned is not None and planned[2] == rec[2]:
            del e.copying[node]
            e.locations[node] = planned        # the first of its copies landed
            return
        known = e.locations.get(node) if e is not None else None
        if (known is None or known[2] != rec[2]) and not due:
            # Freed meanwhile (its last copy landed), or a copy no plan made.
            self.allocators[node].free(rec[2], rec[3])

    def record_for(self, oid: int, node: int) -> tuple:
        """The record a reader on ``node`` should use (a fetch plan if it is elsewhere)."""
        rec = self.entries[oid].record
        if rec[0] != SHM or rec[1] == node:
            return rec
        e = self.entries[oid]
        local = e.locations.get(node)
        if local is not None:
            return local
        local = e.copying.get(node)
        if local is None:
            off = self.allocators[node].alloc(rec[3])
            if off is None:
                return (ERROR, dumps(store_full(rec[3], self.store_size, node)))
            local = e.copying[node] = (SHM, node, off, rec[3], rec[4], rec[5])
        key = (node, local[2])
        self.arrivals[key] = self.arrivals.get(key, 0) + 1
        return (FETCH_PLAN, self.node_leader[rec[1]], rec, local)
