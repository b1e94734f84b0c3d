"""Framing on non-blocking sockets (``transport/channel.py``): a frame written in
one ``writev``, or in pieces when the socket is full; frames read whole, several
per read, or split across reads. Real socketpairs."""
from __future__ import annotations

import os
import socket

import pytest

from hpc_ray.transport.channel import Channel, read_frames, write_frame, write_pending


def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


@pytest.fixture
def ab():
    """A connected non-blocking socketpair, closed after the test."""
    a, b = pair()
    yield a, b
    a.close()
    b.close()


def read_all(sock, buf: bytearray) -> list[bytes]:
    got = read_frames(sock.fileno(), buf)
    assert got is not None
    return [bytes(f) for f in got]


def test_one_frame_comes_whole_from_one_read(ab):
    a, b = ab
    out = bytearray()
    assert write_frame(a.fileno(), out, b"hello") and not out
    inbuf = bytearray()
    got = read_frames(b.fileno(), inbuf)
    assert [bytes(f) for f in got] == [b"hello"] and not inbuf
    assert read_all(b, inbuf) == []          # nothing more: no frame, no EOF


def test_frames_together_and_split_across_reads(ab):
    a, b = ab
    out = bytearray()
    for data in (b"one", b"", b"three"):
        assert write_frame(a.fileno(), out, data)
    inbuf = bytearray()
    assert read_all(b, inbuf) == [b"one", b"", b"three"]
    # A frame whose length came but not all of its bytes waits in the buffer.
    os.write(a.fileno(), (10).to_bytes(4, "big") + b"01234")
    assert read_all(b, inbuf) == [] and len(inbuf) == 9
    os.write(a.fileno(), b"56789" + (2).to_bytes(4, "big") + b"ok")
    assert read_all(b, inbuf) == [b"0123456789", b"ok"] and not inbuf


def test_a_frame_larger_than_the_socket_takes_goes_out_in_pieces(ab):
    a, b = ab
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    big = os.urandom(1 << 20)
    out = bytearray()
    assert write_frame(a.fileno(), out, big)
    assert out, "the socket took a whole MiB at once: the test shows nothing"
    assert write_frame(a.fileno(), out, b"after")   # queued behind the rest
    inbuf = bytearray()
    got: list[bytes] = []
    while out or len(got) < 2:
        got += read_all(b, inbuf)
        write_pending(a.fileno(), out)
    assert got == [big, b"after"]


def test_a_closed_peer_reads_as_none_and_fails_writes():
    a, b = pair()
    b.close()
    try:
        assert write_frame(a.fileno(), bytearray(), b"x" * 100) is False
    finally:
        a.close()
    c, d = pair()
    c.close()
    try:
        assert read_frames(d.fileno(), bytearray()) is None
    finally:
        d.close()


def test_a_channel_carries_message_batches_and_says_when_it_is_backed_up():
    """Two ends of a socketpair as two Channels: batches of messages arrive whole
    and in order; a writer whose reader does not read is backed up past
    OUTBUF_HIGH, and drained once the reader has taken enough."""
    a, b = pair()
    left, right = Channel(a), Channel(b)
    try:
        assert left.send([(1, "x")]) and left.send([(2, "y"), (3, b"z")])
        assert right.read() == [[(1, "x")], [(2, "y"), (3, b"z")]]
        big = [(4, b"\0" * (256 << 10))]
        sent = 0
        while not left.backed_up():
            assert left.send(big)
            sent += 1
        assert not left.drained()
        got = []
        while len(got) < sent:
            got += right.read() or []
            left.write_some()
        assert got == [big] * sent and left.drained() and not left.outbuf
        right.close()
        assert left.read() is None            # the reader closed: EOF here
    finally:
        left.close()
        right.close()
