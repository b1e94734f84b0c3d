"""Direct calls to an actor on the caller's host (Ray's direct actor calls).

    caller (driver, task or actor) ── EXECUTE ─────────────────▶ actor's executor
    caller                         ◀─ TASK_DONE / TASK_FAILED ──  (a socket per pair)

Through the head a task's call crosses six processes' wake-ups (caller -> rank
-> head over MPI -> actor, and back), the driver's four; here it crosses two.
The actor listens on an abstract Unix socket named after the session and the
actor (``address``): no file to clean up, nothing to look up, and a connect
succeeds only on the actor's host, once the actor is up. Only the caller and
the actor take part in the call, as in Ray: the caller owns the result and keeps
it in its memory. This module is the caller's state (``PeerCaller``),
``peer_server`` the actor's (``PeerServer``); ``caller.Caller`` (the driver,
tasks and actors) and ``executor.ExecutorContext`` drive them.

What keeps the usual semantics:

* Order. A caller's calls to one actor run in the order they were made. A call
  goes direct only while none of the caller's earlier calls to that actor may
  still be queued at the head (``head_calls``: made through the head and not
  yet seen finished). A call that must go through the head (retries, several
  return values, arguments not known to exist yet, behind a fence: ``FENCING``,
  or of a method that returned a ``LARGE_RESULT``) first waits until the
  caller's direct calls to that actor are answered (``DRAIN``).
* Refs among the arguments. A call goes direct only if the objects of its
  top-level refs are known to exist (put by the caller, seen by its get or
  wait, or direct results); the actor gets their values from the head itself,
  except the caller's own small results, whose values go with the call
  (``inline_args``: no object at the head, no fetch).
  The caller keeps the objects alive until the answer comes (``pending``), and
  an actor that took holds of its own meanwhile (a view into the store, refs
  nested in the arguments) has the head confirm them before it answers.
* Escape. Before a result's ref leaves the caller (an argument of a call, part
  of a put or of a returned value), the caller puts the value at the head under
  the ref's id: it becomes an ordinary object. A ref dropped without escaping
  costs the head nothing. A call that takes a result still in flight is held in
  the caller until the answer comes (``held_calls``): ``.remote()`` does not
  wait for it.
* Refs nested in a result. The actor keeps them alive (``PeerServer.pins``)
  until the caller holds them itself: the caller's holds reach the head, the
  head answers a request sent after them, and then the caller sends UNPIN.
* Failure. When the actor's process ends, its sockets close and the calls in
  flight fail with ActorDiedError, as Ray fails them when an actor dies; the
  caller's next call to that actor waits until the head knows of the death
  (``settle``), and a call the dead socket refused (the caller had not read of
  the death yet) goes through the head too: it runs on the restarted actor.
  An actor with ``max_task_retries`` does not listen, so the head retries its
  calls.
* Waiting. An executor's get() waits for a direct result in its usual loop (its
  CPU is lent after 50 ms). Answered calls go to the head in batches
  (DIRECT_DONE), with failed calls' errors: ``tasks()``, ``errors()``, signals.
* Floods stay bounded (``INFLIGHT_READ``, ``INBOX_HIGH``, and the channels'
  own limits, ``channel.OUTBUF_HIGH`` and ``channel.FAIR_READ``).
"""
from __future__ import annotations

import collections
import select
import threading
import time

from .. import _config
from ..exceptions import ActorDiedError
from ..transport import direct
from ..transport.channel import Channel
from ..transport import messages as m
from ..transport import wait
from ..transport.serialization import INLINE, INLINE_MAX, RAW
from . import context, values
from .held_calls import HeldCalls

#: Seconds before a caller tries again to connect to an actor that refused
#: (not up yet, on another host, or not accepting direct calls).
RETRY_CONNECT = 0.2
#: Calls through the head a caller tracks per actor (made, not seen finished)
#: before it stops tracking and sends that actor's calls through the head only.
MAX_HEAD_CALLS = 1000
#: Longest a caller waits for the head to learn of an actor process's end that
#: the caller saw first (``PeerCaller.settle``).
SETTLE_WAIT = 10.0
#: Summaries of answered calls a caller keeps before it sends them to the head
#: (for ``tasks()`` and the timeline), and the longest it keeps one (seconds).
REPORT_EVERY = 256
REPORT_AGE = 1.0
#: A flood of calls stays bounded (the Ray docs' tasks calling an actor forever):
#: a caller with this many calls in flight on a link reads the answers that came
#: (and lets go of dropped refs) before its next call (one whose channel is
#: ``backed_up`` waits); an actor with this many calls in its inbox reads no
#: caller's socket (their calls wait there, then in the callers).
INFLIGHT_READ = 1024
INBOX_HIGH = 1024
#: A result larger than this (pickled) sends its method's later calls from this
#: caller through the head: into the store, read without a copy, where the socket
#: moves ~200 KiB per wake-up (16 MiB: 4 against 65 ms; actor_results.py).
LARGE_RESULT = 512 << 10
#: ``HPC_RAY_DIRECT_CALLS=0`` sends every call through the head.
ENABLED = bool(_config.os_environ_get("DIRECT_CALLS", 1, int))


#: Control calls that make the head send actors' ranks something (a collective
#: group, a function to run, a kill) that later calls must not overtake: a
#: caller's next call to those actors (None: to every actor) goes through the
#: head, behind it. After kill() the head fails that call (or, for an actor
#: being restarted, queues it for the new process); sent direct, it raced the
#: kill to the old process and could be answered.
FENCING = {"collective_create": lambda args: args[1], "run_function": lambda args: None,
           "kill": lambda args: (args[0],)}

#: PeerCaller.route's answers.
DIRECT, DRAIN, HEAD = range(3)


def address(session_id: str, actor_id: int) -> str:
    return f"hpc_ray-{session_id}-actor-{actor_id:x}"


def direct_eligible(spec: list) -> bool:
    """Whether a call can skip the head: one return value, no retries (the head
    retries calls lost with the actor's process)."""
    return len(spec[m.T_RETURNS]) == 1 and not spec[m.T_RETRIES]


def watch(poller, readers: dict, channels: dict, muted=()) -> None:
    """Add the direct-call sockets to ``poller``: for reading, and for writing where
    bytes wait to go; ``muted`` ones for writing only."""
    for fd in tuple(readers):
        ch = channels.get(fd)
        out = ch is not None and ch.outbuf
        if fd in muted:
            if out:
                poller.register(fd, select.POLLOUT)
            continue
        poller.register(fd, select.POLLIN | select.POLLOUT if out else select.POLLIN)


def serve(fd: int, ev: int, readers: dict, channels: dict, lock) -> list:
    """One poll event of a direct-call socket: write what waits, read what came.
    Returns the calls read (for an actor's inbox)."""
    if ev & select.POLLOUT:
        ch = channels.get(fd)
        if ch is not None:
            with lock:
                ch.write_some()
    if ev & ~select.POLLOUT:
        reader = readers.get(fd)
        if reader is not None:
            return reader()
    return []


def small_record(record: tuple, limit: int = INLINE_MAX) -> bool:
    """Whether a value's record may go with a call: RAW, or INLINE up to ``limit``
    bytes (not an error: the actor fails a call whose argument failed as the head
    does, on a record it fetched)."""
    kind = record[0]
    return kind == RAW or (kind == INLINE and len(record[1]) + sum(map(len, record[2]))
                           <= limit)


def with_records(spec: list, record_of) -> None:
    """Resolve the call's top-level ref arguments whose values ``record_of(oid)``
    gives (None: unknown, or refs inside) and are ``small_record``s, as the head
    does on dispatch: ``(position, id, record)``. The actor fetches the rest."""
    deps = spec[m.T_DEPS]
    out = None
    for i, dep in enumerate(deps):
        if len(dep) != 2:
            continue
        record = record_of(dep[1])
        if record is not None and small_record(record):
            if out is None:
                out = list(deps)
            out[i] = (dep[0], dep[1], record)
    if out is not None:
        spec[m.T_DEPS] = out


def refs_of(spec: list) -> list[int]:
    """The objects a call's arguments refer to: top-level refs (the actor fetches
    their values from the head) but those sent with their value
    (``with_records``), the stored arguments, refs nested deeper."""
    deps = spec[m.T_DEPS]
    contained = spec[m.T_CONTAINED]
    if not deps:
        return list(contained) if contained else []
    return [d[1] for d in deps if len(d) == 2] + (contained or [])


class Link:
    """A caller's socket to one actor and the calls in flight on it."""

    __slots__ = ("actor_id", "channel", "inflight", "rank", "pid", "sent", "reading",
                 "poller", "rank_poller", "large")

    def __init__(self, actor_id: int, channel: Channel) -> None:
        self.actor_id = actor_id
        self.channel = channel
        #: This socket's own poll object, kept: a sync call's wait builds none per turn.
        self.poller = select.poll()
        self.poller.register(channel.fd, select.POLLIN)
        #: This socket's and the rank pipe's poll object (``recv_answer``), made at first use.
        self.rank_poller = None
        #: Whether a driver thread reads this socket now (``driver_calls.DriverLinks``).
        self.reading = False
        #: The actor's rank and process, from its DIRECT_HELLO.
        self.rank = -1
        self.pid = 0
        #: task id -> return id, for calls sent and not answered yet.
        self.inflight: dict[int, int] = {}
        self.large: set[str] = set()     # methods that returned a LARGE_RESULT


class Result:
    """A direct call's answer, kept by the caller until its ref dies or escapes."""

    __slots__ = ("record", "contained", "pins", "link", "tid", "lost")

    def __init__(self, record: tuple | None, contained, pins, link, tid: int,
                 lost: tuple | None = None) -> None:
        #: None for a call lost with the actor's process until ``explain`` says why.
        self.record = record
        #: (actor id, its process, call name) of a lost call.
        self.lost = lost
        self.contained = contained
        #: Refs this process made to the nested refs, until it no longer needs
        #: the actor's pins on them: None once UNPIN was sent (or none needed).
        self.pins = pins
        self.link = link
        self.tid = tid


class PeerCaller:
    """The caller's side: links to actors, calls in flight, results kept."""

    def __init__(self, session_id: str, readers: dict, channels: dict, lock,
                 control=None) -> None:
        self.session_id = session_id
        #: The process's ``control(name, *args)``: asks the head about an actor
        #: whose process this caller saw end (``settle``, ``explain``).
        self.control = control
        #: Shared with the executor's wait loop: fd -> reader, fd -> Channel, and
        #: the lock around every write to a channel.
        self.readers = readers
        self.channels = channels
        self.lock = lock
        self.links: dict[int, Link] = {}
        #: return id -> (link, task id, the handle's lifetime ref, call name,
        #: submit time): in flight.
        self.pending: dict[int, tuple] = {}
        #: Summaries of answered calls not reported to the head yet, and since when
        #: (threads reading other actors' sockets append while one reports: a
        #: deque's append and popleft need no lock).
        self.finished: collections.deque = collections.deque()
        self.finished_since = 0.0
        #: return id -> Result: arrived.
        self.results: dict[int, Result] = {}
        #: Return ids whose refs died while the call was in flight.
        self.dropped: set[int] = set()
        #: actor id -> first return ids of calls made through the head, not seen
        #: finished (a call's task id is its first return id - 1).
        self.head_calls: dict[int, set] = {}
        #: Threads of the caller note and clear head calls at once: one that
        #: dropped an entry another had just added to would let a later direct
        #: call overtake that head call.
        self.head_calls_lock = threading.Lock()
        #: Actors this caller calls through the head only (too many calls to track).
        self.head_only: set[int] = set()
        #: Actors whose next call goes through the head (FENCING); after a fence of
        #: every actor, those whose call did so since.
        self.fenced: set[int] = set()
        self.fence_all = False
        self.fence_passed: set[int] = set()
        #: actor id -> the process this caller saw end: the next call waits until
        #: the head knows too (``settle``), or it could go to that process.
        self.dead: dict[int, int] = {}
        self.refused: dict[int, float] = {}
        #: The actor this process is, if any: its calls to itself go through the
        #: head. Direct, the ref of one that a method returned or passed on would
        #: wait for its answer (``Caller.promote``), queued behind that method.
        self.own_actor: int | None = None
        #: Calls made with results still in flight among their arguments.
        self.held = HeldCalls()

    def escaping(self, spec: list) -> list[int]:
        """The objects a call's arguments refer to, where some may be this caller's
        direct results (they must become objects at the head before the call
        leaves); [] in the common case, at the cost of two tests."""
        if (spec[m.T_DEPS] or spec[m.T_CONTAINED]) and (self.pending or self.results):
            return refs_of(spec)
        return []

    def inline_args(self, spec: list, await_answer) -> None:
        """Send the values of top-level ref arguments that are this caller's own
        results with the call, as the head would have resolved them (see
        ``with_records``), waiting for those still in flight (``await_answer(oid)``)
        as their promotion to the head would. The actor then runs the call
        without asking the head for them (a round trip through two ranks'
        polling, ~3 ms on a 2-core node), and they need not become objects at
        the head: the actor gets the value, not the ref. A parameter server's
        loop (gradients from the weights the server returned, the server from
        the gradients) is this case at every step."""
        deps = spec[m.T_DEPS]
        if not (self.pending or self.results):
            return
        for dep in deps:
            if dep[1] in self.pending:
                await_answer(dep[1])
        results = self.results

        def record_of(oid):
            res = results.get(oid)
            return None if res is None or res.contained else res.record
        with_records(spec, record_of)

    def owns(self, oid: int) -> bool:
        return oid in self.results or oid in self.pending

    def links_for(self, oids) -> list[Link]:
        """The links of the calls among ``oids`` still in flight."""
        pending = self.pending
        out: list[Link] = []
        for oid in oids:
            sent = pending.get(oid)
            if sent is not None and sent[0] not in out:
                out.append(sent[0])
        return out

    def answered(self, oid: int) -> bool:
        """Whether a wait for ``oid`` is over (its answer came, or it is not ours).
        An answer is filed before it leaves ``pending``: another thread never
        finds it in neither."""
        return oid in self.results or oid not in self.pending

    def route(self, spec: list, deps_ready: bool = True) -> tuple[int, Link | None]:
        """How to send this call: (DIRECT, the link to send it on), (DRAIN, a link
        whose calls in flight must be answered first, then through the head), or
        (HEAD, None). ``deps_ready``: whether the objects of the call's top-level
        ref arguments are known to exist (else the head holds the call until they
        do: an actor waiting for one could wait for a call queued behind it)."""
        actor_id = spec[m.T_ACTOR]
        link = self.links.get(actor_id)
        if self.head_calls.get(actor_id) or not direct_eligible(spec) \
                or link is not None and link.large and spec[m.T_NAME] in link.large \
                or not deps_ready or actor_id in self.head_only or actor_id in self.fenced \
                or actor_id == self.own_actor \
                or self.fence_all and actor_id not in self.fence_passed:
            # Through the head it could overtake the direct calls still in flight.
            return (DRAIN, link) if link is not None and link.inflight else (HEAD, None)
        if link is None:
            link = self._connect(actor_id)
            if link is None:
                return HEAD, None
        return DIRECT, link

    def _connect(self, actor_id: int) -> Link | None:
        refused = self.refused.get(actor_id)
        now = time.monotonic()
        if refused is not None and now - refused < RETRY_CONNECT:
            return None
        sock = direct.connect(address(self.session_id, actor_id))
        if sock is None:
            self.refused[actor_id] = now
            return None
        link = Link(actor_id, Channel(sock))
        self.links[actor_id] = link
        fd = link.channel.fd
        self.channels[fd] = link.channel
        self.readers[fd] = lambda link=link: self._read(link)
        return link

    def send(self, link: Link, spec: list, lifetime) -> bool:
        """Send a call on ``link``. False if the actor's process was gone before
        any of the call reached it (its socket refused the first byte with
        nothing queued before): the call must go through the head, which runs
        it on the restarted actor or fails it as it fails any call to a dead
        one. The calls still in flight on the link are lost with the process."""
        tid = spec[m.T_ID]
        oid = spec[m.T_RETURNS][0]
        link.inflight[tid] = oid
        # The handle's lifetime ref and the arguments' objects live until the answer.
        keep = (lifetime, [context.ObjectRef(i) for i in refs_of(spec)]) \
            if spec[m.T_DEPS] or spec[m.T_CONTAINED] else lifetime
        self.pending[oid] = (link, tid, keep, spec[m.T_NAME], time.time())
        msgs = [(m.EXECUTE, spec)]
        with self.lock:
            alone = not link.channel.outbuf
            if link.channel.send(msgs) or not alone:
                return True
        del link.inflight[tid]
        del self.pending[oid]
        self._lost(link)
        return False

    def fence(self, control_name: str, args: tuple) -> None:
        actors = FENCING[control_name](args)
        if actors is None:
            self.fence_all = True
            self.fence_passed.clear()
        else:
            self.fenced.update(actors)

    def note_head_call(self, actor_id: int, returns: list) -> None:
        self.fenced.discard(actor_id)
        if self.fence_all:
            self.fence_passed.add(actor_id)
        if actor_id in self.head_only:
            return
        with self.head_calls_lock:
            calls = self.head_calls.get(actor_id)
            if calls is None:
                calls = self.head_calls[actor_id] = set()
            calls.update(returns)
            if len(calls) > MAX_HEAD_CALLS:
                del self.head_calls[actor_id]
                self.head_only.add(actor_id)

    def head_calls_of(self, actor_id: int) -> list[int]:
        """The calls to ``actor_id`` made through the head and not seen finished."""
        with self.head_calls_lock:
            return list(self.head_calls.get(actor_id, ()))

    def new_task(self) -> None:
        """A task starts in this process: a new caller, whose calls need not stay
        behind the previous task's."""
        with self.head_calls_lock:
            self.head_calls.clear()
            self.head_only.clear()

    def seen_finished(self, oids) -> None:
        """A get or wait saw these head objects ready: calls that made them are done."""
        with self.head_calls_lock:
            for actor_id, calls in list(self.head_calls.items()):
                calls.difference_update(oids)
                if not calls:
                    del self.head_calls[actor_id]

    def _read(self, link: Link) -> list:
        batches = link.channel.read()
        if batches is None:
            self._lost(link)
            return []
        for msgs in batches:
            if m.CHECKING:
                m.check_all(msgs, f"a caller from actor {link.actor_id:016x}")
            for msg in msgs:
                if msg[0] == m.DIRECT_HELLO:
                    _, _, link.pid, link.rank = msg
                else:
                    self._answer(link, msg)
        return []

    def _answer(self, link: Link, msg: tuple) -> None:
        done = msg[0] == m.TASK_DONE
        if done:
            _, task_id, results, contained, t_start, t_end, pid = msg
        else:
            _, task_id, error, t_start, t_end, pid = msg
            contained = None
        oid = link.inflight.pop(task_id, None)
        if oid is None:
            return
        sent = self.pending.get(oid)
        if sent is not None:
            self._report(task_id, sent[3], "FINISHED" if done else "FAILED", link.rank, oid,
                         sent[4], t_start, t_end, pid, () if done else ((link.actor_id, error),))
        if self.dropped and oid in self.dropped:
            self.dropped.discard(oid)
            self.pending.pop(oid, None)
            if contained:
                with self.lock:
                    link.channel.send([(m.UNPIN, task_id)])
            return
        record = results[0] if done else error
        if done and not small_record(record, LARGE_RESULT) and sent is not None:
            link.large.add(sent[3])
        pins = [context.ObjectRef(c, _owned=False) for c in contained] if contained else None
        # In results before it leaves pending: another thread's wait sees it in one or
        # the other at every moment.
        self.results[oid] = Result(record, contained, pins, link, task_id)
        self.pending.pop(oid, None)
        if self.dropped and oid in self.dropped:
            self._let_go(oid)   # its ref died since the test above: see forget

    def _lost(self, link: Link) -> None:
        """The actor's process is gone: its calls in flight fail."""
        self.close(link)
        if link.pid:
            self.dead[link.actor_id] = link.pid
        for tid, oid in link.inflight.items():
            sent = self.pending.get(oid)
            if sent is not None:
                self._report(tid, sent[3], "FAILED", link.rank, oid, sent[4], None, None, 0,
                             ((link.actor_id, None),))
            self.results[oid] = Result(None, None, None, None, tid,
                                       (link.actor_id, link.pid, sent and sent[3]))
            self.pending.pop(oid, None)
            if self.dropped and oid in self.dropped:
                self._let_go(oid)   # its ref died, before or while this was filed: see forget
        link.inflight.clear()

    def settle(self, actor_id: int, pid: int | None = None) -> None:
        """Wait until the head no longer runs ``actor_id`` in the process this
        caller saw end (the head's ``actor_pid``: its current one, 0 for none),
        at most SETTLE_WAIT: its rank reports the death soon after."""
        dead = self.dead.get(actor_id, pid)
        if dead:
            try:   # (each look is a round trip to the head: no spin)
                wait.wait_until(lambda: self.control("actor_pid", actor_id) != dead,
                                SETTLE_WAIT, spin=0.0, what=f"actor {actor_id}'s death")
            except wait.WaitTimeout:
                pass   # the head still names it: the call's own error will say why
        self.dead.pop(actor_id, None)

    def record(self, res: Result) -> tuple:
        """A result's record; for a call lost with its actor's process, the error
        in the words the head uses for calls it loses (the head's ``actor_death``:
        class name, how the process ended, whether the actor is being restarted)."""
        if res.record is None:
            actor_id, pid, name = res.lost
            self.settle(actor_id, pid)
            cls, reason, restarting = self.control("actor_death", actor_id)
            text = (f"actor {cls} died: {reason}; the call {name} was lost"
                    + ("; the actor is being restarted" if restarting else "")
                    if cls else f"the actor's process (pid {pid}) ended; the call {name} "
                    f"was lost")
            res.record = values.error_record(ActorDiedError(text))
        return res.record

    def _report(self, tid, name, state, rank, oid, t_submit, t_start, t_end, pid,
                failure=()) -> None:
        """Keep a summary for the head, in its history's form (head/tasks.py summary);
        a failed call's adds (actor id, error record; None: lost with the process)."""
        finished = self.finished
        if not finished:
            self.finished_since = time.monotonic()
        finished.append((tid, name, state, rank, 1, (oid,), t_submit, t_start, t_end, pid)
                        + failure)

    def report_due(self, idle: bool) -> list | None:
        """The summaries to send now: many, old, or the caller is between tasks."""
        finished = self.finished
        if finished and (idle or len(finished) >= REPORT_EVERY
                         or time.monotonic() - self.finished_since > REPORT_AGE):
            # (Another thread may report at once: each takes what it pops.)
            take, done = finished.popleft, []
            try:
                for _ in range(len(finished)):
                    done.append(take())
            except IndexError:
                pass
            return done
        return None

    def close(self, link: Link) -> None:
        if self.links.get(link.actor_id) is link:
            del self.links[link.actor_id]
        fd = link.channel.fd
        self.channels.pop(fd, None)
        self.readers.pop(fd, None)
        link.channel.close()
        self.refused[link.actor_id] = time.monotonic()

    def unpin(self, res: Result) -> None:
        """The caller holds ``res``'s nested refs itself now (see the module doc)."""
        link = res.link
        if res.pins is not None and link is not None and self.links.get(link.actor_id) is link:
            with self.lock:
                link.channel.send([(m.UNPIN, res.tid)])
        res.pins = None

    def forget(self, oid: int) -> bool:
        """The last ref to ``oid`` died in this process: True if it was a direct
        result (``owns``), which this forgets, or is made by a held call.

        The thread reading the answers needs no lock of this one's: an answer
        is filed in ``results`` before it leaves ``pending``, so a call in
        flight is looked for there first, and noted ``dropped`` before it is
        looked for again. Whichever of the two threads sees both the filing
        and the note lets go of the result (``_let_go``); when both do, the
        second finds nothing left."""
        if self.held.returns and self.held.forget(oid):
            return True
        if oid in self.pending:
            self.dropped.add(oid)
            if oid not in self.pending:   # answered meanwhile
                self._let_go(oid)
            return True
        res = self.results.pop(oid, None)
        if res is not None:
            if res.pins is not None:
                self.unpin(res)
            return True
        return False

    def _let_go(self, oid: int) -> None:
        """A dropped result that was filed: forget it, and the actor's pins."""
        self.dropped.discard(oid)
        res = self.results.pop(oid, None)
        if res is not None and res.pins is not None:
            self.unpin(res)
