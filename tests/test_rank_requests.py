"""A worker rank's table of its executors' requests (``runtime/rank_requests.py``)
as a state machine: processes ask, the head answers in any order (a get's answer
may reserve store blocks for copies), and a process dies at any step.

Invariants after every step:
- an answer reaches a process only if it is alive and asked that request, once;
- no request of a dead process is pending, except an ALLOC whose answer is due;
- every store block the head handed out (an ALLOC's, a fetch plan's) is either
  with a live process or given back, exactly once;
- once every answer has arrived, nothing is pending.
"""
from __future__ import annotations

import collections
import itertools

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings, strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402

from hpc_ray.runtime.rank_requests import ALLOC, CALL, GET, WAIT, RankRequests  # noqa: E402
from hpc_ray.transport.messages import FETCH_PLAN  # noqa: E402
from hpc_ray.transport.serialization import RAW, SHM  # noqa: E402


class Proc:
    def __init__(self, n: int) -> None:
        self.n = n
        self.alive = True
        self.asked: set[int] = set()          #: its own request ids, unanswered
        self.blocks: set[int] = set()         #: store blocks it was handed


class RankRequestsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = RankRequests()
        self.procs: list[Proc] = []
        self.offsets = itertools.count(1)
        #: What the head owes: rank id -> (kind, process, its id, head knows it died).
        self.at_head: dict[int, list] = {}
        self.cancelled: set[int] = set()      #: ids the rank told the head to forget
        self.handed: collections.Counter = collections.Counter()   # block -> holders
        self.given_back: collections.Counter = collections.Counter()
        self.reqs = itertools.count(1)

    def _live(self) -> list[Proc]:
        return [p for p in self.procs if p.alive]

    @rule()
    def process_starts(self):
        if len(self.procs) < 5:
            self.procs.append(Proc(len(self.procs)))

    @rule(data=st.data(), kind=st.sampled_from([GET, WAIT, ALLOC, CALL]))
    @precondition(lambda self: self._live())
    def process_asks(self, data, kind):
        proc = data.draw(st.sampled_from(self._live()))
        req = next(self.reqs)
        ids = [1, 2] if kind == GET else 900 if kind == ALLOC else None
        rreq = self.table.ask(proc, req, kind, ids)
        assert rreq not in self.at_head
        proc.asked.add(req)
        self.at_head[rreq] = [kind, proc, req]

    @rule(data=st.data(), plans=st.integers(0, 2), room=st.booleans())
    @precondition(lambda self: [r for r in self.at_head if r not in self.cancelled])
    def head_answers(self, data, plans, room):
        # The head answers what it has not been told to forget (ALLOCs always).
        rreq = data.draw(st.sampled_from(sorted(r for r in self.at_head
                                                if r not in self.cancelled)))
        kind, proc, req = self.at_head.pop(rreq)
        reserved = []
        if kind == GET:
            payload = [(RAW, 1)]
            for _ in range(plans):
                off = next(self.offsets)
                reserved.append(off)
                payload.append((FETCH_PLAN, 3, (SHM, 1, 0, 100, 0, []),
                                (SHM, 0, off, 100, 0, [])))
        elif kind == ALLOC:
            off = next(self.offsets) if room else None
            payload = (0, off, 1 << 20)
            if off is not None:
                reserved.append(off)
        elif kind == WAIT:
            payload = [1, 2]
        else:
            payload = (True, None)
        r, give_back = self.table.answered(rreq, payload)
        for off, _size in give_back:
            self.given_back[off] += 1
        if r is None:
            assert not proc.alive, "an answer for a live process was dropped"
            assert sorted(off for off, _ in give_back) == sorted(reserved)
            return
        assert give_back == []
        assert r.owner is proc and proc.alive and r.req == req and req in proc.asked
        proc.asked.discard(req)
        proc.blocks.update(reserved)
        for off in reserved:
            self.handed[off] += 1

    @rule(data=st.data())
    @precondition(lambda self: self._live())
    def process_dies(self, data):
        proc = data.draw(st.sampled_from(self._live()))
        proc.alive = False
        forgotten = self.table.process_gone(proc)
        for rreq in forgotten:
            assert self.at_head[rreq][1] is proc and self.at_head[rreq][0] != ALLOC
            # The head forgets them once it reads PROCESS_ENDED, unless its answer
            # was already on the way: both orders are possible.
            self.cancelled.add(rreq)
        for off in proc.blocks:       # its unsealed blocks go back with PROCESS_ENDED
            self.given_back[off] += 1
            self.handed[off] -= 1
        proc.blocks = set()

    @rule(data=st.data())
    @precondition(lambda self: [r for r in self.at_head if r in self.cancelled])
    def answer_already_on_its_way(self, data):
        # The head had answered before it heard of the death.
        rreq = data.draw(st.sampled_from(sorted(r for r in self.at_head
                                                if r in self.cancelled)))
        self.cancelled.discard(rreq)
        kind = self.at_head[rreq][0]
        self.head_answers_one(rreq, kind)

    def head_answers_one(self, rreq, kind):
        _, proc, _ = self.at_head.pop(rreq)
        off = next(self.offsets)
        payload = [(FETCH_PLAN, 3, (SHM, 1, 0, 100, 0, []), (SHM, 0, off, 100, 0, []))] \
            if kind == GET else [1] if kind == WAIT else (True, None)
        r, give_back = self.table.answered(rreq, payload)
        assert r is None
        for o, _ in give_back:
            self.given_back[o] += 1
        if kind == GET:
            assert give_back == [(off, 100)]

    @rule(data=st.data())
    @precondition(lambda self: [r for r in self.at_head if r in self.cancelled])
    def head_forgets(self, data):
        rreq = data.draw(st.sampled_from(sorted(r for r in self.at_head
                                                if r in self.cancelled)))
        self.cancelled.discard(rreq)
        del self.at_head[rreq]

    @invariant()
    def pending_is_what_live_processes_asked_and_dead_allocs(self):
        for rreq, r in self.table.pending.items():
            if r.owner.alive:
                assert r.req in r.owner.asked
            else:
                assert r.kind == ALLOC and r.gone, f"{r.kind} of a dead process pending"
        assert set(self.table.pending) <= set(self.at_head)

    @invariant()
    def every_block_is_held_or_given_back_once(self):
        for off, n in self.given_back.items():
            assert n == 1, f"block {off} given back {n} times"
        for off, n in self.handed.items():
            assert n in (0, 1)
            holders = [p for p in self.procs if off in p.blocks]
            assert len(holders) == n and all(p.alive for p in holders)

    def teardown(self):
        # Every answer arrives (or is forgotten): nothing stays pending.
        for rreq in sorted(self.at_head):
            kind = self.at_head[rreq][0]
            if rreq in self.cancelled:
                del self.at_head[rreq]
            else:
                self.table.answered(rreq, (0, None, 1) if kind == ALLOC else [1])
                del self.at_head[rreq]
        for proc in self._live():
            proc.alive = False
            assert self.table.process_gone(proc) == []
        assert not self.table


RankRequestsMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40,
                                                 deadline=None,
                                                 suppress_health_check=list(HealthCheck))
test_rank_requests_machine = RankRequestsMachine.TestCase


def test_an_alloc_answered_after_its_process_died_gives_the_block_back():
    table = RankRequests()
    ex = object()
    rreq = table.ask(ex, 7, ALLOC, 4096)
    assert table.process_gone(ex) == []          # the head answers every ALLOC
    assert table.answered(rreq, (0, 123, 1 << 20)) == (None, [(123, 4096)])
    assert not table


def test_a_get_answered_after_its_process_died_gives_its_fetch_copies_back():
    table = RankRequests()
    ex = object()
    rreq = table.ask(ex, 3, GET, [10, 11])
    assert table.process_gone(ex) == [rreq]
    plan = (FETCH_PLAN, 2, (SHM, 1, 0, 64, 0, []), (SHM, 0, 555, 64, 0, []))
    assert table.answered(rreq, [(RAW, 1), plan]) == (None, [(555, 64)])
