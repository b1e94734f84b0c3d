"""Held calls (``runtime/held_calls.py``) as a state machine.

Hypothesis plays one caller: it makes calls to two actors and tasks, each
taking as arguments results of earlier calls (still in flight, held, answered
or through the head), sends what ``HeldCalls`` says may leave (as
``Caller._release`` does, each sent call going direct or through the head),
has actors answer direct calls in any order, drops refs, and lets the process
die at any step (what it held is gone with it, and no held result was ever
seen outside it).

After every step it checks:

- a call leaves only once none of its arguments is in flight or still held;
- a caller's calls to one actor leave in the order they were made;
- a call is held exactly when it was made taking a result in flight or held,
  or behind a held call to its actor (otherwise it left at once);
- every call made is held or has left, once; the books (results held, actors
  with held calls, refs dropped while held) match the held calls.
"""
from __future__ import annotations

import itertools

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import settings, strategies as st  # noqa: E402
from hypothesis.stateful import (RuleBasedStateMachine, invariant, precondition,  # noqa: E402
                                 rule)

from hpc_ray.runtime.held_calls import Held, HeldCalls  # noqa: E402

ACTORS = (None, 1, 2)     # None: a task


class HeldCallsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._start()

    def _start(self) -> None:
        self.held = HeldCalls()
        self.ids = itertools.count(100)
        self.pending: set[int] = set()     # direct results in flight
        self.made: list[tuple] = []        # (call id, target, refs, returns)
        self.sent: list[int] = []          # call ids, in the order they left
        self.sent_ok: list[bool] = []      # whether its refs were all out and answered
        self.results: list[int] = []       # every result made so far
        self.made_held: dict[int, bool] = {}
        self.dropped: set[int] = set()
        self.creates: dict[int, bool] = {}   # call id -> whether it creates its actor

    # --- events ------------------------------------------------------------------

    def _leave(self, call_id: int, refs, returns, direct: bool) -> None:
        unsent_returns = self.held.returns
        self.sent_ok.append(not any(r in self.pending or r in unsent_returns for r in refs))
        self.sent.append(call_id)
        if direct:
            self.pending.update(returns)

    @rule(actor=st.sampled_from(ACTORS), n_args=st.integers(0, 2), data=st.data(),
          direct=st.booleans(), creates=st.booleans())
    def make_call(self, actor, n_args, data, direct, creates):
        target = actor
        creates = creates and target is not None   # (an actor's creation)
        refs = [data.draw(st.sampled_from(self.results)) for _ in range(n_args)] \
            if self.results else []
        call_id = next(self.ids)
        returns = [next(self.ids)]
        self.results.extend(returns)
        self.made.append((call_id, target, refs, returns))
        self.creates[call_id] = creates
        must = self.held.must_hold(refs, target, self.pending)
        unsent = [c for c in self.made[:-1] if c[0] not in self.sent]
        behind = target is not None and any(c[1] == target for c in unsent)
        held_results = {r for c in unsent for r in c[3]}
        assert must == (behind or any(r in self.pending or r in held_results for r in refs))
        self.made_held[call_id] = must
        if must:
            self.held.add(Held(lambda c=call_id, r=refs, o=returns, d=direct:
                               self._leave(c, r, o, d), refs, target, returns, [],
                               creates))
        else:
            self._leave(call_id, refs, returns, direct)

    @rule()
    def release(self):
        for call in self.held.ready(self.pending):
            call.send()
            gone = self.held.sent(call)
            assert set(gone) <= self.dropped
            self.dropped.difference_update(gone)

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def answer(self, data):
        self.pending.discard(data.draw(st.sampled_from(sorted(self.pending))))

    @precondition(lambda self: self.results)
    @rule(data=st.data())
    def drop_ref(self, data):
        oid = data.draw(st.sampled_from(self.results))
        if self.held.forget(oid):
            self.dropped.add(oid)

    @rule()
    def process_dies_and_another_starts(self):
        # What it held is gone with it; no call that left took a held result
        # (an invariant), so nothing at the head waits for one.
        self._start()

    # --- invariants ----------------------------------------------------------------

    @invariant()
    def calls_leave_only_with_their_arguments_out_and_answered(self):
        assert all(self.sent_ok)

    @invariant()
    def calls_to_one_actor_leave_in_the_order_made(self):
        order = {c[0]: i for i, c in enumerate(self.made)}
        target = {c[0]: c[1] for c in self.made}
        for actor in ACTORS[1:]:
            mine = [order[c] for c in self.sent if target[c] == actor]
            assert mine == sorted(mine)

    @invariant()
    def every_call_is_held_or_has_left_once(self):
        held_ids = {id(h) for h in self.held.entries}
        assert len(held_ids) == len(self.held.entries)
        assert len(self.sent) == len(set(self.sent))
        assert len(self.sent) + len(self.held.entries) == len(self.made)
        left_at_once = [c for c in self.made_held if not self.made_held[c]]
        assert set(left_at_once) <= set(self.sent)

    @invariant()
    def an_actor_is_being_created_while_its_creation_is_held(self):
        # (kill() of such an actor is held behind it: the head does not know it.)
        sent = set(self.sent)
        for actor in ACTORS[1:]:
            assert self.held.creating(actor) == any(
                c[1] == actor and self.creates[c[0]] and c[0] not in sent for c in self.made)

    @invariant()
    def the_books_match_the_held_calls(self):
        entries = self.held.entries
        assert self.held.returns == {r for h in entries for r in h.returns}
        counts: dict = {}
        for h in entries:
            if h.target is not None:
                counts[h.target] = counts.get(h.target, 0) + 1
        assert self.held.actors == counts
        assert self.held.dropped <= self.held.returns
        assert self.held.dropped == self.dropped
        # No call that left takes a held result: a process that dies with held
        # calls leaves nothing at the head waiting for their results.
        refs_out = {r for c in self.made if c[0] in set(self.sent) for r in c[2]}
        assert not (self.held.returns & refs_out)


TestHeldCalls = HeldCallsMachine.TestCase
TestHeldCalls.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
