"""The head's signal history under its budget, driven by hypothesis: sources send
signals of random sizes, receivers poll with their cursors, sources are
forgotten; the budget is small, so the oldest signals go all along.

After every step: the books match what is kept, the budget holds (only a single
newest signal may exceed it), and each receiver gets what every source sends
next, in order and once, however much was dropped before (a busy actor's
signals were dropped whole, its later ones then started again at 0, behind the
receivers' cursors, and were never heard)."""
from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hpc_ray.runtime.head.history import SIGNAL_BYTES, Signals

SOURCES = [("actor", 1), ("actor", 2), ("task", 3)]
RECEIVERS = 2
BUDGET = 40 * SIGNAL_BYTES


class SignalHistory(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.signals = Signals(BUDGET)
        self.sent = {s: 0 for s in SOURCES}            # signals each source sent so far
        self.cursors = [{} for _ in range(RECEIVERS)]
        self.heard = [{s: -1 for s in SOURCES} for _ in range(RECEIVERS)]  # newest number heard

    @rule(source=st.sampled_from(SOURCES), size=st.integers(0, 3 * SIGNAL_BYTES))
    def send(self, source, size):
        number = self.sent[source]
        self.sent[source] += 1
        self.signals.add(source, number.to_bytes(4, "big") + bytes(size),
                         return_ids=(source[1] * 100,) if source[0] == "task" else ())

    @rule(receiver=st.integers(0, RECEIVERS - 1))
    def poll(self, receiver):
        cursors = self.cursors[receiver]
        for source in SOURCES:
            blobs, after = self.signals.since(source, cursors.get(source, 0))
            numbers = [int.from_bytes(b[:4], "big") for b in blobs]
            assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
            assert not numbers or numbers[0] > self.heard[receiver][source]   # none twice
            # Every signal kept that this receiver has not heard, and only those: a
            # source's newest signals are heard however many older ones went.
            kept = self.signals.by_source.get(source)
            unheard = [n for n in (int.from_bytes(b[:4], "big") for b in kept.blobs)
                       if n > self.heard[receiver][source]] if kept else []
            assert numbers == unheard, (source, numbers, unheard)
            if numbers:
                self.heard[receiver][source] = numbers[-1]
            assert after >= cursors.get(source, 0)
            cursors[source] = after

    @precondition(lambda self: self.signals.by_source)
    @rule(data=st.data())
    def forget(self, data):
        source = data.draw(st.sampled_from(sorted(self.signals.by_source)))
        self.signals.forget(source)

    @invariant()
    def books_match(self):
        kept = sum(SIGNAL_BYTES + sum(SIGNAL_BYTES + len(b) for b in sent.blobs)
                   for sent in self.signals.by_source.values())
        kept += SIGNAL_BYTES * len(self.signals.task_of)
        assert self.signals.bytes == kept
        assert set(self.signals.task_of.values()) <= {s[1] for s in self.signals.by_source}

    @invariant()
    def within_budget(self):
        if self.signals.bytes > BUDGET:
            (only,) = self.signals.by_source.values()   # one newest signal over it
            assert len(only.blobs) == 1


TestSignalHistory = SignalHistory.TestCase
TestSignalHistory.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
