"""Direct channels between the driver (rank 0) and the actors' executors on its host,
and the sockets of direct calls (``runtime/peer_calls.py``), which use the same
listening and accepting; each end a ``channel.Channel``.

    driver (HeadLoop) ── EXECUTE (calls the head dispatches) ──▶ actor's executor
    driver (HeadLoop) ◀─ DIRECT_HELLO, then TASK_DONE / TASK_FAILED of those calls ──

(Calls that go through the head take this channel; calls a caller sends
straight to the actor take the actor's own socket instead.)

A sync actor call through the actor's worker rank crosses four processes'
wake-ups (driver -> rank over MPI, rank -> executor, and back); over a direct
channel it crosses two, and both sides block in the kernel instead of polling.
Everything else an executor sends (holds, puts, submissions, results with store
blocks or nested refs, actor exits) still goes through its rank, which keeps the
books of what the process holds; see ``executor.ExecutorContext.flush``.

The driver listens on an abstract Unix socket (no file to clean up) and accepts
only processes of its own user (``SO_PEERCRED``). Frames are multiprocessing's
(a 4-byte big-endian length, then a pickle), so an executor uses a plain
``multiprocessing.connection.Connection``.
"""
from __future__ import annotations

import os
import socket
import struct

from .channel import Channel

_CRED = struct.Struct("3i")   # struct ucred: pid, uid, gid


def listen(job_id: str) -> tuple[socket.socket | None, str | None]:
    """A non-blocking listening socket and its address, or (None, None) off Linux."""
    return listen_at(f"hpc_ray-{job_id}-{os.getpid()}-{os.urandom(6).hex()}")


def listen_at(address: str) -> tuple[socket.socket | None, str | None]:
    """``listen`` at a chosen abstract address; (None, None) if taken or off Linux."""
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
    """The executor's end: connected and blocking, or None when the driver is not there."""
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
