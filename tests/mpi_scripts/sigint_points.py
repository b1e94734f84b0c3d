"""Deliver a SIGINT at the n-th point of a call where CPython would run its handler.

CPython runs a Python signal handler only at its "eval breaker" checks: as a
function starts (``RESUME``), at a loop's backward jump, and after a call into
C code returns (a blocking C call, such as a lock's acquire or ``poll``, is
interrupted too, and the exception comes out of that call). A trace function
that sees every bytecode (``f_trace_opcodes``) stops at the same places: before
a frame's first instruction, after a ``JUMP_BACKWARD``, and after a ``CALL``
that did not run a Python function directly (that function's own start was the
check). There ``run_with_sigint_at`` calls hpc_ray's SIGINT handler, as the
interpreter would: it raises ``KeyboardInterrupt`` or, inside a ``deferred()``
section, leaves it pending until the section ends.

Only the calling thread is traced: as with real signals, the other threads run on.

The interpreter raises an exception from the check after a call inside that
``CALL`` (whose exception handler, a ``with``'s ``__exit__`` say, then runs); a
trace function can raise it only at the next instruction. Where that
instruction has another handler (the last call of a ``with`` block: the next
instruction calls ``__exit__`` and is outside the block), the point is skipped:
raised there, the exception would skip the ``__exit__`` the interpreter runs,
and leave a lock held that a real Ctrl-C never leaves held.
"""
from __future__ import annotations

import dis
import signal
import sys

from hpc_ray.runtime import interrupts

_CALLS = {dis.opmap[name] for name in ("CALL", "CALL_FUNCTION_EX") if name in dis.opmap}
_JUMP_BACK = {dis.opmap[name] for name in ("JUMP_BACKWARD", "JUMP_ABSOLUTE")
              if name in dis.opmap}


_HANDLERS: dict = {}


def _handler(code, offset: int):
    """The exception handler that covers the instruction at ``offset`` (None: none)."""
    entries = _HANDLERS.get(code)
    if entries is None:
        entries = _HANDLERS[code] = [(e.start, e.end, e.target) for e in
                                     getattr(dis.Bytecode(code), "exception_entries", ())]
    for start, end, target in entries:
        if start <= offset < end:
            return target
    return None


def run_with_sigint_at(n: int, fn):
    """Run ``fn()`` with one SIGINT handled at its n-th signal point.

    Returns ``(reached, value)``: whether it ran as far as that point, and
    ``fn``'s value (None when a KeyboardInterrupt ended it)."""
    count = 0
    last: dict = {}          # frame -> (opcode, offset) it ran last
    entered: dict = {}       # frame -> a Python function it called has started

    def tracer(frame, event, arg):
        nonlocal count
        if event == "call":
            if "/hypothesis/" in frame.f_code.co_filename:
                # Hypothesis's gc callback (installed process-wide by the suite's
                # property tests) runs wherever a collection starts: not a point
                # of the turn, and a KeyboardInterrupt there is "unraisable".
                return None
            frame.f_trace_opcodes = True
            if frame.f_back is not None:
                entered[frame.f_back] = True
            return tracer
        if event != "opcode":
            return tracer
        offset = frame.f_lasti
        op = frame.f_code.co_code[offset]
        prev, prev_offset = last.get(frame, (-1, -1))
        last[frame] = (op, offset)
        here = (prev == -1 or prev in _JUMP_BACK
                or (prev in _CALLS and not entered.get(frame)
                    and _handler(frame.f_code, prev_offset) == _handler(frame.f_code, offset)))
        entered[frame] = False
        if here:
            count += 1
            if count == n:
                sys.settrace(None)
                frame.f_trace = None
                interrupts._on_sigint(signal.SIGINT, frame)
        return tracer

    value = None
    sys.settrace(tracer)
    try:
        value = fn()
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
        # (One that met a protected function with no section after it in ``fn``
        # waits to be sent again: it came too late for this step.)
        interrupts._pending = False
        last.clear()
        entered.clear()
    return count >= n, value
