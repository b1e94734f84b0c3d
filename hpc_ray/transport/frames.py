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


def read_available(fd: int, buf: bytearray, limit: int = READ_CHUNK) -> bool | None:
    """Append the bytes ``fd`` (non-blocking) has now to ``buf``, at most ``limit``:
    True if any came, False if none were waiting, None at EOF or on an error (the
    peer is gone)."""
    chunk = getattr(_local, "chunk", None)
    if chunk is None:
        chunk = _local.chunk = memoryview(bytearray(READ_CHUNK))
    try:
        n = os.readv(fd, [chunk if limit >= READ_CHUNK else chunk[:limit]])
    except BlockingIOError:
        return False
    except OSError:
        return None
    if not n:
        return None
    buf += chunk[:n]
    return True


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
