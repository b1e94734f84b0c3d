"""The sockets of direct calls (``runtime/peer_calls.py``): an actor's executor
listens on one, and a caller on its host connects to it; each end a
``channel.Channel``.

The listener is an abstract Unix socket (no file to clean up), and it accepts
only processes of its own user (``SO_PEERCRED``).
"""
from __future__ import annotations

import os
import socket
import struct

from .channel import Channel

_CRED = struct.Struct("3i")   # struct ucred: pid, uid, gid


def listen_at(address: str) -> tuple[socket.socket | None, str | None]:
    """A non-blocking listening socket at an abstract address; (None, None) if
    taken or off Linux."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None, None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("\0" + address)
        sock.listen(256)
        sock.setblocking(False)
    except OSError:
        sock.close()
        return None, None
    return sock, address


def connect(address: str) -> socket.socket | None:
    """The caller's end: connected and blocking, or None when no one listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect("\0" + address)
    except OSError:
        sock.close()
        return None
    return sock


def accept(listener: socket.socket) -> list[Channel]:
    """Connections waiting on ``listener`` from processes of this user."""
    out = []
    while True:
        try:
            sock, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return out
        except OSError:
            return out
        try:
            cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
            _, uid, _ = _CRED.unpack(cred)
        except OSError:
            uid = -1
        if uid != os.getuid():
            sock.close()
            continue
        out.append(Channel(sock))
