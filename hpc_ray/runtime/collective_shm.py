"""Collectives among ordinary actors of one node, run by the actors themselves
through the node's shared-memory store, without their ranks.

When every member of a group is an executor of the same node, each member lends
the group one block of the store (``SLOT`` bytes after a 64-byte header) and an
operation is a round or two of flags in those headers, no message and no rank.
Chunk ``s`` of the group's operations (``s`` counts chunks, the same on every
member) uses half ``s % 2`` of every block:

    member i:  copy a chunk of its tensor into its block's half ── counter = 2s+1 ──▶
               wait until every member's counter >= 2s+1
               small chunk (<= SMALL): reduce every block into its own tensor
               large chunk: reduce its own part (1/size) of the chunk, in its
               block ── counter = 2s+2 ──▶ wait for all; copy every member's
               reduced part out (of two members, each copies only the other's
               half in, and reduces its own from its tensor into its block)

No round says "done reading": a member writes half ``s % 2`` again only in chunk
``s + 2``, after it has seen every counter reach 2(s+1)+1, and a member that has
begun chunk ``s + 1`` has finished reading chunk ``s``. So a small operation
is one round of flags. Broadcast, reduce and barrier are the same rounds with
less work; allgather copies every member's block out after the first round.
Chunks of ``HALF`` bytes (1 MiB) keep the blocks in cache: on 3 members of a
2-core node this ran 16 MB in a third to a half of MPI's time on the same
buffers (``benchmarks/allreduce.py``, results of 2026-11-22; 1-2 MiB chunks
measured alike). The ranks are woken by nothing, and the two cross-memory
copies are one copy in and one copy out, both cache-sized.

The first operation of a group sets it up through the ranks (``setup``): an
allgather of each member's node, block, pid and a random token, with the rank
path's header exchange first (so a member gone before it is reported). The
route is then decided the same way on every member; groups that span nodes
run a ShmGroup of their members on each node with MPI between one leader per
node (``collective_nodes``); members whose store was full, or
``HPC_RAY_COLLECTIVE_SHM=0``, keep the rank path (``collective_buffers``).

A member that dies is noticed by the others while they wait: its pid is gone
(checked every ``wait.CHECK_EVERY`` seconds of waiting) or its block no longer holds
its token (its rank gave the block back to the store, which may reuse it). They
raise a RayError naming the group, which stays broken on every member that
noticed, as on the rank path; a member that raises writes the dead member's
index into its header (``BROKEN``), so that those waiting on it raise too.

Ordering: data are written, then the counter; readers read the counter, then
the data. x86-64 keeps ordinary stores in order, but not the non-temporal
stores glibc's memcpy uses for large copies: after a copy that may use them a
locked instruction (``_fence``) comes before the counter. That is enough on x86-64
only; elsewhere every group keeps the rank path.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys
import zlib

import numpy as np

from ..exceptions import ObjectStoreFullError, RayError
from ..transport.wait import wait_until

#: Bytes of each member's block for data: two halves of one chunk each. Larger
#: chunks cost fewer rounds of flags but fall out of cache (measured on 3
#: members, 16 MB: 1-2 MiB chunks 3.2-3.4 ms, 4 MiB 10 ms, 16 MiB 5 ms; MPI 6-9 ms).
SLOT = 2 << 20
HALF = SLOT // 2
#: Chunks up to this size are reduced whole by every member (one round of
#: flags); larger ones are reduced a part per member (two rounds, less work
#: each).
SMALL = 64 << 10
#: glibc's memcpy uses non-temporal stores only above a threshold that is at
#: least this (its floor, 0x4040, in ``dl-cacheinfo.h``): smaller copies need no fence.
ORDINARY_STORES = 0x4040
#: Header bytes before the data (a cache line), as int64 words: the member's
#: token, its counter, BROKEN, and at SIG + s % 2 the signature of the
#: operation that began in chunk s (two: a member may begin the next operation
#: while another still compares this one's).
HEADER = 64
#: Header word where a member that saw another die writes that one's index + 1,
#: so that the members waiting on it stop waiting too.
BROKEN = 3
SIG = 4
#: Signatures kept (``signature``), and views per group, at most this many of
#: each (an operation's shapes usually repeat; a program whose never do still works).
CACHED = 64
#: A wait looks without sleeping (yielding the core between looks) for this
#: long, since the members of a step arrive within about this much of each
#: other; then it sleeps between looks, doubling up to ``wait.SLEEP_CAP``, so
#: that a member waiting for a long computation of another does not keep a
#: core busy. It checks that the member it waits for lives every
#: ``wait.CHECK_EVERY`` (``wait.wait_until``).
SPIN = 0.002

_UFUNCS = {"sum": np.add, "mean": np.add, "prod": np.multiply, "min": np.minimum,
           "max": np.maximum}
_OPS = ("allreduce", "reduce", "broadcast", "barrier")


def available() -> bool:
    from .. import _config
    if not sys.platform.startswith("linux") or \
            platform.machine().lower() not in ("x86_64", "amd64"):
        return False    # the ordering argument is x86's; liveness is read from /proc
    return bool(_config.os_environ_get("COLLECTIVE_SHM", 1, int))


class _Fence:
    """A locked instruction (pthread spin lock and unlock): orders earlier stores,
    non-temporal ones included, before later ones."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None)
        self._lock = ctypes.c_int(0)
        self._ref = ctypes.byref(self._lock)
        self._libc.pthread_spin_init(self._ref, 0)

    def __call__(self) -> None:
        self._libc.pthread_spin_lock(self._ref)
        self._libc.pthread_spin_unlock(self._ref)


_fence = None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] not in "ZX"
    except (OSError, IndexError):
        return False


_signatures: dict = {}


def signature(key: tuple) -> int:
    """A number naming an operation, its shape and dtype (``key``: names, numbers,
    shapes and numpy dtypes), the same in every process (unlike ``hash``). The
    store route's members and the ranks' header exchange (``collective_ops``)
    compare theirs."""
    sig = _signatures.get(key)
    if sig is None:
        if len(_signatures) >= CACHED:
            _signatures.clear()
        named = tuple(x.str if isinstance(x, np.dtype) else x for x in key)
        sig = _signatures[key] = zlib.crc32(repr(named).encode())
    return sig


def check_call(broken: str | None, size: int, op: str, reduce_op: str, root: int) -> None:
    """Raise what a member's call of ``op`` on a group of ``size`` raises before
    it waits for anyone: the group is broken, or the arguments are wrong."""
    if broken is not None:
        raise RayError(broken)
    if reduce_op not in _UFUNCS:
        raise ValueError(f"unknown reduce op {reduce_op!r} (valid: {list(_UFUNCS)})")
    if op in ("reduce", "broadcast") and not 0 <= root < size:
        raise ValueError(f"{op} root must be in 0..{size - 1}, got {root!r}")


def _reduce_all(ufunc, views: list, out: np.ndarray) -> None:
    """``out`` = every member's view reduced with ``ufunc``."""
    ufunc(views[0], views[1], out=out)
    for v in views[2:]:
        ufunc(out, v, out=out)


class _Plan:
    """One kind of operation as one member runs it (``ShmGroup._plan``)."""

    __slots__ = ("op", "sig", "halves", "ufunc", "write", "fence", "reduces", "copies",
                 "root", "mean")

    def __init__(self, **fields) -> None:
        for name, value in fields.items():
            setattr(self, name, value)


class ShmGroup:
    """This member's view of a group run through the store (executor side)."""

    #: The operations this route runs.
    OPS = _OPS + ("allgather",)

    def __init__(self, ctx, name: str, block, token: int, me: int, peers: list,
                 members: list[int] | None = None) -> None:
        global _fence
        if _fence is None:
            _fence = _Fence()
        self.name = name
        self.block = block          # keeps this member's store block lent
        self.me = me
        self.size = len(peers)
        self.pids = [p[2] for p in peers]
        self.tokens = [p[3] for p in peers]
        self.hdrs = [ctx.arena.array(p[1], np.int64, (HEADER // 8,)) for p in peers]
        #: Each member's two halves, by parity of the chunk.
        self.halves = [[ctx.arena.array(p[1] + HEADER + h * HALF, np.uint8, (HALF,))
                        for p in peers] for h in (0, 1)]
        self.seq = 0
        self.views: dict = {}
        #: An operation's ``_Plan`` by (op, shape, dtype, reduce_op, root).
        self.plans: dict = {}
        self.broken: str | None = None
        self.others = [j for j in range(self.size) if j != me]
        #: Each peer's index in the whole group (``collective_nodes`` runs a
        #: group's members of one node as a ShmGroup of their own).
        self.members = list(range(self.size)) if members is None else members
        #: The group index of the member whose death broke the group here.
        self.dead: int | None = None

    # --- flags ---------------------------------------------------------------------

    def _publish(self, value: int, fence: bool = False) -> None:
        if fence:
            _fence()
        self.hdrs[self.me][1] = value

    def _wait(self, target: int, op: str) -> None:
        for j in self.others:
            h, token = self.hdrs[j], self.tokens[j]
            if h.item(1) >= target and h.item(0) == token:
                continue

            def arrived() -> bool:
                if h[0] != token:
                    self._gone(self.members[j], op)
                if h[BROKEN]:
                    self._gone(int(h[BROKEN]) - 1, op)
                return h[1] >= target

            def alive() -> None:
                if not _alive(self.pids[j]):
                    self._gone(self.members[j], op)
            wait_until(arrived, alive=alive, spin=SPIN, what=f"{op} member {j}")

    def _gone(self, dead: int, op: str):
        """Member ``dead`` (its index in the group) is gone: break the group here,
        and say so in this member's header to the members waiting on this one."""
        self.broken = (f"{op} in collective group {self.name!r}: the actor of member(s) "
                       f"[{dead}] is gone (it died or was killed); the group is broken on "
                       f"every member: destroy it (destroy_collective_group) and create "
                       f"a new one")
        self.dead = dead
        self.break_off(dead)
        raise RayError(self.broken)

    def break_off(self, dead: int) -> None:
        """Tell the members waiting on this one that member ``dead`` is gone."""
        self.hdrs[self.me][BROKEN] = dead + 1

    # --- operations ----------------------------------------------------------------

    def run(self, op: str, arr: np.ndarray, reduce_op: str = "sum", root: int = 0) -> None:
        """``op`` on ``arr`` (C-contiguous, writable), in place, with the other members."""
        if self.broken is not None:
            raise RayError(self.broken)
        key = (op, arr.shape, arr.dtype, reduce_op, root)
        plan = self.plans.get(key)
        if plan is None:
            plan = self._plan(key, arr)
        if plan.halves is not None:
            self._one_round(plan, arr)
        else:
            flat = arr if arr.ndim == 1 else arr.reshape(-1)
            step = HALF // flat.itemsize
            for lo in range(0, flat.size, step):
                self._chunk(op, flat[lo:lo + step], reduce_op, root,
                            plan.sig if lo == 0 else None)
        if plan.mean:
            if np.issubdtype(arr.dtype, np.integer):
                arr //= self.size
            else:
                arr /= self.size

    def _plan(self, key: tuple, arr: np.ndarray) -> "_Plan":
        """What ``run`` needs of an operation named by ``key``, made once per key
        (the arguments checked, its signature, views of every member's halves
        shaped like ``arr`` where the operation fits in one round of flags)."""
        op, _shape, dtype, reduce_op, root = key
        check_call(None, self.size, op, reduce_op, root)
        if len(self.plans) >= CACHED:
            self.plans.clear()
        one_round = op == "barrier" or arr.nbytes <= SMALL
        halves = None
        if one_round:
            k = arr.nbytes if op != "barrier" else 0
            halves = [[d[:k].view(dtype).reshape(arr.shape if op != "barrier" else (0,))
                       for d in self.halves[h]] for h in (0, 1)]
        me = self.me
        takes = op == "allreduce" or (op == "reduce" and me == root)
        write = op != "barrier" and (op != "broadcast" or me == root)
        plan = self.plans[key] = _Plan(
            sig=signature(key), halves=halves, ufunc=_UFUNCS[reduce_op], write=write,
            fence=write and arr.nbytes >= ORDINARY_STORES, reduces=takes,
            copies=op == "broadcast" and me != root, root=root,
            mean=reduce_op == "mean" and takes, op=op)
        return plan

    def _one_round(self, plan: "_Plan", arr: np.ndarray) -> None:
        """An operation of at most SMALL bytes: one round of flags, then the
        members that take a result reduce every member's half into ``arr``
        (a broadcast's copy the root's)."""
        s = self.seq
        self.seq = s + 1
        h = s & 1
        views = plan.halves[h]
        if plan.write:
            views[self.me][...] = arr
        self.hdrs[self.me][SIG + h] = plan.sig
        self._publish(2 * s + 1, fence=plan.fence)
        self._wait(2 * s + 1, plan.op)
        self._check_signatures(h, plan.sig, plan.op)
        if plan.reduces:
            _reduce_all(plan.ufunc, views, arr)
        elif plan.copies:
            arr[...] = views[plan.root]

    def allgather(self, arr: np.ndarray) -> np.ndarray:
        """Every member's ``arr`` (C-contiguous), stacked in member order."""
        if self.broken is not None:
            raise RayError(self.broken)
        out = np.empty((self.size,) + arr.shape, arr.dtype)
        flat = arr.reshape(-1).view(np.uint8)
        dest = [out[j].reshape(-1).view(np.uint8) for j in range(self.size)]
        sig = signature(("allgather", arr.shape, arr.dtype))
        lo, first = 0, True
        while first or lo < flat.nbytes:
            hi = min(flat.nbytes, lo + HALF)
            views = self._arrive("allgather", flat[lo:hi], True, sig if first else None)
            for j in range(self.size):
                dest[j][lo:hi] = views[j]
            lo, first = hi, False
        return out

    def _arrive(self, op: str, chunk: np.ndarray, write: bool, sig: int | None,
                keep: slice | None = None) -> list:
        """Begin the next chunk: write ``chunk`` into this member's half (if
        ``write``; all but its ``keep`` part, which this member reduces from
        ``chunk`` itself), say so, wait for every member to say so. Returns every
        member's half as arrays like ``chunk``. ``sig``: this chunk begins an
        operation, which every member must name alike."""
        s = self.seq
        self.seq += 1
        me, h = self.me, s & 1
        key = (h, chunk.size, chunk.dtype)
        views = self.views.get(key)
        if views is None:
            if len(self.views) >= CACHED:
                self.views.clear()
            k = chunk.nbytes
            views = self.views[key] = [d[:k].view(chunk.dtype) for d in self.halves[h]]
        if write and keep is None:
            views[me][...] = chunk
        elif write:
            views[me][:keep.start] = chunk[:keep.start]
            views[me][keep.stop:] = chunk[keep.stop:]
        if sig is not None:
            self.hdrs[me][SIG + h] = sig
        self._publish(2 * s + 1, fence=write and chunk.nbytes >= ORDINARY_STORES)
        self._wait(2 * s + 1, op)
        if sig is not None:
            self._check_signatures(h, sig, op)
        return views

    def _check_signatures(self, h: int, sig: int, op: str) -> None:
        """Every member named the operation that began in half ``h`` alike."""
        for hdr in self.hdrs:
            if hdr.item(SIG + h) != sig:
                raise ValueError(f"{op} in collective group {self.name!r}: the members "
                                 f"called different operations, shapes or dtypes")

    def _chunk(self, op: str, out: np.ndarray, reduce_op: str, root: int,
               sig: int | None) -> None:
        """One chunk of ``op``: ``out`` (a flat piece of the tensor) in, the result into it."""
        me = self.me
        if op == "broadcast" or out.nbytes <= SMALL:
            views = self._arrive(op, out, op != "broadcast" or me == root, sig)
            if not out.size:
                return
            if op == "broadcast":
                if me != root:
                    out[...] = views[root]
            elif op == "allreduce" or me == root:
                _reduce_all(_UFUNCS[reduce_op], views, out)
            return
        # Reduce-scatter, then every member copies the reduced parts out. Of two
        # members, each keeps its own half out of its block and reduces it from
        # ``out`` into the block: a quarter less copying, 1.14-1.22x at 1-16 MB
        # on 16 cores; with 3 members the same took 0.91-0.95x, with 4 and 8
        # 0.88-1.08x (benchmarks/results/sixteen-cores-2026-11-28c.md).
        count = out.size
        bounds = [count * j // self.size for j in range(self.size + 1)]
        part = slice(bounds[me], bounds[me + 1])
        keep = part if self.size == 2 else None
        views = self._arrive(op, out, True, sig, keep=keep)
        s = self.seq - 1
        ufunc = _UFUNCS[reduce_op]
        acc = views[me][part]
        src = acc if keep is None else out[part]
        for j in self.others:
            ufunc(src, views[j][part], out=acc)
            src = acc
        self._publish(2 * s + 2, fence=True)
        self._wait(2 * s + 2, op)
        if op == "allreduce" or me == root:
            for j in range(self.size):
                part = slice(bounds[j], bounds[j + 1])
                out[part] = views[j][part]


# --- setup (executor side) ---------------------------------------------------------------


def setup(ctx, group: str, request):
    """Set ``group`` up on its first operation: a ShmGroup (members on one node),
    a ``collective_nodes.NodesGroup`` (members on several nodes, a store route in
    each), or None for the rank path.

    ``request(info)`` runs the ranks' allgather of ``info`` over the group and
    returns (this member's index, every member's info).
    """
    from .collective_buffers import _Block
    block = None
    token = (int.from_bytes(os.urandom(8), "little") >> 2) | 1   # not the user's random seed
    if available():
        try:
            block = _Block(ctx, HEADER + SLOT)
        except ObjectStoreFullError:
            block = None
    if block is not None:
        hdr = ctx.arena.array(block.offset, np.int64, (HEADER // 8,))
        hdr[:] = 0
        hdr[0] = token
    me, peers = request((ctx.node, None if block is None else block.offset, ctx.pid, token))
    if block is None:
        return None
    from .collective_nodes import NodesGroup, plan
    nodes = plan(peers)
    if nodes is not None:
        return NodesGroup(ctx, group, block, token, me, peers, nodes)
    if any(p[1] is None or p[0] != ctx.node for p in peers):
        return None
    if len(peers) < 2:
        return None
    return ShmGroup(ctx, group, block, token, me, peers)
