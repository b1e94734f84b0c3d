"""multiprocessing.connection's framing, parsed from a non-blocking socket's bytes.

A frame is a 4-byte big-endian length and that many bytes, or, for 2 GiB and
more, -1 then an 8-byte length. Both the rank's executor sockets and the
driver's direct channels (``direct.py``) read them this way.
"""
from __future__ import annotations

import struct


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
