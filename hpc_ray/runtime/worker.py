"""A worker rank: the MPI endpoint and supervisor of its executor processes.

    head (rank 0) ──EXECUTE/REPLY/CREATE_ACTOR/KILL_ACTOR/RUN_FUNCTION/SHUTDOWN──▶ rank
    rank ──[executor messages, req ids renumbered]──▶ head
    rank ──ALIVE, each second, on another node than rank 0's──▶ head (node_watch)
    rank ◀──FETCH──▶ ranks of other nodes (raw store bytes on Tag.OBJECT_DATA)
    rank ══ socketpair ══ executor (one per CPU for tasks, one per actor, and
                                   extras for num_cpus=0 tasks, on demand,
                                   spares for CPUs lent by a task's threads)
    rank ◀── stdout/stderr pipes ── executor; whole lines ──LOG──▶ head,
             printed on rank 0 as "(pid=P, rank=R) line" (log_to_driver)

What the rank holds and decides (queues, which executor runs what, CPU lending,
standby, batch sizing) is ``worker_state.WorkerState``, with no I/O: the loop
feeds it what it reads and carries out what it asks, starting executors
through ``executor_procs.ExecutorPool``.

The loop never runs user code. It blocks in ``select`` on the executors' pipes
and its doorbell (``wait.Doorbell``) with a back-off timeout and polls MPI in
between (``wait.loop_backoff``): at most 1 ms apart after recent activity,
10 ms apart after a second of quiet. When the whole job is on one host, it
raises its flag (``comm.SleepFlags``) and sleeps from 1 ms doubling up to
50 ms, and every sender rings the doorbell of a rank whose flag is up, so the
message is read at once. (On several hosts, a process on the rank's host that
sends after a pause rings.) A dead executor (EOF on its pipe) is reported and
replaced.

A rank that has hosted an actor keeps one executor started ahead (``standby``)
for its next actor, as Ray's worker pool does: creating an actor then costs no
interpreter start-up. The next one starts once the last is up and the rank's
CPUs have a core to spare (``transport/idle_cores.py``); while they stay busy
it does not start, and an actor created meanwhile starts its own executor, as
with no standby (``HPC_RAY_ACTOR_STANDBY=0``: none).
"""
from __future__ import annotations

import collections
import os
import select
import socket
import sys
import time

from mpi4py import MPI

from ..transport import messages as m
from ..transport.comm import Fetcher, Sender, control_waiting, recv_control, tighten_timer_slack
from ..transport.idle_cores import IdleCores
from ..transport.serialization import loads
from ..transport.wait import Doorbell, loop_backoff
from . import context, strays
from .executor_procs import ExecutorPool
from .node_watch import HEARTBEAT
from .rank_actors import DriverGone
from .executor_record import Executor
from .worker_state import EXTRA_IDLE_DEFAULT, WorkerState

#: Batches sent to the head and not yet received by it, at most. Beyond this the
#: rank stops reading its executors' requests until the head catches up, so
#: executors that flood the head (a task looping on ``actor.f.remote()``) are
#: slowed to what the head can take, and what the head has to read before the
#: driver's own messages stays bounded.
HEAD_WINDOW = 4

#: A standby executor is due (``WorkerLoop._start_standby``): it starts once the
#: rank's CPUs had STANDBY_SPARE idle cores on average over a look of
#: STANDBY_LOOK seconds, and not before, however long that takes. Forced after
#: 5 s of busy cores, its interpreter start-up (~0.4 s of CPU) took the cores from
#: the actors that had been busy since: two driver threads calling two actors
#: on 2 cores ran 35-45% fewer calls a second over the half second it started
#: in (benchmarks/README.md, "Stop 33").
STANDBY_LOOK = 0.1
STANDBY_SPARE = 1.0

#: Seconds an executor whose actor ended may spend in its clean-up (atexit
#: handlers, finalizers: ``executor_exit``) before the rank kills it, looked at
#: each HEARTBEAT: as long as the rank waits for one it stopped (``ExecutorPool.reap``).
LEAVE_TIMEOUT = 5.0


class WorkerLoop:
    def __init__(self, comm: MPI.Comm, rank: int, node: int, arena, cfg: dict,
                 flags=None) -> None:
        self.comm = comm
        #: The job's ``comm.SleepFlags`` (one-host jobs), else None.
        self.flags = flags
        self.rank = rank
        self.node = node
        self.arena = arena
        self.cfg = cfg
        cpus = cfg["resources"].get("CPU", 1)
        idle = cfg.get("extra_idle")
        #: The rank's queues, executors and dispatch decisions (no I/O).
        self.state = WorkerState(max(1, int(round(cpus))) if cpus else 0, rank, node,
                                 EXTRA_IDLE_DEFAULT if idle is None else idle,
                                 bool(cfg.get("actor_standby", True)))
        self.sender = Sender(comm, cfg.get("session_id"), flags)
        self.fetcher = Fetcher(comm, self.sender, arena)
        #: When the rank last looked at its idle cores for a due standby (None:
        #: not yet), and what reads them.
        self.standby_looked: float | None = None
        self.idle_cores: IdleCores | None = None
        self.stop = False
        self.driver_gone = False
        self.deferred: list = []          # messages that arrived during an in-rank call
        self.start_failed = False         # an executor could not be started (said once)
        #: actor id -> its calls held back behind one whose arguments are being fetched.
        self.fetching: dict[int, collections.deque] = {}
        self.rank_ctx = None              # API context of in-rank actors, made on demand
        self.groups: dict = {}            # collective group name -> (comm, rank in group)
        #: Collective groups: name -> the member executor here (None: an in-rank
        #: actor); name -> why it is broken; headers posted for gone members.
        self.group_owners: dict = {}
        self.broken_groups: dict[str, str] = {}
        self.abandoned: list = []
        self.collective_staging = None    # ordinary actors' tensors here during a collective
        self.driver_pid = cfg.get("driver_pid") if cfg.get("driver_host") == socket.gethostname() else None
        self.pool = ExecutorPool(rank, node, comm.Get_size(), arena, cfg,
                                 cfg.get("log_to_driver", True))

    # --- messages from the head and other ranks ---------------------------------

    def on_control(self, src: int, msg: tuple) -> None:
        kind = msg[0]
        state = self.state
        if kind == m.EXECUTE or kind == m.CREATE_ACTOR:
            _, spec = msg
            if spec[m.T_BLOB] is not None:
                state.fn_blobs[spec[m.T_FN]] = spec[m.T_BLOB]
            if kind == m.CREATE_ACTOR:
                self._after_fetches(spec, self._start_rank_actor
                                    if spec[m.T_MAX_CALLS] == m.IN_RANK else self._start_actor)
            elif spec[m.T_ACTOR] is not None:
                self._actor_call(spec)
            else:
                self._after_fetches(spec, state.task_arrived)
        elif kind == m.REPLY:
            _, req_id, payload = msg
            r = state.head_replied(req_id, payload)
            if r is not None:
                self._fetch_then_answer(r, payload)
        elif kind == m.KILL_ACTOR:
            _, actor_id, no_restart, graceful = msg
            ex = state.forget_actor(actor_id)
            dropped = self.rank_ctx is not None and self.rank_ctx.drop(actor_id)
            if ex is not None and graceful and ex.ready:
                # Its last handle is gone: it exits as a Python process does, as
                # after __ray_terminate__ (its calls are all done by now).
                state.send(ex, [(m.SHUTDOWN,)])
                state.leaving[ex] = state.clock()
            elif ex is not None:
                # (Killed, or not started yet: none of the user's code ran there.)
                self._kill(ex)
            if (ex is not None or dropped) and not no_restart:
                state.out.append((m.ACTOR_DIED, actor_id, "killed", True))
        elif kind == m.GROUP_CREATE:
            self.create_group(*msg[1:])
        elif kind == m.STEAL:
            state.steal(*msg[1:])
        elif kind == m.THROTTLE:
            state.throttle(*msg[1:])
        elif kind == m.RUN_FUNCTION:
            _, blob = msg
            self._start_and_write()     # (the executors started after run it first)
            self.pool.run_functions.append(blob)
            state.send_all(msg)
        elif kind == m.FETCH:
            self.fetcher.serve(src, *msg[1:])
        elif kind == m.SHUTDOWN:
            self.stop = True
            state.stopping = True

    def _after_fetches(self, spec: list, then) -> None:
        """Copy remote arguments into this node's store first, then go on."""
        deps = spec[m.T_DEPS]
        plans = [i for i, d in enumerate(deps) if d[2][0] == m.FETCH_PLAN] if deps else ()
        if not plans:
            then(spec)
            return
        count = [len(plans)]

        def done(i, oid, rec):
            deps[i] = (deps[i][0], oid, rec)
            self.state.out.append((m.ADD_LOCATION, oid, rec))
            count[0] -= 1
            if count[0] == 0:
                then(spec)

        for i in plans:
            pos, oid, plan = deps[i]
            self.fetcher.start(oid, plan[1], plan[2], plan[3],
                               lambda o, rec, i=i: done(i, o, rec), m.FETCH)

    def _actor_call(self, spec: list) -> None:
        """Calls reach their actor in the order they came: one whose arguments are
        being copied from another node holds back the calls behind it."""
        actor_id = spec[m.T_ACTOR]
        held = self.fetching.get(actor_id)
        if held is not None:
            held.append(spec)
        elif _needs_fetch(spec):
            self.fetching[actor_id] = collections.deque()
            self._after_fetches(spec, self._fetched_actor_call)
        else:
            self._enqueue_call(spec)

    def _fetched_actor_call(self, spec: list) -> None:
        self._enqueue_call(spec)
        actor_id = spec[m.T_ACTOR]
        held = self.fetching.pop(actor_id)
        while held:
            spec = held.popleft()
            if _needs_fetch(spec):
                self.fetching[actor_id] = held
                self._after_fetches(spec, self._fetched_actor_call)
                return
            self._enqueue_call(spec)

    def _enqueue_call(self, spec: list) -> None:
        if self.rank_ctx is not None and spec[m.T_ACTOR] in self.rank_ctx.actors:
            self.rank_ctx.call(spec)
        else:
            self.state.actor_call(spec)

    def _start_actor(self, spec: list) -> None:
        standby = self.state.standby
        # (One that died stays listed until its EOF is read: on_executor_died.)
        self.state.start_actor(spec, bool(standby) and standby[-1].proc.alive())

    def _start_standby(self, now: float) -> None:
        """Start the due standby executor once a look of STANDBY_LOOK found a core
        to spare (or where the rank cannot tell). The first look starts the count:
        the actor executor whose start made it due was up by then."""
        if self.standby_looked is None:
            self.standby_looked = now
            if self.idle_cores is None:
                self.idle_cores = IdleCores()
            self.idle_cores.since_last()
            return
        if now - self.standby_looked < STANDBY_LOOK:
            return
        self.standby_looked = now
        idle = self.idle_cores.since_last()
        if idle is not None and idle < STANDBY_SPARE:
            return
        self.standby_looked = None
        self.state.standby_started()

    def _rank_context(self):
        if self.rank_ctx is None:
            from .rank_actors import RankContext
            self.rank_ctx = RankContext(self)
            context.set_id_prefix(self.rank, 0)
            context.set_current(self.rank_ctx)
            for path in self.cfg["sys_path"]:
                if path not in sys.path:
                    sys.path.append(path)
        return self.rank_ctx

    def _start_rank_actor(self, spec: list) -> None:
        self._rank_context().create(spec)

    def create_group(self, name: str, mpi_ranks: list[int], actor_ids: list[int]) -> None:
        """Make the communicator of a collective group (collective over its members)."""
        from . import collective_ops as collective
        actors = self.state.actors
        owner = next((actors[a] for a in actor_ids if a in actors), None)
        collective.rank_create_group(self, name, mpi_ranks, owner)

    def _fetch_then_answer(self, r, payload: list) -> None:
        """Copy the objects a get's answer plans to fetch, then answer the executor."""
        ex, req = r.owner, r.req
        payload = list(payload)
        todo = [i for i, rec in enumerate(payload) if rec[0] == m.FETCH_PLAN]
        count = [len(todo)]

        def done(i, oid, rec):
            payload[i] = rec
            self.state.out.append((m.ADD_LOCATION, oid, rec))
            count[0] -= 1
            if count[0] == 0 and not ex.gone:
                self.state.send(ex, [(m.REPLY, req, payload)])

        for i in todo:
            plan = payload[i]
            self.fetcher.start(r.ids[i], plan[1], plan[2], plan[3],
                               lambda o, rec, i=i: done(i, o, rec), m.FETCH)

    # --- executors -----------------------------------------------------------------

    def on_executor(self, ex: Executor, msgs: list) -> None:
        for _, req_id, group, op, args in self.state.on_executor(ex, msgs) or ():  # COLLECTIVE_OP
            from . import collective_ops as collective
            self.state.send(ex, [(m.REPLY, req_id,
                                  collective.rank_run_op(self, group, op, args, owner=ex))])

    def flush(self) -> None:
        """Carry out what the state asked for: start executors, write each outbox
        as one frame, stop the executors to retire."""
        state = self.state
        if state.starts or state.to_write:
            self._start_and_write()
        while state.retire:
            self._retire(state.retire[0])

    def _start_and_write(self) -> None:
        state = self.state
        if state.starts:
            starts, state.starts = state.starts, []
            for ex in starts:
                try:
                    self.pool.start(ex)
                except OSError as exc:   # (out of file descriptors, of processes)
                    self._start_failed(ex, exc)
        if state.to_write:
            to_write, state.to_write = state.to_write, []
            for ex in to_write:
                if ex.outbox:
                    msgs, ex.outbox = ex.outbox, []
                    ex.proc.channel.send(msgs)

    def send_out(self) -> None:
        """Pass the executors' printed lines on, then send the head what is due."""
        state = self.state
        self._logs_out()
        if state.out:
            out, state.out = state.out, []
            self.sender.send_sync(0, out)

    def _read_remaining(self, ex: Executor) -> None:
        """Handle what an exited executor printed and sent before it went."""
        self.pool.read_output(ex.proc)
        self._logs_out()
        for data in self.pool.remaining_frames(ex.proc):
            self.on_executor(ex, loads(data))

    def _start_failed(self, ex: Executor, exc: OSError) -> None:
        """No process for ``ex``: what it was for fails as if it had died at once
        (its actor's calls raise, its tasks are retried), and the rank goes on."""
        import resource
        if not self.start_failed:   # (said once: the next starts most likely fail alike)
            self.start_failed = True
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            sys.stderr.write(f"hpc_ray: worker rank {self.rank} could not start a process "
                             f"for an actor or tasks: {exc!r}; each actor holds about 3 of "
                             f"its rank's file descriptors, whose limit is {limit} "
                             f"(ulimit -n)\n")
        self.state.executor_died(ex, 1)
        self._ended(ex)

    def _ended(self, ex: Executor) -> None:
        """``ex``'s end was reported: a collective group it was in breaks."""
        if ex in self.group_owners.values():
            from . import collective_ops as collective
            collective.rank_abandon_groups(self, ex)

    def _retire(self, ex: Executor) -> None:
        """max_calls reached, or an extra executor idle too long: stop it (a CPU
        executor is replaced with a fresh process)."""
        self.state.retire_begin(ex)
        self._start_and_write()
        ex.proc.channel.send([(m.SHUTDOWN,)])
        self.pool.reap(ex.proc, close=False)
        self._read_remaining(ex)
        self.pool.close(ex.proc)
        self.state.executor_ended(ex)
        self._ended(ex)

    def _kill(self, ex: Executor) -> None:
        if self.state.cancel_start(ex):
            return   # (an actor killed in the turn that created it: no process yet)
        self.pool.kill(ex.proc)
        self._read_remaining(ex)
        self.pool.close(ex.proc)
        self.state.executor_ended(ex)
        self._ended(ex)

    def on_executor_died(self, ex: Executor) -> None:
        code = self.pool.reap(ex.proc)
        self._logs_out()  # its last lines (a traceback, a fault) before the crash report
        self.state.executor_died(ex, code)
        self._ended(ex)

    def _logs_out(self) -> None:
        if self.pool.logs:
            self.state.out.append((m.LOG, self.pool.take_logs()))

    # --- loop -------------------------------------------------------------------

    def run(self) -> None:
        from .interrupts import ignore_in_workers
        ignore_in_workers()
        state = self.state
        state.open()
        self.flush()
        tighten_timer_slack()
        comm = self.comm
        doorbell = Doorbell(self.cfg.get("session_id"), self.rank)
        bell_fd = doorbell.fileno()
        flags = self.flags if bell_fd >= 0 else None
        backoff = loop_backoff(False, self.cfg["one_host"] and bell_fd >= 0, flags is not None)
        last_check = time.monotonic()
        node_of = self.cfg.get("node_of") or []
        alive = not self.cfg["one_host"] and bool(node_of) and self.node != node_of[0]
        try:
            while not self.stop:
                active = False
                batches = recv_control(comm)
                if self.deferred:
                    batches = self.deferred + batches
                    self.deferred = []
                for src, msgs in batches:
                    active = True
                    for msg in msgs:
                        self.on_control(src, msg)
                state.dispatch()
                self.flush()
                if state.out:
                    self.send_out()
                    active = True
                self.sender.progress()
                if self.fetcher.progress():
                    active = True
                timeout = 0.0 if active or self.fetcher.moving() else backoff.next_timeout()
                if state.standby_due:
                    self._start_standby(time.monotonic())
                    if timeout > STANDBY_LOOK:
                        timeout = STANDBY_LOOK
                self.flush()    # (fetches done and a standby started just now)
                flagged = not active and backoff.flagged_sleep
                # What select watches, built again every pass (the executors come
                # and go from several places), in one loop: this runs for every
                # poll of MPI, and comprehensions cost a function object each.
                by_fd: dict = {}
                pipes: dict = {}
                writers = []
                for ex in state.all_executors():
                    p = ex.proc
                    by_fd[p.channel.fd] = ex
                    for fd in p.pipes:
                        pipes[fd] = ex
                    if p.channel.outbuf:
                        writers.append(p.channel.fd)
                readers = list(pipes)
                if bell_fd >= 0:
                    readers.append(bell_fd)
                if self.sender.unmatched_count() < HEAD_WINDOW:
                    throttled = state.throttled
                    for fd, ex in by_fd.items():
                        if not throttled or ex.serial not in throttled:
                            readers.append(fd)
                elif not active:
                    # The head is behind and no executor is read: poll for its
                    # answers at most the back-off's cap apart (no deep or flagged sleep).
                    timeout = min(timeout, backoff.cap)
                    flagged = False
                if flagged:
                    # Flag up, then one more look: a message sent before a sender
                    # could see the flag is found now (comm.SleepFlags).
                    flags.up(self.rank)
                    if control_waiting(comm):
                        timeout = 0.0
                try:
                    ready, writable, _ = select.select(readers, writers, [], timeout)
                except (OSError, ValueError):
                    ready, writable = list(pipes) + list(by_fd), []
                if flagged:
                    flags.down(self.rank)
                for fd in writable:
                    by_fd[fd].proc.channel.write_some()
                for fd in ready:
                    if fd == bell_fd:
                        doorbell.drain()   # a message is on its way: poll MPI at once
                        active = True
                        continue
                    if fd in pipes:
                        # Output first (select lists the pipes first): a line printed
                        # before a task returned reaches the driver before its result.
                        self.pool.read_output(pipes[fd].proc, fd)
                        active = True
                        continue
                    self._logs_out()
                    ex = by_fd[fd]
                    if ex.gone:
                        continue    # (retired or killed while this pass read another)
                    frames = ex.proc.channel.read_frames()
                    if frames is None:
                        self.on_executor_died(ex)
                        active = True
                        continue
                    for data in frames:
                        msgs = loads(data)
                        if m.CHECKING:
                            m.check_all(msgs, f"rank {self.rank} from executor {ex.pid}")
                        self.on_executor(ex, msgs)
                        if not active:
                            active = m.reply_due(msgs)
                if ready:
                    state.dispatch()
                    self.flush()
                    self.send_out()
                if self.rank_ctx is not None and (self.rank_ctx.out or context.released):
                    self.rank_ctx.flush()
                if active:
                    backoff.reset()
                now = time.monotonic()
                if now - last_check > HEARTBEAT:
                    last_check = now
                    if alive:   # (node_watch: rank 0's watch over the other nodes)
                        state.out.append((m.ALIVE,))
                    if self.driver_pid and not _alive(self.driver_pid):
                        sys.stderr.write(f"hpc_ray worker rank {self.rank}: the driver "
                                         f"(pid {self.driver_pid}) is gone; exiting\n")
                        self.driver_gone = True
                        break
                    for ex in state.idle_executors():
                        self._retire(ex)
                    for ex, since in list(state.leaving.items()):
                        if now - since > LEAVE_TIMEOUT:
                            sys.stderr.write(f"hpc_ray worker rank {self.rank}: executor pid "
                                             f"{ex.pid} still cleaning up (atexit handlers, "
                                             f"finalizers) {LEAVE_TIMEOUT} s after its actor "
                                             f"ended; killed\n")
                            self._kill(ex)
        except DriverGone as gone:
            sys.stderr.write(f"hpc_ray worker rank {self.rank}: the driver (pid {gone.args[0]}) "
                             f"is gone while an in-rank actor waited; exiting\n")
            self.driver_gone = True
        doorbell.close()
        self.close()

    def close(self) -> None:
        self.flush()
        executors = self.state.all_executors()
        for ex in executors:
            try:
                ex.proc.channel.send([(m.SHUTDOWN,)])
            except Exception:
                pass
        deadline = time.monotonic() + 2.0
        for ex in executors:
            self.pool.reap(ex.proc, max(0.05, deadline - time.monotonic()))
        strays.end(self.pool.stray_mark)
        self._logs_out()
        if not self.driver_gone:
            # The last message to rank 0, which receives until it has one from
            # every rank: nothing this rank sent is left unreceived at MPI_Finalize.
            self.sender.send(0, self.state.out + [(m.STOPPED,)])
            self.state.out = []
        self.sender.drain(10.0)
        self.sender.close_bell()
        if self.idle_cores is not None:
            self.idle_cores.close()


def _needs_fetch(spec: list) -> bool:
    deps = spec[m.T_DEPS]
    return bool(deps) and any(d[2][0] == m.FETCH_PLAN for d in deps)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
