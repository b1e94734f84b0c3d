"""A worker rank's requests to the head on behalf of its executors: state, no I/O.

    executor ──GET/WAIT/ALLOC/CONTROL_CALL (its own req id)──▶ rank ──(rank's id)──▶ head
    executor ◀──────────────── REPLY (its own req id) ───────── rank ◀──── REPLY ─── head

Executors number their requests independently, so the rank renumbers each one
and remembers whose it is (``ask``). An answer goes back to the process that
asked (``answered``). When a process dies its requests are forgotten at once
(``process_gone``) and the head is told which, so that it never answers them
(``Head.process_ended``) — except its ALLOCs: the head answers every ALLOC in
the round it reads it, so that answer may already be on its way, and the block
it carries must be given back. An answer that arrives for a request already
forgotten (the head had answered before it heard of the death) gives back the
room it reserved: a get's fetch plans each reserve a block for a copy.

``WorkerLoop`` (``worker.py``) does the I/O; ``tests/test_rank_requests.py``
drives this table with hypothesis, processes dying at any step.
"""
from __future__ import annotations

import itertools
from typing import Any

from ..transport.messages import FETCH_PLAN

GET, WAIT, ALLOC, CALL = "get", "wait", "alloc", "call"


class Request:
    __slots__ = ("owner", "req", "kind", "ids", "gone")

    def __init__(self, owner: Any, req: int, kind: str, ids: Any) -> None:
        self.owner = owner      #: the process that asked (compared by identity)
        self.req = req          #: its own id for the request
        self.kind = kind        #: GET, WAIT, ALLOC or CALL
        self.ids = ids          #: a GET's object ids; an ALLOC's size
        self.gone = False       #: its process died (an ALLOC waiting for its answer)


class RankRequests:
    """Requests sent to the head and not answered yet, by the rank's id."""

    def __init__(self) -> None:
        self.pending: dict[int, Request] = {}
        self._ids = itertools.count(1)

    def __bool__(self) -> bool:
        return bool(self.pending)

    def ask(self, owner: Any, req: int, kind: str, ids: Any = None) -> int:
        """``owner`` sent request ``req``; returns the id the head will see."""
        rreq = next(self._ids)
        self.pending[rreq] = Request(owner, req, kind, ids)
        return rreq

    def rank_id(self, owner: Any, req: int) -> int | None:
        """The head's id of ``owner``'s pending request ``req`` (a WAIT_NOW's)."""
        for rreq, r in self.pending.items():
            if r.owner is owner and r.req == req:
                return rreq
        return None

    def answered(self, rreq: int, payload: Any) -> tuple[Request | None, list]:
        """The head answered ``rreq``: (the request to pass it on to, or None if
        its process is gone; store blocks to give back, as [(offset, size)])."""
        r = self.pending.pop(rreq, None)
        if r is None:
            return None, plan_blocks(payload)
        if r.gone:                          # (an ALLOC of a dead process)
            off = payload[1]
            return None, [] if off is None else [(off, r.ids)]
        return r, []

    def process_gone(self, owner: Any) -> list[int]:
        """``owner`` died: forget its requests (its ALLOCs wait for their answer,
        marked gone); returns the ids of those forgotten, for the head."""
        forgotten = []
        for rreq, r in list(self.pending.items()):
            if r.owner is owner:
                if r.kind == ALLOC:
                    r.gone = True
                else:
                    del self.pending[rreq]
                    forgotten.append(rreq)
        return forgotten


def plan_blocks(payload: Any) -> list:
    """The blocks a get's answer reserved for copies (fetch plans): [(offset, size)].
    Other answers (a wait's ids, a call's result) reserve nothing."""
    if not isinstance(payload, list):
        return []
    return [(r[3][2], r[3][3]) for r in payload
            if isinstance(r, tuple) and r and r[0] == FETCH_PLAN]
