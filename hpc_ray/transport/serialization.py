"""Values to bytes and back: pickle protocol 5 with out-of-band buffers.

A value is described on the wire and in the object table by a *record*, a tuple
whose first item is its kind:

    (RAW, value)                       int/float/str/... small enough to travel as is
    (INLINE, data, [buffers])          pickled, under INLINE_MAX bytes in all
    (SHM, node, offset, size, data_len, [(rel_offset, length), ...])
                                       pickled into the node's shared-memory store
    (ERROR, data)                      a pickled exception (TaskError, WorkerCrashedError, ...)

cloudpickle handles functions and classes defined in ``__main__``. Object refs
inside a value are collected while pickling (``contained``) so the head can keep
them alive as long as the value that holds them. Plain data (``_plain``: numbers,
strings, numpy arrays, small lists, tuples and dicts of them) is pickled by the
standard pickler, which writes the same bytes several times faster: cloudpickle
calls back into Python for every object it pickles.
"""
from __future__ import annotations

import copyreg
import io
import pickle
import sys
import threading
import types
from collections import ChainMap
from typing import Any

import cloudpickle

RAW, INLINE, SHM, ERROR = 0, 1, 2, 3

#: Values up to this size travel inside control messages; larger ones go through
#: the shared-memory store. A copy of 100 KiB costs ~10 us, a store round trip more.
INLINE_MAX = 100 * 1024
#: Out-of-band buffers start on this alignment in the store (cache line, SIMD loads).
ALIGN = 64

_RAW_SCALARS = (int, float, bool, type(None))
_RAW_SEQ = (str, bytes)

_collect = threading.local()


def note_contained_ref(object_id: int) -> None:
    """Called by ``ObjectRef.__reduce__``: remember refs pickled inside a value."""
    ids = getattr(_collect, "ids", None)
    if ids is not None:
        ids.append(object_id)


class Serialized:
    """A pickled value: in-band bytes, out-of-band buffers and the refs inside it."""

    __slots__ = ("data", "buffers", "contained", "size")

    def __init__(self, data: bytes, buffers: list, contained: list[int]) -> None:
        self.data = data
        self.buffers = [b.raw() if isinstance(b, pickle.PickleBuffer) else memoryview(b)
                        for b in buffers]
        self.contained = contained
        self.size = len(data) + sum(b.nbytes + ALIGN for b in self.buffers)

    def inline_record(self) -> tuple:
        return (INLINE, self.data, [bytes(b) for b in self.buffers])

    def layout(self) -> tuple[int, list[tuple[int, int]]]:
        """Total bytes needed in the store and where each buffer goes."""
        pos = len(self.data)
        spans = []
        for b in self.buffers:
            pos = (pos + ALIGN - 1) // ALIGN * ALIGN
            spans.append((pos, b.nbytes))
            pos += b.nbytes
        return max(pos, 1), spans

    def write_into(self, dest: memoryview, spans: list[tuple[int, int]]) -> None:
        dest[: len(self.data)] = self.data
        for b, (off, n) in zip(self.buffers, spans):
            dest[off: off + n] = b.cast("B") if b.ndim != 1 or b.format != "B" else b


# --- code objects keep their file --------------------------------------------------

def _code_in_file(args: tuple, filename: str) -> types.CodeType:
    """Rebuild a code object that cloudpickle sent, under the file it came from."""
    code = types.CodeType(*args)
    return code if code.co_filename == filename else code.replace(co_filename=filename)


_cloudpickle_code_reduce = cloudpickle.Pickler.dispatch_table.get(types.CodeType)


def _code_reduce(code: types.CodeType):
    # cloudpickle 3.1.3 sends every code object of a function defined in __main__
    # under the file name "<dynamic-code>", so a remote traceback showed no source
    # line ("File "<dynamic-code>", line 12, in f"). The file travels beside it.
    rebuild, args = _cloudpickle_code_reduce(code)
    if rebuild is not types.CodeType:
        return rebuild, args
    return _code_in_file, (args, code.co_filename)


def _flat(table) -> list:
    """A dispatch table's dicts: a ChainMap of a ChainMap made the pickler call
    two Python ``__getitem__`` (each raising KeyError) for every object pickled."""
    return list(table.maps) if isinstance(table, ChainMap) else [table]


_class_reduce = getattr(cloudpickle.cloudpickle, "_class_reduce", None)
_make_skeleton_class = getattr(cloudpickle.cloudpickle, "_make_skeleton_class", None)


def _slotted_class_reduce(cls: type):
    """cloudpickle's reduction of a class it sends by value, with its ``__slots__``
    given when the class is made. cloudpickle 3.1.3 sets them afterwards, which
    makes nothing of them: instances of the copy get a ``__dict__``, their state
    goes back as a dict, and the sender's own class (with slots) cannot take it
    (a ``__main__`` class with ``__slots__`` returned from a task). None: as
    cloudpickle does it, also for empty slots, which give instances no state
    (a ``typing.NamedTuple`` has them, and its metaclass refuses them given)."""
    if not cls.__dict__["__slots__"]:
        return None
    reduced = _class_reduce(cls) if _class_reduce is not None else NotImplemented
    if not isinstance(reduced, tuple) or reduced[0] is not _make_skeleton_class:
        return None
    args = list(reduced[1])
    args[3] = dict(args[3], __slots__=cls.__dict__["__slots__"])
    return (reduced[0], tuple(args)) + tuple(reduced[2:])


class _Pickler(cloudpickle.Pickler):
    if _cloudpickle_code_reduce is not None:   # (a cloudpickle that pickles code its own way)
        dispatch_table = ChainMap({types.CodeType: _code_reduce},
                                  *_flat(cloudpickle.Pickler.dispatch_table))

    def reducer_override(self, obj):
        if isinstance(obj, type) and "__slots__" in obj.__dict__:
            reduced = _slotted_class_reduce(obj)
            if reduced is not None:
                return reduced
        return super().reducer_override(obj)


def _cloudpickle_dumps(value: Any, buffer_callback=None) -> bytes:
    with io.BytesIO() as file:
        _Pickler(file, protocol=5, buffer_callback=buffer_callback).dump(value)
        return file.getvalue()


def dumps(value: Any) -> bytes:
    """Pickle a function, class or small control value (no out-of-band buffers)."""
    return _cloudpickle_dumps(value)


#: A remote function or actor class larger than this, pickled, is warned of
#: (Ray 0.7's PICKLE_OBJECT_WARNING_SIZE).
DEFINITION_WARNING_BYTES = 10 ** 7


def dumps_definition(obj: Any, kind: str, name: str, stacklevel: int) -> bytes:
    """Pickle a remote function or actor class (``kind``, e.g. "remote function"):
    a ``TypeError`` naming it if that fails, and a warning if it is large, as Ray
    0.7 gives. It goes to every process that runs it, so a large one is most often
    a large array or model its definition refers to. ``stacklevel``: the user's
    call that sends it, for the warning."""
    try:
        blob = _cloudpickle_dumps(obj)
    except Exception as exc:
        raise TypeError(f"could not serialize {kind} {name}: "
                        f"{type(exc).__name__}: {exc}") from exc
    if len(blob) > DEFINITION_WARNING_BYTES:
        import warnings
        warnings.warn(f"The {kind} {name} has size {len(blob)} when pickled, and every "
                      f"process that runs it loads it. This may mean that its definition "
                      f"uses a large array or other object; pass that as an argument or "
                      f"put() it once and pass the ref.", stacklevel=stacklevel)
    return blob


loads = pickle.loads


def loads_definition(blob: bytes, name: str, rank: int) -> Any:
    """A remote function or actor class ``dumps_definition`` pickled, rebuilt in
    this process: a ``TypeError`` naming it and the cause if that fails."""
    try:
        return loads(blob)
    except Exception as exc:
        raise TypeError(f"could not load {name} on worker rank {rank}: {type(exc).__name__}: "
                        f"{exc} (a global it uses, pickled with it, cannot be rebuilt in "
                        f"another process: create it inside the function instead)") from exc


def is_raw(value: Any) -> bool:
    t = type(value)
    return t in _RAW_SCALARS or (t in _RAW_SEQ and len(value) <= 4096)


#: Types the standard pickler writes as cloudpickle does (no code, no class by
#: reference that could be ``__main__``'s), and how many items ``_plain`` looks
#: at before it leaves a value to cloudpickle (a long list is checked no faster
#: than cloudpickle pickles it).
_PLAIN_ATOMS = frozenset((int, float, bool, type(None), complex, str, bytes))
PLAIN_ITEMS = 64
#: ``_plain``'s answers; WITH_REFS is added to PLAIN or PLAIN_NUMPY where the
#: value holds objects of ``_BY_NAME`` types (their refs must be collected).
NOT_PLAIN, PLAIN, PLAIN_NUMPY = range(3)
WITH_REFS = 4
#: hpc_ray's own types whose ``__reduce__`` names a module-level function
#: (object refs, actor handles: ``register_by_name``). The standard pickler
#: writes them as cloudpickle does, without cloudpickle's look-up of that
#: function in its module at every pickle: a task's arguments holding an actor
#: handle pickled in 15.5 us that way, 4.4 us now (benchmarks/handle_args.py).
_BY_NAME: set = set()


def register_by_name(t: type) -> None:
    """Let ``_plain`` take ``t``'s instances: its ``__reduce__`` must return a
    function importable by its module and name, with plain data or ``_BY_NAME``
    objects as its arguments."""
    _BY_NAME.add(t)


def _plain(value: Any) -> int:
    """PLAIN if ``value`` is plain data: the atoms above, and lists, tuples and
    dicts (exactly those types) of plain data, PLAIN_ITEMS items in all at most;
    PLAIN_NUMPY if some of it is numpy arrays or scalars without Python objects
    in them (and no reducer of the user's for their type); plus WITH_REFS if
    some of it is objects of ``_BY_NAME`` types; NOT_PLAIN otherwise.
    (The pickler writes the atoms and containers itself, whatever copyreg says.)"""
    budget = PLAIN_ITEMS
    todo = [value]
    np = sys.modules.get("numpy")
    found = PLAIN
    refs = 0
    while todo:
        v = todo.pop()
        t = type(v)
        if t in _PLAIN_ATOMS:
            continue
        budget -= 1
        if budget < 0:
            return NOT_PLAIN
        if t is list or t is tuple:
            if len(v) > budget:
                return NOT_PLAIN
            todo.extend(v)
        elif t is dict:
            if 2 * len(v) > budget:
                return NOT_PLAIN
            todo.extend(v.keys())
            todo.extend(v.values())
        elif t in _BY_NAME:
            if t in copyreg.dispatch_table:
                return NOT_PLAIN
            refs = WITH_REFS
        elif np is not None and (t is np.ndarray or isinstance(v, np.generic)) \
                and t.__module__ == "numpy" and not v.dtype.hasobject \
                and t not in copyreg.dispatch_table:   # (register_custom_serializer)
            found = PLAIN_NUMPY
        else:
            return NOT_PLAIN
    return found | refs


# numpy's own reduce pickles the dtype object (~10 us to write, ~3 us to read);
# plain arrays and scalars travel with the dtype's string instead. An array's
# data stays out of band (protocol 5): in the store it is read without a copy.

def _rebuild_array(buf, dtype: str, shape: tuple):
    import numpy
    return numpy.frombuffer(buf, dtype).reshape(shape)


def _rebuild_scalar(dtype: str, data: bytes):
    import numpy
    return numpy.frombuffer(data, dtype)[0]


#: dtype kinds whose data is exported as a buffer: bool, numbers, strings (not
#: datetimes, records or raw void).
_BUFFER_KINDS = frozenset("biufcSU")


def _reduce_array(a):
    dt = a.dtype
    if dt.kind in _BUFFER_KINDS and a.flags.c_contiguous and dt.metadata is None:
        return _rebuild_array, (pickle.PickleBuffer(a), dt.str, a.shape)
    # Other dtypes, dtypes with metadata (an h5py enum: the string drops it), or
    # not contiguous: numpy's own way.
    return a.__reduce_ex__(5)


def _reduce_scalar(x):
    if x.dtype.kind in _BUFFER_KINDS and x.dtype.metadata is None:
        return _rebuild_scalar, (x.dtype.str, x.tobytes())
    return x.__reduce_ex__(5)


class _NumpyPickler(pickle.Pickler):
    """The standard pickler, with the reducers above for numpy's types (a dict:
    the C pickler looks types up in it without calling Python)."""
    dispatch_table: dict = {}


def _numpy_pickler_table() -> dict:
    import numpy
    table = dict(copyreg.dispatch_table)
    table[numpy.ndarray] = _reduce_array
    for t in set(numpy.sctypeDict.values()):
        if issubclass(t, numpy.generic) and t.__module__ == "numpy" \
                and not numpy.dtype(t).hasobject:
            table[t] = _reduce_scalar
    return table


def _dumps_plain(value: Any, kind: int, buffer_callback) -> bytes:
    if kind == PLAIN:
        return pickle.dumps(value, protocol=5, buffer_callback=buffer_callback)
    if not _NumpyPickler.dispatch_table:
        _NumpyPickler.dispatch_table = _numpy_pickler_table()
    with io.BytesIO() as file:
        _NumpyPickler(file, protocol=5, buffer_callback=buffer_callback).dump(value)
        return file.getvalue()


def serialize(value: Any) -> Serialized:
    """Pickle ``value`` with out-of-band buffers, collecting contained refs."""
    buffers: list = []
    kind = _plain(value)
    if kind != NOT_PLAIN and not kind & WITH_REFS:
        return Serialized(_dumps_plain(value, kind, buffers.append), buffers, [])
    prev = getattr(_collect, "ids", None)
    _collect.ids = contained = []
    try:
        if kind == NOT_PLAIN:
            data = _cloudpickle_dumps(value, buffer_callback=buffers.append)
        else:
            data = _dumps_plain(value, kind & ~WITH_REFS, buffers.append)
    finally:
        _collect.ids = prev
    return Serialized(data, buffers, contained)


def deserialize_inline(record: tuple) -> Any:
    if record[0] == RAW:
        return record[1]
    return pickle.loads(record[1], buffers=record[2])
