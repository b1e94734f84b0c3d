"""Calls held in the caller until the direct results they take have come.

``.remote()`` returns at once, as in Ray, also when an argument is the ref of a
direct actor call (``peer_calls``) not answered yet. Such a call cannot leave:
the head has no object under that id to give it, and an actor taking it
directly would need the value. So it waits here, not in the user's thread, and
``caller.Caller`` sends it when those answers have come (``ready``): whenever
the caller reads answers, at the latest at the process's next get, wait or
control call. A task's or actor's process also sends them while it waits for
its next call, after the task that made them has ended (their answers may come
only once its result is out); an in-rank actor's method sends them before it
ends.

Held calls keep the caller's order per actor, and a call that takes a held
call's result, or calls its actor, is held behind it. A control call does not
wait for them (a kill() may be what ends the call they wait for), but a kill()
of an actor whose creation is held is held behind it (``creating``). The
actor's lifetime token counts among its creation's results, so its handle does
not leave the process before the creation does, nor is the token let go of.
A held call's results never leave the process before it does
(``Caller.promote`` sends it first), so a process that dies with held calls
leaves no object unmade at the head. Pure state: no I/O.
"""
from __future__ import annotations

import threading


class Held:
    """One held call: ``send()`` sends it; it takes ``refs``, goes to actor
    ``target`` (None: a task) and makes ``returns``. ``keep``: refs that keep the
    arguments' objects alive while it is held (the user's may die meanwhile).
    ``creates``: it is ``target``'s creation."""

    __slots__ = ("send", "refs", "target", "returns", "keep", "creates")

    def __init__(self, send, refs: list, target: int | None, returns: list,
                 keep: list, creates: bool = False) -> None:
        self.send = send
        self.refs = refs
        self.target = target
        self.returns = returns
        self.keep = keep
        self.creates = creates


class HeldCalls:
    """The calls a process holds, in the order they were made."""

    def __init__(self) -> None:
        self.entries: list[Held] = []
        #: Results of held calls, the actors they go to, and those results whose
        #: refs died while held (released once their call has left).
        self.returns: set[int] = set()
        self.actors: dict[int, int] = {}     # actor id -> held calls to it
        self.dropped: set[int] = set()
        #: Guards the sets above: ``forget`` runs in any thread (a ref's death).
        self.lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.entries)

    def must_hold(self, refs, target: int | None, pending) -> bool:
        """Whether a new call must be held: it takes a result still in flight
        (``pending``) or held, or goes to an actor that has a held call."""
        if target is not None and target in self.actors:
            return True
        returns = self.returns
        return any(r in pending or r in returns for r in refs)

    def add(self, held: Held) -> None:
        with self.lock:
            self.entries.append(held)
            self.returns.update(held.returns)
            target = held.target
            if target is not None:
                self.actors[target] = self.actors.get(target, 0) + 1

    def creating(self, actor_id: int) -> bool:
        """Whether ``actor_id``'s creation is held (the head does not know it yet)."""
        return actor_id in self.actors and any(
            held.creates and held.target == actor_id for held in self.entries)

    def ready(self, pending) -> list[Held]:
        """The held calls that may leave now, in order: none of their refs still
        in flight or made by a call before them that is held or leaves now (sent
        direct, its result will be in flight), no call to their actor held
        before them."""
        out = []
        actors: set = set()
        returns: set = set()
        for held in self.entries:
            if (held.target is not None and held.target in actors) or \
                    any(r in pending or r in returns for r in held.refs):
                if held.target is not None:
                    actors.add(held.target)
            else:
                out.append(held)
            returns.update(held.returns)
        return out

    def waiting_on(self, pending) -> list[int]:
        """The results in flight that held calls wait for."""
        return [r for held in self.entries for r in held.refs if r in pending]

    def sent(self, held: Held) -> list[int]:
        """``held`` has left: forget it. Returns its results whose refs died
        meanwhile (the caller releases them now)."""
        with self.lock:
            self.entries.remove(held)
            self.returns.difference_update(held.returns)
            target = held.target
            if target is not None:
                left = self.actors.pop(target) - 1
                if left:
                    self.actors[target] = left
            gone = [r for r in held.returns if r in self.dropped]
            self.dropped.difference_update(gone)
        return gone

    def forget(self, oid: int) -> bool:
        """The last ref to ``oid`` died: True if a held call makes it."""
        with self.lock:
            if oid in self.returns:
                self.dropped.add(oid)
                return True
        return False
