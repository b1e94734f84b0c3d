"""multiprocessing.connection's framing, parsed from a non-blocking socket's bytes.

A frame is a 4-byte big-endian length and that many bytes, or, for 2 GiB and
more, -1 then an 8-byte length. Both the rank's executor sockets and the
driver's direct channels (``direct.py``) are read and written this way, through
non-blocking buffers (``add_frame``/``write_pending``, ``read_available``/
``split_frames``).
"""
from __future__ import annotations

import os
import struct
import threading

#: Most bytes taken off a socket per read. Each reading thread reads into one
#: buffer of this size, kept: ``os.read(fd, 1 MiB)`` allocates and frees a
#: 1 MiB object every call, 27 us against 5 us here for a 200-byte message.
READ_CHUNK = 1 << 20
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
