"""One end of a byte-stream link between two processes of a host: ``Channel``.

Every link a loop reads and writes without blocking is a ``Channel``:

    rank (WorkerLoop) ◀── socketpair ──▶ its executor         executor_procs.ExecutorProc
    caller            ◀── Unix socket ─▶ an actor's executor  peer_calls.Link, peer_server

The executor's own end of its rank's socket blocks (the executor has nothing
else to do while it waits to write); it is a ``multiprocessing.connection.Connection``,
which speaks the same framing.

Framing is multiprocessing.connection's: a 4-byte big-endian length and that
many bytes, or, for 2 GiB and more, -1 then an 8-byte length. A frame holds one
pickled list of messages. A channel's writes never block: what the socket did
not take waits in ``outbuf`` and goes out with ``write_some`` when the loop sees
the socket writable. The limits that keep one link from flooding its reader
(``READ_CHUNK``, ``FAIR_READ``, ``OUTBUF_HIGH``) are here, for every link.
"""
from __future__ import annotations

import os
import pickle
import socket
import struct
import threading

from . import messages as m
from .serialization import loads

#: Most bytes taken off a socket per read. Each reading thread reads into one
#: buffer of this size, kept: ``os.read(fd, 1 MiB)`` allocates and frees a
#: 1 MiB object every call, 27 us against 5 us here for a 200-byte message.
READ_CHUNK = 1 << 20
#: Most bytes an actor reads from one caller at a time (a few hundred small
#: calls): a flooding caller's calls do not queue far ahead of the others'.
FAIR_READ = 64 << 10
#: Bytes waiting in a channel's ``outbuf`` past which its writer waits for the
#: reader (``backed_up``) before it queues more, down to half of it (``drained``).
OUTBUF_HIGH = 1 << 20
_local = threading.local()


def add_frame(buf: bytearray, data: bytes) -> None:
    """Append ``data`` to ``buf`` as one frame."""
    n = len(data)
    buf += struct.pack("!i", n) if n <= 0x7FFFFFFF else struct.pack("!iQ", -1, n)
    buf += data


_LENGTH = struct.Struct("!i")


def write_frame(fd: int, buf: bytearray, data: bytes) -> bool:
    """Send ``data`` as one frame after what ``buf`` holds (``add_frame`` then
    ``write_pending``). With nothing queued, the frame goes in one ``writev``
    of its length and ``data``, unjoined; what the socket did not take waits
    in ``buf``."""
    n = len(data)
    if buf or n > 0x7FFFFFFF:
        add_frame(buf, data)
        return write_pending(fd, buf)
    head = _LENGTH.pack(n)
    try:
        k = os.writev(fd, (head, data))
    except BlockingIOError:
        k = 0
    except OSError:
        return False
    if k < n + 4:
        buf += head[k:] if k < 4 else b""
        buf += memoryview(data)[max(0, k - 4):]
    return True


def read_chunk() -> memoryview:
    """This thread's read buffer (``READ_CHUNK`` bytes, kept)."""
    try:
        return _local.chunk
    except AttributeError:
        chunk = _local.chunk = memoryview(bytearray(READ_CHUNK))
        return chunk


def write_pending(fd: int, buf: bytearray) -> bool:
    """Write what ``buf`` holds to ``fd`` (non-blocking) until it would block;
    the rest stays in ``buf``. A dead peer's bytes are dropped (EOF on the
    read side reports it) and False returned."""
    while buf:
        try:
            k = os.write(fd, buf)
        except BlockingIOError:
            return True
        except OSError:
            buf.clear()
            return False
        del buf[:k]
    return True


def _read_into_chunk(fd: int, limit: int, chunk: memoryview) -> int | None:
    """Read what ``fd`` (non-blocking) has now, at most ``limit`` bytes, into
    ``chunk`` (this thread's read buffer): how many bytes (0: none were waiting),
    None at EOF or on an error (the peer is gone)."""
    try:
        n = os.readv(fd, [chunk if limit >= READ_CHUNK else chunk[:limit]])
    except BlockingIOError:
        return 0
    except OSError:
        return None
    return n or None


def read_available(fd: int, buf: bytearray, limit: int = READ_CHUNK) -> bool | None:
    """Append the bytes ``fd`` (non-blocking) has now to ``buf``, at most ``limit``:
    True if any came, False if none were waiting, None at EOF or on an error (the
    peer is gone)."""
    chunk = read_chunk()
    n = _read_into_chunk(fd, limit, chunk)
    if not n:
        return None if n is None else False
    buf += chunk[:n]
    return True


def read_frames(fd: int, buf: bytearray, limit: int = READ_CHUNK) -> list | None:
    """The frames that are whole after reading what ``fd`` (non-blocking) has now,
    at most ``limit`` bytes, after what ``buf`` holds (a partial frame stays
    there); None at EOF or on an error. The usual read, one whole frame with
    nothing before it, is not copied: it comes as a view of this thread's read
    buffer, valid until the thread's next read."""
    if buf:
        got = read_available(fd, buf, limit)
        return None if got is None else split_frames(buf)
    chunk = read_chunk()
    n = _read_into_chunk(fd, limit, chunk)
    if not n:
        return None if n is None else []
    if n >= 4 and _LENGTH.unpack_from(chunk)[0] == n - 4:
        return [chunk[4:n]]
    buf += chunk[:n]
    return split_frames(buf)


def split_frames(buf: bytearray) -> list[bytes]:
    """Take every complete frame off the front of ``buf``; a partial one stays."""
    frames = []
    pos = 0
    while len(buf) - pos >= 4:
        n = struct.unpack_from("!i", buf, pos)[0]
        head = 4
        if n == -1:
            if len(buf) - pos < 12:
                break
            n = struct.unpack_from("!Q", buf, pos + 4)[0]
            head = 12
        if len(buf) - pos - head < n:
            break
        frames.append(bytes(buf[pos + head: pos + head + n]))
        pos += head + n
    del buf[:pos]
    return frames


# --- the channel ----------------------------------------------------------------------


class Channel:
    """One non-blocking end of a link: frames out through ``outbuf``, frames in
    through ``inbuf``. ``sock`` is kept to be closed with the channel (None when
    the caller owns the file descriptor's object)."""

    __slots__ = ("sock", "fd", "inbuf", "outbuf", "actor_id", "pid", "rank")

    def __init__(self, sock: socket.socket | None, fd: int | None = None) -> None:
        self.sock = sock
        self.fd = sock.fileno() if fd is None else fd
        os.set_blocking(self.fd, False)
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        #: The process at the other end, once the link says (a DIRECT_HELLO).
        self.actor_id: int | None = None
        self.pid = 0
        self.rank = -1

    def send(self, msgs: list) -> bool:
        """Queue ``msgs`` as one frame and write what the socket takes; False if
        the peer is gone."""
        return write_frame(self.fd, self.outbuf, pickle.dumps(msgs, protocol=5))

    def write_some(self) -> None:
        write_pending(self.fd, self.outbuf)

    def backed_up(self) -> bool:
        return len(self.outbuf) > OUTBUF_HIGH

    def drained(self) -> bool:
        return len(self.outbuf) <= OUTBUF_HIGH // 2

    def read_frames(self, limit: int = READ_CHUNK) -> list | None:
        """The frames that came whole (``read_frames``: a lone frame is a view of
        this thread's read buffer, valid until its next read); None at EOF."""
        return read_frames(self.fd, self.inbuf, limit)

    def read(self, limit: int = READ_CHUNK, who: str = "") -> list[list] | None:
        """The batches of messages that came whole, reading at most ``limit``
        bytes; None at EOF. ``who`` names the link in schema errors."""
        got = read_frames(self.fd, self.inbuf, limit)
        if got is None:
            return None
        out = [loads(frame) for frame in got]
        if m.CHECKING:
            for msgs in out:
                m.check_all(msgs, who or f"a channel from pid {self.pid}")
        return out

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
