"""The processes a rank's tasks started and left running, ended with the rank.

A task may start a process and return without waiting for it
(``subprocess.Popen``, a shell's ``cmd &``). Slurm ends such a process with
the job (its cgroup); a plain ``mpiexec`` does not, and it would outlive the
job. Every executor's environment carries ``MARK`` (its session and rank), and
so does every process started under it unless its starter replaced the
environment. When the rank ends, after its executors, it ends every process of
its user that carries its mark: SIGTERM, then SIGKILL for one still there after
``GRACE`` seconds. Rank 0, at ``shutdown()``, ends those of every rank of the
session on its node: a rank that died there left its strays to it.
"""
from __future__ import annotations

import os
import signal

from ..transport.wait import WaitTimeout, wait_until

MARK = "HPC_RAY_STARTED_UNDER"

#: How long a stray may take to end after SIGTERM.
GRACE = 1.0


def mark(session_id: str | None, rank: int) -> str:
    """The value of ``MARK`` in the executors of ``rank`` in ``session_id``."""
    return f"{session_id}/rank{rank}"


def session_prefix(session_id: str | None) -> str:
    """What ``MARK`` starts with in the executors of every rank of ``session_id``."""
    return f"{session_id}/rank"


def find(value: str, prefix: bool = False) -> list[int]:
    """The pids of this user's processes whose environment has ``MARK=value``
    (with ``prefix``: a value that starts with ``value``)."""
    needle = f"\0{MARK}={value}".encode() + (b"" if prefix else b"\0")
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:   # gone, or another user's
            continue
        if needle in b"\0" + env:
            found.append(int(name))
    return found


#: Processes left alone: they end on their own once their clients have, and
#: clean up only then. torch's shared-memory manager unlinks its /dev/shm files
#: about 4 s after its last client went; signalled, it left them.
SELF_ENDING = ("torch_shm_manag",)   # (/proc/PID/comm keeps 15 characters)


def end(value: str, prefix: bool = False) -> list[int]:
    """End the processes ``find`` finds, but the ``SELF_ENDING``; their pids."""
    def strays():
        return [pid for pid in find(value, prefix) if _name(pid) not in SELF_ENDING]
    pids = strays()
    if pids:
        _signal(pids, signal.SIGTERM)
        try:
            # Each poll reads /proc: no other process waits on it.
            wait_until(lambda: not strays(), timeout=GRACE, cap=0.05,
                       what="stray processes to end")
        except WaitTimeout:
            _signal(strays(), signal.SIGKILL)
    return pids


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
