"""The node-local shared-memory object store.

One ``memfd`` per node, created by the node's first rank at start-up; the other
ranks of the node open it through ``/proc/<pid>/fd/<n>`` and executors inherit
it. Nothing has a name in /dev/shm, so nothing can be left behind: the memory is
returned to the kernel when the last process that maps it exits, even after
``kill -9``.

Placement is bookkeeping only (:class:`Allocator`), kept by the head for every
node, so frees need no message and one object may be as large as the whole
store. Readers get read-only views that pin the object: the view holds a
reference that keeps the object alive for as long as any numpy array or Arrow
buffer made from it exists.
"""
from __future__ import annotations

import bisect
import ctypes
import logging
import mmap
import os
import threading

import numpy as np

logger = logging.getLogger(__name__)

#: Every allocation is rounded up to this; it keeps buffers cache-line aligned.
BLOCK = 64
#: Bytes made resident in the background right after start-up (the first write
#: into fresh shared memory runs at ~0.25 GB/s here, later ones at ~10 GB/s).
PRETOUCH_BYTES = 256 << 20
_MADV_POPULATE_WRITE = 23


class Allocator:
    """First-fit placement in one arena, with coalescing frees. Pure bookkeeping."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free_offsets: list[int] = [0]
        self._free_sizes: dict[int, int] = {0: capacity}
        self.used = 0
        #: Bytes freed so far: whether a full store is making room
        #: (``values.allocate`` waits only while it is).
        self.freed = 0

    def alloc(self, size: int) -> int | None:
        size = max(BLOCK, (size + BLOCK - 1) // BLOCK * BLOCK)
        for i, off in enumerate(self._free_offsets):
            avail = self._free_sizes[off]
            if avail >= size:
                del self._free_offsets[i]
                del self._free_sizes[off]
                if avail > size:
                    rest = off + size
                    self._free_offsets.insert(i, rest)
                    self._free_sizes[rest] = avail - size
                self.used += size
                return off
        return None

    def free(self, offset: int, size: int) -> None:
        size = max(BLOCK, (size + BLOCK - 1) // BLOCK * BLOCK)
        self.used -= size
        self.freed += size
        i = bisect.bisect_left(self._free_offsets, offset)
        # Merge with the following free block.
        if i < len(self._free_offsets) and self._free_offsets[i] == offset + size:
            nxt = self._free_offsets.pop(i)
            size += self._free_sizes.pop(nxt)
        # Merge with the preceding free block.
        if i > 0:
            prev = self._free_offsets[i - 1]
            if prev + self._free_sizes[prev] == offset:
                self._free_sizes[prev] += size
                return
        self._free_offsets.insert(i, offset)
        self._free_sizes[offset] = size

    def largest_free(self) -> int:
        return max(self._free_sizes.values(), default=0)


class _Pinned(np.ndarray):
    """A byte array over store memory that holds a pin (an ObjectRef) alive."""


class Arena:
    """This process's mapping of its node's store."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self._mmap = mmap.mmap(fd, size) if size else None
        self._bytes = (np.frombuffer(self._mmap, dtype=np.uint8) if size
                       else np.empty(0, np.uint8))

    @classmethod
    def create(cls, size: int) -> "Arena":
        fd = os.memfd_create("hpc_ray_store", 0)
        os.ftruncate(fd, size)
        return cls(fd, size)

    @classmethod
    def open(cls, pid: int, fd: int, size: int) -> "Arena":
        return cls(os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR), size)

    def writable(self, offset: int, size: int) -> memoryview:
        return memoryview(self._bytes[offset: offset + size])

    def array(self, offset: int, dtype: np.dtype, shape: tuple) -> np.ndarray:
        """A writable array over store memory at ``offset`` (no pin: the caller owns it)."""
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self._mmap, dtype=dtype, count=count, offset=offset).reshape(shape)

    def pinned_view(self, offset: int, size: int, pin: object,
                    writable: bool = False) -> memoryview:
        """Memory at ``offset`` that keeps ``pin`` alive while any array made from it exists."""
        arr = self._bytes[offset: offset + size].view(_Pinned)
        arr._hpc_ray_pin = pin
        arr.flags.writeable = writable
        return memoryview(arr)

    def pretouch_in_background(self, nbytes: int = PRETOUCH_BYTES) -> None:
        """Make the first ``nbytes`` resident at low priority, off the caller's path."""
        if not self.size:
            return
        nbytes = min(nbytes, self.size)
        threading.Thread(target=self._pretouch, args=(nbytes,), daemon=True,
                         name="hpc_ray-pretouch").start()

    def _pretouch(self, nbytes: int) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:
            pass
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            base = self._bytes.ctypes.data
            chunk = 16 << 20
            for off in range(0, nbytes, chunk):
                n = min(chunk, nbytes - off)
                # Not a write loop: other processes may already be writing here.
                if libc.madvise(base + off, n, _MADV_POPULATE_WRITE) != 0:
                    return  # kernel before 5.14: pages fault in on first use instead
        except (OSError, ValueError, AttributeError) as exc:  # pragma: no cover
            logger.debug("pretouch stopped: %s", exc)

    def close(self) -> None:
        """Close the store's fd and unmap it: an embedded driver that starts and
        stops sessions in a loop kept every store mapped (and its fd) until the
        garbage collector found the arena. Views handed to the user may still
        export the mapping: then it stays until they go (or the process exits)."""
        try:
            os.close(self.fd)
        except OSError:
            pass
        if self._mmap is not None:
            self._bytes = np.empty(0, np.uint8)
            try:
                self._mmap.close()
            except BufferError:
                pass
