"""The object table's copies between nodes (``runtime/head/objects.py``) as a
state machine: objects sealed on node 0, readers on node 1 asking for them (a
fetch plan, or the copy already there), the planned copies landing in any
order, and holds released at any step. Invariants after every step:

- node 1 holds at most one block per object, and readers asking while a copy
  is on its way are planned into that same block (one copy per node);
- every block of node 1's store is a live object's copy (landed or on its way)
  or a block whose planned copies have not all landed yet: nothing is freed
  twice, nothing leaks once every copy has landed and every hold is gone.
"""
from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import settings, strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402

from hpc_ray.runtime.head.objects import ObjectTable  # noqa: E402
from hpc_ray.runtime.store import BLOCK  # noqa: E402
from hpc_ray.transport.messages import FETCH_PLAN  # noqa: E402
from hpc_ray.transport.serialization import SHM  # noqa: E402

STORE = 64 * BLOCK


def _blocks(size: int) -> int:
    return max(BLOCK, (size + BLOCK - 1) // BLOCK * BLOCK)


class CopiesMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = ObjectTable([0, 1], STORE, {0: 1, 1: 2})
        self.next_oid = 1
        self.holds: list[int] = []           # one entry per hold taken
        self.in_flight: list[tuple] = []     # (oid, local record) of copies planned

    @rule(size=st.sampled_from([BLOCK, 3 * BLOCK]))
    def seal_on_node_0(self, size):
        off = self.table.alloc(0, size)
        if off is None:
            return
        oid, self.next_oid = self.next_oid, self.next_oid + 1
        self.table.hold([oid])
        self.holds.append(oid)
        self.table.seal(oid, (SHM, 0, off, size, None, None), None)

    @rule(data=st.data())
    @precondition(lambda self: self.holds)
    def reader_on_node_1(self, data):
        oid = data.draw(st.sampled_from(self.holds))
        self.table.hold([oid])               # the reader's task holds its argument
        self.holds.append(oid)
        e = self.table[oid]
        copying = e.copying.get(1)
        rec = self.table.record_for(oid, 1)
        if rec[0] == FETCH_PLAN:
            local = rec[3]
            if copying is not None:
                assert local == copying, "a second copy of one object on one node"
            self.in_flight.append((oid, local))
        else:
            assert rec == e.locations.get(1), rec

    @rule(data=st.data())
    @precondition(lambda self: self.in_flight)
    def copy_lands(self, data):
        i = data.draw(st.integers(0, len(self.in_flight) - 1))
        oid, local = self.in_flight.pop(i)
        self.table.add_location(oid, local)

    @rule(data=st.data())
    @precondition(lambda self: self.holds)
    def release(self, data):
        i = data.draw(st.integers(0, len(self.holds) - 1))
        self.table.release([self.holds.pop(i)])

    @invariant()
    def one_block_per_object_and_node_and_none_lost(self):
        blocks = {}
        for e in self.table.entries.values():
            landed, coming = e.locations.get(1), e.copying.get(1)
            assert landed is None or coming is None
            for rec in (landed, coming):
                if rec is not None:
                    blocks[rec[2]] = rec[3]
        for (node, off), due in self.table.arrivals.items():
            assert node == 1 and due > 0
            blocks.setdefault(off, next(local[3] for _, local in self.in_flight
                                        if local[2] == off))
        assert self.table.allocators[1].used == sum(map(_blocks, blocks.values()))
        assert sum(self.table.arrivals.values()) == len(self.in_flight)
        live = sum(_blocks(e.record[3]) for e in self.table.entries.values()
                   if e.record is not None)
        assert self.table.allocators[0].used == live


CopiesMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40,
                                           deadline=None)
test_object_copies = CopiesMachine.TestCase
