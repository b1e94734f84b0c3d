"""A worker rank's executor processes: starting them, their pipes, their end.

``ExecutorProc`` is the rank's handle on one executor process (its socket and
output pipes); what the process was sent and holds is its record in the rank's
state (``executor_record.Executor``, whose ``proc`` this is). ``ExecutorPool``
starts executors, collects their printed lines (log_to_driver) and waits for
them to exit; ``WorkerLoop`` holds one and tells its state what happened.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

from ..transport import messages as m
from ..transport.channel import Channel
from . import strays
from .executor_record import Executor
from .launched import LAUNCHER_PREFIXES


#: Bytes read from an executor's stdout/stderr at once.
OUTPUT_CHUNK = 1 << 16
#: A partial line is held until its newline, up to this many bytes; a longer
#: line is passed on in pieces (each printed with its own prefix).
LONGEST_LINE = 8 << 20
#: Most chunks read from one pipe per pass of the loop (1 MiB): the rest waits.
OUTPUT_READS = 16


class ExecutorProc:
    """The rank's handle on one executor process."""

    __slots__ = ("proc", "conn", "pid", "channel", "pipes")

    def __init__(self, proc: subprocess.Popen, conn: Connection) -> None:
        self.proc = proc
        self.conn = conn
        self.pid = proc.pid
        #: The rank's end of the executor's socket, non-blocking both ways: a rank
        #: that blocked writing to a busy executor, while that executor blocked
        #: writing its results to the rank, would deadlock. (Sent even before
        #: EXEC_READY: the bytes wait until the executor reads.) ``conn`` owns the
        #: file descriptor.
        self.channel = Channel(None, conn.fileno())
        #: Its stdout/stderr pipes (log_to_driver): fd -> [is stderr, partial line, file].
        self.pipes: dict[int, list] = {}
        for f, is_err in ((proc.stdout, False), (proc.stderr, True)):
            if f is not None:
                os.set_blocking(f.fileno(), False)
                self.pipes[f.fileno()] = [is_err, bytearray(), f]

    def alive(self) -> bool:
        return self.proc.poll() is None


class ExecutorPool:
    """Starts a rank's executor processes and collects what they print."""

    def __init__(self, rank: int, node: int, size: int, arena, cfg: dict,
                 log_to_driver: bool) -> None:
        self.rank = rank
        self.node = node
        self.size = size
        self.arena = arena
        self.cfg = cfg
        #: Executors' prints go to the driver (Ray's log_to_driver); otherwise they
        #: go wherever this rank's own output goes.
        self.log_to_driver = log_to_driver
        #: RUN_FUNCTION blobs every executor runs first, new ones included.
        self.run_functions: list[bytes] = []
        #: Lines read from executors and not yet sent: [(pid, is stderr, [lines])].
        self.logs: list = []
        #: In every executor's environment, and so in what its tasks start
        #: (``strays``): those still running when the rank ends are ended with it.
        self.stray_mark = strays.mark(cfg.get("session_id"), rank)

    def start(self, ex: Executor) -> None:
        """Start the process of ``ex`` (a record of the rank's state)."""
        parent_sock, child_sock = socket.socketpair()
        # (An import of mpi4py.MPI in user code must not join the job as a rank.)
        env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
        env[strays.MARK] = self.stray_mark
        env["HPC_RAY_EXECUTOR_CONFIG"] = json.dumps({
            "fd": child_sock.fileno(), "arena_fd": self.arena.fd,
            "store_size": self.arena.size, "node": self.node, "rank": self.rank,
            "size": self.size, "serial": ex.serial,
            "sys_path": self.cfg["sys_path"], "cwd": self.cfg.get("cwd"),
            # Names the actors' sockets for direct calls between executors.
            "session_id": self.cfg.get("session_id"),
        })
        fds = (child_sock.fileno(),) + ((self.arena.fd,) if self.arena.size else ())
        pipe = subprocess.PIPE if self.log_to_driver else None
        # A process group of its own: MPI that a task starts (MPI_Comm_spawn,
        # mpi4py.futures) ends with a SIGKILL to the group of the process that
        # started it, which was the rank's, and the rank went with it.
        proc = subprocess.Popen([sys.executable, "-m", "hpc_ray.runtime.executor"],
                                pass_fds=fds, env=env, stdin=subprocess.DEVNULL,
                                stdout=pipe, stderr=pipe, process_group=0)
        child_sock.close()
        ex.proc = ExecutorProc(proc, Connection(parent_sock.detach()))
        ex.pid = proc.pid
        if self.run_functions:
            ex.proc.channel.send([(m.RUN_FUNCTION, b) for b in self.run_functions])

    # --- executors' output (log_to_driver) ---------------------------------------

    def read_output(self, p: ExecutorProc, fd: int | None = None) -> None:
        """Move the whole lines ``p`` printed so far into ``logs``."""
        for pfd in (fd,) if fd is not None else tuple(p.pipes):
            pipe = p.pipes.get(pfd)
            if pipe is None:
                continue
            is_err, buf, f = pipe
            eof = False
            for _ in range(OUTPUT_READS):  # bounded: a flood must not stall the loop
                try:
                    chunk = os.read(pfd, OUTPUT_CHUNK)
                except BlockingIOError:
                    break
                except OSError:
                    eof = True
                    break
                if not chunk:
                    eof = True
                    break
                buf += chunk
                if len(chunk) < OUTPUT_CHUNK:
                    break
            cut = buf.rfind(b"\n") + 1
            if eof or (not cut and len(buf) >= LONGEST_LINE):
                cut = len(buf)
            if cut:
                lines = buf[:cut].decode(errors="replace").split("\n")
                del buf[:cut]
                if lines[-1] == "":
                    lines.pop()
                self.logs.append((p.pid, is_err, lines))
            if eof:
                del p.pipes[pfd]
                f.close()

    def close_output(self, p: ExecutorProc) -> None:
        """``p`` has exited: pass on what it printed last, even a partial line."""
        self.read_output(p)
        for is_err, buf, f in p.pipes.values():
            if buf:
                self.logs.append((p.pid, is_err, buf.decode(errors="replace").split("\n")))
            f.close()
        p.pipes.clear()

    def take_logs(self) -> list:
        logs, self.logs = self.logs, []
        return logs

    # --- processes ending --------------------------------------------------------

    def remaining_frames(self, p: ExecutorProc):
        """What an exited executor sent before it went, frame by frame."""
        while True:
            frames = p.channel.read_frames()
            if not frames:
                return
            yield from frames

    def kill(self, p: ExecutorProc) -> None:
        try:
            p.proc.kill()
        except OSError:
            pass
        self.reap(p, close=False)

    def reap(self, p: ExecutorProc, timeout: float = 5.0, close: bool = True) -> int:
        """Wait for ``p`` to exit (killing it after ``timeout``); its exit code."""
        try:
            code = p.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            p.proc.kill()
            code = p.proc.wait(5)
        if close:
            self.close(p)
        return code

    def close(self, p: ExecutorProc) -> None:
        try:
            p.conn.close()
        except OSError:
            pass
        if p.pipes:
            self.close_output(p)
