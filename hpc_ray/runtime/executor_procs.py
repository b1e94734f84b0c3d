"""A worker rank's executor processes: starting them, their output, their end.

``ExecutorProc`` is the rank's view of one executor (its socket, what it was
sent and holds); ``ExecutorProcesses`` is the part of ``WorkerLoop`` that
starts executors, passes their printed lines on (log_to_driver), and when one
ends (retired, killed, crashed) gives back what it held and reports or requeues
its tasks.
"""
from __future__ import annotations

import collections
import json
import os
import pickle
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection

from ..transport import messages as m
from ..transport.frames import add_frame, read_available, split_frames, write_pending
from ..transport.serialization import SHM, loads

#: Environment variables of the MPI launcher that an executor must not see: with
#: them, an ``import mpi4py.MPI`` in user code would try to join the job as a rank.
_LAUNCHER_ENV_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPIR_", "MPICH_INTERFACE",
                          "PALS_", "I_MPI_HYDRA")

#: Bytes read from an executor's stdout/stderr at once; a line longer than this
#: is passed on in pieces (a partial line is otherwise held until its newline).
OUTPUT_CHUNK = 1 << 16
#: Most chunks read from one pipe per pass of the loop (1 MiB): the rest waits.
OUTPUT_READS = 16


class ExecutorProc:
    """The rank's view of one executor process."""

    __slots__ = ("proc", "conn", "serial", "known_fns", "assigned", "blocked", "actor_id",
                 "calls", "retiring", "ready", "pid", "fd", "outbuf", "inbuf", "holds",
                 "unsealed", "pipes", "extra", "idle_since", "cpus", "lending", "spare", "gone")

    def __init__(self, proc: subprocess.Popen, conn: Connection, serial: int,
                 actor_id: int | None) -> None:
        self.proc = proc
        self.conn = conn
        self.serial = serial
        self.pid = proc.pid
        self.known_fns: set = set()
        #: Tasks sent and not finished, in order: task id -> (sent while blocked?, spec).
        self.assigned: collections.OrderedDict = collections.OrderedDict()
        self.blocked = 0
        self.actor_id = actor_id
        self.calls: collections.Counter = collections.Counter()
        self.retiring = False
        self.ready = False
        #: An extra executor, for num_cpus=0 tasks only.
        self.extra = False
        #: Threads of its task other than the main one waiting in get() (LEND).
        self.lending = 0
        #: A CPU executor started to run tasks on CPUs such threads lend; stopped
        #: when idle (the rank keeps one CPU executor per CPU otherwise).
        self.spare = False
        #: CPUs its actor holds (an actor's executor only).
        self.cpus = 0
        #: When it last had nothing assigned (extras stop after a while idle).
        self.idle_since = time.monotonic()
        self.fd = conn.fileno()
        os.set_blocking(self.fd, False)
        self.outbuf = bytearray()
        self.inbuf = bytearray()
        #: Object ids this process holds at the head (HOLD, PUT and SUBMIT take one,
        #: RELEASE gives one back), and store blocks it was given by ALLOC and has
        #: not sealed in a PUT or a result yet: given back if it dies.
        self.holds: dict[int, int] = {}
        self.unsealed: dict[int, int] = {}
        #: Reclaimed: the head was told it ended; replies still due to it are dropped.
        self.gone = False
        #: Its stdout/stderr pipes (log_to_driver): fd -> [is stderr, partial line, file].
        self.pipes: dict[int, list] = {}
        for f, is_err in ((proc.stdout, False), (proc.stderr, True)):
            if f is not None:
                os.set_blocking(f.fileno(), False)
                self.pipes[f.fileno()] = [is_err, bytearray(), f]

    def took(self, oids) -> None:
        """The process holds one more ref to each of ``oids`` at the head."""
        holds = self.holds
        for oid in oids:
            holds[oid] = holds.get(oid, 0) + 1

    def gave_back(self, oids) -> None:
        holds = self.holds
        for oid in oids:
            n = holds.get(oid, 0) - 1
            if n > 0:
                holds[oid] = n
            else:
                holds.pop(oid, None)

    # The rank's end of the socket is non-blocking and buffered both ways: a rank
    # that blocked writing to a busy executor, while that executor blocked writing
    # its results to the rank, would deadlock. Frames are multiprocessing's
    # (a 4-byte big-endian length, then the bytes), so the executor reads them
    # with a plain Connection.

    def send(self, msgs: list) -> None:
        # Sent even before EXEC_READY: the bytes wait until the executor reads.
        add_frame(self.outbuf, pickle.dumps(msgs, protocol=5))
        self.write_some()

    def write_some(self) -> None:
        write_pending(self.fd, self.outbuf)

    def read_frames(self) -> list[bytes] | None:
        """Complete frames available now; None at EOF (the executor died)."""
        got = read_available(self.fd, self.inbuf)
        if not got:
            return None if got is None else []
        return split_frames(self.inbuf)


class ExecutorProcesses:
    """The executor side of ``WorkerLoop`` (a mixin: it uses the loop's state)."""

    # --- executors --------------------------------------------------------------

    def spawn(self, actor_id: int | None = None) -> ExecutorProc:
        parent_sock, child_sock = socket.socketpair()
        serial = next(self.serials)
        env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_ENV_PREFIXES)}
        env["HPC_RAY_EXECUTOR_CONFIG"] = json.dumps({
            "fd": child_sock.fileno(), "arena_fd": self.arena.fd,
            "store_size": self.arena.size, "node": self.node, "rank": self.rank,
            "size": self.comm.Get_size(), "serial": serial,
            "sys_path": self.cfg["sys_path"], "cwd": self.cfg.get("cwd"),
            # The driver's direct channel, for actors (only on the driver's host).
            "direct_addr": self.cfg.get("direct_addr") if self.driver_pid else None,
            # Names the actors' sockets for direct calls between executors.
            "session_id": self.cfg.get("session_id"),
        })
        fds = (child_sock.fileno(),) + ((self.arena.fd,) if self.arena.size else ())
        pipe = subprocess.PIPE if self.log_to_driver else None
        proc = subprocess.Popen([sys.executable, "-m", "hpc_ray.runtime.executor"],
                                pass_fds=fds, env=env, stdin=subprocess.DEVNULL,
                                stdout=pipe, stderr=pipe)
        child_sock.close()
        conn = Connection(parent_sock.detach())
        ex = ExecutorProc(proc, conn, serial, actor_id)
        if self.run_functions:
            ex.send([(m.RUN_FUNCTION, b) for b in self.run_functions])
        return ex

    def _ship_fn(self, ex: ExecutorProc, spec: list) -> list:
        """The spec for ``ex``: with the function's blob the first time it sees it."""
        fn_id = spec[m.T_FN]
        if spec[m.T_BLOB] is not None:
            self.fn_blobs[fn_id] = spec[m.T_BLOB]
        blob = None
        if fn_id is not None and fn_id not in ex.known_fns and fn_id in self.fn_blobs:
            ex.known_fns.add(fn_id)
            blob = self.fn_blobs[fn_id]
        if blob is spec[m.T_BLOB]:
            return spec
        spec = list(spec)
        spec[m.T_BLOB] = blob
        return spec

    # --- executors' output (log_to_driver) ---------------------------------------

    def read_output(self, ex: ExecutorProc, fd: int | None = None) -> None:
        """Move the whole lines ``ex`` printed so far into ``logs``."""
        for pfd in (fd,) if fd is not None else tuple(ex.pipes):
            pipe = ex.pipes.get(pfd)
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
            if eof or (not cut and len(buf) >= OUTPUT_CHUNK):
                cut = len(buf)
            if cut:
                lines = buf[:cut].decode(errors="replace").split("\n")
                del buf[:cut]
                if lines[-1] == "":
                    lines.pop()
                self.logs.append((ex.pid, is_err, lines))
            if eof:
                del ex.pipes[pfd]
                f.close()

    def close_output(self, ex: ExecutorProc) -> None:
        """``ex`` has exited: pass on what it printed last, even a partial line."""
        self.read_output(ex)
        for is_err, buf, f in ex.pipes.values():
            if buf:
                self.logs.append((ex.pid, is_err, buf.decode(errors="replace").split("\n")))
            f.close()
        ex.pipes.clear()

    def send_logs(self) -> None:
        if self.logs:
            self.out.append((m.LOG, self.logs))
            self.logs = []

    def _sealed(self, ex: ExecutorProc, records) -> None:
        for rec in records:
            if rec[0] == SHM and rec[1] == self.node:
                ex.unsealed.pop(rec[2], None)

    def _reclaim(self, ex: ExecutorProc, exitcode: int | None = None, lost=(),
                 actor_id: int | None = None) -> None:
        """``ex`` is gone: tell the head in one PROCESS_ENDED everything it had started
        there, so that the head ends it all in one transition (``Head.process_ended``):
        its holds, the store blocks it never sealed, its pending gets, waits and
        calls, the CPUs it lent, and, when it crashed (``exitcode`` not None), the
        tasks ``lost`` with it and its actor.

        Called once every message it sent has been read (EOF on its socket, or
        what was left read after it exited), so the counts are exact. Answers
        still on their way to it give back what they reserved
        (``RankRequests.answered``).
        """
        ex.gone = True
        holds = [oid for oid, n in ex.holds.items() for _ in range(n)]
        ex.holds = {}
        blocks = list(ex.unsealed.items())
        ex.unsealed = {}
        reqs = self.requests.process_gone(ex)
        lent = ex.blocked + thread_lent(ex) if lends_cpu(ex) else 0
        ex.blocked = ex.lending = 0
        self.out.append((m.PROCESS_ENDED, ex.pid, holds, blocks, reqs, lent, list(lost),
                         exitcode, actor_id))
        if ex in self.group_owners.values():
            from . import collective_ops as collective
            collective.rank_abandon_groups(self, ex)

    def _drain(self, ex: ExecutorProc) -> None:
        """Read and handle what an exited executor sent before it went."""
        self.read_output(ex)
        self.send_logs()
        while True:
            frames = ex.read_frames()
            if not frames:
                return
            for data in frames:
                self.on_executor(ex, loads(data))

    def _retire(self, ex: ExecutorProc) -> None:
        """max_calls reached, or an extra executor idle too long: stop it (a CPU
        executor is replaced with a fresh process)."""
        ex.send([(m.SHUTDOWN,)])
        (self.extras if ex.extra else self.executors).remove(ex)
        self._reap(ex, close=False)
        ex.retiring = False  # its last messages must not retire it again
        self._drain(ex)
        self._close(ex)
        self._reclaim(ex)
        if not ex.extra and not ex.spare:
            self.executors.append(self.spawn())

    def retire_idle_extras(self) -> None:
        """Stop extra and spare executors idle for ``extra_idle`` seconds."""
        now = time.monotonic()
        for ex in [*self.extras, *(ex for ex in self.executors if ex.spare)]:
            if ex.ready and not ex.assigned and now - ex.idle_since > self.extra_idle:
                self._retire(ex)

    def _kill(self, ex: ExecutorProc) -> None:
        try:
            ex.proc.kill()
        except OSError:
            pass
        self._reap(ex, close=False)
        self._drain(ex)
        self._close(ex)
        self._reclaim(ex)

    def _reap(self, ex: ExecutorProc, timeout: float = 5.0, close: bool = True) -> int:
        """Wait for ``ex`` to exit (killing it after ``timeout``); its exit code."""
        try:
            code = ex.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            ex.proc.kill()
            code = ex.proc.wait(5)
        if close:
            self._close(ex)
        return code

    def _close(self, ex: ExecutorProc) -> None:
        try:
            ex.conn.close()
        except OSError:
            pass
        if ex.pipes:
            self.close_output(ex)

    def on_executor_died(self, ex: ExecutorProc) -> None:
        code = self._reap(ex)
        self.send_logs()  # its last lines (a traceback, a fault) before the crash report
        if ex in self.standby:      # it never ran anything: nothing to report
            self.standby.remove(ex)
            self._reclaim(ex)
            return
        # The first task it held was running; tasks sent while it was blocked in
        # get() may have been running nested. The rest never started: run them again.
        lost, requeue = [], []
        for i, (tid, (nested, spec)) in enumerate(ex.assigned.items()):
            if i == 0 or nested:
                lost.append(tid)
            else:
                requeue.append(spec)
        if ex.actor_id is not None and self.actors.get(ex.actor_id) is ex:
            self._forget_actor(ex.actor_id)
            self._reclaim(ex, code, lost + [spec[m.T_ID] for spec in requeue], ex.actor_id)
            return
        if ex.actor_id is not None:     # its actor was killed or ended: no crash
            self._reclaim(ex)
            return
        self._reclaim(ex, code, lost)
        (self.zero_cpu_queue if ex.extra else self.queue).extendleft(reversed(requeue))
        if ex in self.executors:
            self.executors.remove(ex)
            if not ex.spare:
                self.executors.append(self.spawn())
        elif ex in self.extras:
            self.extras.remove(ex)


def lends_cpu(ex: ExecutorProc) -> bool:
    """Whether ``ex`` waiting in ``get`` frees a CPU the head may hand out meanwhile:
    only a CPU executor's task holds one (an actor keeps its CPU while it waits)."""
    return not ex.extra and ex.actor_id is None


def thread_lent(ex: ExecutorProc) -> bool:
    """Whether ``ex``'s CPU is lent by threads of its task other than the main
    one (LEND) while the main thread is not waiting itself: the lent CPU runs
    tasks in another executor (the main thread lends by running them nested)."""
    return ex.lending > 0 and not ex.blocked
