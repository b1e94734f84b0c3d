"""The actor's side of direct calls (``peer_calls``): its listening socket, its
callers' sockets, the calls they sent and the pins on refs nested in results.

The executor of an actor that takes direct calls opens one (``PeerServer.open``)
when the actor is created; its wait loop (``executor_transport``) reads the
callers' sockets through ``readers`` and the calls join the executor's inbox.
"""
from __future__ import annotations

import os

from ..transport import direct
from ..transport.channel import FAIR_READ, Channel
from ..transport import messages as m
from ..transport import placement
from . import context
from .peer_calls import address


class PeerServer:
    """The actor's side: the listening socket, its callers, pins on nested refs."""

    def __init__(self, listener, readers: dict, channels: dict, lock, hello: tuple) -> None:
        self.listener = listener
        #: The first frame to each caller: which actor process and rank this is.
        self.hello = hello
        self.readers = readers
        self.channels = channels
        self.lock = lock
        self.callers: dict[int, Channel] = {}
        #: task id -> the channel its call came on, until answered.
        self.calls: dict[int, Channel] = {}
        #: (channel fd, task id) -> refs kept alive for the caller.
        self.pins: dict[tuple, list] = {}
        #: Results not sent yet, per caller's channel (the executor sends them at
        #: its flushes: a batch of calls is answered in a few frames), and how many.
        self.answers: dict = {}
        self.queued = 0
        #: What the actor holds (GPU ids, resources): a direct call runs with it.
        self.held = None
        #: Where its callers run: it moves off a polling caller's CPU.
        self.neighbour = placement.Neighbour()
        readers[listener.fileno()] = self._accept

    @classmethod
    def open(cls, session_id: str, actor_id: int, readers: dict, channels: dict, lock,
             rank: int = -1):
        sock, _ = direct.listen_at(address(session_id, actor_id))
        if sock is None:
            return None
        return cls(sock, readers, channels, lock, (m.DIRECT_HELLO, actor_id, os.getpid(), rank))

    def _accept(self) -> list:
        for ch in direct.accept(self.listener):
            self.callers[ch.fd] = ch
            self.channels[ch.fd] = ch
            self.readers[ch.fd] = lambda ch=ch: self._read(ch)
            with self.lock:
                ch.send([self.hello])
        return []

    def _read(self, ch: Channel) -> list:
        batches = ch.read(FAIR_READ, "an actor from a caller")
        if batches is None:
            self._drop(ch)
            return []
        calls = []
        for msgs in batches:
            if m.CHECKING:
                m.check_all(msgs, f"actor process {os.getpid()} from a caller")
            for msg in msgs:
                if msg[0] == m.EXECUTE:
                    _, spec = msg
                    spec[m.T_RES] = self.held
                    self.calls[spec[m.T_ID]] = ch
                    calls.append(msg)
                elif msg[0] == m.UNPIN:
                    _, task_id = msg
                    self.pins.pop((ch.fd, task_id), None)
                elif msg[0] == m.CALLER_CPU:
                    self.neighbour.caller_at(*msg[1:])
        return calls

    def _drop(self, ch: Channel) -> None:
        fd = ch.fd
        self.callers.pop(fd, None)
        self.channels.pop(fd, None)
        self.readers.pop(fd, None)
        for key in [k for k in self.pins if k[0] == fd]:
            del self.pins[key]
        ch.close()

    def answer(self, tid: int, msg: tuple, contained) -> bool:
        """Queue a direct call's result for its caller (sent by ``send_answers``);
        False if ``tid`` came another way."""
        ch = self.calls.pop(tid, None)
        if ch is None:
            return False
        if self.callers.get(ch.fd) is ch:
            if contained:
                self.pins[(ch.fd, tid)] = [context.ObjectRef(c) for c in contained]
            queued = self.answers.get(ch)
            if queued is None:
                self.answers[ch] = [msg]
            else:
                queued.append(msg)
            self.queued += 1
        return True

    def send_answers(self) -> None:
        """Send the queued results, one frame per caller."""
        answers, self.answers, self.queued = self.answers, {}, 0
        with self.lock:
            for ch, msgs in answers.items():
                if self.callers.get(ch.fd) is ch:
                    ch.send(msgs)
