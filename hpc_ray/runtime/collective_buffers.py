"""How an ordinary actor's tensor reaches its rank's MPI collective and back.

An ordinary actor runs in an executor process without MPI; where its group's
members are not all on one node (``collective_shm`` runs those), its rank runs
the collective for it. The tensor crosses between the two processes by one of
two routes, never through the socket:

    executor                                    rank
    ── COLLECTIVE_OP(group, op, (CROSS_MEMORY, pid, address, out_address, ...)) ──▶
                                                process_vm_readv: the tensor into the
                                                rank's own buffer; MPI in place there;
                                                process_vm_writev: the result back
    ◀── REPLY (True, None) or (False, exception) ──

    or, where the kernel refuses cross-memory copies (then once per executor):
    the tensor into a scratch block of the node's store
    ── COLLECTIVE_OP(group, op, (STORE, offset, ...)) ──▶  the same, copying from and
                                                           to the store block
    ◀── REPLY ──   the result out of the block into the tensor

Either way the data moves once each way (a memcpy's speed), and MPI runs on the
rank's private memory: MPICH's Allreduce of 16 MB among 3 ranks took 9.5 ms on
private memory with transparent huge pages, 19.4 ms on private 4 KiB pages, 19.9
ms on a /dev/shm mapping and 18.8 ms on a shared anonymous mapping with
MADV_HUGEPAGE (shmem gets no huge pages here: shmem_enabled=never, and no
hugetlbfs pages are reserved); at 1 MB all four were alike (re-measured
2026-11-22 on 2 cores, load ~2). So MPI in place on a store block would cost
more than the two copies.

A scratch block is a store allocation like any other (ALLOC to the head); the
rank counts it among the executor's unsealed blocks, so it returns to the store
if the executor dies, and the executor gives it back itself (FREE_BLOCKS) when it
replaces it.
"""
from __future__ import annotations

import ctypes
import errno
import weakref
from typing import Any

import numpy as np

from ..exceptions import ObjectStoreFullError
from ..transport import messages as m

#: First element of a COLLECTIVE_OP's ``args``: where the tensor is.
CROSS_MEMORY = "cross_memory"
STORE = "store"
#: Scratch blocks grow to at least this, so that small tensors of different
#: sizes do not each cost an allocation round trip to the head.
MIN_SCRATCH = 1 << 20


class CrossMemoryRefused(OSError):
    """The kernel refused a cross-memory copy (seccomp, Yama, no such syscall)."""


# --- executor side ---------------------------------------------------------------------


def run(ctx, group: str, op: str, arr: np.ndarray, kw: dict, members: int = 0) -> Any:
    """Run ``op`` on ``arr`` (in place) through the rank; ``members`` sizes allgather's output.

    Returns None, or for allgather a new array of the ``members`` pieces.
    """
    work = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
    out = np.empty((members,) + arr.shape, arr.dtype) if members else None
    if ctx.cross_memory:
        ok, result = ctx._request(
            m.COLLECTIVE_OP, group, op,
            (CROSS_MEMORY, ctx.pid, work.ctypes.data,
             None if out is None else out.ctypes.data, arr.dtype.str, arr.shape, kw))
        if ok or not isinstance(result, CrossMemoryRefused):
            if not ok:
                raise result
            if work is not arr:
                np.copyto(arr, work)
            return out
        ctx.cross_memory = False
    try:
        block = _scratch(ctx, arr.nbytes * (1 + members))
    except ObjectStoreFullError:
        return _through_socket(ctx, group, op, arr, kw)
    staged = block.array(ctx, arr.dtype, arr.shape)
    np.copyto(staged, arr)
    ok, result = ctx._request(
        m.COLLECTIVE_OP, group, op,
        (STORE, block.offset, block.offset + arr.nbytes if members else None,
         arr.dtype.str, arr.shape, kw))
    if not ok:
        raise result
    if members:
        np.copyto(out, block.array(ctx, arr.dtype, out.shape, at=arr.nbytes))
        return out
    np.copyto(arr, staged)
    return None


def _through_socket(ctx, group: str, op: str, arr: np.ndarray, kw: dict) -> Any:
    """The last resort (a store too full for a scratch block): bytes both ways."""
    ok, result = ctx._request(m.COLLECTIVE_OP, group, op,
                              (arr.tobytes(), arr.dtype.str, arr.shape, kw))
    if not ok:
        raise result
    got = np.frombuffer(result, dtype=arr.dtype)
    if op == "allgather":
        return got.reshape((-1,) + arr.shape).copy()
    np.copyto(arr, got.reshape(arr.shape))
    return None


class _Block:
    """A store block lent to this executor; given back when it is collected."""

    __slots__ = ("offset", "size", "__weakref__")

    def __init__(self, ctx, size: int) -> None:
        _node, self.offset = ctx._alloc(size)
        self.size = size
        weakref.finalize(self, ctx.freed_blocks.append, (self.offset, size))

    def array(self, ctx, dtype: np.dtype, shape: tuple, at: int = 0) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        view = ctx.arena.pinned_view(self.offset + at, count * dtype.itemsize, self,
                                     writable=True)
        return np.frombuffer(view, dtype=dtype, count=count).reshape(shape)


def _scratch(ctx, nbytes: int) -> _Block:
    block = ctx.collective_scratch
    if block is None or block.size < nbytes:
        ctx.collective_scratch = None  # the old block goes back before a new one is taken
        block = _Block(ctx, max(nbytes, MIN_SCRATCH))
        ctx.collective_scratch = block
    return block


# --- rank side -------------------------------------------------------------------------


class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = None


def _vm_copy(write: bool, pid: int, local: int, remote: int, nbytes: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        for name in ("process_vm_readv", "process_vm_writev"):
            fn = getattr(_libc, name)
            fn.argtypes = [ctypes.c_int, ctypes.POINTER(_IOVec), ctypes.c_ulong,
                           ctypes.POINTER(_IOVec), ctypes.c_ulong, ctypes.c_ulong]
            fn.restype = ctypes.c_ssize_t
    fn = _libc.process_vm_writev if write else _libc.process_vm_readv
    done = 0
    while done < nbytes:
        got = fn(pid, ctypes.byref(_IOVec(local + done, nbytes - done)), 1,
                 ctypes.byref(_IOVec(remote + done, nbytes - done)), 1, 0)
        if got <= 0:
            err = ctypes.get_errno()
            if err in (errno.EPERM, errno.ENOSYS, errno.EACCES):
                raise CrossMemoryRefused(err, f"cross-memory copy refused: "
                                              f"{errno.errorcode.get(err, err)}")
            raise OSError(err, f"cross-memory copy with executor {pid} failed: "
                               f"{errno.errorcode.get(err, err)}")
        done += got


def _staging(loop, nbytes: int) -> np.ndarray:
    """The rank's own buffer for collectives (kept and grown: large numpy buffers get
    transparent huge pages, and MPI runs markedly faster on those)."""
    buf = loop.collective_staging
    if buf is None or buf.nbytes < nbytes:
        buf = loop.collective_staging = np.empty(max(nbytes, MIN_SCRATCH), np.uint8)
    return buf


def rank_run(loop, comm, group: str, op: str, args: tuple, apply) -> None:
    """Run ``op`` on an executor's tensor (``args`` from ``run``), in place."""
    from .collective_ops import member_gone
    dtype = np.dtype(args[-3])
    shape = tuple(args[-2])
    kw = args[-1]
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    members = comm.Get_size() if op == "allgather" else 0
    buf = _staging(loop, nbytes * (1 + members))
    work = buf[:nbytes].view(dtype).reshape(shape)
    out = buf[nbytes: nbytes * (1 + members)].view(dtype).reshape((members,) + shape) \
        if members else None
    if args[0] == CROSS_MEMORY:
        _, pid, address, out_address = args[:4]
        try:
            _vm_copy(False, pid, work.ctypes.data, address, nbytes)
        except CrossMemoryRefused:
            raise  # before any MPI call: the executor goes through the store instead
        except OSError as exc:
            raise member_gone(loop, comm, group, op) from exc  # it died after asking
        apply(loop, comm, group, op, work, out=out, **kw)
        if members:
            _vm_copy(True, pid, out.ctypes.data, out_address, out.nbytes)
        else:
            _vm_copy(True, pid, work.ctypes.data, address, nbytes)
        return
    _, offset, out_offset = args[:3]
    staged = loop.arena.array(offset, dtype, shape)
    np.copyto(work, staged)
    apply(loop, comm, group, op, work, out=out, **kw)
    if members:
        np.copyto(loop.arena.array(out_offset, dtype, out.shape), out)
    else:
        np.copyto(staged, work)
